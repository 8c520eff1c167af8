//! Test harness of the ptp, macvlan, ipvlan and host-device tests: a
//! throwaway "node" namespace with a veth master, pods, plugin processes
//! spawned from a thread inside the node, and the kernel state read back
//! with `ip -j` (an oracle independent of our netlink code), normalised so
//! that the Go reference's and ours compare equal.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_netns::OwnedNetns;
use serde_json::{json, Value};

/// Go reference plugins.
pub(crate) use cni_testkit::premise::GO_PLUGINS as GO_DIR;

/// Which implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Impl {
    Go,
    Ours,
}

pub(crate) fn plugin_path(imp: Impl, plugin: &str) -> PathBuf {
    match imp {
        Impl::Go => Path::new(GO_DIR).join(plugin),
        Impl::Ours => PathBuf::from(match plugin {
            "ptp" => env!("CARGO_BIN_EXE_ptp"),
            "macvlan" => env!("CARGO_BIN_EXE_macvlan"),
            "ipvlan" => env!("CARGO_BIN_EXE_ipvlan"),
            "host-device" => env!("CARGO_BIN_EXE_host-device"),
            other => panic!("no binary {other}"),
        }),
    }
}

/// The outcome of one plugin run.
#[derive(Debug)]
pub(crate) struct Out {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) elapsed: Duration,
}

impl Out {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout not JSON ({e}): {self:?}"))
    }

    #[track_caller]
    pub(crate) fn expect_ok(&self, what: &str) -> &Self {
        assert!(self.ok, "{what} failed: {self:?}");
        self
    }
}

/// A node: its own namespace with `lo` up and a master link `uplink0`
/// (a veth whose peer `uplink0p` stays in the node), and an IPAM data dir.
pub(crate) struct Node {
    pub(crate) ns: OwnedNetns,
    pub(crate) data: tempfile::TempDir,
    pods: Vec<OwnedNetns>,
}

impl Node {
    pub(crate) fn new() -> Node {
        let ns = OwnedNetns::new("p14node").expect("node netns");
        let node = Node {
            ns,
            data: tempfile::tempdir().expect("tempdir"),
            pods: Vec::new(),
        };
        node.ip(&["link", "set", "lo", "up"]);
        node.ip(&[
            "link", "add", "uplink0", "mtu", "1500", "type", "veth", "peer", "name", "uplink0p",
        ]);
        node.ip(&["link", "set", "uplink0", "up"]);
        node.ip(&["link", "set", "uplink0p", "up"]);
        node
    }

    pub(crate) fn name(&self) -> &str {
        self.ns.name()
    }

    /// A new pod namespace (deleted with the node).
    pub(crate) fn pod(&mut self) -> String {
        let pod = OwnedNetns::new("p14pod").expect("pod netns");
        let path = pod.path().display().to_string();
        self.pods.push(pod);
        path
    }

    /// `ip -n <node> args`, panicking on failure.
    pub(crate) fn ip(&self, args: &[&str]) -> String {
        ip_in(self.name(), args)
    }

    /// `ip -j -n <node> args` parsed.
    pub(crate) fn ip_json(&self, args: &[&str]) -> Value {
        ip_json_in(self.name(), args)
    }

    /// Runs `bin` with `CNI_COMMAND=cmd` from a thread inside the node.
    pub(crate) fn exec(&self, bin: &Path, cmd: &str, env: &CniEnv, stdin: &Value) -> Out {
        let input = serde_json::to_vec(stdin).expect("config");
        self.ns
            .run(|| run_plugin(bin, cmd, env, &input))
            .expect("enter node")
    }

    /// A config with the node's host-local dataDir filled in.
    pub(crate) fn host_local(&self, subnet: &str) -> Value {
        json!({
            "type": "host-local",
            "dataDir": self.data.path().join("ipam"),
            "ranges": [[{"subnet": subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
        })
    }
}

/// The CNI environment of one attachment.
#[derive(Debug, Clone)]
pub(crate) struct CniEnv {
    pub(crate) container_id: String,
    pub(crate) netns: String,
    pub(crate) ifname: String,
    pub(crate) args: String,
    /// `CNI_PATH` (default: the Go reference directory, for host-local).
    pub(crate) cni_path: String,
}

impl CniEnv {
    pub(crate) fn new(netns: &str) -> CniEnv {
        CniEnv {
            container_id: "ctr-p14".into(),
            netns: netns.into(),
            ifname: "eth0".into(),
            args: String::new(),
            cni_path: GO_DIR.into(),
        }
    }
}

pub(crate) fn run_plugin(bin: &Path, cmd: &str, env: &CniEnv, input: &[u8]) -> Out {
    use std::io::Write;
    let start = Instant::now();
    let mut child = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", &env.container_id)
        .env("CNI_NETNS", &env.netns)
        .env("CNI_IFNAME", &env.ifname)
        .env("CNI_ARGS", &env.args)
        .env("CNI_PATH", &env.cni_path)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

pub(crate) fn ip_in(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .arg("-n")
        .arg(ns)
        .args(args)
        .output()
        .expect("run ip");
    assert!(
        out.status.success(),
        "ip -n {ns} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn ip_json_in(ns: &str, args: &[&str]) -> Value {
    let mut full = vec!["-j"];
    full.extend_from_slice(args);
    let s = ip_in(ns, &full);
    if s.trim().is_empty() {
        return json!([]);
    }
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {s}"))
}

/// Whether a TCP connection from namespace `from` reaches a listener on
/// `ip` in namespace `to` (both under /run/netns; sockets keep the
/// namespace of the thread that made them, so no tool is needed and the
/// traffic stays in namespaces the test made).
pub(crate) fn tcp_reachable(from: &str, to: &str, ip: &str) -> bool {
    use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
    let open = |n: &str| {
        cni_netns::Netns::open(Path::new(cni_netns::NETNS_RUN_DIR).join(n)).expect("open netns")
    };
    let ip: IpAddr = ip.parse().expect("ip");
    let listener = open(to)
        .run(|| TcpListener::bind(SocketAddr::new(ip, 0)))
        .expect("enter")
        .expect("bind listener");
    let addr = listener.local_addr().expect("local addr");
    open(from)
        .run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok())
        .expect("enter")
}

/// The name under /run/netns of a namespace path.
pub(crate) fn ns_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn is_random_veth(name: &str) -> bool {
    name.len() == 12 && name.starts_with("veth") && name[4..].chars().all(|c| c.is_ascii_hexdigit())
}

fn norm_name(name: &str) -> String {
    if is_random_veth(name) {
        "VETH".into()
    } else {
        name.into()
    }
}

/// The kernel state of a namespace as sorted lines: links (kind, MTU, up,
/// mode, master, alias), addresses (link-local IPv6 left out: it follows
/// the random MAC) and routes of every table.
pub(crate) fn kernel_state(ns: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for l in ip_json_in(ns, &["-d", "link", "show"]).as_array().unwrap() {
        let flags = l["flags"].as_array().cloned().unwrap_or_default();
        let up = flags.iter().any(|f| f == "UP");
        lines.push(format!(
            "link {} kind={} mtu={} up={} mode={} master={} alias={}",
            norm_name(l["ifname"].as_str().unwrap_or("")),
            l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
            l["mtu"],
            up,
            l["linkinfo"]["info_data"]["mode"].as_str().unwrap_or("-"),
            l["master"].as_str().map(norm_name).unwrap_or("-".into()),
            l["ifalias"].as_str().unwrap_or("-"),
        ));
    }
    for l in ip_json_in(ns, &["addr", "show"]).as_array().unwrap() {
        let dev = norm_name(l["ifname"].as_str().unwrap_or(""));
        for a in l["addr_info"].as_array().cloned().unwrap_or_default() {
            let local = a["local"].as_str().unwrap_or("");
            if local.starts_with("fe80") {
                continue;
            }
            lines.push(format!(
                "addr {dev} {local}/{} scope={}",
                a["prefixlen"],
                a["scope"].as_str().unwrap_or("")
            ));
        }
    }
    for fam in ["-4", "-6"] {
        for r in ip_json_in(ns, &[fam, "route", "show", "table", "all"])
            .as_array()
            .unwrap()
        {
            let dst = r["dst"].as_str().unwrap_or("");
            if fam == "-6"
                && (dst.starts_with("fe80")
                    || dst.starts_with("ff00")
                    || dst.starts_with("multicast"))
            {
                continue;
            }
            lines.push(format!(
                "route {} {dst} via={} dev={} scope={} proto={} src={} table={}",
                r["type"].as_str().unwrap_or("unicast"),
                r["gateway"].as_str().unwrap_or("-"),
                norm_name(r["dev"].as_str().unwrap_or("-")),
                r["scope"].as_str().unwrap_or("global"),
                r["protocol"].as_str().unwrap_or("-"),
                r["prefsrc"].as_str().unwrap_or("-"),
                r["table"].as_str().unwrap_or("main"),
            ));
        }
    }
    lines.sort();
    lines
}

/// A result with random parts replaced: MACs, random veth names, sandbox
/// paths.
pub(crate) fn normalise(v: &Value) -> Value {
    match v {
        // Go 1.1.1 prints an empty `"dns":{}` in 1.0.0 results; newer Go
        // (and cni-types) omit it.
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| {
                    !(k.as_str() == "dns" && v.as_object().is_some_and(|o| o.is_empty()))
                })
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("mac", Value::String(s)) if !s.is_empty() => json!("MAC"),
                        ("sandbox", Value::String(s)) if !s.is_empty() => json!("SANDBOX"),
                        ("name", Value::String(s)) => json!(norm_name(s)),
                        _ => normalise(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalise).collect()),
        other => other.clone(),
    }
}

/// The IPv6 DAD state after ADD, as sorted lines: the pod's `eth0`
/// sysctls (`accept_dad`, `optimistic_dad`, `use_optimistic`) and the
/// `nodad` flag of each global IPv6 address in the pod and on the node.
/// Where ours differs from Go's on purpose,
/// [`apply_deliberate_dad_difference`] says how.
pub(crate) fn dad_state(node: &str, pod: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let netns = cni_netns::Netns::open(Path::new(cni_netns::NETNS_RUN_DIR).join(pod))
        .expect("open pod netns");
    let sysctls = netns
        .run(|| {
            ["accept_dad", "optimistic_dad", "use_optimistic"]
                .map(|k| {
                    let v = std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/eth0/{k}"));
                    v.map(|v| format!("{k}={}", v.trim()))
                })
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
        })
        .expect("enter pod");
    if let Ok(sysctls) = sysctls {
        lines.push(format!("pod eth0 {}", sysctls.join(" ")));
    }
    for (side, ns) in [("node", node), ("pod", pod)] {
        for l in ip_json_in(ns, &["-6", "addr", "show", "scope", "global"])
            .as_array()
            .unwrap()
        {
            let dev = norm_name(l["ifname"].as_str().unwrap_or(""));
            // iproute2 lists the addresses `-6` leaves out as `{}`.
            for a in l["addr_info"].as_array().cloned().unwrap_or_default() {
                let Some(local) = a["local"].as_str() else {
                    continue;
                };
                lines.push(format!(
                    "{side} {dev} {local} nodad={}",
                    a["nodad"] == json!(true)
                ));
            }
        }
    }
    lines.sort();
    lines
}

/// Go's run turned into ours by the deliberate differences of IPv6 DAD
/// (docs/plugins/<plugin>.md): its [`dad_state`], and
/// * ptp (unless `enabledad`), with IPv6 addresses: DAD off on the pod end
///   (`accept_dad` 0) and every global IPv6 address, the pod's and the
///   node's gateway, added `nodad`; so the node's gateway is usable at
///   once and its `local` route is there when ADD returns (Go's appears
///   when its DAD ends, after the ADD);
/// * macvlan, ipvlan (with IPv6 addresses) and host-device (with IPAM),
///   unless `optimisticDad` is false: `optimistic_dad` and
///   `use_optimistic` 1 on the pod's interface.
pub(crate) fn apply_deliberate_dad_difference(plugin: &str, conf: &Value, go: &mut Run) {
    let has_v6 = go
        .dad
        .iter()
        .any(|l| l.starts_with("pod eth0 ") && !l.contains("accept_dad="));
    let optimistic = conf["optimisticDad"] != json!(false)
        && match plugin {
            "macvlan" | "ipvlan" => has_v6,
            "host-device" => conf.get("ipam").is_some_and(|i| !i.is_null()),
            _ => false,
        };
    let off = plugin == "ptp" && conf["enabledad"] != json!(true) && has_v6;
    let mut ours: Vec<String> = go
        .dad
        .iter()
        .map(|l| {
            if l.starts_with("pod eth0 accept_dad=") {
                let mut l = l.clone();
                if off {
                    l = l.replace("accept_dad=1", "accept_dad=0");
                }
                if optimistic {
                    l = l
                        .replace("optimistic_dad=0", "optimistic_dad=1")
                        .replace("use_optimistic=0", "use_optimistic=1");
                }
                l
            } else if off {
                l.replace("nodad=false", "nodad=true")
            } else {
                l.clone()
            }
        })
        .collect();
    ours.sort();
    if off {
        for l in &ours {
            let mut words = l.split(' ');
            if let (Some("node"), Some(dev), Some(ip)) = (words.next(), words.next(), words.next())
            {
                let route = format!(
                    "route local {ip} via=- dev={dev} scope=global proto=kernel src=- table=local"
                );
                if !go.node_after_add.contains(&route) {
                    go.node_after_add.push(route);
                }
            }
        }
        go.node_after_add.sort();
    }
    go.dad = ours;
}

/// What one implementation did with one config: ADD's result, CHECK's
/// outcome, the state after ADD and after DEL, and the DEL outcomes.
#[derive(Debug, PartialEq)]
pub(crate) struct Run {
    pub(crate) add: Result<Value, String>,
    /// [`dad_state`] after ADD (compared through
    /// [`apply_deliberate_dad_difference`]).
    pub(crate) dad: Vec<String>,
    pub(crate) check: Option<bool>,
    pub(crate) node_after_add: Vec<String>,
    pub(crate) pod_after_add: Vec<String>,
    pub(crate) del_ok: bool,
    pub(crate) del_again_ok: bool,
    pub(crate) node_after_del: Vec<String>,
    pub(crate) pod_after_del: Vec<String>,
}

/// A scenario: the plugin config (without IPAM's dataDir, which the node
/// fills in when `ipam` is a host-local section), a node setup, and the
/// attachment's `CNI_ARGS`.
pub(crate) struct Scenario<'a> {
    pub(crate) plugin: &'a str,
    pub(crate) conf: Value,
    pub(crate) setup: &'a dyn Fn(&Node),
    pub(crate) args: &'a str,
}

/// Runs a scenario with one implementation in a fresh node.
pub(crate) fn run_scenario(imp: Impl, sc: &Scenario<'_>) -> Run {
    let mut node = Node::new();
    (sc.setup)(&node);
    let pod = node.pod();
    let mut env = CniEnv::new(&pod);
    env.args = sc.args.into();
    let mut conf = sc.conf.clone();
    if let Some(ipam) = conf.get_mut("ipam").and_then(Value::as_object_mut) {
        if ipam.get("type") == Some(&json!("host-local")) {
            ipam.insert("dataDir".into(), json!(node.data.path().join("ipam")));
        }
    }
    let bin = plugin_path(imp, sc.plugin);
    let add = node.exec(&bin, "ADD", &env, &conf);
    let pod_name = ns_name(&pod).to_owned();
    let node_after_add = kernel_state(node.name());
    let pod_after_add = kernel_state(&pod_name);
    let dad = dad_state(node.name(), &pod_name);
    let mut check = None;
    let version = conf["cniVersion"].as_str().unwrap_or("").to_owned();
    if add.ok && !matches!(version.as_str(), "0.1.0" | "0.2.0" | "0.3.0" | "0.3.1") {
        let mut c = conf.clone();
        c["prevResult"] = add.json();
        check = Some(node.exec(&bin, "CHECK", &env, &c).ok);
        if check == Some(false) {
            eprintln!("{imp:?} CHECK: {:?}", node.exec(&bin, "CHECK", &env, &c));
        }
    }
    let mut del_conf = conf.clone();
    if add.ok {
        del_conf["prevResult"] = add.json();
    }
    let del = node.exec(&bin, "DEL", &env, &del_conf);
    let del_again = node.exec(&bin, "DEL", &env, &del_conf);
    Run {
        add: if add.ok {
            Ok(normalise(&add.json()))
        } else {
            Err(error_msg(&add))
        },
        dad,
        check,
        node_after_add,
        pod_after_add,
        del_ok: del.ok,
        del_again_ok: del_again.ok,
        node_after_del: kernel_state(node.name()),
        pod_after_del: kernel_state(&pod_name),
    }
}

/// The `code` of an error reply (the message differs between
/// implementations in wording; the code is the contract).
fn error_msg(out: &Out) -> String {
    match serde_json::from_str::<Value>(&out.stdout) {
        Ok(v) => format!("code {}", v["code"]),
        Err(_) => format!("no error reply: {out:?}"),
    }
}

/// Runs the scenario with the Go reference and ours, and asserts that they
/// did the same.
#[track_caller]
pub(crate) fn differential(sc: &Scenario<'_>) -> Run {
    let mut go = run_scenario(Impl::Go, sc);
    let ours = run_scenario(Impl::Ours, sc);
    apply_deliberate_dad_difference(sc.plugin, &sc.conf, &mut go);
    pretty_assertions::assert_eq!(go, ours, "Go (left) vs ours (right) for {}", sc.conf);
    ours
}

/// [`differential`] for a plugin whose Go 1.1.1 version fails a repeated
/// DEL (host-device: "failed to find eth0"); ours must succeed, as the
/// spec asks of DEL.
#[track_caller]
pub(crate) fn differential_idempotent_del(sc: &Scenario<'_>) -> Run {
    let mut go = run_scenario(Impl::Go, sc);
    let ours = run_scenario(Impl::Ours, sc);
    apply_deliberate_dad_difference(sc.plugin, &sc.conf, &mut go);
    assert!(ours.del_again_ok, "repeated DEL: {ours:?}");
    go.del_again_ok = true;
    pretty_assertions::assert_eq!(go, ours, "Go (left) vs ours (right) for {}", sc.conf);
    ours
}

/// Median of durations.
pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Whether this kernel can create an ipvlan (tried in a throwaway node).
pub(crate) fn kernel_has_ipvlan() -> bool {
    let node = Node::new();
    let ok = std::process::Command::new("ip")
        .args([
            "-n",
            node.name(),
            "link",
            "add",
            "ipvprobe",
            "link",
            "uplink0",
            "type",
            "ipvlan",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    eprintln!("kernel ipvlan support: {ok}");
    ok
}
