//! The Multus reference's own examples, verbatim (`multus_reference/`, see
//! its README for the source of each file and commit), as test inputs:
//! what we make of every key, checked against what Go multus does with it.
//! Delegates are recorded in-process here (the capability arguments
//! through real plugins are `multus_capabilities`).
#![cfg(feature = "multus")]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cni_multus::conf::LogLevel;
use cni_multus::thick::plugin::merged_conf;
use cni_multus::thick::DaemonConfig;
use cni_multus::{
    cmd_add, cmd_del, kube_client, selection, Delegate, DelegateExec, DelegateRuntime, Error,
    NetConf, PodRequest,
};
use cni_testkit::KubeApiServer;
use cni_types::{CniResult, ErrorCode, GcAttachment, Interface, IpConfig};
use serde_json::{json, Value};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/plugins/multus_reference")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// One recorded delegate call.
#[derive(Clone, Debug)]
struct Call {
    op: String,
    name: String,
    ty: String,
    ifname: String,
    config: Value,
    caps: Value,
    args: String,
}

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Call>>,
}

impl Recorder {
    fn record(&self, op: &str, d: &Delegate, rt: &DelegateRuntime) {
        self.calls.lock().unwrap().push(Call {
            op: op.into(),
            name: d.name.clone(),
            ty: d.plugin_type().into(),
            ifname: rt.ifname.clone(),
            config: serde_json::from_slice(&d.config_bytes()).unwrap(),
            caps: Value::Object(rt.capability_args.clone()),
            args: rt.args_string(),
        });
    }
    fn calls(&self, op: &str) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.op == op)
            .cloned()
            .collect()
    }
}

impl DelegateExec for Recorder {
    fn add(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<CniResult, Error> {
        self.record("ADD", d, rt);
        let n = self.calls.lock().unwrap().len();
        Ok(CniResult {
            interfaces: vec![Interface {
                name: rt.ifname.clone(),
                sandbox: rt.netns.clone(),
                ..Default::default()
            }],
            ips: vec![IpConfig {
                interface: Some(0),
                address: format!("10.99.{n}.2/24").parse().unwrap(),
                gateway: None,
            }],
            ..Default::default()
        })
    }
    fn del(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<(), Error> {
        self.record("DEL", d, rt);
        Ok(())
    }
    fn check(&self, _: &Delegate, _: &DelegateRuntime) -> Result<(), Error> {
        Ok(())
    }
    fn status(&self, _: &Delegate) -> Result<(), Error> {
        Ok(())
    }
    fn gc(&self, _: &Delegate, _: &[GcAttachment]) -> Result<(), Error> {
        Ok(())
    }
    fn set_default_routes(
        &self,
        d: &Delegate,
        rt: &DelegateRuntime,
        v4: bool,
        v6: bool,
        gws: &[IpAddr],
    ) -> Result<(), Error> {
        self.calls.lock().unwrap().push(Call {
            op: "ROUTES".into(),
            name: d.name.clone(),
            ty: String::new(),
            ifname: rt.ifname.clone(),
            config: json!({"v4": v4, "v6": v6, "gateways": gws}),
            caps: Value::Null,
            args: String::new(),
        });
        Ok(())
    }
}

/// The one line of the published example that is not JSON, quoted.
fn configuration_example_as_json() -> String {
    let text = fixture("configuration-example.json");
    assert!(text.contains("    allowTryDeleteOnErr: false\n"));
    text.replace(
        "    allowTryDeleteOnErr: false\n",
        "    \"allowTryDeleteOnErr\": false\n",
    )
}

#[test]
fn configuration_example_verbatim_is_refused_like_go() {
    // Go's json.Unmarshal stops at the unquoted key: multus fails with a
    // decoding error, so do we (code 6), naming the place.
    let e = NetConf::from_slice(fixture("configuration-example.json").as_bytes()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::DecodingFailure, "{e}");
    assert!(e.to_string().contains("line 26"), "{e}");
}

#[test]
fn configuration_example_every_key_parsed() {
    let c = NetConf::from_slice(configuration_example_as_json().as_bytes()).unwrap();
    assert_eq!(c.cni_version, "0.3.1");
    assert_eq!(c.name, "node-cni-network");
    assert_eq!(c.plugin_type, "multus");
    assert_eq!(
        c.kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/node-kubeconfig.yaml"))
    );
    assert_eq!(c.conf_dir, Path::new("/etc/cni/multus/net.d"));
    assert_eq!(c.cni_dir, Path::new("/var/lib/cni/multus"));
    assert_eq!(c.bin_dir, Path::new("/opt/cni/bin"));
    assert_eq!(
        c.log.file.as_deref(),
        Some(Path::new("/var/log/multus.log"))
    );
    assert_eq!(c.log.level, LogLevel::Debug);
    let o = c.log.options.unwrap();
    assert_eq!(
        (o.max_age, o.max_size, o.max_backups, o.compress),
        (Some(5), Some(100), Some(5), Some(true))
    );
    // `capabilities` is for the runtime (it then injects runtimeConfig):
    // kept, not interpreted, as Go.
    assert_eq!(c.raw["capabilities"], json!({"portMappings": true}));
    assert!(!c.namespace_isolation);
    assert_eq!(
        c.cluster_network.as_deref(),
        Some("/etc/cni/net.d/99-flannel.conf")
    );
    assert!(c.delegates.is_empty());
    assert_eq!(c.default_networks, ["sidecarCRD", "exampleNetwork"]);
    assert_eq!(c.system_namespaces, ["kube-system", "admin"]);
    assert_eq!(c.multus_namespace, "kube-system");
    assert_eq!(
        c.auxiliary_cni_chain_name.as_deref(),
        Some("cni-chain-config")
    );
    // Not a key of Go's NetConf (its `retryDeleteOnError` is): ignored by
    // both, and it does not switch on the retry.
    assert!(!c.retry_delete_on_error);
    assert_eq!(c.raw["allowTryDeleteOnErr"], json!(false));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

/// The example's absolute paths moved under `root` (a node of our own:
/// the test never touches /etc, /var or /opt).
fn rooted_example(root: &Path) -> String {
    let r = root.display().to_string();
    configuration_example_as_json()
        .replace("\"/etc/", &format!("\"{r}/etc/"))
        .replace("\"/var/", &format!("\"{r}/var/"))
        .replace("\"/opt/", &format!("\"{r}/opt/"))
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn pod_req(cid: &str, ns: &str, pod: &str) -> PodRequest {
    PodRequest::new(
        cid,
        "/run/netns/reference-test",
        "eth0",
        &format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={pod};K8S_POD_UID=uid-{pod}"),
    )
    .unwrap()
}

struct Node {
    server: KubeApiServer,
    root: tempfile::TempDir,
}

impl Node {
    /// The example's node: flannel as the cluster network file, the two
    /// default networks as NADs in `multusNamespace` (one of them with an
    /// empty spec, read from `confDir`), the auxiliary chain's folder, the
    /// how-to-use NADs, and the stand-in's kubeconfig where the example
    /// points.
    fn new() -> Node {
        let server = KubeApiServer::start().unwrap();
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(
            &r.join("etc/cni/net.d/99-flannel.conf"),
            r#"{"cniVersion":"0.3.1","name":"cbr0","type":"flannel","delegate":{"isDefaultGateway":true}}"#,
        );
        write(
            &r.join("etc/cni/net.d/cni-chain-config/10-aux.conf"),
            r#"{"type":"aux-plugin","name":"aux"}"#,
        );
        write(
            &r.join("etc/cni/multus/net.d/example.conf"),
            r#"{"cniVersion":"0.3.1","name":"exampleNetwork","type":"example-plugin"}"#,
        );
        std::fs::copy(server.kubeconfig_path(), {
            let p = r.join("etc/kubernetes/node-kubeconfig.yaml");
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            p
        })
        .unwrap();
        server.add_nad(
            "kube-system",
            "sidecarCRD",
            r#"{"cniVersion":"0.3.1","type":"sidecar-plugin"}"#,
        );
        // No spec.config: the file in confDir whose name is the NAD's.
        server.add_nad("kube-system", "exampleNetwork", "");
        for n in ["macvlan-conf-1", "macvlan-conf-2", "macvlan-conf"] {
            server.add_nad(
                "default",
                n,
                &json!({"cniVersion": "0.3.0", "type": "macvlan", "master": "eth1"}).to_string(),
            );
        }
        server.add_nad(
            "default",
            "sriov-net",
            &fixture("how-to-use-sriov-net-nad.json"),
        );
        Node { server, root }
    }

    fn conf(&self, runtime_config: Option<Value>) -> NetConf {
        let mut v: Value = serde_json::from_str(&rooted_example(self.root.path())).unwrap();
        // Device-info files go under the node of our own too.
        v["deviceInfoDir"] = json!(self.root.path().join("var/run/k8s.cni.cncf.io/devinfo"));
        if let Some(rc) = runtime_config {
            // What a runtime injects for the example's `capabilities`.
            v["runtimeConfig"] = rc;
        }
        NetConf::from_slice(v.to_string().as_bytes()).unwrap()
    }

    fn cni_dir(&self) -> PathBuf {
        self.root.path().join("var/lib/cni/multus")
    }
}

#[test]
fn configuration_example_every_key_acted_on() {
    let node = Node::new();
    node.server.add_pod(
        "default",
        "pod-case-06",
        "uid-pod-case-06",
        &[(
            selection::NETWORKS_ANNOTATION,
            &fixture("how-to-use-networks-interface.json"),
        )],
    );
    node.server.add_pod("admin", "sys-pod", "uid-sys-pod", &[]);
    let conf = node.conf(Some(
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}),
    ));
    // `kubeconfig`: the client comes from the file the example names.
    let kube = kube_client(&conf)
        .unwrap()
        .expect("a client from kubeconfig");
    let rec = Recorder::default();
    let req = pod_req("cid-example", "default", "pod-case-06");
    cmd_add(&conf, &req, Some(&kube), &rec).unwrap();
    let adds = rec.calls("ADD");
    let got: Vec<(String, String, String)> = adds
        .iter()
        .map(|c| (c.name.clone(), c.ty.clone(), c.ifname.clone()))
        .collect();
    assert_eq!(
        got,
        [
            // `clusterNetwork` as a file path: the master, on CNI_IFNAME.
            ("cbr0".into(), "flannel".into(), "eth0".into()),
            // `defaultNetworks` from `multusNamespace`; the second from
            // `confDir` (its NAD has no spec).
            (
                "kube-system/sidecarCRD".into(),
                "sidecar-plugin".into(),
                "net1".into()
            ),
            (
                "kube-system/exampleNetwork".into(),
                "example-plugin".into(),
                "net2".into()
            ),
            // The pod's annotation (how-to-use pod-case-06).
            (
                "default/macvlan-conf-1".into(),
                "macvlan".into(),
                "macvlan1".into()
            ),
            (
                "default/macvlan-conf-2".into(),
                "macvlan".into(),
                "net4".into()
            ),
            // `auxiliaryCNIChainName`: passthru + the folder's plugins.
            ("cni-chain-config".into(), "passthru".into(), "net5".into()),
        ]
    );
    assert_eq!(adds[5].config["plugins"][1]["type"], "aux-plugin");
    // `capabilities` + the runtime's runtimeConfig: multus's runtimeConfig
    // is where every delegate's starts (Go's mergeCNIRuntimeConfig); libcni
    // then injects what each delegate declares.
    assert_eq!(adds[0].caps["portMappings"][0]["hostPort"], 8080);
    assert_eq!(adds[1].caps["portMappings"][0]["hostPort"], 8080);
    // `cniDir`: the delegate cache of the attachment is there.
    assert!(
        std::fs::read_dir(node.cni_dir()).unwrap().count() > 0,
        "no delegate cache under cniDir"
    );
    cmd_del(&conf, &req, Some(&kube), &rec).unwrap();
    assert_eq!(rec.calls("DEL").len(), 6);

    // `systemNamespaces`: a pod in "admin" gets no default networks.
    let rec = Recorder::default();
    let req = pod_req("cid-admin", "admin", "sys-pod");
    cmd_add(&conf, &req, Some(&kube), &rec).unwrap();
    let tys: Vec<String> = rec.calls("ADD").iter().map(|c| c.ty.clone()).collect();
    assert_eq!(tys, ["flannel", "passthru"]);
}

#[test]
fn how_to_use_default_route_example() {
    let node = Node::new();
    node.server.add_pod(
        "default",
        "samplepod",
        "uid-samplepod",
        &[(
            selection::NETWORKS_ANNOTATION,
            &fixture("how-to-use-networks-default-route.json"),
        )],
    );
    let conf = node.conf(None);
    let kube = kube_client(&conf).unwrap().unwrap();
    let rec = Recorder::default();
    cmd_add(
        &conf,
        &pod_req("cid-dr", "default", "samplepod"),
        Some(&kube),
        &rec,
    )
    .unwrap();
    let routes = rec.calls("ROUTES");
    // The master's default route is filtered, net3 (macvlan-conf) gets
    // 192.168.2.1: "default via 192.168.2.1 dev net3" in Go's docs (net1
    // there: the example node has no default networks).
    let on: Vec<(String, Value)> = routes
        .iter()
        .map(|c| (c.ifname.clone(), c.config.clone()))
        .collect();
    assert!(
        on.iter().any(|(i, v)| i == "net3"
            && v["v4"] == true
            && v["gateways"] == json!(["192.168.2.1"])),
        "{on:?}"
    );
    assert!(
        on.iter()
            .any(|(i, v)| i == "eth0" && v["v4"] == true && v["gateways"] == json!([])),
        "{on:?}"
    );
}

#[test]
fn selection_element_every_key_reaches_the_delegate() {
    let node = Node::new();
    let element = fixture("selection-every-key.json");
    node.server.add_pod(
        "default",
        "ib-pod",
        "uid-ib-pod",
        &[(selection::NETWORKS_ANNOTATION, &element)],
    );
    let conf = node.conf(None);
    let kube = kube_client(&conf).unwrap().unwrap();
    let rec = Recorder::default();
    let req = pod_req("cid-ib", "default", "ib-pod");
    cmd_add(&conf, &req, Some(&kube), &rec).unwrap();
    let adds = rec.calls("ADD");
    let sriov = adds
        .iter()
        .find(|c| c.name == "default/sriov-net")
        .expect("sriov-net attached");
    // `interface`.
    assert_eq!(sriov.ifname, "ib1");
    // The NAD's config (how-to-use's sriov-net, verbatim) with `cni-args`
    // merged into args.cni.
    assert_eq!(sriov.ty, "sriov");
    assert_eq!(sriov.config["spoofchk"], "on");
    assert_eq!(sriov.config["args"]["cni"], json!({"foo": "bar"}));
    // `ips`, `mac`, `infiniband-guid`, `deviceID`, `portMappings`,
    // `bandwidth`: the delegate's capability arguments (Go's
    // mergeCNIRuntimeConfig), `deviceID` with its device-info file.
    assert_eq!(sriov.caps["ips"], json!(["10.0.2.10/24"]));
    assert_eq!(sriov.caps["mac"], "c2:11:22:33:44:55");
    assert_eq!(sriov.caps["infinibandGUID"], "c2:11:22:33:44:55:66:77");
    assert_eq!(sriov.caps["deviceID"], "0000:00:1f.6");
    assert_eq!(
        sriov.caps["CNIDeviceInfoFile"],
        json!(node
            .root
            .path()
            .join("var/run/k8s.cni.cncf.io/devinfo/cni/default-sriov-net-cid-ib_ib1"))
    );
    assert_eq!(
        sriov.caps["portMappings"],
        json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}])
    );
    assert_eq!(
        sriov.caps["bandwidth"],
        json!({"ingressRate": 2048, "ingressBurst": 1600, "egressRate": 4096, "egressBurst": 1600})
    );
    // `mac` and `ips` also as CNI_ARGS (Go's MAC= and IP=).
    assert!(
        sriov
            .args
            .ends_with(";MAC=c2:11:22:33:44:55;IP=10.0.2.10/24"),
        "{}",
        sriov.args
    );
    // `default-route`: the default route moves to ib1.
    let routes = rec.calls("ROUTES");
    assert!(
        routes
            .iter()
            .any(|c| c.ifname == "ib1" && c.config["gateways"] == json!(["10.0.2.1"])),
        "{routes:?}"
    );
    // `namespace`: an element naming another namespace looks there.
    let other = element.replace("\"namespace\": \"default\"", "\"namespace\": \"elsewhere\"");
    node.server.add_pod(
        "default",
        "ib-pod-2",
        "uid-ib-pod-2",
        &[(selection::NETWORKS_ANNOTATION, &other)],
    );
    let e = cmd_add(
        &conf,
        &pod_req("cid-ib2", "default", "ib-pod-2"),
        Some(&kube),
        &Recorder::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("elsewhere"), "{e}");
}

#[test]
fn thick_daemon_example_every_key() {
    let text = fixture("thick-daemon-config.json");
    let d = DaemonConfig::from_slice(text.as_bytes(), Path::new("thick-plugin.md")).unwrap();
    assert_eq!(d.chroot_dir.as_deref(), Some(Path::new("/hostroot")));
    assert!(d.log_to_stderr);
    assert_eq!(d.log_level.as_deref(), Some("verbose"));
    assert_eq!(d.log_file.as_deref(), Some(Path::new("/tmp/multus.log")));
    assert_eq!(d.socket_path(), Path::new("/host/run/multus/multus.sock"));
    assert_eq!(d.cni_config_dir, Path::new("/host/etc/cni/net.d"));
    assert!(d.auto_config());
    assert_eq!(d.multus_autoconfig_dir, Path::new("/host/etc/cni/net.d"));
    assert_eq!(d.metrics_port, None);
    assert_eq!(d.request_limit.max, None);
    // The multus keys of the file override the shim's configuration on
    // every request (Go's overrideCNIConfigWithServerConfig).
    let shim = br#"{"cniVersion":"1.0.0","name":"multus-cni-network","type":"multus-shim","logLevel":"error","cniDir":"/elsewhere"}"#;
    let c = merged_conf(shim, &d.netconf_overrides).unwrap_err();
    // The example names no cluster network: the shim's auto-generated
    // 00-multus.conf carries it. Add one as that file would.
    assert!(c.to_string().contains("clusterNetwork"), "{c}");
    let shim = br#"{"cniVersion":"1.0.0","name":"multus-cni-network","type":"multus-shim","logLevel":"error","cniDir":"/elsewhere","clusterNetwork":"/host/etc/cni/net.d/10-flannel.conflist"}"#;
    let c = merged_conf(shim, &d.netconf_overrides).unwrap();
    assert_eq!(c.conf_dir, Path::new("/host/etc/cni/net.d"));
    assert_eq!(c.bin_dir, Path::new("/opt/cni/bin"));
    assert_eq!(c.cni_dir, Path::new("/var/lib/cni/multus"));
    assert_eq!(c.cni_version, "0.3.1");
    assert_eq!(c.log.level, LogLevel::Verbose);
    assert_eq!(c.log.file.as_deref(), Some(Path::new("/tmp/multus.log")));
    assert!(c.log.to_stderr);
    // Daemon-only keys do not leak into the plugin configuration.
    for k in [
        "chrootDir",
        "socketDir",
        "cniConfigDir",
        "multusConfigFile",
        "multusAutoconfigDir",
    ] {
        assert!(!d.netconf_overrides.contains_key(k), "{k}");
    }
}
