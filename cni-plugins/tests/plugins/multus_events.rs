//! multus's Kubernetes events (Go multus's `Eventf` calls) against the test
//! API server: `AddedInterface` per attached delegate with Go's message and
//! the pod as `involvedObject`, `NoNetworkFound` for a NAD that cannot be
//! read, nothing more for a failing delegate (Go posts nothing for it), an
//! API server refusing events does not fail the ADD, and the thick daemon
//! emits the same events.
#![cfg(feature = "multus")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cni_exec::{InProcessExec, Plugin, Request};
use cni_multus::k8s::{ClientConfig, HttpKubeClient};
use cni_multus::thick::{self, api::CniRequest, DaemonConfig};
use cni_multus::{cmd_add, Delegate, DelegateExec, DelegateRuntime, Error, NetConf};
use cni_multus::{PodRequest, Result as MultusResult};
use cni_testkit::KubeApiServer;
use cni_types::{CniError, CniResult, ErrorCode, GcAttachment, Interface, IpConfig};
use serde_json::{json, Value};

/// A delegate executor answering from the plugin type: `plugin-<n>` gets
/// `10.<n>.0.2/24` (and `fd00:<n>::2/64` for `dual-<n>`), `empty` an empty
/// result, `fail` a plugin error.
#[derive(Default)]
struct Fake {
    log: Mutex<Vec<String>>,
}

fn answer(plugin: &str, ifname: &str, netns: &str) -> Result<CniResult, CniError> {
    if plugin == "fail" {
        return Err(CniError::new(ErrorCode::Other(100), "boom", ""));
    }
    if plugin == "empty" {
        return Ok(CniResult::default());
    }
    let n = plugin.rsplit('-').next().unwrap_or("0");
    let mut ips = vec![IpConfig::new(format!("10.{n}.0.2/24").parse().unwrap())];
    if plugin.starts_with("dual-") {
        ips.push(IpConfig::new(format!("fd00:{n}::2/64").parse().unwrap()));
    }
    Ok(CniResult {
        interfaces: vec![Interface {
            name: ifname.into(),
            sandbox: netns.into(),
            ..Default::default()
        }],
        ips,
        ..Default::default()
    })
}

impl DelegateExec for Fake {
    fn add(&self, d: &Delegate, rt: &DelegateRuntime) -> MultusResult<CniResult> {
        self.log
            .lock()
            .unwrap()
            .push(format!("ADD {} {}", d.plugin_type(), rt.ifname));
        answer(d.plugin_type(), &rt.ifname, &rt.netns).map_err(|e| Error::DelegateFailed {
            network: d.name.clone(),
            ifname: rt.ifname.clone(),
            error: Box::new(e),
        })
    }
    fn del(&self, d: &Delegate, rt: &DelegateRuntime) -> MultusResult<()> {
        self.log
            .lock()
            .unwrap()
            .push(format!("DEL {} {}", d.plugin_type(), rt.ifname));
        Ok(())
    }
    fn check(&self, _: &Delegate, _: &DelegateRuntime) -> MultusResult<()> {
        Ok(())
    }
    fn status(&self, _: &Delegate) -> MultusResult<()> {
        Ok(())
    }
    fn gc(&self, _: &Delegate, _: &[GcAttachment]) -> MultusResult<()> {
        Ok(())
    }
}

struct Setup {
    server: KubeApiServer,
    dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let server = KubeApiServer::start().unwrap();
    server.add_nad(
        "kube-system",
        "cluster",
        r#"{"cniVersion":"1.0.0","type":"plugin-1"}"#,
    );
    server.add_nad("ns1", "net-a", r#"{"cniVersion":"1.0.0","type":"dual-2"}"#);
    server.add_nad(
        "ns1",
        "net-b",
        r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"plugin-3"}]}"#,
    );
    server.add_nad(
        "ns1",
        "net-empty",
        r#"{"cniVersion":"1.0.0","type":"empty"}"#,
    );
    server.add_nad("ns1", "net-fail", r#"{"cniVersion":"1.0.0","type":"fail"}"#);
    Setup {
        server,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Setup {
    fn conf(&self) -> NetConf {
        let v = json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus",
            "kubeconfig": self.server.kubeconfig_path(), "clusterNetwork": "cluster",
            "cniDir": self.dir.path().join("cni"), "confDir": self.dir.path().join("conf")});
        NetConf::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
    }
    fn client(&self) -> HttpKubeClient {
        HttpKubeClient::new(
            &ClientConfig::from_kubeconfig(self.server.kubeconfig_path(), Duration::from_secs(5))
                .unwrap(),
        )
        .unwrap()
    }
    fn add_pod(&self, name: &str, networks: &str) {
        self.server.add_pod(
            "ns1",
            name,
            &format!("uid-{name}"),
            &[("k8s.v1.cni.cncf.io/networks", networks)],
        );
    }
    /// (type, reason, message) of the events about `pod`, in order.
    fn events(&self, pod: &str) -> Vec<(String, String, String)> {
        self.server
            .posted_events()
            .iter()
            .filter(|e| e["involvedObject"]["name"] == pod)
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
                (s("type"), s("reason"), s("message"))
            })
            .collect()
    }
}

fn req(cid: &str, pod: &str) -> PodRequest {
    PodRequest::new(
        cid,
        "/run/netns/test",
        "eth0",
        &format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME={pod};K8S_POD_UID=uid-{pod}"),
    )
    .unwrap()
}

fn normal(msg: &str) -> (String, String, String) {
    ("Normal".into(), "AddedInterface".into(), msg.into())
}

#[test]
fn add_posts_added_interface_per_network_as_go() {
    let s = setup();
    s.add_pod("web", "net-a,net-b@data0,net-empty");
    let conf = s.conf();
    let client = s.client();
    let exec = Fake::default();
    // The reference names the pod as ADD read it (before network-status).
    let read = s.server.pod("ns1", "web").unwrap()["metadata"]["resourceVersion"].clone();
    let result = cmd_add(&conf, &req("c1", "web"), Some(&client), &exec).unwrap();
    assert_eq!(result.ips[0].address.to_string(), "10.1.0.2/24");
    // Go: "Add %s %v from %s" (ifname, []string of the result's
    // addresses, the delegate's name); no event for an empty result.
    assert_eq!(
        s.events("web"),
        [
            normal("Add eth0 [10.1.0.2/24] from kube-system/cluster"),
            normal("Add net1 [10.2.0.2/24 fd00:2::2/64] from ns1/net-a"),
            normal("Add data0 [10.3.0.2/24] from ns1/net-b"),
        ]
    );
    for e in s.server.posted_events() {
        // client-go's recorder: the pod's reference, source "multus",
        // count 1, `<pod>.<hex nanoseconds>` in the pod's namespace.
        assert_eq!(
            e["involvedObject"],
            json!({"kind": "Pod", "apiVersion": "v1", "namespace": "ns1", "name": "web",
                   "uid": "uid-web", "resourceVersion": read})
        );
        assert_eq!(e["source"], json!({"component": "multus"}));
        assert_eq!(e["reportingComponent"], "multus");
        assert_eq!(e["count"], 1);
        assert_eq!(e["metadata"]["namespace"], "ns1");
        let name = e["metadata"]["name"].as_str().unwrap();
        let hex = name.strip_prefix("web.").unwrap();
        assert!(u128::from_str_radix(hex, 16).is_ok(), "{name}");
        assert_eq!(e["firstTimestamp"], e["lastTimestamp"]);
        assert!(e["firstTimestamp"].as_str().unwrap().ends_with('Z'));
    }
    // Posted with POST to the core/v1 events collection of the namespace.
    let posts: Vec<_> = s
        .server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/events"))
        .collect();
    assert_eq!(posts.len(), 3);
    assert!(posts.iter().all(|r| r.method == "POST"
        && r.path == "/api/v1/namespaces/ns1/events"
        && r.status == 201));
}

#[test]
fn failures_post_what_go_posts() {
    let s = setup();
    let conf = s.conf();
    let client = s.client();

    // A failing delegate: Go posts nothing for it (DelegateAdd returns the
    // error before Eventf); the interfaces added before it were announced.
    s.add_pod("failing", "net-a,net-fail");
    let exec = Fake::default();
    let e = cmd_add(&conf, &req("c1", "failing"), Some(&client), &exec).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Other(100), "{e}");
    assert_eq!(
        s.events("failing"),
        [
            normal("Add eth0 [10.1.0.2/24] from kube-system/cluster"),
            normal("Add net1 [10.2.0.2/24 fd00:2::2/64] from ns1/net-a"),
        ]
    );
    assert!(exec
        .log
        .lock()
        .unwrap()
        .contains(&"DEL fail net2".to_string()));

    // A NAD that does not exist: Warning NoNetworkFound with Go's message
    // (getKubernetesDelegate), and no delegate runs.
    s.add_pod("lost", "net-a,missing");
    let exec = Fake::default();
    let e = cmd_add(&conf, &req("c2", "lost"), Some(&client), &exec).unwrap_err();
    assert!(
        e.to_string()
            .contains("cannot find a network-attachment-definition"),
        "{e}"
    );
    assert!(exec.log.lock().unwrap().is_empty());
    assert_eq!(
        s.events("lost"),
        [(
            "Warning".to_string(),
            "NoNetworkFound".to_string(),
            "cannot find a network-attachment-definition (missing) in namespace (ns1): \
             network-attachment-definitions.k8s.cni.cncf.io \"missing\" not found"
                .to_string()
        )]
    );
}

#[test]
fn refused_events_never_fail_the_add() {
    let s = setup();
    s.add_pod("web", "net-a");
    s.server.refuse_events(Some(500));
    let conf = s.conf();
    let client = s.client();
    let exec = Fake::default();
    let result = cmd_add(&conf, &req("c1", "web"), Some(&client), &exec).unwrap();
    assert_eq!(result.interfaces[0].name, "eth0");
    assert!(s.server.posted_events().is_empty());
    // Both events were tried (and refused); the ADD went on to its end.
    let refused = s
        .server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/events") && r.status == 500)
        .count();
    assert_eq!(refused, 2);
    assert!(s
        .server
        .pod_annotation("ns1", "web", "k8s.v1.cni.cncf.io/network-status")
        .is_some());
}

/// A CNI plugin registered in the daemon's in-process executor.
struct InProcess(&'static str);

impl Plugin for InProcess {
    type Error = CniError;
    fn name(&self) -> &str {
        self.0
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        answer(self.0, &req.ifname, &req.netns)
    }
    fn del(&self, _: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

#[test]
fn thick_daemon_posts_the_same_events() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let pod_ns = cni_netns::OwnedNetns::new("mev").unwrap();
    let s = setup();
    s.add_pod("web", "net-a");
    let exec = InProcessExec::builder()
        .register("plugin-1", Arc::new(InProcess("plugin-1")))
        .register("dual-2", Arc::new(InProcess("dual-2")))
        .register("plugin-4", Arc::new(InProcess("plugin-4")))
        .build();
    let dir = s.dir.path();
    let c = json!({"socketDir": dir.join("sock"), "metricsPort": 0,
        "metricsBindAddress": "127.0.0.1", "clusterNetwork": "cluster",
        "cniDir": dir.join("cni"), "binDir": dir.join("bin"), "confDir": dir.join("conf")});
    let config = DaemonConfig::from_slice(c.to_string().as_bytes(), "test".as_ref()).unwrap();
    let kube: thick::plugin::SharedKube = Arc::new(s.client());
    let daemon = thick::start_with(config, Some(kube), Arc::new(exec)).unwrap();

    let netns = pod_ns.netns().path().display().to_string();
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", netns.as_str()),
        ("CNI_IFNAME", "eth0"),
        (
            "CNI_ARGS",
            "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web;K8S_POD_UID=uid-web",
        ),
        ("CNI_PATH", "/nonexistent"),
    ];
    let request = CniRequest {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        config: br#"{"cniVersion":"1.0.0","name":"multus","type":"multus-shim"}"#.to_vec(),
        interface_attributes: None,
    };
    let stream = std::os::unix::net::UnixStream::connect(daemon.socket()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (status, body) = thick::http::post(&stream, "/cni", &request.to_vec()).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reply["result"]["interfaces"][0]["name"], "eth0", "{reply}");

    // `/delegate` (one extra attachment): Go's cmdDelegateAdd runs
    // DelegateAdd, which announces it too, named by the conf's name.
    let mut extra = request.clone();
    extra.env.insert("CNI_IFNAME".into(), "net9".into());
    extra.config = br#"{"cniVersion":"1.0.0","name":"extra","type":"plugin-4"}"#.to_vec();
    let stream = std::os::unix::net::UnixStream::connect(daemon.socket()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (status, body) = thick::http::post(&stream, "/delegate", &extra.to_vec()).unwrap();
    daemon.stop();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        s.events("web"),
        [
            normal("Add eth0 [10.1.0.2/24] from kube-system/cluster"),
            normal("Add net1 [10.2.0.2/24 fd00:2::2/64] from ns1/net-a"),
            normal("Add net9 [10.4.0.2/24] from extra"),
        ]
    );
}
