//! Finding delegate configs: `clusterNetwork` / `defaultNetworks` in the
//! reference's order (NAD in `multusNamespace`, a file in `confDir` whose
//! `name` matches, a directory, a file path), NAD to config conversion, and
//! the pod's own networks (multus-cni `pkg/k8sclient/k8sclient.go`,
//! network-attachment-definition-client `pkg/utils/cniconfig.go`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::conf::NetConf;
use super::delegate::{check_gateways, Delegate};
use super::k8s::{KubeClient, NetworkAttachmentDefinition, Pod};
use super::selection::{
    parse_networks, NetworkSelectionElement, DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION,
};
use crate::Error;

/// The config files of `dir` whose extension is one of `exts` (with the
/// dot), sorted by name; a missing directory has none (libcni `ConfFiles`,
/// [`cni_exec::conf::conf_files`]).
pub fn conf_files(dir: &Path, exts: &[&str]) -> Result<Vec<PathBuf>, Error> {
    cni_exec::conf::conf_files(dir, exts).map_err(|e| match e {
        cni_exec::Error::Io { op, path, source } => Error::io(op, path, source),
        e => Error::io("read directory", dir, std::io::Error::other(e.to_string())),
    })
}

fn read_json_object(path: &Path) -> Result<Map<String, Value>, Error> {
    let bytes = cni_files::capped::read_file(path, cni_files::capped::MAX_ADMIN_FILE).map_err(
        |source| Error::Io {
            op: "read CNI config",
            path: path.to_path_buf(),
            source,
        },
    )?;
    serde_json::from_slice(&bytes).map_err(|e| Error::DelegateConfig {
        what: path.display().to_string(),
        reason: format!("error parsing configuration: {e}"),
    })
}

/// The config in `conf_dir` whose `name` is `name` (any config when `name`
/// is empty): `.conf`, `.json` and `.conflist` files in name order, as the
/// NAD client's `GetCNIConfigFromFile`.
pub fn config_from_dir(name: &str, conf_dir: &Path) -> Result<Value, Error> {
    let files = conf_files(conf_dir, &[".conf", ".json", ".conflist"])?;
    if files.is_empty() {
        return Err(Error::NetworkNotFound {
            name: name.into(),
            reason: format!("no networks found in {}", conf_dir.display()),
        });
    }
    for f in files {
        let obj = read_json_object(&f)?;
        let n = obj.get("name").and_then(Value::as_str).unwrap_or("");
        if n != name && !name.is_empty() {
            continue;
        }
        let is_list = f.extension().is_some_and(|e| e == "conflist");
        if !is_list
            && obj
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        {
            return Err(Error::DelegateConfig {
                what: f.display().to_string(),
                reason: "no 'type'; perhaps this is a .conflist?".into(),
            });
        }
        return Ok(Value::Object(obj));
    }
    Err(Error::NetworkNotFound {
        name: name.into(),
        reason: format!(
            "no network available in the name {name} in cni dir {}",
            conf_dir.display()
        ),
    })
}

/// A conflist file plus the plugins of its `<dir>/<name>/` folder unless
/// `loadOnlyInlinedPlugins` (multus-cni `LoadChainedPluginsFromFile`).
pub fn conflist_with_chain(path: &Path) -> Result<Value, Error> {
    let mut obj = read_json_object(path)?;
    let what = || path.display().to_string();
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let inline_only = obj
        .get("loadOnlyInlinedPlugins")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !inline_only {
        cni_types::validate::network_name(&name).map_err(|_| Error::DelegateConfig {
            what: what(),
            reason: format!("invalid network config name: {name}"),
        })?;
        let dir = path.parent().unwrap_or(Path::new(".")).join(&name);
        let extra = conf_files(&dir, &[".conf"])?
            .iter()
            .map(|f| read_json_object(f).map(Value::Object))
            .collect::<Result<Vec<_>, _>>()?;
        if !extra.is_empty() {
            let plugins = obj
                .entry("plugins")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(p) = plugins {
                p.extend(extra);
            }
        }
    }
    if obj
        .get("plugins")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err(Error::DelegateConfig {
            what: what(),
            reason: "no plugin configs found".into(),
        });
    }
    Ok(Value::Object(obj))
}

/// The CNI config of a NAD: `spec.config` with the NAD's name injected when
/// missing, or for an empty spec the file in `conf_dir` named like the NAD
/// (NAD client `GetCNIConfig`).
pub fn nad_config(nad: &NetworkAttachmentDefinition, conf_dir: &Path) -> Result<Value, Error> {
    if nad.config.is_empty() {
        return config_from_dir(&nad.name, conf_dir);
    }
    let mut obj: Map<String, Value> =
        serde_json::from_str(&nad.config).map_err(|e| Error::DelegateConfig {
            what: format!(
                "network-attachment-definition {}/{}",
                nad.namespace, nad.name
            ),
            reason: format!("failed to unmarshal spec.config: {e}"),
        })?;
    let missing = obj
        .get("name")
        .is_none_or(|n| n.as_str().is_some_and(str::is_empty));
    if missing {
        obj.insert("name".into(), Value::String(nad.name.clone()));
    }
    Ok(Value::Object(obj))
}

/// The delegate for one selection element, from its NAD.
pub fn nad_delegate(
    client: &dyn KubeClient,
    element: &NetworkSelectionElement,
    conf_dir: &Path,
) -> Result<Delegate, Error> {
    let nad = client
        .get_network_attachment_definition(&element.namespace, &element.name)
        .map_err(|e| match e {
            Error::ApiNotFound { .. } => Error::NetworkNotFound {
                name: format!("{}/{}", element.namespace, element.name),
                reason: format!(
                    "cannot find a network-attachment-definition ({}) in namespace ({})",
                    element.name, element.namespace
                ),
            },
            other => other,
        })?;
    let config = nad_config(&nad, conf_dir)?;
    let mut d = Delegate::from_value(config, Some(element)).map_err(|e| match e {
        Error::DelegateConfig { reason, .. } => Error::DelegateConfig {
            what: format!(
                "network-attachment-definition {}/{}",
                nad.namespace, nad.name
            ),
            reason,
        },
        other => other,
    })?;
    if let Some(r) = nad
        .annotations
        .get(super::devices::RESOURCE_NAME_ANNOTATION)
    {
        d.resource_name = r.clone();
    }
    Ok(d)
}

/// Resolves a `clusterNetwork` or `defaultNetworks` entry, in the
/// reference's order. Without a client the NAD step is skipped (a
/// file-based cluster network works without Kubernetes).
pub fn network_delegate(
    client: Option<&dyn KubeClient>,
    netname: &str,
    conf_dir: &Path,
    namespace: &str,
) -> Result<Delegate, Error> {
    if !netname.contains('/') {
        let mut why = Vec::new();
        if let Some(c) = client {
            let element = NetworkSelectionElement {
                name: netname.into(),
                namespace: namespace.into(),
                ..Default::default()
            };
            match nad_delegate(c, &element, conf_dir) {
                Ok(d) => return Ok(d),
                // A transient API failure must not silently pick another
                // network: fail so the runtime retries.
                Err(e @ (Error::ApiUnreachable { .. } | Error::ApiStatus { .. })) => return Err(e),
                Err(e) => why.push(e.to_string()),
            }
        }
        match config_from_dir(netname, conf_dir) {
            Ok(v) => return Delegate::from_value(v, None),
            Err(e) => why.push(e.to_string()),
        }
        return Err(Error::NetworkNotFound {
            name: netname.into(),
            reason: why.join("; "),
        });
    }
    let path = Path::new(netname);
    let meta = std::fs::metadata(path).map_err(|e| Error::NetworkNotFound {
        name: netname.into(),
        reason: e.to_string(),
    })?;
    if meta.is_dir() {
        let files = conf_files(path, &[".conf", ".conflist"])?;
        if files.is_empty() {
            return Err(Error::NetworkNotFound {
                name: netname.into(),
                reason: "no .conf or .conflist file in the directory".into(),
            });
        }
        return Delegate::from_value(config_from_dir("", path)?, None);
    }
    let value = if netname.ends_with(".conflist") {
        conflist_with_chain(path)?
    } else {
        let obj = read_json_object(path)?;
        if obj
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            return Err(Error::DelegateConfig {
                what: netname.into(),
                reason: "no 'type'; perhaps this is supposed to be a .conflist?".into(),
            });
        }
        Value::Object(obj)
    };
    Delegate::from_value(value, None)
}

/// The cluster network (master) followed by `defaultNetworks`, which pods
/// in `systemNamespaces` do not get (multus-cni `GetDefaultNetworks`).
/// `pod_namespace` is `None` for STATUS and GC.
pub fn cluster_delegates(
    client: Option<&dyn KubeClient>,
    conf: &NetConf,
    pod_namespace: Option<&str>,
) -> Result<Vec<Delegate>, Error> {
    let Some(cluster) = &conf.cluster_network else {
        return Ok(conf.delegates.clone());
    };
    let mut master = network_delegate(client, cluster, &conf.conf_dir, &conf.multus_namespace)?;
    master.master = true;
    let mut out = vec![master];
    if let Some(ns) = pod_namespace {
        if !conf.is_system_namespace(ns) {
            for n in &conf.default_networks {
                out.push(network_delegate(
                    client,
                    n,
                    &conf.conf_dir,
                    &conf.multus_namespace,
                )?);
            }
        }
    }
    Ok(out)
}

/// Applies the pod's annotations to `delegates` (whose first is the
/// master): `v1.multus-cni.io/default-network` replaces the master, and
/// every network of `k8s.v1.cni.cncf.io/networks` is appended, subject to
/// namespace isolation. Then `default-route` requests are checked.
/// Returns how many pod networks were added.
pub fn add_pod_delegates(
    client: &dyn KubeClient,
    pod: &Pod,
    conf: &NetConf,
    delegates: &mut Vec<Delegate>,
) -> Result<usize, Error> {
    if let Some(a) = pod.annotations.get(DEFAULT_NETWORK_ANNOTATION) {
        let nets = parse_networks(DEFAULT_NETWORK_ANNOTATION, a, &conf.multus_namespace)?;
        if nets.len() > 1 {
            return Err(Error::PodAnnotation {
                key: DEFAULT_NETWORK_ANNOTATION.into(),
                value: a.clone(),
                reason: "more than one default network is specified".into(),
            });
        }
        let mut d = nad_delegate(client, &nets[0], &conf.conf_dir)?;
        d.master = true;
        match delegates.first_mut() {
            Some(first) => *first = d,
            None => delegates.push(d),
        }
    }
    let Some(a) = pod
        .annotations
        .get(NETWORKS_ANNOTATION)
        .filter(|a| !a.is_empty())
    else {
        return Ok(0);
    };
    let nets = parse_networks(NETWORKS_ANNOTATION, a, &pod.namespace)?;
    for n in &nets {
        if !conf.may_reference(&pod.namespace, &n.namespace) {
            return Err(Error::NamespaceIsolation {
                pod_namespace: pod.namespace.clone(),
                target_namespace: n.namespace.clone(),
            });
        }
    }
    for n in &nets {
        delegates.push(nad_delegate(client, n, &conf.conf_dir)?);
    }
    check_gateways(delegates)?;
    Ok(nets.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// An in-memory client for lookup tests (the HTTPS one is tested
    /// against the test API server).
    #[derive(Default)]
    struct FakeClient {
        nads: BTreeMap<(String, String), String>,
        calls: Mutex<Vec<String>>,
    }

    impl FakeClient {
        fn with(mut self, ns: &str, name: &str, config: &str) -> Self {
            self.nads.insert((ns.into(), name.into()), config.into());
            self
        }
    }

    impl KubeClient for FakeClient {
        fn get_pod(&self, _: &str, _: &str) -> Result<Pod, Error> {
            unimplemented!()
        }
        fn get_network_attachment_definition(
            &self,
            namespace: &str,
            name: &str,
        ) -> Result<NetworkAttachmentDefinition, Error> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("{namespace}/{name}"));
            match self.nads.get(&(namespace.into(), name.into())) {
                Some(c) => Ok(NetworkAttachmentDefinition {
                    name: name.into(),
                    namespace: namespace.into(),
                    config: c.clone(),
                    ..Default::default()
                }),
                None => Err(Error::ApiNotFound {
                    op: "get".into(),
                    kind: "network-attachment-definition".into(),
                    namespace: namespace.into(),
                    name: name.into(),
                }),
            }
        }
        fn patch_pod_annotations(
            &self,
            _: &str,
            _: &str,
            _: &BTreeMap<String, Option<String>>,
        ) -> Result<(), Error> {
            unimplemented!()
        }
    }

    fn conf(extra: Value, dir: &Path) -> NetConf {
        let mut v = serde_json::json!({"name": "multus", "type": "multus", "confDir": dir});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        NetConf::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    fn pod(ns: &str, ann: &[(&str, &str)]) -> Pod {
        Pod {
            name: "p".into(),
            namespace: ns.into(),
            uid: "u".into(),
            annotations: ann
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn lookup_order_nad_then_file_then_dir_then_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("10-a.conf"),
            r#"{"name":"net","type":"from-file"}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("20-b.conflist"),
            r#"{"name":"list","plugins":[{"type":"from-list"}]}"#,
        )
        .unwrap();
        // 1. NAD in multusNamespace wins over the file.
        let c = FakeClient::default().with("kube-system", "net", r#"{"type":"from-nad"}"#);
        let d = network_delegate(Some(&c), "net", dir.path(), "kube-system").unwrap();
        assert_eq!(d.plugin_type(), "from-nad");
        assert_eq!(d.network_name(), "net");
        // 2. No NAD: the file in confDir whose name matches.
        let c = FakeClient::default();
        assert_eq!(
            network_delegate(Some(&c), "net", dir.path(), "kube-system")
                .unwrap()
                .plugin_type(),
            "from-file"
        );
        assert_eq!(c.calls.lock().unwrap().as_slice(), ["kube-system/net"]);
        assert!(
            network_delegate(None, "list", dir.path(), "x")
                .unwrap()
                .is_conflist
        );
        // 3. A directory: its first config.
        let p = dir.path().to_str().unwrap();
        assert_eq!(
            network_delegate(None, p, Path::new("/nonexistent"), "x")
                .unwrap()
                .plugin_type(),
            "from-file"
        );
        // 4. A file path, conf or conflist.
        let f = dir.path().join("20-b.conflist");
        assert!(
            network_delegate(None, f.to_str().unwrap(), Path::new("/x"), "x")
                .unwrap()
                .is_conflist
        );
        let e = network_delegate(Some(&c), "nothing", dir.path(), "kube-system").unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot find a network-attachment-definition"),
            "{e}"
        );
        assert!(e.to_string().contains("no network available"), "{e}");
        assert!(network_delegate(None, "/nonexistent/x.conf", dir.path(), "x").is_err());
    }

    #[test]
    fn conflist_subdirectory_chain() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("00-main.conflist");
        std::fs::write(
            &f,
            r#"{"name":"main","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("main")).unwrap();
        std::fs::write(
            dir.path().join("main/10-tuning.conf"),
            r#"{"type":"tuning"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("main/ignored.json"), r#"{"type":"nope"}"#).unwrap();
        let v = conflist_with_chain(&f).unwrap();
        assert_eq!(v["plugins"].as_array().unwrap().len(), 2);
        assert_eq!(v["plugins"][1]["type"], "tuning");
    }

    #[test]
    fn nad_conversion() {
        let dir = tempfile::tempdir().unwrap();
        let nad = |config: &str| NetworkAttachmentDefinition {
            name: "macvlan-conf".into(),
            namespace: "ns".into(),
            config: config.into(),
            ..Default::default()
        };
        assert_eq!(
            nad_config(&nad(r#"{"type":"macvlan"}"#), dir.path()).unwrap()["name"],
            "macvlan-conf"
        );
        assert_eq!(
            nad_config(&nad(r#"{"type":"macvlan","name":""}"#), dir.path()).unwrap()["name"],
            "macvlan-conf"
        );
        assert_eq!(
            nad_config(&nad(r#"{"type":"macvlan","name":"mine"}"#), dir.path()).unwrap()["name"],
            "mine"
        );
        assert!(nad_config(&nad("{bad"), dir.path()).is_err());
        // Empty spec: the file in confDir with the NAD's name.
        assert!(nad_config(&nad(""), dir.path()).is_err());
        std::fs::write(
            dir.path().join("m.conf"),
            r#"{"name":"macvlan-conf","type":"macvlan"}"#,
        )
        .unwrap();
        assert_eq!(nad_config(&nad(""), dir.path()).unwrap()["type"], "macvlan");
        std::fs::write(dir.path().join("a.conf"), r#"{"name":"macvlan-conf"}"#).unwrap();
        assert!(nad_config(&nad(""), dir.path())
            .unwrap_err()
            .to_string()
            .contains("no 'type'"));
    }

    #[test]
    fn default_networks_skip_system_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let c = FakeClient::default()
            .with("kube-system", "cluster", r#"{"type":"flannel"}"#)
            .with("kube-system", "side", r#"{"type":"macvlan"}"#);
        let conf = conf(
            serde_json::json!({"clusterNetwork": "cluster", "defaultNetworks": ["side"]}),
            dir.path(),
        );
        let ds = cluster_delegates(Some(&c), &conf, Some("default")).unwrap();
        assert_eq!(ds.len(), 2);
        assert!(ds[0].master && !ds[1].master);
        assert_eq!(ds[1].ifname("eth0", 1), "net1");
        assert_eq!(
            cluster_delegates(Some(&c), &conf, Some("kube-system"))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(cluster_delegates(Some(&c), &conf, None).unwrap().len(), 1);
    }

    #[test]
    fn pod_annotations() {
        let dir = tempfile::tempdir().unwrap();
        let c = FakeClient::default()
            .with("test", "net1", r#"{"type":"bridge"}"#)
            .with("test", "net2", r#"{"name":"n2","type":"macvlan"}"#)
            .with("kube-system", "net3", r#"{"type":"ipvlan"}"#)
            .with("kube-system", "alt", r#"{"type":"calico"}"#);
        let conf0 = conf(
            serde_json::json!({"delegates": [{"name": "flannel", "type": "flannel"}]}),
            dir.path(),
        );
        let mut ds = conf0.delegates.clone();
        let p = pod(
            "test",
            &[
                (NETWORKS_ANNOTATION, "net1,net2@data0"),
                (DEFAULT_NETWORK_ANNOTATION, "alt"),
            ],
        );
        assert_eq!(add_pod_delegates(&c, &p, &conf0, &mut ds).unwrap(), 2);
        assert_eq!(ds[0].plugin_type(), "calico");
        assert!(ds[0].master);
        assert_eq!(ds[1].name, "test/net1");
        assert_eq!(ds[2].ifname("eth0", 2), "data0");

        // Namespace isolation.
        let iso = conf(
            serde_json::json!({"delegates": [{"type": "flannel"}], "namespaceIsolation": true}),
            dir.path(),
        );
        let p = pod("test", &[(NETWORKS_ANNOTATION, "kube-system/net3")]);
        let e = add_pod_delegates(&c, &p, &iso, &mut iso.delegates.clone()).unwrap_err();
        assert_eq!(e.to_string(), "namespace isolation enabled, annotation violates permission, pod is in namespace test but refers to target namespace kube-system");
        let allowed = conf(
            serde_json::json!({"delegates": [{"type": "flannel"}], "namespaceIsolation": true, "globalNamespaces": "kube-system,donkey-kong"}),
            dir.path(),
        );
        assert_eq!(
            add_pod_delegates(&c, &p, &allowed, &mut allowed.delegates.clone()).unwrap(),
            1
        );

        // Unknown NAD; malformed annotation; two default networks; ECMP.
        let p = pod("test", &[(NETWORKS_ANNOTATION, "missing")]);
        let e = add_pod_delegates(&c, &p, &conf0, &mut conf0.delegates.clone()).unwrap_err();
        assert!(
            e.to_string().contains(
                "cannot find a network-attachment-definition (missing) in namespace (test)"
            ),
            "{e}"
        );
        let p = pod("test", &[(NETWORKS_ANNOTATION, "[asdf]")]);
        assert!(matches!(
            add_pod_delegates(&c, &p, &conf0, &mut conf0.delegates.clone()),
            Err(Error::PodAnnotation { .. })
        ));
        let p = pod("test", &[(DEFAULT_NETWORK_ANNOTATION, "alt,net3")]);
        assert!(
            add_pod_delegates(&c, &p, &conf0, &mut conf0.delegates.clone())
                .unwrap_err()
                .to_string()
                .contains("more than one default network")
        );
        let p = pod(
            "test",
            &[(
                NETWORKS_ANNOTATION,
                r#"[{"name":"net1","default-route":["10.0.0.1"]},{"name":"net2","default-route":["10.0.1.1"]}]"#,
            )],
        );
        assert!(matches!(
            add_pod_delegates(&c, &p, &conf0, &mut conf0.delegates.clone()),
            Err(Error::DefaultRouteEcmp)
        ));
        let p = pod("test", &[]);
        assert_eq!(
            add_pod_delegates(&c, &p, &conf0, &mut conf0.delegates.clone()).unwrap(),
            0
        );
    }
}
