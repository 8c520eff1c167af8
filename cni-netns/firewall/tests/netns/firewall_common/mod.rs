//! Helpers shared by the firewall integration tests: namespaces with Drop
//! guards, `ip`/`nft` oracles, threads entered into a namespace.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Skips (returns true) when not root, so `cargo test` as a user still
/// passes; without an `nft` binary it checks the clean error path instead
/// and skips the rest.
pub fn skip_unless_root() -> bool {
    if !cni_testkit::premise::require_root() {
        return true;
    }
    if !have("nft") {
        let ns = TestNs::new("fwnonft");
        let fw = cni_firewall::NftFirewall::in_netns(ns.path());
        let e = cni_firewall::Firewall::list(&fw, cni_firewall::RuleKind::Masquerade).unwrap_err();
        assert!(matches!(e, cni_firewall::Error::NftSpawn { .. }), "{e}");
        return !cni_testkit::premise::require(false, "needs nft (the error path was checked)");
    }
    false
}

/// Whether `program` runs.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn suffix() -> String {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("random bytes");
    format!("{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3])
}

/// A network namespace made with `ip netns add`, deleted on drop.
pub struct TestNs {
    pub name: String,
}

impl TestNs {
    pub fn new(prefix: &str) -> TestNs {
        let name = format!("{prefix}-{}", suffix());
        run("ip", &["netns", "add", &name]);
        let ns = TestNs { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// Runs a command in the namespace; panics on failure.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["netns", "exec", &self.name];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// The namespace's ruleset as JSON (`nft -j list ruleset`).
    pub fn ruleset(&self) -> Value {
        serde_json::from_str(&self.exec(&["nft", "-j", "list", "ruleset"])).expect("nft json")
    }

    /// Runs `f` on a new thread that entered this namespace.
    pub fn run_in<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let ns = File::open(self.path()).expect("open netns");
        std::thread::spawn(move || {
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

pub fn run(prog: &str, args: &[&str]) -> String {
    let out = Command::new(prog).args(args).output().expect("spawn");
    assert!(
        out.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Objects of kind `kind` (`table`, `chain`, `rule`, `map`) in a ruleset.
pub fn objects<'a>(ruleset: &'a Value, kind: &str) -> Vec<&'a Value> {
    ruleset["nftables"]
        .as_array()
        .map(|a| a.iter().filter_map(|o| o.get(kind)).collect())
        .unwrap_or_default()
}

pub fn has_table(ruleset: &Value, family: &str, name: &str) -> bool {
    objects(ruleset, "table")
        .iter()
        .any(|t| t["family"] == family && t["name"] == name)
}

pub fn chain_names(ruleset: &Value, table: &str) -> Vec<String> {
    objects(ruleset, "chain")
        .iter()
        .filter(|c| c["table"] == table)
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

/// Rules whose comment is `tag`.
pub fn rules_tagged<'a>(ruleset: &'a Value, tag: &str) -> Vec<&'a Value> {
    objects(ruleset, "rule")
        .into_iter()
        .filter(|r| r["comment"] == tag)
        .collect()
}

/// The elements (key JSON, data JSON) of a map.
pub fn map_elements(ruleset: &Value, table: &str, map: &str) -> Vec<(Value, Value)> {
    map_elements_commented(ruleset, table, map)
        .into_iter()
        .map(|(k, d, _)| (k, d))
        .collect()
}

/// The elements (key JSON, data JSON, comment) of a map.
pub fn map_elements_commented(
    ruleset: &Value,
    table: &str,
    map: &str,
) -> Vec<(Value, Value, Option<String>)> {
    let mut out = Vec::new();
    for m in objects(ruleset, "map") {
        if m["table"] != table || m["name"] != map {
            continue;
        }
        for e in m["elem"].as_array().into_iter().flatten() {
            // An element a DEL made expire is gone in a few milliseconds.
            if e[0]["elem"]["expires"].as_u64().is_some_and(|s| s < 86_400) {
                continue;
            }
            let key = e[0]
                .get("elem")
                .map(|x| x["val"].clone())
                .unwrap_or_else(|| e[0].clone());
            let comment = e[0]["elem"]["comment"].as_str().map(str::to_owned);
            out.push((key, e[1].clone(), comment));
        }
    }
    out
}

/// The elements (map, key JSON) of every map of `table` whose comment is
/// `tag`.
#[allow(dead_code)]
pub fn elements_tagged(ruleset: &Value, table: &str, tag: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for m in objects(ruleset, "map") {
        if m["table"] != table {
            continue;
        }
        let name = m["name"].as_str().unwrap_or_default();
        for (k, _, c) in map_elements_commented(ruleset, table, name) {
            if c.as_deref() == Some(tag) {
                out.push((name.to_owned(), k));
            }
        }
    }
    out
}

/// The owner id our firewall stores as element data (a number in `nft -j`).
#[allow(dead_code)]
pub fn owner_data(id: &cni_firewall::AttachmentId) -> Value {
    Value::from(cni_firewall::owner_id(&id.owner_hash()))
}

/// A namespace "node" with a bridge `br0` (10.99.0.1/24), pods on veths
/// (10.99.0.N/24) and an "ext" namespace (10.98.0.2) routed through a veth
/// to the node (10.98.0.1): a small host for traffic tests.
pub struct Topology {
    pub node: TestNs,
    pub ext: TestNs,
    pub pods: Vec<TestNs>,
}

impl Topology {
    pub fn new(pods: usize) -> Topology {
        let node = TestNs::new("fwnode");
        node.exec(&["ip", "link", "add", "br0", "type", "bridge"]);
        node.exec(&["ip", "addr", "add", "10.99.0.1/24", "dev", "br0"]);
        node.exec(&["ip", "link", "set", "br0", "up"]);
        node.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        // 127.0.0.1:hostPort reaches the pods only with route_localnet on the
        // interface routing to them (the caller's job, see PortMappingSpec).
        node.exec(&["sysctl", "-qw", "net.ipv4.conf.br0.route_localnet=1"]);
        node.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        node.exec(&[
            "ip",
            "-6",
            "addr",
            "add",
            "fd00:99::1/64",
            "dev",
            "br0",
            "nodad",
        ]);

        let ext = TestNs::new("fwext");
        node.exec(&[
            "ip", "link", "add", "x0", "type", "veth", "peer", "name", "eth0", "netns", &ext.name,
        ]);
        node.exec(&["ip", "addr", "add", "10.98.0.1/24", "dev", "x0"]);
        node.exec(&["ip", "link", "set", "x0", "up"]);
        ext.exec(&["ip", "addr", "add", "10.98.0.2/24", "dev", "eth0"]);
        ext.exec(&["ip", "link", "set", "eth0", "up"]);
        ext.exec(&["ip", "route", "add", "default", "via", "10.98.0.1"]);
        node.exec(&[
            "ip",
            "-6",
            "addr",
            "add",
            "fd00:98::1/64",
            "dev",
            "x0",
            "nodad",
        ]);
        ext.exec(&[
            "ip",
            "-6",
            "addr",
            "add",
            "fd00:98::2/64",
            "dev",
            "eth0",
            "nodad",
        ]);
        ext.exec(&["ip", "-6", "route", "add", "default", "via", "fd00:98::1"]);

        let mut list = Vec::new();
        for i in 0..pods {
            let pod = TestNs::new("fwpod");
            let host_if = format!("v{i}");
            let addr = format!("10.99.0.{}/24", i + 2);
            node.exec(&[
                "ip", "link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns",
                &pod.name,
            ]);
            node.exec(&["ip", "link", "set", &host_if, "master", "br0", "up"]);
            // With br_netfilter loaded (bridge-nf-call-iptables, as on most
            // Kubernetes nodes) a pod's packet DNATed back to itself is
            // bridged out of the port it came in: that needs hairpin mode
            // (the bridge plugin's `hairpinMode`).
            node.exec(&[
                "ip",
                "link",
                "set",
                &host_if,
                "type",
                "bridge_slave",
                "hairpin",
                "on",
            ]);
            pod.exec(&["ip", "addr", "add", &addr, "dev", "eth0"]);
            pod.exec(&["ip", "link", "set", "eth0", "up"]);
            pod.exec(&["ip", "route", "add", "default", "via", "10.99.0.1"]);
            let addr6 = format!("fd00:99::{}/64", i + 2);
            pod.exec(&["ip", "-6", "addr", "add", &addr6, "dev", "eth0", "nodad"]);
            pod.exec(&["ip", "-6", "route", "add", "default", "via", "fd00:99::1"]);
            list.push(pod);
        }
        Topology {
            node,
            ext,
            pods: list,
        }
    }

    pub fn pod_ip(i: usize) -> String {
        format!("10.99.0.{}", i + 2)
    }
}

/// A TCP server in a namespace answering each connection with
/// `"<name> <peer address>\n"`; stops on drop.
pub struct TcpServer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl TcpServer {
    pub fn start(ns: &TestNs, port: u16, name: &'static str) -> TcpServer {
        Self::start_on(ns, "0.0.0.0", port, name)
    }

    /// Listens on `[::]:port` (IPv6 and IPv4-mapped).
    pub fn start_v6(ns: &TestNs, port: u16, name: &'static str) -> TcpServer {
        Self::start_on(ns, "::", port, name)
    }

    fn start_on(ns: &TestNs, host: &'static str, port: u16, name: &'static str) -> TcpServer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = ns.run_in(move || {
            let l = TcpListener::bind((host, port)).expect("bind");
            l.set_nonblocking(true).expect("nonblocking");
            tx.send(()).ok();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                match l.accept() {
                    Ok((mut s, peer)) => {
                        let _ = s.write_all(format!("{name} {}\n", peer.ip()).as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        rx.recv().expect("server started");
        TcpServer {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Connects from `ns` to `addr` and returns the server's line (retrying a
/// few times while bridge ports settle), or the last error.
pub fn tcp_ask(ns: &TestNs, addr: &str) -> Result<String, String> {
    let addr: SocketAddr = addr.parse().expect("socket address");
    ns.run_in(move || {
        let mut last = String::new();
        for _ in 0..10 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(mut s) => {
                    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
                    let mut buf = String::new();
                    return match s.read_to_string(&mut buf) {
                        Ok(_) => Ok(buf.trim().to_owned()),
                        Err(e) => Err(e.to_string()),
                    };
                }
                Err(e) => {
                    last = e.to_string();
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        Err(last)
    })
    .join()
    .expect("client thread")
}

/// A UDP server in a namespace answering each datagram with `name`.
pub struct UdpServer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl UdpServer {
    pub fn start(ns: &TestNs, port: u16, name: &'static str) -> UdpServer {
        Self::start_on(ns, "0.0.0.0", port, name)
    }

    pub fn start_on(ns: &TestNs, host: &'static str, port: u16, name: &'static str) -> UdpServer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = ns.run_in(move || {
            let s = UdpSocket::bind((host, port)).expect("bind udp");
            s.set_read_timeout(Some(Duration::from_millis(50))).ok();
            tx.send(()).ok();
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut buf = [0u8; 64];
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                if let Ok((_, peer)) = s.recv_from(&mut buf) {
                    let _ = s.send_to(name.as_bytes(), peer);
                }
            }
        });
        rx.recv().expect("udp server started");
        UdpServer {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for UdpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The firewall backend under test: the test (not the library) reads
/// `CNI_FIREWALL_BACKEND` (`native`, the default, or `nft`), so the same
/// tests run against both (`CNI_FIREWALL_BACKEND=nft cargo test ...`).
#[allow(dead_code)]
pub fn backend_under_test() -> cni_firewall::Backend {
    std::env::var("CNI_FIREWALL_BACKEND")
        .ok()
        .and_then(|v| cni_firewall::Backend::from_name(&v))
        .unwrap_or_default()
}

/// The firewall under test ([`backend_under_test`]) for the namespace at
/// `path`.
#[allow(dead_code)]
pub fn firewall_for(path: &std::path::Path) -> Box<dyn cni_firewall::Firewall> {
    backend_under_test().firewall(Some(path), 0)
}
