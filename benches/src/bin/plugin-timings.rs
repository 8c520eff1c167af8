//! Plugin-level timings, ours next to the Go reference (`/usr/lib/cni`) in
//! the same run, each plugin exec'd as a runtime would (root for portmap):
//!
//! * `host-local`: ADD+DEL pairs (dual-stack) and the VERSION floor, rounds
//!   interleaved so both see the same load (target: ours at most 1/3 of Go);
//! * `host-local-60k`: ADD and DEL into a /16 holding 60,000 reservations
//!   written as Go leaves them (target: ADD < 10 ms);
//! * `portmap`: ADD and DEL p50 in a fresh node namespace holding 50, 200
//!   (and for ours 1000) other attachments' mappings (Go: iptables backend);
//! * `link`: ADD and DEL of ptp (with and without ipMasq), macvlan, ipvlan
//!   and host-device, Go's host-local as IPAM for both (root);
//! * `tuning`, `bandwidth`: ADD and DEL chained on a veth pair (root);
//! * `bridge`: ADD and DEL p50/p95 over 50 pods (isGateway, ipMasq), Go's
//!   bridge and ours, each with Go's host-local and ours (root).
//!
//! ```text
//! cargo build --release -p cni-plugins -p cni-benches --bins
//! target/release/plugin-timings [--plugins DIR] [--go DIR] [host-local|host-local-60k|portmap|link|tuning|bandwidth|bridge ...]
//! ```
//!
//! `--plugins` defaults to this program's own directory (where cargo put
//! the plugins of the same build), `--go` to `/usr/lib/cni`; a missing Go
//! plugin is reported and its column left out.

// A measurement program: its figures go to stdout.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use cni_benches::measure::{exec_plugin, median, ms, require_root, run, Fallible};
use cni_netns::OwnedNetns;
use serde_json::{json, Value};

const PROGRAM: &str = "plugin-timings";

struct Dirs {
    ours: PathBuf,
    go: PathBuf,
}

impl Dirs {
    fn ours(&self, plugin: &str) -> Fallible<PathBuf> {
        let p = self.ours.join(plugin);
        if !p.exists() {
            return Err(format!("{} is missing (build the plugins first)", p.display()).into());
        }
        Ok(p)
    }

    /// The Go plugin, or `None` (with a note) when it is not installed.
    fn go(&self, plugin: &str) -> Option<PathBuf> {
        let p = self.go.join(plugin);
        if p.exists() {
            Some(p)
        } else {
            println!("({} is missing: Go not measured)", p.display());
            None
        }
    }
}

/// A host-local-only call (no namespace: IPAM plugins need none).
fn ipam_call(bin: &Path, command: &str, id: &str, conf: &Value) -> Fallible<Duration> {
    exec_plugin(
        bin,
        &[
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", "/var/run/netns/bench"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/nonexistent"),
        ],
        conf.to_string().as_bytes(),
    )
}

fn host_local_conf(name: &str, data_dir: &Path, ranges: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": name, "type": "ptp",
           "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": ranges}})
}

fn add_del_pairs(bin: &Path, conf: &Value, n: usize) -> Fallible<Vec<Duration>> {
    (0..n)
        .map(|i| {
            let id = format!("bench-{i}");
            Ok(ipam_call(bin, "ADD", &id, conf)? + ipam_call(bin, "DEL", &id, conf)?)
        })
        .collect()
}

fn host_local(dirs: &Dirs) -> Fallible<()> {
    let tmp = tempfile::tempdir()?;
    let ranges = json!([[{"subnet": "10.1.0.0/16"}], [{"subnet": "2001:db8:1::/64"}]]);
    let ours_conf = host_local_conf("bench", &tmp.path().join("ours"), ranges.clone());
    let go_conf = host_local_conf("bench", &tmp.path().join("go"), ranges);
    let ours = dirs.ours("host-local")?;
    let go = dirs.go("host-local");
    let n = 200;
    // Warm both (page cache, index creation), then interleave rounds so
    // both see the same machine load.
    add_del_pairs(&ours, &ours_conf, 5)?;
    if let Some(g) = &go {
        add_del_pairs(g, &go_conf, 5)?;
    }
    let (mut o, mut g) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        o.extend(add_del_pairs(&ours, &ours_conf, n / 4)?);
        if let Some(go) = &go {
            g.extend(add_del_pairs(go, &go_conf, n / 4)?);
        }
    }
    let version = |bin: &Path| -> Fallible<Duration> {
        let v = (0..50)
            .map(|_| ipam_call(bin, "VERSION", "", &json!({})))
            .collect::<Fallible<Vec<_>>>()?;
        Ok(median(v))
    };
    println!(
        "exec floor (VERSION), median of 50: ours {:.2} ms",
        ms(version(&ours)?)
    );
    if let Some(go) = &go {
        println!(
            "exec floor (VERSION), median of 50: Go   {:.2} ms",
            ms(version(go)?)
        );
    }
    let o = median(o);
    println!(
        "host-local exec ADD+DEL (dual-stack), median of {n}: ours {:.2} ms",
        ms(o)
    );
    if !g.is_empty() {
        let g = median(g);
        println!(
            "host-local exec ADD+DEL (dual-stack), median of {n}: Go   {:.2} ms; ours/Go = {:.2} (target <= 0.33)",
            ms(g),
            o.as_secs_f64() / g.as_secs_f64()
        );
    }
    Ok(())
}

/// Fills `dir` with `count` reservations of 10.2.0.0/16 in Go's layout
/// (as files, which is what 60,000 ADDs would leave).
fn fill(dir: &Path, count: u32) -> Fallible<()> {
    std::fs::create_dir_all(dir)?;
    let mut last = String::new();
    for i in 0..count {
        let n = i + 2;
        let ip = format!("10.2.{}.{}", n >> 8, n & 0xff);
        std::fs::write(dir.join(&ip), format!("fill-{i}\r\neth0"))?;
        last = ip;
    }
    std::fs::write(dir.join("last_reserved_ip.0"), last)?;
    Ok(())
}

fn host_local_60k(dirs: &Dirs) -> Fallible<()> {
    let tmp = tempfile::tempdir()?;
    let count = 60_000;
    let ranges = json!([[{"subnet": "10.2.0.0/16"}]]);
    let ours_conf = host_local_conf("big", &tmp.path().join("ours"), ranges.clone());
    let go_conf = host_local_conf("big", &tmp.path().join("go"), ranges);
    fill(&tmp.path().join("ours/big"), count)?;
    fill(&tmp.path().join("go/big"), count)?;
    let ours = dirs.ours("host-local")?;

    // The first ADD builds the owner index from a full scan (once per boot,
    // or after another plugin changed the directory).
    let first = ipam_call(&ours, "ADD", "first", &ours_conf)?;
    let (mut adds, mut dels) = (Vec::new(), Vec::new());
    for i in 0..30 {
        let id = format!("steady-{i}");
        adds.push(ipam_call(&ours, "ADD", &id, &ours_conf)?);
        dels.push(ipam_call(&ours, "DEL", &id, &ours_conf)?);
    }
    println!(
        "host-local exec with {count} reservations in a /16: first ADD {:.2} ms (index build), ADD median {:.2} ms (target < 10), DEL median {:.2} ms",
        ms(first),
        ms(median(adds)),
        ms(median(dels))
    );
    if let Some(g) = dirs.go("host-local") {
        let go_adds = (0..5)
            .map(|i| ipam_call(&g, "ADD", &format!("go-{i}"), &go_conf))
            .collect::<Fallible<Vec<_>>>()?;
        println!(
            "Go host-local exec with {count} reservations: ADD median {:.2} ms",
            ms(median(go_adds))
        );
    }
    Ok(())
}

/// A throwaway "node" namespace: plugins are exec'd from a thread inside
/// it, so everything they change on the node lives and dies with it.
struct Node {
    ns: OwnedNetns,
    /// `CNI_PATH` of the calls (where a plugin finds its IPAM plugin).
    cni_path: PathBuf,
}

impl Node {
    fn new(prefix: &str) -> Fallible<Node> {
        let node = Node {
            ns: OwnedNetns::new(prefix)?,
            cni_path: PathBuf::from("/usr/lib/cni"),
        };
        node.ip(&["link", "set", "lo", "up"])?;
        Ok(node)
    }

    /// `ip -n <node> args`; an error carries what `ip` printed.
    fn ip(&self, args: &[&str]) -> Fallible<()> {
        let out = Command::new("ip")
            .arg("-n")
            .arg(self.ns.name())
            .args(args)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "ip {args:?} in {}: {}",
                self.ns.name(),
                String::from_utf8_lossy(&out.stderr).trim_end()
            )
            .into());
        }
        Ok(())
    }

    /// One call of `plugin` for container `id` in `pod`, exec'd inside the
    /// node.
    fn exec(
        &self,
        plugin: &Path,
        command: &str,
        id: &str,
        pod: &Path,
        conf: &Value,
    ) -> Fallible<Duration> {
        let pod = pod.to_string_lossy();
        let cni_path = self.cni_path.to_string_lossy();
        self.ns
            .netns()
            .run(|| {
                exec_plugin(
                    plugin,
                    &[
                        ("CNI_COMMAND", command),
                        ("CNI_CONTAINERID", id),
                        ("CNI_NETNS", &pod),
                        ("CNI_IFNAME", "eth0"),
                        ("CNI_PATH", &cni_path),
                    ],
                    conf.to_string().as_bytes(),
                )
                .map_err(|e| e.to_string())
            })?
            .map_err(Into::into)
    }
}

const PORTMAP_SAMPLES: usize = 31;

/// A node (a bridge holding 10.77.0.0/16) and a pod namespace, with
/// `existing` attachments of `plugin` programmed.
struct PortmapCase {
    name: &'static str,
    plugin: PathBuf,
    existing: usize,
    node: Node,
    pod: OwnedNetns,
    adds: Vec<Duration>,
    dels: Vec<Duration>,
}

impl PortmapCase {
    fn new(name: &'static str, plugin: PathBuf, existing: usize) -> Fallible<PortmapCase> {
        let node = Node::new("pmbench")?;
        node.ip(&["link", "add", "br0", "type", "bridge"])?;
        node.ip(&["addr", "add", "10.77.255.254/16", "dev", "br0"])?;
        node.ip(&["link", "set", "br0", "up"])?;
        let case = PortmapCase {
            name,
            plugin,
            existing,
            node,
            pod: OwnedNetns::new("pmbpod")?,
            adds: Vec::new(),
            dels: Vec::new(),
        };
        for n in 0..existing {
            case.exec("ADD", n)?;
        }
        Ok(case)
    }

    /// One portmap call for container `n` (10.77.<n/250>.<n%250+2>, host
    /// port 10000+n).
    fn exec(&self, command: &str, n: usize) -> Fallible<Duration> {
        let ip = format!("10.77.{}.{}", n / 250, n % 250 + 2);
        let conf = json!({"cniVersion": "0.4.0", "name": "bench", "type": "portmap", "snat": true,
            "runtimeConfig": {"portMappings": [
                {"hostPort": 10000 + n, "containerPort": 80, "protocol": "tcp"}]},
            "prevResult": {"cniVersion": "0.4.0",
                "interfaces": [{"name": "eth0", "sandbox": self.pod.path()}],
                "ips": [{"version": "4", "address": format!("{ip}/16"), "interface": 0}]}});
        self.node.exec(
            &self.plugin,
            command,
            &format!("bench-{n}"),
            self.pod.path(),
            &conf,
        )
    }

    fn sample(&mut self, i: usize) -> Fallible<()> {
        let n = self.existing + i;
        let add = self.exec("ADD", n)?;
        let del = self.exec("DEL", n)?;
        self.adds.push(add);
        self.dels.push(del);
        Ok(())
    }
}

/// Cases are measured in rounds (one ADD and one DEL of each case per
/// round) so a change of machine load hits all of them alike.
fn portmap(dirs: &Dirs) -> Fallible<()> {
    require_root(PROGRAM)?;
    let ours = dirs.ours("portmap")?;
    let go = dirs.go("portmap");
    let mut cases = Vec::new();
    for n in [50, 200] {
        if let Some(go) = &go {
            cases.push(PortmapCase::new("go (iptables)", go.clone(), n)?);
        }
        cases.push(PortmapCase::new("ours (nftables)", ours.clone(), n)?);
    }
    cases.push(PortmapCase::new("ours (nftables)", ours, 1000)?);
    let started = Instant::now();
    for i in 0..PORTMAP_SAMPLES {
        for c in &mut cases {
            c.sample(i)?;
        }
    }
    println!(
        "{:<16} {:>9} {:>12} {:>12}   (p50 of {PORTMAP_SAMPLES}, {:.1} s)",
        "portmap",
        "existing",
        "ADD p50",
        "DEL p50",
        started.elapsed().as_secs_f64()
    );
    for c in cases {
        println!(
            "{:<16} {:>9} {:>9.2} ms {:>9.2} ms",
            c.name,
            c.existing,
            ms(median(c.adds)),
            ms(median(c.dels))
        );
    }
    Ok(())
}

const LINK_ROUNDS: usize = 21;

/// ptp, ptp with ipMasq, macvlan, ipvlan (when the kernel has it) and
/// host-device: median ADD and DEL, Go and ours alternating on the same
/// node with the same config, Go's host-local as IPAM for both.
fn link_plugins(dirs: &Dirs) -> Fallible<()> {
    require_root(PROGRAM)?;
    let ipam = json!({"type": "host-local"});
    let conf = |plugin: &str, extra: Value| {
        let mut c = json!({"cniVersion": "1.0.0", "name": "perf", "type": plugin, "ipam": ipam});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    };
    let has_ipvlan = {
        let n = link_node()?;
        n.ip(&["link", "add", "p", "link", "uplink0", "type", "ipvlan"])
            .is_ok()
    };
    println!(
        "median of {} rounds, Go {} vs ours {}",
        LINK_ROUNDS - 1,
        dirs.go.display(),
        dirs.ours.display()
    );
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>10}",
        "plugin", "Go ADD", "ours ADD", "Go DEL", "ours DEL"
    );
    let cases = [
        ("ptp", "ptp", conf("ptp", json!({})), false),
        (
            "ptp+masq",
            "ptp",
            conf("ptp", json!({"ipMasq": true})),
            false,
        ),
        (
            "macvlan",
            "macvlan",
            conf("macvlan", json!({"master": "uplink0"})),
            false,
        ),
        (
            "ipvlan",
            "ipvlan",
            conf("ipvlan", json!({"master": "uplink0"})),
            false,
        ),
        (
            "host-device",
            "host-device",
            conf("host-device", json!({"device": "hostdev0"})),
            true,
        ),
    ];
    for (label, plugin, conf, host_device) in cases {
        if plugin == "ipvlan" && !has_ipvlan {
            println!("{label:<12} (kernel has no ipvlan: not measured)");
            continue;
        }
        let Some(go) = dirs.go(plugin) else { continue };
        let ours = dirs.ours(plugin)?;
        let node = link_node()?;
        if host_device {
            node.ip(&[
                "link",
                "add",
                "hostdev0",
                "type",
                "veth",
                "peer",
                "name",
                "hostdev0p",
            ])?;
        }
        let pod = OwnedNetns::new("lpod")?;
        let data = tempfile::tempdir()?;
        let mut conf = conf;
        conf["ipam"] = json!({"type": "host-local", "dataDir": data.path(),
            "ranges": [[{"subnet": "10.90.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]});
        let mut times: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
        for round in 0..LINK_ROUNDS {
            for (i, bin) in [&go, &ours].into_iter().enumerate() {
                let add = node.exec(bin, "ADD", "ctr-perf", pod.path(), &conf)?;
                let del = node.exec(bin, "DEL", "ctr-perf", pod.path(), &conf)?;
                // The first round warms the page cache for both binaries.
                if round > 0 {
                    times[i].0.push(add);
                    times[i].1.push(del);
                }
            }
        }
        let [(go_add, go_del), (our_add, our_del)] = times.map(|(a, d)| (median(a), median(d)));
        println!(
            "{label:<12} {:>7.1} ms {:>7.1} ms {:>7.1} ms {:>7.1} ms",
            ms(go_add),
            ms(our_add),
            ms(go_del),
            ms(our_del)
        );
    }
    Ok(())
}

/// A node whose master link `uplink0` is a veth (its peer stays in the node).
fn link_node() -> Fallible<Node> {
    let node = Node::new("lnode")?;
    node.ip(&[
        "link", "add", "uplink0", "mtu", "1500", "type", "veth", "peer", "name", "uplink0p",
    ])?;
    node.ip(&["link", "set", "uplink0", "up"])?;
    node.ip(&["link", "set", "uplink0p", "up"])?;
    Ok(node)
}

/// A node and a pod joined by a veth (`vethbench` in the node, `eth0` in
/// the pod, 10.91.0.1/24 and .2), as a main plugin leaves them for the
/// chained ones, and the prevResult describing it.
struct VethPair {
    node: Node,
    pod: OwnedNetns,
}

impl VethPair {
    fn new() -> Fallible<VethPair> {
        let node = Node::new("vnode")?;
        let pod = OwnedNetns::new("vpod")?;
        node.ip(&[
            "link",
            "add",
            "vethbench",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod.name(),
        ])?;
        node.ip(&["addr", "add", "10.91.0.1/24", "dev", "vethbench"])?;
        node.ip(&["link", "set", "vethbench", "up"])?;
        for args in [
            &["addr", "add", "10.91.0.2/24", "dev", "eth0"][..],
            &["link", "set", "eth0", "up"],
            &["link", "set", "lo", "up"],
        ] {
            let st = Command::new("ip")
                .arg("-n")
                .arg(pod.name())
                .args(args)
                .status()?;
            if !st.success() {
                return Err(format!("ip {args:?} in {}: {st}", pod.name()).into());
            }
        }
        Ok(VethPair { node, pod })
    }

    fn conf(&self, plugin: &str, extra: Value) -> Value {
        let mut c = json!({"cniVersion": "1.0.0", "name": "bench", "type": plugin,
            "prevResult": {"cniVersion": "1.0.0",
                "interfaces": [{"name": "vethbench"}, {"name": "eth0", "sandbox": self.pod.path()}],
                "ips": [{"address": "10.91.0.2/24", "interface": 1, "gateway": "10.91.0.1"}]}});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    }

    /// Runs `ip args` (or any program) inside the pod, ignoring failure:
    /// for resetting state between samples.
    fn in_pod(&self, args: &[&str]) -> Fallible<()> {
        Command::new("ip")
            .args(["netns", "exec", self.pod.name()])
            .args(args)
            .output()?;
        Ok(())
    }
}

/// Median ADD and DEL of Go's `plugin` and ours on one [`VethPair`], 21
/// each; `reset` runs (untimed) after every DEL.
fn chained_timing(
    dirs: &Dirs,
    plugin: &str,
    extra: Value,
    reset: &dyn Fn(&VethPair) -> Fallible<()>,
) -> Fallible<()> {
    let pair = VethPair::new()?;
    let conf = pair.conf(plugin, extra);
    let mut bins = vec![("ours", dirs.ours(plugin)?)];
    if let Some(go) = dirs.go(plugin) {
        bins.insert(0, ("go", go));
    }
    for (label, bin) in bins {
        let (mut adds, mut dels) = (Vec::new(), Vec::new());
        for i in 0..21 {
            let id = format!("t{i}");
            adds.push(pair.node.exec(&bin, "ADD", &id, pair.pod.path(), &conf)?);
            dels.push(pair.node.exec(&bin, "DEL", &id, pair.pod.path(), &conf)?);
            reset(&pair)?;
        }
        println!(
            "{plugin} {label}: ADD median {:.2} ms, DEL median {:.2} ms",
            ms(median(adds)),
            ms(median(dels))
        );
    }
    Ok(())
}

/// tuning: three sysctls, MAC, MTU, promisc and allmulti.
fn tuning(dirs: &Dirs) -> Fallible<()> {
    require_root(PROGRAM)?;
    let data = tempfile::tempdir()?;
    let tuned = json!({"dataDir": data.path(),
        "sysctl": {"net.ipv4.conf.eth0.arp_ignore": "1", "net.core.somaxconn": "512",
                   "net.ipv4.ip_forward": "1"},
        "mac": "c2:11:22:33:44:55", "mtu": 1400, "promisc": true, "allmulti": true});
    // Go does not restore sysctls: put them back (untimed) so that every
    // ADD of both really changes them, as on a fresh pod (writing
    // ip_forward is costly only when it changes).
    chained_timing(dirs, "tuning", tuned, &|pair| {
        pair.in_pod(&["sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/eth0/arp_ignore; echo 4096 > /proc/sys/net/core/somaxconn; echo 0 > /proc/sys/net/ipv4/ip_forward"])
    })
}

/// bandwidth: ingress and egress limits (an IFB device for egress).
fn bandwidth(dirs: &Dirs) -> Fallible<()> {
    require_root(PROGRAM)?;
    let limits = json!({"ingressRate": 8_000_000, "ingressBurst": 80_000,
                        "egressRate": 8_000_000, "egressBurst": 80_000});
    // Go leaves its qdiscs on the veth: clear them for the next ADD.
    chained_timing(dirs, "bandwidth", limits, &|pair| {
        for kind in ["root", "ingress"] {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    pair.node.ns.name(),
                    "tc",
                    "qdisc",
                    "del",
                    "dev",
                    "vethbench",
                    kind,
                ])
                .output()?;
        }
        Ok(())
    })
}

const BRIDGE_PODS: usize = 50;

/// bridge (isGateway + ipMasq) ADD and DEL p50/p95 over 50 pods: Go's
/// bridge with Go's host-local, ours with Go's host-local, ours with ours
/// (run in-process by our bridge unless `CNI_RS_EXEC_DELEGATES=1`).
fn bridge(dirs: &Dirs) -> Fallible<()> {
    require_root(PROGRAM)?;
    let go_bridge = dirs.go("bridge");
    let go_hl = dirs.go("host-local");
    let (ours, ours_hl) = (dirs.ours("bridge")?, dirs.ours("host-local")?);
    let mut cases = Vec::new();
    if let (Some(b), Some(h)) = (&go_bridge, &go_hl) {
        cases.push(("go bridge + go host-local", b.clone(), h.clone()));
    }
    if let Some(h) = &go_hl {
        cases.push(("our bridge + go host-local", ours.clone(), h.clone()));
    }
    cases.push(("our bridge + our host-local", ours, ours_hl));
    for (label, plugin, host_local) in cases {
        let mut node = Node::new("brbench")?;
        let path_dir = tempfile::tempdir()?;
        std::os::unix::fs::symlink(&host_local, path_dir.path().join("host-local"))?;
        node.cni_path = path_dir.path().to_path_buf();
        let data = tempfile::tempdir()?;
        let conf = json!({"cniVersion": "1.0.0", "name": "brbench", "type": "bridge",
            "bridge": "cnibench0", "isGateway": true, "ipMasq": true,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.98.0.0/24"}]],
                     "dataDir": data.path()}});
        // Pods are made before and removed after the timed loop: the
        // kernel's namespace cleanup would otherwise contend for the RTNL
        // lock with the calls being timed.
        let pods = (0..BRIDGE_PODS)
            .map(|_| OwnedNetns::new("cnib").map_err(Into::into))
            .collect::<Fallible<Vec<_>>>()?;
        let (mut add, mut del) = (Vec::new(), Vec::new());
        for (i, pod) in pods.iter().enumerate() {
            let id = format!("bench{i}");
            add.push(node.exec(&plugin, "ADD", &id, pod.path(), &conf)?);
            del.push(node.exec(&plugin, "DEL", &id, pod.path(), &conf)?);
        }
        let p95 = |mut v: Vec<Duration>| {
            v.sort();
            v.get(v.len() * 95 / 100).copied().unwrap_or_default()
        };
        println!(
            "{label}: ADD p50 {:.1} ms p95 {:.1} ms; DEL p50 {:.1} ms p95 {:.1} ms (N={BRIDGE_PODS}, isGateway+ipMasq)",
            ms(median(add.clone())),
            ms(p95(add)),
            ms(median(del.clone())),
            ms(p95(del))
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    run(PROGRAM, || {
        let mut args = std::env::args().skip(1);
        let here = std::env::current_exe()?
            .parent()
            .map(Path::to_path_buf)
            .ok_or("no directory of this program")?;
        let mut dirs = Dirs {
            ours: here,
            go: PathBuf::from("/usr/lib/cni"),
        };
        let mut picked = Vec::new();
        while let Some(a) = args.next() {
            match a.as_str() {
                "--plugins" => dirs.ours = args.next().ok_or("--plugins needs a directory")?.into(),
                "--go" => dirs.go = args.next().ok_or("--go needs a directory")?.into(),
                _ => picked.push(a),
            }
        }
        let all = [
            "host-local",
            "host-local-60k",
            "portmap",
            "link",
            "tuning",
            "bandwidth",
            "bridge",
        ];
        if picked.is_empty() {
            picked = all.iter().map(|s| s.to_string()).collect();
        }
        for what in picked {
            match what.as_str() {
                "host-local" => host_local(&dirs)?,
                "host-local-60k" => host_local_60k(&dirs)?,
                "portmap" => portmap(&dirs)?,
                "link" => link_plugins(&dirs)?,
                "tuning" => tuning(&dirs)?,
                "bandwidth" => bandwidth(&dirs)?,
                "bridge" => bridge(&dirs)?,
                other => {
                    return Err(format!("unknown measurement {other:?} (one of {all:?})").into())
                }
            }
        }
        Ok(())
    })
}
