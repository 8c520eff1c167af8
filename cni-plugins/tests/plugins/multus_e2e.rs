//! End to end in real namespaces: the `multus` binary, run inside a fresh
//! "node" network namespace, attaches a "pod" namespace to a cluster
//! network and two NADs (Go bridge + host-local from /usr/lib/cni as
//! delegates), talking to the test API server over HTTPS. Needs root;
//! skipped (with a message) otherwise.
#![cfg(feature = "multus")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_testkit::premise::{self, Need};
use cni_testkit::KubeApiServer;
use serde_json::{json, Value};

const GO_PLUGINS: &str = "/usr/lib/cni";

/// The binary under test: `MULTUS_BIN` (e.g. a release build) or this
/// profile's.
fn multus_bin() -> String {
    std::env::var("MULTUS_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_multus").to_string())
}

fn suffix() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:08x}", h.finish() as u32)
}

fn ip(args: &[&str]) -> std::process::Output {
    Command::new("ip").args(args).output().expect("run ip")
}

/// A named network namespace, deleted on drop (with everything in it).
struct Netns(String);

impl Netns {
    fn new(prefix: &str) -> Netns {
        let name = format!("{prefix}-{}", suffix());
        let out = ip(&["netns", "add", &name]);
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ns = Netns(name);
        assert!(ip(&["-n", &ns.0, "link", "set", "lo", "up"])
            .status
            .success());
        ns
    }
    fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.0)
    }
    /// Default routes in the namespace: (gateway, device).
    fn default_routes(&self) -> Vec<(String, String)> {
        let out = ip(&["-n", &self.0, "-j", "route", "show", "default"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(json!([]));
        v.as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["gateway"].as_str().unwrap_or("").to_string(),
                    r["dev"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// `ip -j addr` in the namespace: interface name -> IPv4 CIDRs.
    fn addrs(&self) -> Vec<(String, Vec<String>)> {
        let out = ip(&["-n", &self.0, "-j", "addr", "show"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(json!([]));
        v.as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                let name = l["ifname"].as_str().unwrap_or("").to_string();
                let ips = l["addr_info"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|a| a["family"] == "inet")
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
                    .collect();
                (name, ips)
            })
            .collect()
    }
    fn links(&self) -> Vec<String> {
        self.addrs().into_iter().map(|(n, _)| n).collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

struct Env {
    node: Netns,
    pod: Netns,
    server: KubeApiServer,
    dir: tempfile::TempDir,
}

fn bridge_nad(bridge: &str, subnet: &str, ipam_dir: &Path, caps: bool) -> String {
    let mut v = json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge, "isGateway": true,
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir,
                 "routes": [{"dst": "0.0.0.0/0"}]}});
    if caps {
        v["capabilities"] = json!({"ips": true});
    }
    v.to_string()
}

fn setup() -> Env {
    let node = Netns::new("mnode");
    let pod = Netns::new("mpod");
    let server = KubeApiServer::start_in_netns(&node.path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ipam = dir.path().join("ipam");
    server.add_nad(
        "kube-system",
        "cluster",
        &bridge_nad("mcl0", "10.210.0.0/24", &ipam, false),
    );
    server.add_nad(
        "ns1",
        "net-a",
        &bridge_nad("mba0", "10.211.0.0/24", &ipam, false),
    );
    server.add_nad(
        "ns1",
        "net-b",
        &bridge_nad("mbb0", "10.212.0.0/24", &ipam, true),
    );
    server.add_nad(
        "other",
        "net-c",
        &bridge_nad("mbc0", "10.213.0.0/24", &ipam, false),
    );
    Env {
        node,
        pod,
        server,
        dir,
    }
}

impl Env {
    fn conf(&self) -> Value {
        json!({"cniVersion": "1.0.0", "name": "multus-net", "type": "multus",
            "kubeconfig": self.server.kubeconfig_path(), "clusterNetwork": "cluster",
            "namespaceIsolation": true, "binDir": GO_PLUGINS,
            "cniDir": self.dir.path().join("cni"), "confDir": self.dir.path().join("conf")})
    }

    /// Runs the multus binary inside the node namespace.
    fn multus(&self, command: &str, cid: &str, pod: &str) -> (bool, Value, Duration) {
        let start = Instant::now();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.node.0, &multus_bin()])
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", self.pod.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", GO_PLUGINS)
            .env("CNI_ARGS", format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME={pod};K8S_POD_UID=uid-{pod}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(self.conf().to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let took = start.elapsed();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if !out.status.success() {
            eprintln!(
                "multus {command} stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        (out.status.success(), v, took)
    }

    fn ipam_reservations(&self) -> Vec<String> {
        let mut out = Vec::new();
        for net in std::fs::read_dir(self.dir.path().join("ipam"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in std::fs::read_dir(net.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let n = f.file_name().to_string_lossy().into_owned();
                if n.parse::<std::net::IpAddr>().is_ok() {
                    out.push(format!("{}/{n}", net.file_name().to_string_lossy()));
                }
            }
        }
        out.sort();
        out
    }

    fn cache_files(&self) -> Vec<String> {
        std::fs::read_dir(self.dir.path().join("cni"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
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
    let addrs = env.pod.addrs();
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
    let node_links = env.node.links();
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
    assert_eq!(env.pod.links(), ["lo"]);
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
        assert_eq!(env.pod.links(), ["lo"], "{pod}");
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
        env.pod.default_routes(),
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
    assert_eq!(env.pod.links(), ["lo"]);
    assert!(env.ipam_reservations().is_empty());
}

/// Runs one Go plugin directly in the node namespace (what multus's
/// delegation costs without multus).
fn go_plugin(env: &Env, command: &str, conf: &str, cid: &str, ifname: &str) -> bool {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &env.node.0,
            &format!("{GO_PLUGINS}/bridge"),
        ])
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", env.pod.path())
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", GO_PLUGINS)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.as_bytes())
        .unwrap();
    child.wait().unwrap().success()
}

/// multus ADD time beyond its delegates: medians of multus ADD (3 bridge
/// delegates) and of the same three bridge ADDs run directly.
/// `MULTUS_BIN=target/release/multus cargo test -p cni-plugins --test plugins multus_e2e:: -- --ignored --nocapture`
#[test]
#[ignore]
fn measure_add_beyond_delegates() {
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
        "m",
        "uid-m",
        &[("k8s.v1.cni.cncf.io/networks", "net-a,net-b")],
    );
    let ipam = env.dir.path().join("ipam");
    let confs: Vec<(String, &str)> = [
        ("cluster", "mcl0", "10.210.0.0/24", "eth0"),
        ("net-a", "mba0", "10.211.0.0/24", "net1"),
        ("net-b", "mbb0", "10.212.0.0/24", "net2"),
    ]
    .iter()
    .map(|(name, br, subnet, ifname)| {
        let mut v: Value = serde_json::from_str(&bridge_nad(br, subnet, &ipam, false)).unwrap();
        v["name"] = json!(name);
        (v.to_string(), *ifname)
    })
    .collect();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..15 {
        let cid = format!("m{i}");
        let (ok, out, took) = env.multus("ADD", &cid, "m");
        assert!(ok, "{out}");
        with.push(took);
        assert!(env.multus("DEL", &cid, "m").0);
        let t = Instant::now();
        for (c, ifname) in &confs {
            assert!(go_plugin(&env, "ADD", c, &cid, ifname));
        }
        without.push(t.elapsed());
        for (c, ifname) in confs.iter().rev() {
            assert!(go_plugin(&env, "DEL", c, &cid, ifname));
        }
    }
    with.sort();
    without.sort();
    eprintln!(
        "multus ADD median {:?}; the same 3 delegates run directly {:?}; multus beyond delegates {:?}",
        with[7],
        without[7],
        with[7].saturating_sub(without[7])
    );
}
