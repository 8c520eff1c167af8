//! End to end in real namespaces: the `multus` binary, run inside a fresh
//! "node" network namespace, attaches a "pod" namespace to a cluster
//! network and two NADs (Go bridge + host-local from /usr/lib/cni as
//! delegates), talking to the test API server over HTTPS. Needs root;
//! skipped (with a message) otherwise.
#![cfg(feature = "multus")]

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::time::Duration;

use cni_testkit::multus_node::{default_routes, ipv4_addrs, links, BridgeNad, Call, MultusNode};
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

/// The binary under test: `MULTUS_BIN` (e.g. a release build) or this
/// profile's.
fn multus_bin() -> String {
    std::env::var("MULTUS_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_multus").to_string())
}

/// The node of these tests: a cluster network and three NADs.
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
        "m",
        &[
            BridgeNad::new("kube-system", "cluster", "mcl0", "10.210.0.0/24"),
            BridgeNad::new("ns1", "net-a", "mba0", "10.211.0.0/24"),
            BridgeNad {
                ips_capability: true,
                ..BridgeNad::new("ns1", "net-b", "mbb0", "10.212.0.0/24")
            },
            BridgeNad::new("other", "net-c", "mbc0", "10.213.0.0/24"),
        ],
    )
    .unwrap())
}

impl Env {
    /// Runs the multus binary inside the node namespace.
    fn multus(&self, command: &str, cid: &str, pod: &str) -> (bool, Value, Duration) {
        let call = Call {
            command,
            cid,
            pod,
            ifname: "eth0",
            netns: self.pod_path(),
        };
        let r = self
            .run(Path::new(&multus_bin()), &self.multus_conf(), call)
            .unwrap();
        if !r.success {
            eprintln!("multus {command} stderr: {}", r.stderr);
        }
        (r.success, r.stdout, r.took)
    }

    fn cache_files(&self) -> Vec<String> {
        self.files_in("cni")
    }
}

#[test]
fn pod_with_two_nads_then_del_with_the_api_down() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) {
        return;
    }
    let mut env = setup();
    env.server.add_pod(
        "ns1",
        "web",
        "uid-web",
        &[(
            "k8s.v1.cni.cncf.io/networks",
            r#"[{"name":"net-a"},{"name":"net-b","interface":"data0","ips":["10.212.0.50/24"]}]"#,
        )],
    );
    let (ok, result, took) = env.multus("ADD", "cid-web", "web");
    assert!(ok, "ADD failed: {result}");
    eprintln!("multus ADD (3 delegates, binary, Go bridge+host-local): {took:?}");
    // The result is the cluster network's (eth0).
    assert_eq!(result["cniVersion"], "1.0.0");
    let ifaces: Vec<&str> = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert!(ifaces.contains(&"eth0"), "{result}");

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
            .any(|a| a.starts_with("10.210.0.") && a.ends_with("/24")),
        "{addrs:?}"
    );
    assert!(
        find("net1")
            .iter()
            .any(|a| a.starts_with("10.211.0.") && a.ends_with("/24")),
        "{addrs:?}"
    );
    assert_eq!(find("data0"), ["10.212.0.50/24"], "{addrs:?}");
    // Two different bridges (plus the cluster one) in the node namespace.
    let node_links = links(&env.node);
    for b in ["mcl0", "mba0", "mbb0"] {
        assert!(node_links.iter().any(|l| l == b), "{node_links:?}");
    }

    // The network-status annotation on the server matches.
    let st: Value = serde_json::from_str(
        &env.server
            .pod_annotation("ns1", "web", "k8s.v1.cni.cncf.io/network-status")
            .unwrap(),
    )
    .unwrap();
    let st = st.as_array().unwrap();
    assert_eq!(st.len(), 3, "{st:?}");
    assert_eq!(
        (
            st[0]["name"].as_str(),
            st[0]["interface"].as_str(),
            st[0]["default"].as_bool()
        ),
        (Some("kube-system/cluster"), Some("eth0"), Some(true))
    );
    assert_eq!(
        (st[1]["name"].as_str(), st[1]["interface"].as_str()),
        (Some("ns1/net-a"), Some("net1"))
    );
    assert_eq!(
        (st[2]["name"].as_str(), st[2]["interface"].as_str()),
        (Some("ns1/net-b"), Some("data0"))
    );
    assert_eq!(st[2]["ips"], json!(["10.212.0.50"]));
    assert_eq!(
        format!("{}/24", st[1]["ips"][0].as_str().unwrap()),
        find("net1")[0]
    );
    assert_eq!(
        env.ipam_reservations().len(),
        3,
        "{:?}",
        env.ipam_reservations()
    );

    // DEL with the API server stopped: every interface and reservation goes.
    env.server.stop();
    let (ok, out, took) = env.multus("DEL", "cid-web", "web");
    assert!(ok, "DEL failed: {out}");
    eprintln!("multus DEL (API down, from the cache): {took:?}");
    assert_eq!(links(&env.pod), ["lo"]);
    assert!(
        env.ipam_reservations().is_empty(),
        "{:?}",
        env.ipam_reservations()
    );
    assert!(env.cache_files().is_empty(), "{:?}", env.cache_files());
    // DEL again: nothing cached, nothing to do, success.
    assert!(env.multus("DEL", "cid-web", "web").0);
}

#[test]
fn bad_input_fails_cleanly_and_leaves_nothing() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) {
        return;
    }
    let env = setup();
    let cases = [
        (
            "bad",
            "net-a@very_long_interface_name",
            "must be less than 16 characters",
        ),
        (
            "unknown",
            "no-such-nad",
            "cannot find a network-attachment-definition (no-such-nad) in namespace (ns1)",
        ),
        (
            "forbidden",
            "other/net-c",
            "pod is in namespace ns1 but refers to target namespace other",
        ),
        ("taken", "net-a@lo", "interface name lo already exists"),
        ("broken", "broken", ""),
    ];
    for (pod, annotation, msg) in cases {
        env.server.add_pod(
            "ns1",
            pod,
            &format!("uid-{pod}"),
            &[("k8s.v1.cni.cncf.io/networks", annotation)],
        );
        let (ok, reply, _) = env.multus("ADD", &format!("cid-{pod}"), pod);
        assert!(!ok, "{pod}: ADD succeeded");
        if !msg.is_empty() {
            assert_eq!(reply["code"], 7, "{pod}: {reply}");
        }
        assert!(
            reply["msg"].as_str().unwrap_or("").contains(msg),
            "{pod}: {reply}"
        );
        assert_eq!(links(&env.pod), ["lo"], "{pod}");
        assert!(
            env.ipam_reservations().is_empty(),
            "{pod}: {:?}",
            env.ipam_reservations()
        );
        assert!(
            env.cache_files().is_empty(),
            "{pod}: {:?}",
            env.cache_files()
        );
    }
}

#[test]
fn default_route_moves_to_the_requested_network() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) {
        return;
    }
    let env = setup();
    env.server.add_pod(
        "ns1",
        "gw",
        "uid-gw",
        &[(
            "k8s.v1.cni.cncf.io/networks",
            r#"[{"name":"net-a","default-route":["10.211.0.1"]}]"#,
        )],
    );
    let (ok, out, _) = env.multus("ADD", "cid-gw", "gw");
    assert!(ok, "ADD failed: {out}");
    assert_eq!(
        default_routes(&env.pod),
        [("10.211.0.1".to_string(), "net1".to_string())]
    );
    // libcni's cached results follow the kernel.
    let cached = |net: &str, ifname: &str| -> Value {
        let p = env
            .dir
            .path()
            .join(format!("cni/results/{net}-cid-gw-{ifname}"));
        serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
    };
    let eth0 = cached("cluster", "eth0");
    assert!(
        !eth0["result"]["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["dst"] == "0.0.0.0/0"),
        "{eth0}"
    );
    let net1 = cached("net-a", "net1");
    assert!(
        net1["result"]["routes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["dst"] == "0.0.0.0/0" && r["gw"] == "10.211.0.1"),
        "{net1}"
    );
    assert!(env.multus("CHECK", "cid-gw", "gw").0);
    assert!(env.multus("DEL", "cid-gw", "gw").0);
    assert_eq!(links(&env.pod), ["lo"]);
    assert!(env.ipam_reservations().is_empty());
}
