//! multus's delegate cache as Go multus reads it: ADD writes
//! `<cniDir>/<containerID>` (Go's `saveScratchNetConf` name, mode 0600 in a
//! 0700 directory) beside ours; the test parses that file with Go's rules
//! (`consumeScratchNetConf` + `json.Unmarshal` into `[]*DelegateNetConf`:
//! typed fields, unknown keys ignored, `Bytes` base64, the first delegate
//! the master, `ConfListPlugin` when `ConfList.plugins` is not empty) and
//! checks that Go's DEL would run the same delegates on the same
//! interfaces with the same configs. DEL removes both names; a cache only
//! under Go's name (written by Go multus before an upgrade) is used and
//! removed too.
#![cfg(feature = "multus")]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use cni_multus::k8s::{ClientConfig, HttpKubeClient};
use cni_multus::{
    cmd_add, cmd_del, Delegate, DelegateExec, DelegateRuntime, Error, NetConf, PodRequest,
};
use cni_testkit::KubeApiServer;
use cni_types::{CniResult, GcAttachment};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Records `(command, type, ifname, config)` of every delegate call.
#[derive(Default)]
struct Recorder(Mutex<Vec<(String, String, String, Value)>>);

impl Recorder {
    fn push(&self, cmd: &str, d: &Delegate, ifname: &str) {
        self.0.lock().unwrap().push((
            cmd.into(),
            d.plugin_type().into(),
            ifname.into(),
            serde_json::from_slice(&d.config_bytes()).unwrap(),
        ));
    }
    fn take(&self) -> Vec<(String, String, String, Value)> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

impl DelegateExec for Recorder {
    fn add(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<CniResult, Error> {
        self.push("ADD", d, &rt.ifname);
        Ok(CniResult::default())
    }
    fn del(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<(), Error> {
        self.push("DEL", d, &rt.ifname);
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
        _: &Delegate,
        _: &DelegateRuntime,
        _: bool,
        _: bool,
        _: &[IpAddr],
    ) -> Result<(), Error> {
        Ok(())
    }
}

// Go's types (multus-cni pkg/types/types.go, containernetworking/cni
// pkg/types): the fields Go decodes, with their Go types. serde, like
// encoding/json, ignores keys it does not know; a wrong type fails.

#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct GoIpam {
    #[serde(rename = "type")]
    _type: String,
}

#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct GoDns {
    #[serde(rename = "nameservers")]
    _nameservers: Option<Vec<String>>,
    #[serde(rename = "domain")]
    _domain: String,
    #[serde(rename = "search")]
    _search: Option<Vec<String>>,
    #[serde(rename = "options")]
    _options: Option<Vec<String>>,
}

/// `types.NetConf`.
#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct GoNetConf {
    #[serde(rename = "cniVersion")]
    cni_version: String,
    #[serde(rename = "name")]
    _name: String,
    #[serde(rename = "type")]
    typ: String,
    #[serde(rename = "capabilities")]
    _capabilities: Option<BTreeMap<String, bool>>,
    #[serde(rename = "ipam")]
    _ipam: Option<GoIpam>,
    #[serde(rename = "dns")]
    _dns: Option<GoDns>,
}

/// multus `types.NetConfList`.
#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct GoNetConfList {
    #[serde(rename = "cniVersion")]
    _cni_version: String,
    #[serde(rename = "name")]
    _name: String,
    plugins: Option<Vec<GoNetConf>>,
    #[serde(rename = "disableCheck")]
    _disable_check: bool,
}

/// multus `types.DelegateNetConf` (the `json:"-"` fields are not read).
#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct GoDelegateNetConf {
    #[serde(rename = "Conf")]
    conf: GoNetConf,
    #[serde(rename = "ConfList")]
    conf_list: GoNetConfList,
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "ifnameRequest")]
    ifname_request: String,
    #[serde(rename = "macRequest")]
    _mac_request: String,
    #[serde(rename = "infinibandGUIDRequest")]
    _infiniband_guid_request: String,
    #[serde(rename = "ipRequest")]
    _ip_request: Option<Vec<String>>,
    #[serde(rename = "default-route")]
    _gateway_request: Option<Vec<IpAddr>>,
    #[serde(rename = "IsFilterV4Gateway")]
    _filter_v4: bool,
    #[serde(rename = "IsFilterV6Gateway")]
    _filter_v6: bool,
    #[serde(rename = "deviceID")]
    _device_id: String,
    #[serde(rename = "resourceName")]
    _resource_name: String,
    /// `[]byte`: standard base64 in JSON.
    #[serde(rename = "Bytes")]
    bytes: Option<String>,
}

/// What Go multus's DEL does with the file: `(type, ifname, config)` per
/// delegate, in the order Go deletes them (last first).
fn go_del_plan(file: &[u8], args_ifname: &str) -> Vec<(String, String, Value)> {
    let delegates: Vec<GoDelegateNetConf> =
        serde_json::from_slice(file).expect("Go's json.Unmarshal into []*DelegateNetConf");
    assert!(!delegates.is_empty(), "Go indexes Delegates[0]");
    let mut plan: Vec<(String, String, Value)> = delegates
        .iter()
        .enumerate()
        .map(|(idx, d)| {
            let conf_list_plugin = d.conf_list.plugins.as_ref().is_some_and(|p| !p.is_empty());
            let master = idx == 0;
            // getIfname.
            let ifname = if !d.ifname_request.is_empty() {
                d.ifname_request.clone()
            } else if master {
                args_ifname.to_string()
            } else {
                format!("net{idx}")
            };
            // DelegateDel: libcni.ConfListFromBytes / ConfFromBytes of Bytes.
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(d.bytes.as_deref().expect("Bytes"))
                .expect("Bytes is base64");
            let config: Map<String, Value> =
                serde_json::from_slice(&bytes).expect("Bytes is a JSON object");
            let typ = if conf_list_plugin {
                let plugins = config["plugins"].as_array().expect("conflist plugins");
                assert!(!plugins.is_empty());
                assert_eq!(
                    d.conf_list.plugins.as_ref().unwrap()[0].typ,
                    plugins[0]["type"].as_str().unwrap()
                );
                plugins[0]["type"].as_str().unwrap().to_string()
            } else {
                let t = config["type"].as_str().expect("conf type").to_string();
                assert_eq!(d.conf.typ, t, "Conf.type matches Bytes");
                assert!(!d.conf.cni_version.is_empty() || config.get("cniVersion").is_none());
                t
            };
            (typ, ifname, Value::Object(config))
        })
        .collect();
    plan.reverse();
    plan
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

struct Env {
    server: KubeApiServer,
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let server = KubeApiServer::start().unwrap();
        server.add_nad(
            "kube-system",
            "cluster",
            r#"{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[{"type":"calico","kubernetes":{"kubeconfig":"/etc/cni/net.d/calico-kubeconfig"},"ipam":{"type":"calico-ipam"}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#,
        );
        server.add_nad(
            "ns1",
            "sriov-net",
            r#"{"cniVersion":"0.3.1","type":"sriov","vlan":100,"ipam":{"type":"host-local","subnet":"10.56.217.0/24"}}"#,
        );
        server.add_nad(
            "ns1",
            "macvlan-conf",
            r#"{"cniVersion":"0.3.1","type":"macvlan","master":"eth1","mode":"bridge","ipam":{"type":"static"}}"#,
        );
        server.add_pod("ns1", "web", "uid-1", &[(
            "k8s.v1.cni.cncf.io/networks",
            r#"[{"name":"sriov-net","interface":"data0","mac":"c2:11:22:33:44:55","ips":["10.56.217.5/24"],"default-route":["10.56.217.1"]},{"name":"macvlan-conf"}]"#,
        )]);
        Env {
            server,
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn cni_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("cni")
    }
    fn conf(&self) -> NetConf {
        let v = json!({"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus",
            "kubeconfig": self.server.kubeconfig_path(), "clusterNetwork": "cluster",
            "cniDir": self.cni_dir()});
        NetConf::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
    }
    fn client(&self, conf: &NetConf) -> HttpKubeClient {
        let c = ClientConfig::from_kubeconfig(
            conf.kubeconfig.as_ref().unwrap(),
            Duration::from_secs(2),
        )
        .unwrap();
        HttpKubeClient::new(&c).unwrap()
    }
}

fn req(cid: &str) -> PodRequest {
    PodRequest::new(
        cid,
        "/run/netns/test",
        "eth0",
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web;K8S_POD_UID=uid-1",
    )
    .unwrap()
}

#[test]
fn go_multus_can_del_what_we_added() {
    let env = Env::new();
    let conf = env.conf();
    let client = env.client(&conf);
    let exec = Recorder::default();
    let cid = "0123456789abcdef";
    cmd_add(&conf, &req(cid), Some(&client), &exec).unwrap();
    let added = exec.take();
    assert_eq!(added.len(), 3);

    let dir = env.cni_dir();
    assert_eq!(names(&dir), [cid.to_string(), format!("{cid}@eth0")]);
    let go_file = dir.join(cid);
    assert_eq!(mode(&go_file), 0o600, "Go: os.WriteFile(path, b, 0600)");
    assert_eq!(mode(&dir), 0o700, "Go: os.MkdirAll(dataDir, 0700)");
    let bytes = std::fs::read(&go_file).unwrap();
    assert_eq!(
        bytes,
        std::fs::read(dir.join(format!("{cid}@eth0"))).unwrap()
    );

    // Go's DEL: the same delegates, interfaces and configs as our ADD, in
    // reverse.
    let plan = go_del_plan(&bytes, "eth0");
    let mut want: Vec<(String, String, Value)> =
        added.into_iter().map(|(_, t, i, c)| (t, i, c)).collect();
    want.reverse();
    assert_eq!(plan, want);
    assert_eq!(
        plan.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(),
        ["net2", "data0", "eth0"]
    );
    // The conflist's plugin-specific keys survive (calico's kubeconfig).
    assert_eq!(
        plan[2].2["plugins"][0]["kubernetes"]["kubeconfig"],
        "/etc/cni/net.d/calico-kubeconfig"
    );

    // Our DEL removes both names.
    cmd_del(&conf, &req(cid), None, &exec).unwrap();
    let deleted: Vec<(String, String, Value)> = exec
        .take()
        .into_iter()
        .map(|(_, t, i, c)| (t, i, c))
        .collect();
    assert_eq!(deleted, plan);
    assert!(names(&dir).is_empty(), "{:?}", names(&dir));
}

#[test]
fn del_reads_a_cache_only_go_wrote() {
    let mut env = Env::new();
    let conf = env.conf();
    let client = env.client(&conf);
    let exec = Recorder::default();
    let cid = "fedcba9876543210";
    cmd_add(&conf, &req(cid), Some(&client), &exec).unwrap();
    exec.take();
    let dir = env.cni_dir();
    // As if Go multus had done the ADD: only `<cniDir>/<containerID>`.
    std::fs::remove_file(dir.join(format!("{cid}@eth0"))).unwrap();
    let plan = go_del_plan(&std::fs::read(dir.join(cid)).unwrap(), "eth0");
    env.server.stop();
    cmd_del(&conf, &req(cid), None, &exec).unwrap();
    let deleted: Vec<(String, String, Value)> = exec
        .take()
        .into_iter()
        .map(|(_, t, i, c)| (t, i, c))
        .collect();
    assert_eq!(deleted, plan);
    assert!(names(&dir).is_empty(), "{:?}", names(&dir));
}

#[test]
fn another_attachments_go_file_is_not_clobbered() {
    let env = Env::new();
    let conf = env.conf();
    let client = env.client(&conf);
    let exec = Recorder::default();
    let cid = "00aa11bb22cc33dd";
    let dir = env.cni_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let foreign =
        br#"[{"Conf":{"cniVersion":"0.3.1","name":"x","type":"x"},"Name":"x","Bytes":"e30="}]"#;
    std::fs::write(dir.join(cid), foreign).unwrap();
    cmd_add(&conf, &req(cid), Some(&client), &exec).unwrap();
    assert_eq!(std::fs::read(dir.join(cid)).unwrap(), foreign);
    // Our DEL uses ours and leaves the other file alone.
    cmd_del(&conf, &req(cid), None, &exec).unwrap();
    assert_eq!(names(&dir), [cid.to_string()]);
}
