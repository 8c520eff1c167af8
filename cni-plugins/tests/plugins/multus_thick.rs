//! multus thick mode end to end: a `multus-daemon` started by the test
//! inside a fresh "node" network namespace, the `multus-shim` binary
//! forwarding the runtime's commands over the daemon's socket (temporary
//! `socketDir`), Go bridge + host-local from /usr/lib/cni as delegates and
//! the test API server. Also: the socket's error handling, health, metrics
//! and auto-configuration against an in-process daemon. Kernel tests need
//! root; they are skipped (with a message) otherwise.
#![cfg(feature = "multus")]

use std::io::{Read, Write};
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_multus::thick::{self, api::CniRequest, http, DaemonConfig};
use cni_testkit::multus_node::{
    bridge_nad, ipv4_addrs, links, netns_with_lo, BridgeNad, Call, DaemonProcess, MultusNode,
    GO_PLUGINS,
};
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

/// A binary under test: from `MULTUS_BIN_DIR` (e.g. a release build) when
/// set, else this profile's.
fn bin(name: &str, built: &str) -> String {
    std::env::var("MULTUS_BIN_DIR")
        .map(|d| format!("{d}/{name}"))
        .unwrap_or_else(|_| built.to_string())
}

/// The node of these tests: a cluster network and two NADs.
struct Env(MultusNode);

impl Deref for Env {
    type Target = MultusNode;
    fn deref(&self) -> &MultusNode {
        &self.0
    }
}

impl DerefMut for Env {
    fn deref_mut(&mut self) -> &mut MultusNode {
        &mut self.0
    }
}

fn setup() -> Env {
    Env(MultusNode::start(
        "t",
        &[
            BridgeNad::new("kube-system", "cluster", "tcl0", "10.220.0.0/24"),
            BridgeNad::new("ns1", "net-a", "tba0", "10.221.0.0/24"),
            BridgeNad {
                ips_capability: true,
                ..BridgeNad::new("ns1", "net-b", "tbb0", "10.222.0.0/24")
            },
        ],
    )
    .unwrap())
}

impl Env {
    fn start_daemon(&self) -> DaemonProcess {
        self.start_daemon_with(self.daemon_config())
    }

    fn start_daemon_with(&self, config: Value) -> DaemonProcess {
        self.0
            .start_daemon(
                Path::new(&bin("multus-daemon", env!("CARGO_BIN_EXE_multus-daemon"))),
                &config,
                &self.socket_dir().join("multus.sock"),
            )
            .unwrap()
    }

    /// Runs a plugin binary inside the node namespace.
    fn run(
        &self,
        bin: &str,
        conf: &Value,
        command: &str,
        cid: &str,
        pod: &str,
    ) -> (bool, Value, Duration) {
        self.run_in(self.pod_path(), bin, conf, command, cid, pod)
    }

    fn run_in(
        &self,
        netns: &Path,
        bin: &str,
        conf: &Value,
        command: &str,
        cid: &str,
        pod: &str,
    ) -> (bool, Value, Duration) {
        let call = Call {
            command,
            cid,
            pod,
            ifname: "eth0",
            netns,
        };
        let r = self.0.run(Path::new(bin), conf, call).unwrap();
        if !r.success {
            eprintln!("{bin} {command} stderr: {}", r.stderr);
        }
        (r.success, r.stdout, r.took)
    }

    fn shim(&self, command: &str, cid: &str, pod: &str) -> (bool, Value, Duration) {
        self.run(
            &bin("multus-shim", env!("CARGO_BIN_EXE_multus-shim")),
            &self.shim_conf(),
            command,
            cid,
            pod,
        )
    }

    fn cache_files(&self) -> Vec<String> {
        self.files_in("cni")
    }

    fn status_annotation(&self, pod: &str) -> Vec<(String, String)> {
        let st: Value = serde_json::from_str(
            &self
                .server
                .pod_annotation("ns1", pod, "k8s.v1.cni.cncf.io/network-status")
                .unwrap_or_default(),
        )
        .unwrap_or(json!([]));
        st.as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["name"].as_str().unwrap_or("").to_string(),
                    s["interface"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }
}

const TWO_NADS: &str =
    r#"[{"name":"net-a"},{"name":"net-b","interface":"data0","ips":["10.222.0.50/24"]}]"#;

#[test]
fn shim_and_daemon_attach_a_pod_then_del_without_the_daemon() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) {
        return;
    }
    let env = setup();
    let mut daemon = env.start_daemon();
    // The socket is the owner's only.
    let sock = env.socket_dir().join("multus.sock");
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // The daemon lists and watches pods and NADs.
    let gets = |path: &str| {
        env.server
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path)
            .count()
    };
    let nads = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions";
    let deadline = Instant::now() + Duration::from_secs(10);
    while gets("/api/v1/pods") < 2 || gets(nads) < 2 {
        assert!(
            Instant::now() < deadline,
            "daemon never watched: {:?}",
            env.server.requests()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    env.server.add_pod(
        "ns1",
        "web",
        "uid-web",
        &[("k8s.v1.cni.cncf.io/networks", TWO_NADS)],
    );
    std::thread::sleep(Duration::from_millis(200));
    let (ok, result, took) = env.shim("ADD", "cid-web", "web");
    assert!(ok, "ADD failed: {result}");
    eprintln!("shim + daemon ADD (3 delegates): {took:?}");
    assert_eq!(result["cniVersion"], "1.0.0");
    assert!(
        result["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "eth0"),
        "{result}"
    );

    // Independent oracle: the kernel.
    let addrs = ipv4_addrs(&env.pod);
    let find = |n: &str| {
        addrs
            .iter()
            .find(|(name, _)| name == n)
            .map(|(_, a)| a.clone())
            .unwrap_or_default()
    };
    assert!(
        find("eth0")
            .iter()
            .any(|a| a.starts_with("10.220.0.") && a.ends_with("/24")),
        "{addrs:?}"
    );
    assert!(
        find("net1")
            .iter()
            .any(|a| a.starts_with("10.221.0.") && a.ends_with("/24")),
        "{addrs:?}"
    );
    assert_eq!(find("data0"), ["10.222.0.50/24"], "{addrs:?}");
    let node_links = links(&env.node);
    for b in ["tcl0", "tba0", "tbb0"] {
        assert!(node_links.iter().any(|l| l == b), "{node_links:?}");
    }
    let status = env.status_annotation("web");
    assert_eq!(
        status,
        [
            ("kube-system/cluster".to_string(), "eth0".to_string()),
            ("ns1/net-a".to_string(), "net1".to_string()),
            ("ns1/net-b".to_string(), "data0".to_string())
        ]
    );
    assert_eq!(
        env.ipam_reservations().len(),
        3,
        "{:?}",
        env.ipam_reservations()
    );
    // Served from the watch cache: no GET of the pod or its NADs.
    let object_gets: Vec<String> = env
        .server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/namespaces/"))
        .map(|r| r.path.clone())
        .collect();
    assert!(object_gets.is_empty(), "{object_gets:?}");
    // CHECK goes through the daemon too.
    assert!(env.shim("CHECK", "cid-web", "web").0);

    // The thin plugin, given the daemon's configuration, attaches another
    // pod the same way.
    env.server.add_pod(
        "ns1",
        "thin",
        "uid-thin",
        &[(
            "k8s.v1.cni.cncf.io/networks",
            TWO_NADS.replace(".50", ".51").as_str(),
        )],
    );
    let thin_pod = netns_with_lo("tpodthin").unwrap();
    let thin = &bin("multus", env!("CARGO_BIN_EXE_multus"));
    let (ok, thin_result, _) = env.run_in(
        thin_pod.path(),
        thin,
        &env.thin_conf(),
        "ADD",
        "cid-thin",
        "thin",
    );
    assert!(ok, "thin ADD failed: {thin_result}");
    let shape = |r: &Value| -> Vec<String> {
        r["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(shape(&result).len(), shape(&thin_result).len());
    assert_eq!(
        env.status_annotation("thin")
            .into_iter()
            .map(|(_, i)| i)
            .collect::<Vec<_>>(),
        ["eth0", "net1", "data0"]
    );

    // `/delegate`: one more attachment for the running pod, then its removal.
    let mut extra: Value = serde_json::from_str(&bridge_nad(
        "tbx0",
        "10.223.0.0/24",
        &env.dir.path().join("ipam"),
        true,
    ))
    .unwrap();
    extra["name"] = json!("extra");
    let extra = extra.to_string();
    let mut dreq = CniRequest {
        config: extra.into_bytes(),
        interface_attributes: Some(thick::api::InterfaceAttributes {
            ip_request: vec!["10.223.0.9/24".into()],
            mac_request: String::new(),
        }),
        ..Default::default()
    };
    for (k, v) in [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "cid-web"),
        ("CNI_NETNS", env.pod.path().to_str().unwrap()),
        ("CNI_IFNAME", "extra9"),
        ("CNI_PATH", GO_PLUGINS),
        ("CNI_ARGS", "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web"),
    ] {
        dreq.env.insert(k.into(), v.into());
    }
    let reply = thick::shim::send(&sock, "/delegate", &dreq)
        .unwrap()
        .unwrap();
    assert!(reply.result.is_some(), "{reply:?}");
    let extra_addrs = ipv4_addrs(&env.pod);
    assert!(
        extra_addrs
            .iter()
            .any(|(n, a)| n == "extra9" && a == &["10.223.0.9/24".to_string()]),
        "{extra_addrs:?}"
    );
    dreq.env.insert("CNI_COMMAND".into(), "DEL".into());
    thick::shim::send(&sock, "/delegate", &dreq)
        .unwrap()
        .unwrap();
    assert!(!links(&env.pod).contains(&"extra9".to_string()));

    // The daemon goes away: DEL still removes everything, from the cache.
    daemon.stop();
    assert!(UnixStream::connect(&sock).is_err());
    let (ok, out, took) = env.shim("DEL", "cid-web", "web");
    assert!(ok, "DEL failed: {out}");
    eprintln!("shim DEL with the daemon stopped (in-process fallback): {took:?}");
    assert_eq!(links(&env.pod), ["lo"]);
    assert!(
        env.ipam_reservations().iter().all(|r| !r.ends_with(".50")),
        "{:?}",
        env.ipam_reservations()
    );
    assert!(env.cache_files().is_empty(), "{:?}", env.cache_files());
    // Again: nothing cached, success.
    assert!(env.shim("DEL", "cid-web", "web").0);
    // ADD without the daemon is "try again later".
    let (ok, reply, _) = env.shim("ADD", "cid-web2", "web");
    assert!(!ok);
    assert_eq!(reply["code"], 11, "{reply}");
    assert!(
        env.run_in(
            thin_pod.path(),
            thin,
            &env.thin_conf(),
            "DEL",
            "cid-thin",
            "thin"
        )
        .0
    );
    assert_eq!(links(&thin_pod), ["lo"]);
    assert!(
        env.ipam_reservations().is_empty(),
        "{:?}",
        env.ipam_reservations()
    );
}

/// An in-process daemon on a temporary socket directory (no API client:
/// these tests never reach a pod).
fn in_process_daemon(extra: Value) -> (thick::DaemonHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = json!({"socketDir": dir.path().join("sock"), "metricsPort": 0,
        "metricsBindAddress": "127.0.0.1", "clusterNetwork": "cluster",
        "cniDir": dir.path().join("cni"), "binDir": dir.path().join("bin")});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    let config = DaemonConfig::from_slice(c.to_string().as_bytes(), Path::new("test")).unwrap();
    let h = thick::start_with(config, None, Arc::new(cni_exec::ProcessExec::new())).unwrap();
    (h, dir)
}

/// Stops the daemon before its temporary directory goes.
struct StopFirst(Option<thick::DaemonHandle>, tempfile::TempDir);

impl Drop for StopFirst {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            d.stop();
        }
    }
}

/// Sends raw bytes to the socket; returns the status and the body.
fn raw(sock: &Path, bytes: &[u8]) -> (u16, Vec<u8>) {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The daemon may answer (and close) before reading everything.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    http::read_response(&s).unwrap()
}

fn get(sock: &Path, path: &str) -> (u16, String) {
    let (s, b) = raw(
        sock,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    );
    (s, String::from_utf8_lossy(&b).into_owned())
}

fn post_cni(sock: &Path, body: &[u8]) -> (u16, Value) {
    let mut req = format!(
        "POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let (s, b) = raw(sock, &req);
    (s, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(
        out.contains("Content-Type: text/plain; version=0.0.4"),
        "{out}"
    );
    out.split_once("\r\n\r\n").unwrap().1.to_string()
}

fn counter(text: &str, handler: &str, code: u16) -> u64 {
    let key = format!("multus_server_request_total{{handler=\"{handler}\",code=\"{code}\",");
    text.lines()
        .filter(|l| l.starts_with(&key))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

#[test]
fn bad_input_gets_an_error_and_the_daemon_keeps_serving() {
    let (d, _dir) = in_process_daemon(json!({}));
    let sock = d.socket().to_path_buf();
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("garbage", b"\x00\x01garbage\r\n\r\n".to_vec(), 400),
        (
            "oversized",
            format!(
                "POST /cni HTTP/1.1\r\nContent-Length: {}\r\n\r\n{{",
                64 << 20
            )
            .into_bytes(),
            413,
        ),
        (
            "not json",
            b"POST /cni HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
            400,
        ),
        (
            "no such endpoint",
            b"POST /nope HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            404,
        ),
        ("wrong method", b"GET /cni HTTP/1.1\r\n\r\n".to_vec(), 405),
    ];
    for (what, bytes, status) in cases {
        let (s, body) = raw(&sock, &bytes);
        assert_eq!(s, status, "{what}");
        let e: Value = serde_json::from_slice(&body).unwrap_or_else(|_| panic!("{what}: {body:?}"));
        assert!(
            e["code"].as_u64().is_some() && e["msg"].as_str().is_some(),
            "{what}: {e}"
        );
    }
    // A well-formed envelope with an unknown command.
    let mut r = CniRequest::default();
    r.env.insert("CNI_COMMAND".into(), "EXPLODE".into());
    r.config = br#"{"cniVersion":"1.0.0","name":"m","type":"multus-shim"}"#.to_vec();
    let (s, e) = post_cni(&sock, &r.to_vec());
    assert_eq!((s, e["code"].as_u64()), (400, Some(4)), "{e}");
    assert!(e["msg"].as_str().unwrap().contains("EXPLODE"), "{e}");
    // Missing variables and a broken config: the skel's own errors, as a
    // plugin process would print them.
    r.env.insert("CNI_COMMAND".into(), "ADD".into());
    let (s, e) = post_cni(&sock, &r.to_vec());
    assert_eq!((s, e["code"].as_u64()), (500, Some(4)), "{e}");
    for (k, v) in [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/none"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/nonexistent"),
    ] {
        r.env.insert(k.into(), v.into());
    }
    r.config = b"{not json".to_vec();
    let (s, e) = post_cni(&sock, &r.to_vec());
    assert_eq!((s, e["code"].as_u64()), (500, Some(6)), "{e}");
    // VERSION is served like a plugin's.
    r.env.insert("CNI_COMMAND".into(), "VERSION".into());
    r.config = br#"{"cniVersion":"1.0.0"}"#.to_vec();
    let (s, v) = post_cni(&sock, &r.to_vec());
    assert_eq!(s, 200, "{v}");
    assert!(
        v["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "1.1.0"),
        "{v}"
    );
    // A client that connects and leaves.
    drop(UnixStream::connect(&sock).unwrap());
    // Still serving.
    assert_eq!(get(&sock, "/healthz"), (200, "ok".to_string()));
    let m = d.metrics();
    assert_eq!(m.request_count("invalid", 400), 1);
    assert_eq!(m.request_count("invalid", 413), 1);
    assert_eq!(m.request_count("/cni", 400), 2);
    d.stop();
    assert!(!sock.exists());
}

#[test]
fn health_readiness_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let indicator = dir.path().join("ready");
    let (d, _d2) = in_process_daemon(json!({"readinessindicatorfile": indicator}));
    let _d2 = StopFirst(Some(d), _d2);
    let d = _d2.0.as_ref().unwrap();
    let sock = d.socket().to_path_buf();
    let addr = d.metrics_addr().unwrap();
    assert!(addr.ip().is_loopback());

    assert_eq!(get(&sock, "/healthz"), (200, "ok".to_string()));
    assert_eq!(get(&sock, "/readyz").0, 503);
    std::fs::write(&indicator, "").unwrap();
    assert_eq!(get(&sock, "/readyz"), (200, "ok".to_string()));

    let before = scrape(addr);
    assert!(
        before.contains("# TYPE multus_server_request_total counter"),
        "{before}"
    );
    assert_eq!(counter(&before, "/healthz", 200), 1);
    assert_eq!(counter(&before, "/readyz", 503), 1);
    // A STATUS through the socket (it fails: no cluster network file), then
    // the counters and the STATUS histogram move.
    let mut r = CniRequest::default();
    r.env.insert("CNI_COMMAND".into(), "STATUS".into());
    r.env.insert("CNI_PATH".into(), "/nonexistent".into());
    r.config = br#"{"cniVersion":"1.1.0","name":"m","type":"multus-shim"}"#.to_vec();
    let (s, e) = post_cni(&sock, &r.to_vec());
    assert_eq!(s, 500, "{e}");
    get(&sock, "/healthz");
    let after = scrape(addr);
    assert_eq!(counter(&after, "/healthz", 200), 2);
    assert_eq!(counter(&after, "/cni", 500), 1);
    assert!(after.contains("# TYPE multus_server_cni_request_duration_seconds histogram"));
    assert!(
        after.contains(
            "multus_server_cni_request_duration_seconds_bucket{command=\"STATUS\",le=\"+Inf\"} 1\n"
        ),
        "{after}"
    );
    assert!(
        after.contains("multus_server_cni_request_duration_seconds_count{command=\"STATUS\"} 1\n"),
        "{after}"
    );
    // Every sample line is `name{labels} value` with a numeric value.
    for l in after.lines().filter(|l| !l.starts_with('#')) {
        let v = l.rsplit_once(' ').unwrap().1;
        assert!(v.parse::<f64>().is_ok(), "{l}");
    }
}

/// Issue 39, item 4: a real `multus-daemon` with its metrics port, a pod
/// attached through the shim (three bridge delegates), a pod whose
/// delegate's plugin does not exist, a DEL; then a real HTTP client in the
/// node namespace scrapes it and Prometheus' own parser reads it: the
/// request, CNI, delegate and API counters moved by what was done.
#[test]
fn daemon_metrics_move_with_requests_delegates_and_api_calls() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) || !crate::prom_support::require_parser()
    {
        return;
    }
    let env = setup();
    env.server.add_nad(
        "ns1",
        "net-bad",
        r#"{"cniVersion":"1.0.0","type":"no-such-plugin"}"#,
    );
    let mut config = env.daemon_config();
    // Its own node namespace: a fixed port collides with nothing.
    config["metricsPort"] = json!(9091);
    config["metricsBindAddress"] = json!("127.0.0.1");
    let _daemon = env.start_daemon_with(config);
    let scrape = || {
        let out = crate::prom_support::scrape_command_via(
            &["ip", "netns", "exec", env.node.name()],
            "http://127.0.0.1:9091/metrics",
        )
        .output()
        .expect("scrape");
        crate::prom_support::Scrape::from_output(&out)
    };
    let before = scrape();
    assert_eq!(before.sum("multus_server_cni_requests_total", &[]), 0.0);
    env.server.add_pod(
        "ns1",
        "web",
        "uid-web",
        &[("k8s.v1.cni.cncf.io/networks", TWO_NADS)],
    );
    env.server.add_pod(
        "ns1",
        "bad",
        "uid-bad",
        &[("k8s.v1.cni.cncf.io/networks", r#"[{"name":"net-bad"}]"#)],
    );
    std::thread::sleep(Duration::from_millis(200));
    let (ok, result, _) = env.shim("ADD", "cid-web", "web");
    assert!(ok, "ADD failed: {result}");
    assert!(env.shim("DEL", "cid-web", "web").0);
    // In the same pod namespace, now free: the cluster network is added,
    // then net-bad's plugin is missing.
    let (ok, result, _) = env.shim("ADD", "cid-bad", "bad");
    assert!(!ok, "ADD with a missing plugin succeeded: {result}");
    let m = scrape();
    for (family, kind) in [
        ("multus_server_request", "counter"),
        ("multus_server_cni_requests", "counter"),
        ("multus_server_cni_request_duration_seconds", "histogram"),
        ("multus_server_requests_in_flight", "gauge"),
        ("multus_delegate_calls", "counter"),
        ("multus_api_requests", "counter"),
    ] {
        assert_eq!(m.family_type(family), Some(kind), "{family}: {m:?}");
    }
    let post = |code| {
        m.sum(
            "multus_server_request_total",
            &[("handler", "/cni"), ("method", "post"), ("code", code)],
        )
    };
    assert_eq!((post("200"), post("500")), (2.0, 1.0), "{m:?}");
    let cni = |command, code: &str| {
        m.sum(
            "multus_server_cni_requests_total",
            &[("command", command), ("code", code)],
        )
    };
    assert_eq!(cni("ADD", "0"), 1.0, "{m:?}");
    assert_eq!(cni("DEL", "0"), 1.0, "{m:?}");
    let code = result["code"].as_u64().unwrap_or_default().to_string();
    assert_eq!(
        cni("ADD", &code),
        1.0,
        "the failed ADD's code {code}: {m:?}"
    );
    assert_eq!(
        m.sum("multus_server_cni_requests_total", &[("command", "ADD")]),
        2.0
    );
    assert_eq!(
        m.sum(
            "multus_server_cni_request_duration_seconds_count",
            &[("command", "ADD")]
        ),
        2.0
    );
    assert_eq!(
        m.sum(
            "multus_server_cni_request_duration_seconds_bucket",
            &[("command", "DEL"), ("le", "+Inf")]
        ),
        1.0
    );
    assert_eq!(m.sum("multus_server_requests_in_flight", &[]), 0.0);
    let delegate = |command, code| {
        m.sum(
            "multus_delegate_calls_total",
            &[
                ("plugin_type", "bridge"),
                ("command", command),
                ("code", code),
            ],
        )
    };
    // The cluster network, net-a and net-b; the bad pod's cluster
    // network.
    assert_eq!(delegate("ADD", "0"), 4.0, "{m:?}");
    assert!(delegate("DEL", "0") >= 3.0, "{m:?}");
    let missing = m.sum(
        "multus_delegate_calls_total",
        &[("plugin_type", "no-such-plugin"), ("command", "ADD")],
    );
    let missing_ok = m.sum(
        "multus_delegate_calls_total",
        &[
            ("plugin_type", "no-such-plugin"),
            ("command", "ADD"),
            ("code", "0"),
        ],
    );
    assert_eq!((missing, missing_ok), (1.0, 0.0), "{m:?}");
    assert!(
        m.sum(
            "multus_api_requests_total",
            &[("operation", "get_pod"), ("code", "200")]
        ) >= 2.0,
        "{m:?}"
    );
    assert!(
        m.sum(
            "multus_api_requests_total",
            &[("operation", "patch_pod_annotations"), ("code", "200")]
        ) >= 1.0,
        "{m:?}"
    );
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn auto_configuration_follows_the_primary() {
    let net = tempfile::tempdir().unwrap();
    let indicator = net.path().join("indicator");
    let (d, dir) = in_process_daemon(
        json!({"multusConfigFile": "auto", "cniConfigDir": net.path(),
        "readinessindicatorfile": indicator}),
    );
    let guard = StopFirst(Some(d), dir);
    let (d, dir) = (guard.0.as_ref().unwrap(), &guard.1);
    let sock = d.socket().to_path_buf();
    let out = net.path().join("00-multus.conf");
    let primary = net.path().join("10-flannel.conflist");
    // Not multus's own: a stale multus file is skipped as a primary.
    std::fs::write(
        net.path().join("05-old-multus.conf"),
        r#"{"cniVersion":"0.3.1","name":"x","type":"multus"}"#,
    )
    .unwrap();
    std::fs::write(
        &primary,
        r#"{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#,
    )
    .unwrap();
    // Not ready: no configuration yet.
    std::thread::sleep(Duration::from_millis(600));
    assert!(!out.exists());
    assert_eq!(get(&sock, "/readyz").0, 503);
    std::fs::write(&indicator, "").unwrap();
    wait_for("00-multus.conf", || out.exists());
    let read = || -> Value {
        serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap_or(Value::Null)
    };
    let c = read();
    assert_eq!(c["cniVersion"], "0.3.1", "{c}");
    assert_eq!(c["type"], "multus-shim");
    assert_eq!(c["clusterNetwork"], json!(primary));
    assert_eq!(c["socketDir"], json!(dir.path().join("sock")));
    assert_eq!(c["capabilities"], json!({"portMappings": true}));
    assert_eq!(c["readinessindicatorfile"], json!(indicator));
    assert_eq!(c["cniDir"], json!(dir.path().join("cni")));
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    wait_for("ready", || get(&sock, "/readyz").0 == 200);

    // A new primary version: regenerated.
    std::fs::write(
        &primary,
        r#"{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel"}]}"#,
    )
    .unwrap();
    wait_for("regeneration", || read()["cniVersion"] == "1.0.0");
    assert!(read().get("capabilities").is_none());
    // An earlier file in CNI order becomes the primary.
    let earlier = net.path().join("08-calico.conf");
    std::fs::write(
        &earlier,
        r#"{"cniVersion":"0.4.0","name":"k8s-pod-network","type":"calico"}"#,
    )
    .unwrap();
    wait_for("switch to 08-calico.conf", || {
        read()["clusterNetwork"] == json!(earlier)
    });
    assert_eq!(read()["cniVersion"], "0.4.0");
    // The primaries go away: no broken file left behind, not ready.
    std::fs::remove_file(&earlier).unwrap();
    std::fs::remove_file(&primary).unwrap();
    wait_for("removal", || !out.exists());
    // The daemon removes the file, then marks itself not ready.
    wait_for("not ready", || get(&sock, "/readyz").0 == 503);
    // No temporary files either.
    let left: Vec<String> = std::fs::read_dir(net.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.iter().all(|n| !n.ends_with(".tmp")), "{left:?}");
}

/// `chrootDir`: delegates are found under the root and run chrooted
/// (root "/" runs the real Go plugin; a root without its dynamic loader
/// fails with the plugin error, not a panic or a hang).
#[test]
fn chrooted_delegates() {
    use cni_exec::Exec;
    use cni_multus::thick::chroot::ChrootExec;
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) {
        return;
    }
    let e = ChrootExec::new("/");
    let p = e
        .find_plugin("bridge", &[PathBuf::from(GO_PLUGINS)])
        .unwrap();
    let v = cni_exec::invoke::get_version_info(&e, &p).unwrap();
    assert!(v.supported_versions.iter().any(|v| v == "1.0.0"), "{v:?}");

    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("opt/cni/bin")).unwrap();
    std::fs::copy(
        Path::new(GO_PLUGINS).join("bridge"),
        root.path().join("opt/cni/bin/bridge"),
    )
    .unwrap();
    let e = ChrootExec::new(root.path());
    let p = e
        .find_plugin("bridge", &[PathBuf::from("/opt/cni/bin")])
        .unwrap();
    assert_eq!(p, Path::new("/opt/cni/bin/bridge"));
    let err = cni_exec::invoke::get_version_info(&e, &p).unwrap_err();
    assert!(!err.to_string().is_empty());
}

/// #31.1: a regular file (or a directory, or a symlink) at
/// `<socketDir>/multus.sock` is never removed: the daemon refuses to start
/// with a clear error and a non-zero exit. A stale socket is replaced.
#[test]
fn daemon_never_replaces_what_is_not_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().join("sock");
    std::fs::create_dir(&sock_dir).unwrap();
    let config = dir.path().join("daemon-config.json");
    std::fs::write(
        &config,
        json!({"socketDir": sock_dir, "clusterNetwork": "cluster",
            "cniDir": dir.path().join("cni"), "binDir": dir.path().join("bin")})
        .to_string(),
    )
    .unwrap();
    let sock = sock_dir.join("multus.sock");
    let daemon = || {
        let mut cmd = Command::new(bin("multus-daemon", env!("CARGO_BIN_EXE_multus-daemon")));
        cmd.arg("--config").arg(&config);
        cmd
    };
    for kind in ["a regular file", "a directory", "a symbolic link"] {
        match kind {
            "a regular file" => std::fs::write(&sock, "precious").unwrap(),
            "a directory" => std::fs::create_dir(&sock).unwrap(),
            _ => std::os::unix::fs::symlink("/etc/hostname", &sock).unwrap(),
        }
        let (status, out) = crate::common::run_for(daemon(), Duration::from_secs(20));
        let status = status.unwrap_or_else(|| panic!("daemon served on {kind}: {out}"));
        assert!(!status.success(), "{kind}: {out}");
        assert!(
            out.contains("refuse to replace") && out.contains(kind),
            "{kind}: {out}"
        );
        let meta = std::fs::symlink_metadata(&sock).expect("kept");
        match kind {
            "a regular file" => {
                assert_eq!(std::fs::read_to_string(&sock).unwrap(), "precious");
                std::fs::remove_file(&sock).unwrap();
            }
            "a directory" => {
                assert!(meta.is_dir());
                std::fs::remove_dir(&sock).unwrap();
            }
            _ => {
                assert!(meta.file_type().is_symlink());
                std::fs::remove_file(&sock).unwrap();
            }
        }
    }
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let (status, out) = crate::common::run_for(daemon(), Duration::from_secs(2));
    assert!(status.is_none(), "the daemon should serve: {out}");
}
