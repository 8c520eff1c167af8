//! A real containerd running our plugins (issue 29, item 3). Each test
//! starts a private containerd (`cni_testkit::containerd`: its own root,
//! state, socket and cgroup, a pause image built on the spot) inside a
//! "node" network namespace of its own, with this build's plugins as CNI
//! `bin_dir` and the dual-stack network most Kubernetes nodes run: bridge
//! (isGateway, ipMasq) + host-local with an IPv4 and an IPv6 range +
//! portmap, cniVersion 1.0.0, names and subnets random per test. The test
//! is the kubelet: it speaks CRI (`cni_cri`) and checks what
//! happened with oracles of its own: `ip -j` in the sandbox's netns (the
//! path from `PodSandboxStatus`'s verbose info) and in the node, `nft -j`,
//! host-local's files, ping and TCP between sandboxes, a TCP connection
//! through the host port.
//!
//! One containerd per test: the cases that start without a config or
//! kill containerd cannot share one, and "nothing left" is only
//! checkable on an instance nobody else uses; a start costs about a
//! second. Needs root and Debian's containerd, runc, gcc and libc6-dev
//! (a missing one fails the test, or SKIPs under `CNI_TEST_ALLOW_SKIP=1`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cni_cri::v1::{PortMapping, Protocol};
use cni_cri::RuntimeClient;
use cni_netns::{Netns, OwnedNetns};
use cni_testkit::containerd::{self, Containerd, ContainerdOptions};
use cni_testkit::premise::{self, Need};
use ipnetwork::IpNetwork;
use serde_json::{json, Value};

use crate::common::{hex6, ip, reserved_ips, sh};
use crate::nodenet::TcpServer;

/// The port the sandboxes' test listener binds.
pub(crate) const POD_PORT: u16 = 8080;
/// Generous: containers and DAD on a machine whose cores are busy.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// What these tests need: root, and the programs containerd runs and the
/// oracles use.
pub(crate) fn needs() -> Vec<Need<'static>> {
    let programs = containerd::PROGRAMS.iter().chain(&["ping", "nft"]);
    std::iter::once(Need::Root)
        .chain(programs.map(|p| Need::Program(p)))
        .collect()
}

/// The network under test, unique per test.
struct Net {
    name: String,
    bridge: String,
    v4: IpNetwork,
    v6: IpNetwork,
    data_dir: PathBuf,
}

impl Net {
    fn new(data_dir: PathBuf) -> Net {
        let tag = hex6();
        let b = |i: usize| u8::from_str_radix(&tag[i..i + 2], 16).unwrap();
        Net {
            name: format!("cri-{tag}"),
            bridge: format!("crb{tag}"),
            v4: format!("10.{}.{}.0/24", 100 + b(0) % 100, b(2))
                .parse()
                .unwrap(),
            v6: format!("fd{:02x}:{}:{}::/64", b(4), &tag[..4], &tag[2..])
                .parse()
                .unwrap(),
            data_dir,
        }
    }

    fn conflist(&self) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": self.name,
            "plugins": [
                {"type": "bridge", "bridge": self.bridge, "isGateway": true, "ipMasq": true,
                 "ipam": {"type": "host-local", "dataDir": self.data_dir,
                          "ranges": [[{"subnet": self.v4.to_string()}],
                                     [{"subnet": self.v6.to_string()}]],
                          "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        })
    }
}

/// A node: its network namespace, a private containerd running in it, the
/// CNI config directory and host-local's data. containerd is declared
/// first: it goes down (tearing its sandboxes down in the node) before the
/// namespace and the directories.
struct Node {
    ctd: Containerd,
    ns: OwnedNetns,
    net: Net,
    conf_dir: tempfile::TempDir,
    _state: tempfile::TempDir,
}

impl Node {
    /// A node whose containerd starts without a network config.
    fn bare() -> Node {
        let ns = OwnedNetns::new("crinode").expect("create node netns");
        sh(&["ip", "-n", ns.name(), "link", "set", "lo", "up"]);
        let state = tempfile::tempdir().expect("tempdir");
        let conf_dir = tempfile::tempdir().expect("tempdir");
        let net = Net::new(state.path().join("ipam"));
        let plugins = Path::new(env!("CARGO_BIN_EXE_bridge"))
            .parent()
            .expect("plugin dir");
        let ctd = Containerd::start(
            ContainerdOptions::new(plugins, conf_dir.path())
                .netns(ns.path())
                .timeout(PATIENCE),
        )
        .unwrap_or_else(|e| panic!("start containerd: {e}"));
        Node {
            ctd,
            ns,
            net,
            conf_dir,
            _state: state,
        }
    }

    /// A node with the network config written and loaded.
    fn new() -> Node {
        let node = Node::bare();
        node.write_config();
        let mut cri = node.cri();
        assert!(
            wait_until(|| cri.status(false).unwrap().network_ready() == Some(true)),
            "NetworkReady not true after writing the config; containerd's log:\n{}",
            node.ctd.log_tail(20)
        );
        node
    }

    /// Writes the conflist in place (containerd 1.6 ignores a file moved
    /// into the directory).
    fn write_config(&self) {
        let path = self.conf_dir.path().join("10-cri-test.conflist");
        std::fs::write(&path, self.net.conflist().to_string()).expect("write conflist");
    }

    fn cri(&self) -> RuntimeClient {
        self.ctd.client().expect("CRI client")
    }

    /// Runs a sandbox (with these port mappings) and reads back its status.
    fn sandbox(&self, cri: &mut RuntimeClient, name: &str, ports: &[(u16, u16)]) -> Sandbox {
        run_sandbox(&self.ctd, cri, name, ports)
    }

    /// The node's links enslaved to the test bridge.
    fn bridge_ports(&self) -> Vec<String> {
        link_names(&ip(&self.ns, &["link", "show", "master", &self.net.bridge]))
    }

    /// `nft -j list ruleset` in the node.
    fn ruleset(&self) -> Value {
        let out = sh(&[
            "ip",
            "netns",
            "exec",
            self.ns.name(),
            "nft",
            "-j",
            "list",
            "ruleset",
        ]);
        serde_json::from_str(&out).expect("nft json")
    }

    /// The addresses host-local has reserved for the network.
    fn reserved(&self) -> Vec<String> {
        reserved_ips(&self.net.data_dir, &self.net.name)
    }

    /// What of `sb` exists, by kind, each with what was found: in the node
    /// ("addresses" reserved by host-local, its "veth", a "host port" in
    /// the nft maps: what StopPodSandbox must release) and elsewhere
    /// ("listed" by CRI, the "pause" process, its "shim", the "netns"
    /// file, a "mount" naming it, a "libcni cache" entry).
    fn traces(
        &self,
        cri: &mut RuntimeClient,
        sb: &Sandbox,
        veth: &str,
    ) -> BTreeMap<&'static str, String> {
        let mut found = BTreeMap::new();
        let reserved = self.reserved();
        let held: Vec<String> = sb
            .ips
            .iter()
            .map(IpAddr::to_string)
            .filter(|a| reserved.contains(a))
            .collect();
        if !held.is_empty() {
            found.insert("addresses", format!("{held:?}"));
        }
        if link_names(&ip(&self.ns, &["link", "show"]))
            .iter()
            .any(|l| l == veth)
        {
            found.insert("veth", veth.to_string());
        }
        let ruleset = self.ruleset();
        if let Some(port) = sb.ports.iter().find(|p| nft_maps_port(&ruleset, **p)) {
            found.insert("host port", port.to_string());
        }
        let listed = cri.list_pod_sandbox(None).expect("ListPodSandbox");
        if listed.iter().any(|s| s.id == sb.id) {
            found.insert("listed", sb.id.clone());
        }
        if process_alive(sb.pid) {
            found.insert("pause", sb.pid.to_string());
        }
        let shims = shim_processes(&sb.id);
        if !shims.is_empty() {
            found.insert("shim", format!("{shims:?}"));
        }
        if sb.netns.exists() {
            found.insert("netns", sb.netns.display().to_string());
        }
        let mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&sb.id))
            .map(str::to_owned)
            .collect();
        if !mounts.is_empty() {
            found.insert("mount", mounts.join("\n"));
        }
        let cached: Vec<String> = std::fs::read_dir(containerd::LIBCNI_CACHE)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(&sb.id))
            .collect();
        if !cached.is_empty() {
            found.insert("libcni cache", format!("{cached:?}"));
        }
        found
    }
}

/// Every kind of trace [`Node::traces`] looks for.
const ALL_TRACES: [&str; 9] = [
    "addresses",
    "host port",
    "libcni cache",
    "listed",
    "mount",
    "netns",
    "pause",
    "shim",
    "veth",
];
/// What StopPodSandbox releases in the node.
const NODE_TRACES: [&str; 3] = ["addresses", "veth", "host port"];

/// Panics listing what of `kinds` is in `found`.
fn assert_none_of(found: &BTreeMap<&'static str, String>, kinds: &[&str], when: &str) {
    let left: Vec<String> = found
        .iter()
        .filter(|(k, _)| kinds.contains(k))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    assert!(left.is_empty(), "{when}, still there:\n{}", left.join("\n"));
}

/// Runs a sandbox of `ctd` (with these 127.0.0.1 host port to pod port
/// mappings, TCP) and reads back its status.
pub(crate) fn run_sandbox(
    ctd: &Containerd,
    cri: &mut RuntimeClient,
    name: &str,
    ports: &[(u16, u16)],
) -> Sandbox {
    let mut config = ctd.pod_config(name);
    config.port_mappings = ports
        .iter()
        .map(|&(host, pod)| PortMapping {
            protocol: Protocol::Tcp as i32,
            container_port: i32::from(pod),
            host_port: i32::from(host),
            host_ip: "127.0.0.1".into(),
        })
        .collect();
    let id = ctd
        .run_pod_sandbox(cri, config)
        .unwrap_or_else(|e| panic!("{e}; containerd's log:\n{}", ctd.log_tail(20)));
    let status = cri.pod_sandbox_status(&id, true).expect("PodSandboxStatus");
    Sandbox {
        netns: containerd::sandbox_netns(&status).expect("netns path in the verbose info"),
        pid: containerd::sandbox_pid(&status).expect("pid in the verbose info"),
        ips: status.ips(),
        ports: ports.iter().map(|p| p.0).collect(),
        id,
    }
}

/// One running sandbox, as PodSandboxStatus reported it.
pub(crate) struct Sandbox {
    pub(crate) id: String,
    pub(crate) netns: PathBuf,
    pub(crate) pid: u32,
    pub(crate) ips: Vec<IpAddr>,
    pub(crate) ports: Vec<u16>,
}

impl Sandbox {
    pub(crate) fn ip(&self, v6: bool) -> IpAddr {
        *self
            .ips
            .iter()
            .find(|a| a.is_ipv6() == v6)
            .unwrap_or_else(|| {
                panic!(
                    "sandbox {} has no IPv{} address",
                    self.id,
                    if v6 { 6 } else { 4 }
                )
            })
    }

    /// `ip -j ARGS` run inside the sandbox's namespace.
    pub(crate) fn ip_json(&self, args: &[&str]) -> Value {
        let out = in_netns(&self.netns, &[&["ip", "-j"], args].concat());
        assert!(out.0, "ip {args:?} in {}: {}", self.netns.display(), out.2);
        serde_json::from_str(&out.1).expect("ip json")
    }

    /// The node-side veth of the sandbox's `ifname` (its peer's ifindex,
    /// looked up in the node's namespace).
    pub(crate) fn veth(&self, node_ns: &str, ifname: &str) -> String {
        let pod_end = self.ip_json(&["link", "show", "dev", ifname]);
        let peer = pod_end[0]["link_index"].as_u64().expect("a veth");
        let links: Value = serde_json::from_str(&sh(&["ip", "-j", "-n", node_ns, "link", "show"]))
            .expect("ip json");
        links
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["ifindex"].as_u64() == Some(peer))
            .and_then(|l| l["ifname"].as_str())
            .map(str::to_owned)
            .expect("the veth's node end")
    }
}

/// Runs `args` in the namespace at `path` (forked from a thread inside
/// it): (success, stdout, stderr).
pub(crate) fn in_netns(path: &Path, args: &[&str]) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = Netns::open(path)
        .expect("open sandbox netns")
        .run(move || {
            std::process::Command::new(&args[0])
                .args(&args[1..])
                .output()
        })
        .expect("enter netns")
        .expect("spawn");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn link_names(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
        .collect()
}

/// Whether a map element of the ruleset carries `port` (portmap keeps
/// each mapping as elements of its maps, keyed by the host port).
pub(crate) fn nft_maps_port(ruleset: &Value, port: u16) -> bool {
    fn walk(v: &Value, port: u16) -> bool {
        match v {
            Value::Number(n) => n.as_u64() == Some(u64::from(port)),
            Value::Array(a) => a.iter().any(|x| walk(x, port)),
            Value::Object(o) => o.values().any(|x| walk(x, port)),
            _ => false,
        }
    }
    ruleset["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("map").or_else(|| o.get("set")))
        .any(|m| m.get("elem").is_some_and(|e| walk(e, port)))
}

pub(crate) fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Processes whose command line names sandbox `id` (its shim).
fn shim_processes(id: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
            args.windows(2)
                .any(|w| w[0] == b"-id" && w[1] == id.as_bytes())
                .then_some(pid)
        })
        .collect()
}

/// `dst` answers a ping from the namespace at `from` within [`PATIENCE`]
/// (an address may still be tentative a moment: DAD).
pub(crate) fn assert_pings(from: &Path, dst: IpAddr) {
    let dst = dst.to_string();
    let mut last = (false, String::new(), String::new());
    assert!(
        wait_until(|| {
            last = in_netns(from, &["ping", "-c", "1", "-W", "2", &dst]);
            last.0
        }),
        "ping {dst} from {}: {last:?}",
        from.display()
    );
}

pub(crate) fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < PATIENCE {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Connects to `addr` from inside the namespace at `netns`; what the
/// server sent.
pub(crate) fn tcp_get(netns: &Path, addr: SocketAddr) -> Result<String, String> {
    let mut stream = Netns::open(netns)
        .map_err(|e| e.to_string())?
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut s = String::new();
    stream
        .read_to_string(&mut s)
        .map_err(|e| format!("read {addr}: {e}"))?;
    Ok(s)
}

/// A random host port (each node is its own namespace; random anyway).
pub(crate) fn host_port() -> u16 {
    20000 + u16::from_str_radix(&hex6()[..4], 16).unwrap() % 10000
}

#[test]
fn network_ready_only_once_a_config_exists() {
    if !premise::require_all(&needs()) {
        return;
    }
    let node = Node::bare();
    let mut cri = node.cri();
    let version = cri.version().expect("Version");
    assert_eq!(version.runtime_name, "containerd");
    assert_eq!(version.runtime_api_version, "v1");
    let status = cri.status(false).expect("Status");
    assert_eq!(
        status.condition(cni_cri::RUNTIME_READY).map(|c| c.status),
        Some(true)
    );
    let not_ready = status
        .condition(cni_cri::NETWORK_READY)
        .expect("a NetworkReady condition");
    assert!(!not_ready.status, "NetworkReady without any config");
    assert!(!not_ready.message.is_empty());
    node.write_config();
    assert!(
        wait_until(|| cri.status(false).unwrap().network_ready() == Some(true)),
        "NetworkReady not true after writing the config; containerd's log:\n{}",
        node.ctd.log_tail(20)
    );
}

#[test]
fn sandbox_gets_an_ipv4_and_an_ipv6_from_the_ranges() {
    if !premise::require_all(&needs()) {
        return;
    }
    let node = Node::new();
    let mut cri = node.cri();
    let sb = node.sandbox(&mut cri, "dual", &[]);
    let (v4, v6) = (sb.ip(false), sb.ip(true));
    assert_eq!(sb.ips.len(), 2, "{:?}", sb.ips);
    assert!(node.net.v4.contains(v4), "{v4} not in {}", node.net.v4);
    assert!(node.net.v6.contains(v6), "{v6} not in {}", node.net.v6);
    // The kernel's view inside the sandbox: both on eth0, with the
    // ranges' prefix lengths, and the default routes of both families.
    let addrs = sb.ip_json(&["addr", "show", "dev", "eth0"]);
    let on_eth0: BTreeSet<(String, u64)> = addrs[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"] == "global")
        .map(|a| {
            (
                a["local"].as_str().unwrap().to_string(),
                a["prefixlen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        on_eth0,
        BTreeSet::from([(v4.to_string(), 24), (v6.to_string(), 64)])
    );
    for family in ["-4", "-6"] {
        let routes = sb.ip_json(&[family, "route", "show", "default"]);
        assert_eq!(
            routes.as_array().map(Vec::len),
            Some(1),
            "{family}: {routes}"
        );
    }
    // host-local's files name the sandbox.
    let mut reserved = node.reserved();
    reserved.sort();
    let mut want = vec![v4.to_string(), v6.to_string()];
    want.sort();
    assert_eq!(reserved, want);
    for a in &want {
        let owner =
            std::fs::read_to_string(node.net.data_dir.join(&node.net.name).join(a)).unwrap();
        assert!(owner.starts_with(&sb.id), "{a}: {owner:?}");
    }
    // The node end is on the test bridge.
    assert_eq!(node.bridge_ports(), vec![sb.veth(node.ns.name(), "eth0")]);
}

#[test]
fn sandboxes_reach_each_other_over_both_families() {
    if !premise::require_all(&needs()) {
        return;
    }
    let node = Node::new();
    let mut cri = node.cri();
    let a = node.sandbox(&mut cri, "a", &[]);
    let b = node.sandbox(&mut cri, "b", &[]);
    for v6 in [false, true] {
        for (from, to) in [(&a, &b), (&b, &a)] {
            assert_pings(&from.netns, to.ip(v6));
            let _srv = TcpServer::answering(
                &to.netns,
                SocketAddr::new(to.ip(v6), POD_PORT),
                &format!("hello from {}", to.id),
            );
            let got = tcp_get(&from.netns, SocketAddr::new(to.ip(v6), POD_PORT));
            assert_eq!(got, Ok(format!("hello from {}", to.id)));
        }
    }
}

#[test]
fn host_port_reaches_a_listener_in_the_sandbox() {
    if !premise::require_all(&needs()) {
        return;
    }
    let node = Node::new();
    let mut cri = node.cri();
    let port = host_port();
    let sb = node.sandbox(&mut cri, "web", &[(port, POD_PORT)]);
    let _srv = TcpServer::answering(
        &sb.netns,
        SocketAddr::new("0.0.0.0".parse().unwrap(), POD_PORT),
        "pod says hi",
    );
    assert!(
        nft_maps_port(&node.ruleset(), port),
        "no map element for host port {port}"
    );
    // From the node, through portmap's DNAT of 127.0.0.1:<port>.
    let got = tcp_get(
        node.ns.path(),
        SocketAddr::new("127.0.0.1".parse().unwrap(), port),
    );
    assert_eq!(got.as_deref(), Ok("pod says hi"));
}

#[test]
fn stop_releases_everything_and_remove_leaves_nothing() {
    if !premise::require_all(&needs()) {
        return;
    }
    let node = Node::new();
    let mut cri = node.cri();
    let port = host_port();
    let sb = node.sandbox(&mut cri, "gone", &[(port, POD_PORT)]);
    let veth = sb.veth(node.ns.name(), "eth0");
    // Every oracle sees the running sandbox.
    let running = node.traces(&mut cri, &sb, &veth);
    assert_eq!(
        running.keys().copied().collect::<Vec<_>>(),
        ALL_TRACES,
        "{running:?}"
    );
    cri.stop_pod_sandbox(&sb.id).expect("StopPodSandbox");
    let stopped = node.traces(&mut cri, &sb, &veth);
    assert_none_of(&stopped, &NODE_TRACES, "after StopPodSandbox");
    assert_none_of(
        &stopped,
        &["pause", "netns", "libcni cache"],
        "after StopPodSandbox",
    );
    assert!(node.bridge_ports().is_empty(), "{:?}", node.bridge_ports());
    let status = cri.pod_sandbox_status(&sb.id, false).expect("status");
    assert_eq!(
        status.status.map(|s| s.state),
        Some(cni_cri::v1::PodSandboxState::SandboxNotready as i32)
    );
    // Idempotent, as kubelet expects.
    cri.stop_pod_sandbox(&sb.id).expect("second StopPodSandbox");
    cri.remove_pod_sandbox(&sb.id).expect("RemovePodSandbox");
    let removed = node.traces(&mut cri, &sb, &veth);
    assert_none_of(&removed, &ALL_TRACES, "after RemovePodSandbox");
    cri.remove_pod_sandbox(&sb.id)
        .expect("second RemovePodSandbox");
}

#[test]
fn sigkilled_containerd_restarted_still_tears_down() {
    if !premise::require_all(&needs()) {
        return;
    }
    let mut node = Node::new();
    let port = host_port();
    let mut cri = node.cri();
    let sb = node.sandbox(&mut cri, "survivor", &[(port, POD_PORT)]);
    let veth = sb.veth(node.ns.name(), "eth0");
    let pid = node.ctd.pid().expect("containerd runs");
    node.ctd.kill().expect("SIGKILL containerd");
    assert!(!process_alive(pid), "containerd {pid} survived SIGKILL");
    // The sandbox outlives containerd, as on a node whose runtime crashed.
    assert!(process_alive(sb.pid), "pause died with containerd");
    node.ctd.restart().expect("start containerd again");
    // The client made before the crash connects again by itself.
    let before = node.traces(&mut cri, &sb, &veth);
    assert_eq!(
        before.keys().copied().collect::<Vec<_>>(),
        ALL_TRACES,
        "after the restart: {before:?}"
    );
    cri.stop_pod_sandbox(&sb.id)
        .expect("StopPodSandbox after the restart");
    assert_none_of(
        &node.traces(&mut cri, &sb, &veth),
        &NODE_TRACES,
        "after StopPodSandbox by the restarted containerd",
    );
    cri.remove_pod_sandbox(&sb.id).expect("RemovePodSandbox");
    let removed = node.traces(&mut cri, &sb, &veth);
    assert_none_of(&removed, &ALL_TRACES, "after RemovePodSandbox");
}

#[test]
fn burst_of_20_with_4_in_flight_gets_distinct_addresses_and_leaves_nothing() {
    if !premise::require_all(&needs()) {
        return;
    }
    const PODS: usize = 20;
    const IN_FLIGHT: usize = 4;
    let node = Node::new();
    let base = host_port().min(65535 - PODS as u16);
    let sandboxes: Vec<Sandbox> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..IN_FLIGHT)
            .map(|w| {
                let node = &node;
                s.spawn(move || {
                    let mut cri = node.cri();
                    (w..PODS)
                        .step_by(IN_FLIGHT)
                        .map(|i| {
                            let port = base + i as u16;
                            node.sandbox(&mut cri, &format!("burst-{i}"), &[(port, POD_PORT)])
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect()
    });
    assert_eq!(sandboxes.len(), PODS);
    for v6 in [false, true] {
        let ips: BTreeSet<IpAddr> = sandboxes.iter().map(|s| s.ip(v6)).collect();
        assert_eq!(ips.len(), PODS, "duplicate addresses: {ips:?}");
        let net = if v6 { node.net.v6 } else { node.net.v4 };
        assert!(ips.iter().all(|a| net.contains(*a)), "{ips:?} not in {net}");
    }
    assert_eq!(node.reserved().len(), 2 * PODS);
    assert_eq!(node.bridge_ports().len(), PODS);
    let veths: Vec<String> = sandboxes
        .iter()
        .map(|s| s.veth(node.ns.name(), "eth0"))
        .collect();
    std::thread::scope(|s| {
        for w in 0..IN_FLIGHT {
            let (node, sandboxes) = (&node, &sandboxes);
            s.spawn(move || {
                let mut cri = node.cri();
                for sb in sandboxes.iter().skip(w).step_by(IN_FLIGHT) {
                    cri.stop_pod_sandbox(&sb.id).expect("StopPodSandbox");
                    cri.remove_pod_sandbox(&sb.id).expect("RemovePodSandbox");
                }
            });
        }
    });
    let mut cri = node.cri();
    for (sb, veth) in sandboxes.iter().zip(&veths) {
        let left = node.traces(&mut cri, sb, veth);
        assert_none_of(&left, &ALL_TRACES, &format!("sandbox {}", sb.id));
    }
    assert!(node.reserved().is_empty(), "{:?}", node.reserved());
    assert!(node.bridge_ports().is_empty(), "{:?}", node.bridge_ports());
    assert!(cri.list_pod_sandbox(None).unwrap().is_empty());
}
