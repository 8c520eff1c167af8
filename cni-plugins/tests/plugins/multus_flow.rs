//! multus ADD/DEL/CHECK/STATUS/GC against the test API server, with a
//! recording delegate executor (no kernel state: the end-to-end test with
//! real plugins is separate).
#![cfg(feature = "multus")]

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use cni_multus::k8s::{ClientConfig, HttpKubeClient, KubeClient};
use cni_multus::Error;
use cni_multus::{
    cmd_add, cmd_check, cmd_del, cmd_gc, cmd_status, Delegate, DelegateExec, DelegateRuntime,
    NetConf, PodRequest,
};
use cni_testkit::multus_node::add_fake_delegate_nads;
use cni_testkit::KubeApiServer;
use cni_types::{CniError, CniResult, ErrorCode, GcAttachment, Interface, IpConfig};
use serde_json::{json, Value};

#[derive(Default)]
struct Recorder {
    log: Mutex<Vec<String>>,
    fail_add: Option<String>,
    taken: Option<String>,
    fail_del: bool,
    caps: Mutex<Vec<(String, Value, String)>>,
}

impl Recorder {
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl DelegateExec for Recorder {
    fn add(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<CniResult, Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("ADD {} {}", d.plugin_type(), rt.ifname));
        self.caps.lock().unwrap().push((
            rt.ifname.clone(),
            Value::Object(rt.capability_args.clone()),
            rt.args_string(),
        ));
        if self.taken.as_deref() == Some(d.plugin_type()) {
            return Err(Error::InterfaceExists {
                ifname: rt.ifname.clone(),
                netns: rt.netns.clone(),
            });
        }
        if self.fail_add.as_deref() == Some(d.plugin_type()) {
            return Err(Error::DelegateFailed {
                network: d.name.clone(),
                ifname: rt.ifname.clone(),
                error: Box::new(CniError::new(ErrorCode::Other(100), "boom", "")),
            });
        }
        let n = self.log.lock().unwrap().len();
        Ok(CniResult {
            interfaces: vec![Interface {
                name: rt.ifname.clone(),
                mac: format!("02:00:00:00:00:{n:02x}"),
                sandbox: rt.netns.clone(),
                ..Default::default()
            }],
            ips: vec![IpConfig {
                interface: Some(0),
                address: format!("10.{n}.0.2/24").parse().unwrap(),
                gateway: None,
            }],
            ..Default::default()
        })
    }
    fn del(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("DEL {} {}", d.plugin_type(), rt.ifname));
        if self.fail_del {
            return Err(Error::DelegateFailed {
                network: d.name.clone(),
                ifname: rt.ifname.clone(),
                error: Box::new(CniError::new(ErrorCode::TryAgainLater, "busy", "")),
            });
        }
        Ok(())
    }
    fn check(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("CHECK {} {}", d.plugin_type(), rt.ifname));
        Ok(())
    }
    fn status(&self, d: &Delegate) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("STATUS {}", d.plugin_type()));
        Ok(())
    }
    fn gc(&self, d: &Delegate, valid: &[GcAttachment]) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("GC {} {}", d.plugin_type(), valid.len()));
        Ok(())
    }
    fn set_default_routes(
        &self,
        _d: &Delegate,
        rt: &DelegateRuntime,
        v4: bool,
        v6: bool,
        gws: &[IpAddr],
    ) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("ROUTES {} {v4} {v6} {gws:?}", rt.ifname));
        Ok(())
    }
}

struct Setup {
    server: KubeApiServer,
    dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let server = KubeApiServer::start().unwrap();
    add_fake_delegate_nads(&server);
    Setup {
        server,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Setup {
    fn conf(&self, extra: Value) -> NetConf {
        let mut v = json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus",
            "kubeconfig": self.server.kubeconfig_path(), "clusterNetwork": "cluster",
            "cniDir": self.dir.path().join("cni"), "confDir": self.dir.path().join("conf")});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        NetConf::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
    }
    fn client(&self, conf: &NetConf) -> HttpKubeClient {
        HttpKubeClient::new(
            &ClientConfig::from_kubeconfig(
                conf.kubeconfig.as_ref().unwrap(),
                Duration::from_secs(2),
            )
            .unwrap(),
        )
        .unwrap()
    }
    fn cache_files(&self) -> Vec<String> {
        std::fs::read_dir(self.dir.path().join("cni"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn req(cid: &str, ns: &str, pod: &str, uid: &str) -> PodRequest {
    PodRequest::new(
        cid,
        "/run/netns/test",
        "eth0",
        &format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={pod};K8S_POD_UID={uid}"),
    )
    .unwrap()
}

#[test]
fn add_two_networks_then_del_without_the_api() {
    let mut s = setup();
    s.server.add_pod("ns1", "web", "uid-1", &[(
        "k8s.v1.cni.cncf.io/networks",
        r#"[{"name":"net-a","ips":["10.9.0.5/24"],"mac":"c2:11:22:33:44:55","cni-args":{"k":"v"}},{"name":"net-b","interface":"data0"}]"#,
    )]);
    let conf = s.conf(json!({"runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}));
    let client = s.client(&conf);
    let exec = Recorder::default();
    let r = req("c1", "ns1", "web", "uid-1");
    let result = cmd_add(&conf, &r, Some(&client), &exec).unwrap();
    assert_eq!(
        exec.log(),
        [
            "ADD cluster-plugin eth0",
            "ADD plugin-a net1",
            "ADD plugin-b data0"
        ]
    );
    // The result is the master's.
    assert_eq!(result.interfaces[0].name, "eth0");
    // runtimeConfig: multus's for the master, the selection's for the others.
    let caps = exec.caps.lock().unwrap().clone();
    assert_eq!(
        caps[0].1,
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    );
    assert_eq!(caps[1].1["ips"], json!(["10.9.0.5/24"]));
    assert_eq!(caps[1].1["mac"], "c2:11:22:33:44:55");
    assert!(caps[1].2.starts_with("IgnoreUnknown=true;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=;K8S_POD_UID=uid-1"), "{}", caps[1].2);
    assert!(caps[1].2.ends_with(";MAC=c2:11:22:33:44:55;IP=10.9.0.5/24"));
    // network-status on the server.
    let ann = s
        .server
        .pod_annotation("ns1", "web", "k8s.v1.cni.cncf.io/network-status")
        .unwrap();
    let st: Value = serde_json::from_str(&ann).unwrap();
    assert_eq!(st.as_array().unwrap().len(), 3);
    assert_eq!(st[0]["name"], "kube-system/cluster");
    assert_eq!(st[0]["default"], true);
    assert_eq!(st[1]["name"], "ns1/net-a");
    assert_eq!(st[1]["interface"], "net1");
    assert_eq!(st[2]["interface"], "data0");
    assert!(st[1].get("default").is_none());
    // Ours and Go's name (`<cniDir>/<containerID>`).
    let mut files = s.cache_files();
    files.sort();
    assert_eq!(files, ["c1", "c1@eth0"]);
    let cached: Value =
        serde_json::from_slice(&std::fs::read(s.dir.path().join("cni/c1@eth0")).unwrap()).unwrap();
    assert_eq!(cached[2]["ifnameRequest"], "data0");

    // CHECK from the cache.
    cmd_check(&conf, &r, Some(&client), &exec).unwrap();
    assert_eq!(
        exec.log()[3..],
        [
            "CHECK cluster-plugin eth0",
            "CHECK plugin-a net1",
            "CHECK plugin-b data0"
        ]
    );

    // DEL with the API server stopped: from the cache, in reverse.
    s.server.stop();
    let exec = Recorder::default();
    let t = std::time::Instant::now();
    cmd_del(&conf, &r, Some(&client), &exec).unwrap();
    // Waiting for the API would take the client's 2 s timeout at least.
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "DEL must not wait for the API"
    );
    assert_eq!(
        exec.log(),
        [
            "DEL plugin-b data0",
            "DEL plugin-a net1",
            "DEL cluster-plugin eth0"
        ]
    );
    assert!(s.cache_files().is_empty());
    // A second DEL: no cache, no API: success, nothing run.
    cmd_del(&conf, &r, Some(&client), &exec).unwrap();
    assert_eq!(exec.log().len(), 3);
}

#[test]
fn failure_cleans_up_in_reverse_and_leaves_nothing() {
    let s = setup();
    s.server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a,net-b")],
    );
    let conf = s.conf(json!({}));
    let client = s.client(&conf);
    let exec = Recorder {
        fail_add: Some("plugin-b".into()),
        ..Default::default()
    };
    let e = cmd_add(
        &conf,
        &req("c1", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Other(100));
    assert_eq!(
        exec.log(),
        [
            "ADD cluster-plugin eth0",
            "ADD plugin-a net1",
            "ADD plugin-b net2",
            "DEL plugin-b net2",
            "DEL plugin-a net1",
            "DEL cluster-plugin eth0"
        ]
    );
    assert!(s.cache_files().is_empty());
    assert!(s
        .server
        .pod_annotation("ns1", "web", "k8s.v1.cni.cncf.io/network-status")
        .is_none());
}

#[test]
fn bad_input_is_a_clear_error_and_runs_nothing() {
    let s = setup();
    let cases = [
        (
            "k8s.v1.cni.cncf.io/networks",
            "net-a@very_long_interface_name",
            ErrorCode::InvalidNetworkConfig,
            "must be less than 16 characters",
        ),
        (
            "k8s.v1.cni.cncf.io/networks",
            "[{\"name\":",
            ErrorCode::InvalidNetworkConfig,
            "failed to parse JSON format",
        ),
        (
            "k8s.v1.cni.cncf.io/networks",
            "unknown-nad",
            ErrorCode::InvalidNetworkConfig,
            "cannot find a network-attachment-definition (unknown-nad) in namespace (ns1)",
        ),
        (
            "k8s.v1.cni.cncf.io/networks",
            "other/net-c",
            ErrorCode::InvalidNetworkConfig,
            "pod is in namespace ns1 but refers to target namespace other",
        ),
        (
            "k8s.v1.cni.cncf.io/networks",
            "net-a@eth0",
            ErrorCode::InvalidNetworkConfig,
            "interface name \"eth0\" is used by both",
        ),
        (
            "v1.multus-cni.io/default-network",
            "a,b",
            ErrorCode::InvalidNetworkConfig,
            "more than one default network",
        ),
    ];
    let conf = s.conf(json!({"namespaceIsolation": true}));
    let client = s.client(&conf);
    for (i, (key, value, code, msg)) in cases.into_iter().enumerate() {
        let pod = format!("p{i}");
        s.server.add_pod("ns1", &pod, "u", &[(key, value)]);
        let exec = Recorder::default();
        let e = cmd_add(
            &conf,
            &req(&format!("c{i}"), "ns1", &pod, "u"),
            Some(&client),
            &exec,
        )
        .unwrap_err();
        assert_eq!(e.code(), code, "{value}: {e}");
        assert!(e.to_string().contains(msg), "{value}: {e}");
        assert!(exec.log().is_empty(), "{value}: {:?}", exec.log());
        assert!(s.cache_files().is_empty());
    }
}

#[test]
fn pod_lookup_rules() {
    let s = setup();
    s.server.add_pod("ns1", "web", "uid-1", &[]);
    s.server.add_pod("kube-system", "dns", "uid-2", &[]);
    let conf = s.conf(json!({"defaultNetworks": ["net-x"]}));
    s.server.add_nad(
        "kube-system",
        "net-x",
        r#"{"cniVersion":"1.0.0","type":"plugin-x"}"#,
    );
    let client = s.client(&conf);
    // UID mismatch on ADD is an error.
    let e = cmd_add(
        &conf,
        &req("c1", "ns1", "web", "other"),
        Some(&client),
        &Recorder::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("expected pod ns1/web UID \"other\" but got \"uid-1\""),
        "{e}"
    );
    // A pod that is gone: Go's placeholder result, nothing run.
    let exec = Recorder::default();
    let r = cmd_add(&conf, &req("c1", "ns1", "gone", ""), Some(&client), &exec).unwrap();
    assert_eq!(r.ips[0].address.to_string(), "0.0.0.0/0");
    assert!(exec.log().is_empty());
    // defaultNetworks for ordinary pods, not for system namespaces; no status there.
    let exec = Recorder::default();
    cmd_add(
        &conf,
        &req("c2", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap();
    assert_eq!(exec.log(), ["ADD cluster-plugin eth0", "ADD plugin-x net1"]);
    let exec = Recorder::default();
    cmd_add(
        &conf,
        &req("c3", "kube-system", "dns", "uid-2"),
        Some(&client),
        &exec,
    )
    .unwrap();
    assert_eq!(exec.log(), ["ADD cluster-plugin eth0"]);
    assert!(s
        .server
        .pod_annotation("kube-system", "dns", "k8s.v1.cni.cncf.io/network-status")
        .is_none());
}

#[test]
fn del_without_cache_rederives_from_the_pod() {
    let s = setup();
    s.server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a")],
    );
    let conf = s.conf(json!({}));
    let client = s.client(&conf);
    let exec = Recorder::default();
    cmd_del(
        &conf,
        &req("c9", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap();
    assert_eq!(exec.log(), ["DEL plugin-a net1", "DEL cluster-plugin eth0"]);
}

#[test]
fn retry_delete_on_error_keeps_the_cache() {
    let s = setup();
    s.server.add_pod("ns1", "web", "uid-1", &[]);
    for retry in [true, false] {
        let conf = s.conf(json!({"retryDeleteOnError": retry}));
        let client = s.client(&conf);
        cmd_add(
            &conf,
            &req("c1", "ns1", "web", "uid-1"),
            Some(&client),
            &Recorder::default(),
        )
        .unwrap();
        let exec = Recorder {
            fail_del: true,
            ..Default::default()
        };
        let e = cmd_del(&conf, &req("c1", "ns1", "web", "uid-1"), None, &exec).unwrap_err();
        assert_eq!(e.code(), ErrorCode::TryAgainLater);
        assert_eq!(
            s.cache_files().len(),
            2 * usize::from(retry),
            "retry={retry}"
        );
        cmd_del(
            &conf,
            &req("c1", "ns1", "web", "uid-1"),
            None,
            &Recorder::default(),
        )
        .unwrap();
        assert!(s.cache_files().is_empty());
    }
}

#[test]
fn delegates_without_kubernetes() {
    let dir = tempfile::tempdir().unwrap();
    let conf = NetConf::from_slice(&serde_json::to_vec(&json!({"cniVersion": "0.4.0", "name": "multus", "type": "multus",
        "cniDir": dir.path(), "delegates": [{"name": "a", "type": "plugin-a"}, {"name": "b", "plugins": [{"type": "plugin-b"}]}]})).unwrap()).unwrap();
    let exec = Recorder::default();
    let r = PodRequest::new("c1", "/run/netns/x", "eth0", "").unwrap();
    cmd_add(&conf, &r, None, &exec).unwrap();
    cmd_status(&conf, None, &exec).unwrap();
    std::fs::create_dir_all(dir.path().join("results")).unwrap();
    std::fs::write(
        dir.path().join("results/a-c1-eth0"),
        r#"{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0"}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("results/junk"), "x").unwrap();
    cmd_gc(&conf, None, &exec).unwrap();
    cmd_del(&conf, &r, None, &exec).unwrap();
    assert_eq!(
        exec.log(),
        [
            "ADD plugin-a eth0",
            "ADD plugin-b net1",
            "STATUS plugin-a",
            "GC plugin-a 1",
            "DEL plugin-b net1",
            "DEL plugin-a eth0"
        ]
    );
}

#[test]
fn default_route_requests_reach_the_executor() {
    let s = setup();
    s.server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[(
            "k8s.v1.cni.cncf.io/networks",
            r#"[{"name":"net-a","default-route":["10.1.0.1"]}]"#,
        )],
    );
    let conf = s.conf(json!({}));
    let client = s.client(&conf);
    let exec = Recorder::default();
    cmd_add(
        &conf,
        &req("c1", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap();
    assert_eq!(
        exec.log(),
        [
            "ADD cluster-plugin eth0",
            "ROUTES eth0 true true []",
            "ADD plugin-a net1",
            "ROUTES net1 true true [10.1.0.1]"
        ]
    );
}

#[test]
fn api_unreachable_on_add_is_try_again_later_and_bounded() {
    let mut s = setup();
    let conf = s.conf(json!({"apiTimeoutSeconds": 0.6}));
    let client = s.client(&conf);
    s.server.stop();
    let t = std::time::Instant::now();
    let e = cmd_add(
        &conf,
        &req("c1", "ns1", "web", "uid-1"),
        Some(&client),
        &Recorder::default(),
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::TryAgainLater, "{e}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let _ = client.get_pod("a", "b");
}

#[test]
fn taken_interface_is_not_deleted_on_rollback() {
    let s = setup();
    s.server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a@lo")],
    );
    let conf = s.conf(json!({}));
    let client = s.client(&conf);
    let exec = Recorder {
        taken: Some("plugin-a".into()),
        ..Default::default()
    };
    let e = cmd_add(
        &conf,
        &req("c1", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidNetworkConfig);
    // plugin-a never ran: only the cluster network is rolled back.
    assert_eq!(
        exec.log(),
        [
            "ADD cluster-plugin eth0",
            "ADD plugin-a lo",
            "DEL cluster-plugin eth0"
        ]
    );
    assert!(s.cache_files().is_empty());
}

#[test]
fn file_cluster_network_and_auxiliary_chain_without_kubernetes() {
    let dir = tempfile::tempdir().unwrap();
    let netd = dir.path().join("net.d");
    std::fs::create_dir_all(netd.join("aux-chain")).unwrap();
    std::fs::write(
        netd.join("10-cluster.conflist"),
        r#"{"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"cluster-plugin"}]}"#,
    )
    .unwrap();
    std::fs::write(
        netd.join("aux-chain/10-tuning.conf"),
        r#"{"type":"tuning","sysctl":{}}"#,
    )
    .unwrap();
    let conf = NetConf::from_slice(
        &serde_json::to_vec(
            &json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus",
        "cniDir": dir.path().join("cni"), "clusterNetwork": netd.join("10-cluster.conflist"),
        "auxiliaryCNIChainName": "aux-chain"}),
        )
        .unwrap(),
    )
    .unwrap();
    let exec = Recorder::default();
    let r = PodRequest::new("c1", "/run/netns/x", "eth0", "").unwrap();
    cmd_add(&conf, &r, None, &exec).unwrap();
    assert_eq!(exec.log(), ["ADD cluster-plugin eth0", "ADD passthru net1"]);
    let cached: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("cni/c1@eth0")).unwrap()).unwrap();
    assert_eq!(cached[1]["ConfList"]["plugins"][1]["type"], "tuning");
    // Without a folder of extra plugins there is no auxiliary delegate.
    std::fs::remove_file(netd.join("aux-chain/10-tuning.conf")).unwrap();
    let exec = Recorder::default();
    cmd_add(
        &conf,
        &PodRequest::new("c2", "/run/netns/x", "eth0", "").unwrap(),
        None,
        &exec,
    )
    .unwrap();
    assert_eq!(exec.log(), ["ADD cluster-plugin eth0"]);
}

#[test]
fn readiness_indicator_file() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let e = cni_multus::flow::wait_ready(&ready, Duration::from_millis(300)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::TryAgainLater);
    assert!(
        e.to_string()
            .contains("have you checked that your default network is ready?"),
        "{e}"
    );
    let conf = NetConf::from_slice(
        &serde_json::to_vec(
            &json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus",
        "cniDir": dir.path().join("cni"), "readinessindicatorfile": ready,
        "delegates": [{"name": "a", "type": "plugin-a"}]}),
        )
        .unwrap(),
    )
    .unwrap();
    let r = PodRequest::new("c1", "/run/netns/x", "eth0", "").unwrap();
    // DEL does not wait for readiness.
    cmd_del(&conf, &r, None, &Recorder::default()).unwrap();
    let path = ready.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        std::fs::write(path, "").unwrap();
    });
    let exec = Recorder::default();
    cmd_add(&conf, &r, None, &exec).unwrap();
    t.join().unwrap();
    assert_eq!(exec.log(), ["ADD plugin-a eth0"]);
}

/// #31.10: a failed ADD takes its delegate cache with it even when its undo
/// fails too, so a later DEL replays nothing of it.
#[test]
fn a_failed_add_leaves_no_cache_even_when_its_undo_fails() {
    let s = setup();
    s.server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a,net-b")],
    );
    let conf = s.conf(json!({}));
    let client = s.client(&conf);
    let exec = Recorder {
        fail_add: Some("plugin-b".into()),
        fail_del: true,
        ..Default::default()
    };
    cmd_add(
        &conf,
        &req("c1", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap_err();
    assert!(s.cache_files().is_empty(), "{:?}", s.cache_files());
    let later = Recorder::default();
    cmd_del(&conf, &req("c1", "ns1", "web", "uid-1"), None, &later).unwrap();
    assert!(later.log().is_empty(), "{:?}", later.log());
}

/// #31.10: DEL without a cache, the pod's networks needing device IDs and
/// the device-ID source down (no kubelet socket, no checkpoint), deletes
/// the cluster network and succeeds, as Go's multus does.
#[test]
fn del_without_cache_and_without_kubelet_deletes_the_cluster_network() {
    let s = setup();
    s.server.add_nad_with_annotations(
        "ns1",
        "sriov",
        r#"{"cniVersion":"1.0.0","type":"plugin-sriov"}"#,
        &[("k8s.v1.cni.cncf.io/resourceName", "example.com/sriov")],
    );
    s.server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "sriov")],
    );
    let gone = s.dir.path().join("kubelet-stopped");
    let conf = s.conf(json!({"podResourcesSocket": gone.join("kubelet.sock"),
        "deviceCheckpointFile": gone.join("kubelet_internal_checkpoint")}));
    let client = s.client(&conf);
    // The premise: the pod's networks cannot be had without kubelet.
    let exec = Recorder::default();
    cmd_add(
        &conf,
        &req("c1", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap_err();
    let exec = Recorder::default();
    cmd_del(
        &conf,
        &req("c7", "ns1", "web", "uid-1"),
        Some(&client),
        &exec,
    )
    .unwrap();
    assert_eq!(exec.log(), ["DEL cluster-plugin eth0"]);
}
