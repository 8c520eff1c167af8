//! Leak census (#29): nothing is left after the last DEL, without GC.
//!
//! For every cell of the configuration matrix (`cni_testkit::matrix`: IPv4,
//! dual-stack and IPv6-only x the bridge chain, the same with tuning and
//! bandwidth, ptp, macvlan) our plugins, exec'd by our invoker
//! (`cni_exec::CniConfig`, its cache in a temp dir, as a runtime runs
//! them), attach pods in a throwaway node namespace, and Go's 1.1.1
//! plugins do the same in another one. The census (`census_support`)
//! reads the node with independent tools at three points:
//!
//! 1. **pristine**: the node before any ADD;
//! 2. **after the warm-up**: after one pod's ADD and DEL;
//! 3. **after the last DEL**: after [`PODS`] more pods, ADDed at the same
//!    time as a runtime does, then DELed.
//!
//! From 2 to 3 nothing may change, strictly: whatever a pod leaves shows
//! there. From 1 to 2 the network's one-time shared objects appear (its
//! bridge, our nftables tables, host-local's lock file...): the baseline is
//! taken after the warm-up so that these are listed explicitly here, each
//! matched to one of the documented [`SHARED`] kinds with the reason it
//! stays, instead of being hidden in a baseline or mistaken for a pod's
//! leak. A kind that Go's plugins are said to keep too must show in Go's
//! census of the same cell: we keep no more than Go, and the differences
//! are printed. Per-network state that must go with the network's last
//! attachment (nftables set elements, reservations, cache entries) is no
//! shared kind: it fails the census at step 2 as it would at step 3.
//!
//! Each pod namespace is censused too, before its ADD and after its DEL.
//! `census_sees_a_pod_left_behind` proves the oracles on a pod left without
//! its DEL.
//!
//! "Bad input" cells: a dual-stack ADD whose pod interface has no IPv6
//! (MTU below 1280, where the kernel turns IPv6 off on the link) must fail
//! with a CNI error naming the interface and the family, and leave nothing
//! behind (the censuses before and after the failed ADDs, and after the
//! runtime's DELs, equal but for the shared kinds).
//!
//! The documented exceptions are also listed in `docs/leak-census.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cni_exec::{CniConfig, ProcessExec, RuntimeConf};
use cni_testkit::matrix::{pod_capability_args, IpStack, MatrixCell, PluginChain};
use cni_types::NetworkConfigList;
use serde_json::Value;

use crate::census_support::{tools_present, Census, Change};
use crate::common::GO_PLUGINS;
use crate::nodenet::{suffix, Ns};

/// Pods per cell after the warm-up.
const PODS: usize = 3;

/// Our plugin binaries, built with this test binary.
const OURS: &[(&str, &str)] = &[
    ("bridge", env!("CARGO_BIN_EXE_bridge")),
    ("host-local", env!("CARGO_BIN_EXE_host-local")),
    ("portmap", env!("CARGO_BIN_EXE_portmap")),
    ("tuning", env!("CARGO_BIN_EXE_tuning")),
    ("bandwidth", env!("CARGO_BIN_EXE_bandwidth")),
    ("ptp", env!("CARGO_BIN_EXE_ptp")),
    ("macvlan", env!("CARGO_BIN_EXE_macvlan")),
];

/// Whose plugins run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Ours,
    Go,
}

/// What one shared object is, for the kinds' matchers: the cell's names.
struct Names {
    /// The run's tag: in the network's, the bridge's and the containers'
    /// names.
    tag: String,
    bridge: String,
    network: String,
    /// The network's subnets' addresses (`10.130.0.0`, `fd12:3456:2::`).
    subnets: Vec<String>,
}

impl Names {
    fn of(cell: MatrixCell, tag: &str) -> Names {
        Names {
            tag: tag.to_string(),
            bridge: MatrixCell::bridge_name(tag),
            network: format!("bench-{tag}"),
            subnets: cell
                .subnets(tag)
                .iter()
                .filter_map(|s| s.split('/').next())
                .map(str::to_string)
                .collect(),
        }
    }

    /// Whether `key` names this network, one of its pods or its subnets:
    /// then it is no object shared by every network.
    fn mentioned_in(&self, key: &str) -> bool {
        key.contains(&self.tag)
            || self
                .subnets
                .iter()
                .any(|s| key.contains(&format!("\"{s}\"")))
    }
}

/// A kind of one-time shared object a network may keep after its last
/// DEL, with the reason.
struct Shared {
    kind: &'static str,
    /// Why it stays.
    reason: &'static str,
    /// Go's plugins keep it too (checked in Go's census of the cell).
    go_too: bool,
    matches: fn(&Change, &Names) -> bool,
}

fn added(c: &Change) -> Option<&str> {
    match c {
        Change::Added(k, _) => Some(k),
        _ => None,
    }
}

fn changed_to<'a>(c: &'a Change, to: &str) -> Option<&'a str> {
    match c {
        Change::Changed(k, _, v) if v == to => Some(k),
        _ => None,
    }
}

/// The documented one-time shared objects (also in docs/leak-census.md).
const SHARED: &[Shared] = &[
    Shared {
        kind: "the bridge device",
        reason: "the network's bridge is shared by its pods and kept after the last DEL, \
                 as Go's bridge keeps it",
        go_too: true,
        matches: |c, n| added(c) == Some(&format!("link {}", n.bridge)),
    },
    Shared {
        kind: "the bridge's addresses",
        reason: "the gateway addresses (isGateway) and the kernel's IPv6 link-local one \
                 stay with the bridge, as Go's",
        go_too: true,
        matches: |c, n| added(c).is_some_and(|k| k.starts_with(&format!("addr {} ", n.bridge))),
    },
    Shared {
        kind: "the kernel's routes of the bridge",
        reason: "the kernel made them for the bridge's addresses (subnet, local, broadcast, \
                 fe80::/64, multicast); they go with the bridge",
        go_too: true,
        matches: |c, n| {
            added(c).is_some_and(|k| {
                (k.starts_with("route4 ") || k.starts_with("route6 "))
                    && k.contains(&format!("\"dev\":\"{}\"", n.bridge))
            })
        },
    },
    Shared {
        kind: "forwarding on",
        reason: "a gateway or ptp network makes the node a router (ip_forward, \
                 conf/*/forwarding = 1, and the kernel's own consequence of ip_forward: \
                 conf/all/accept_redirects = 0); Go switches it on too and nobody switches \
                 it back",
        go_too: true,
        matches: |c, _| {
            changed_to(c, "1").is_some_and(|k| {
                k == "sysctl net/ipv4/ip_forward"
                    || (k.starts_with("sysctl net/ipv") && k.ends_with("/forwarding"))
            }) || changed_to(c, "0") == Some("sysctl net/ipv4/conf/all/accept_redirects")
        },
    },
    Shared {
        kind: "the firewall's tables and chains",
        reason: "ours: the nftables tables, base chains, their fixed rules and the (then \
                 empty) maps the first ADD makes, shared by every attachment; Go's: the \
                 iptables chains and jump rules its portmap and bridge make. No element, \
                 and nothing that names the network, its pods or its subnets, is in this \
                 kind",
        go_too: true,
        matches: |c, n| {
            added(c).is_some_and(|k| !n.mentioned_in(k))
                && added(c).is_some_and(|k| {
                    k.starts_with("nft table ")
                        || k.starts_with("nft chain ")
                        || k.starts_with("nft set ")
                        || k.starts_with("nft map ")
                        || k.starts_with("nft rule ")
                        || k.starts_with("iptables ")
                        || k.starts_with("ip6tables ")
                })
        },
    },
    Shared {
        kind: "host-local's lock and round-robin position",
        reason: "<dataDir>/<network>/lock and last_reserved_ip.<n>, in Go's layout: Go's \
                 host-local keeps them too",
        go_too: true,
        matches: |c, n| {
            added(c).is_some_and(|k| {
                k == "dir ipam"
                    || k == format!("dir ipam/{}", n.network)
                    || k == format!("file ipam/{}/lock", n.network)
                    || k.starts_with(&format!("file ipam/{}/last_reserved_ip.", n.network))
            })
        },
    },
    Shared {
        kind: "the runtime's cache directories",
        reason: "made by the runtime (our invoker, on both sides), not by a plugin: \
                 libcni keeps them too",
        go_too: true,
        matches: |c, _| added(c).is_some_and(|k| k == "dir cache" || k.starts_with("dir cache/")),
    },
    Shared {
        kind: "tuning's data directory",
        reason: "tuning's dataDir (an empty directory), where it backs up what it changes \
                 until DEL restores it. Ours only against Go 1.1.1, whose tuning backs up no \
                 sysctl (it never restores them: see its pod namespaces) and so makes no \
                 directory here; later Go tunings make it at every ADD and keep it as we do",
        go_too: false,
        matches: |c, _| added(c) == Some("dir tuning"),
    },
];

/// The kind of a one-time change, if it is one.
fn shared_kind(c: &Change, names: &Names) -> Option<&'static Shared> {
    SHARED.iter().find(|s| (s.matches)(c, names))
}

/// One side's census of one cell.
#[derive(Default)]
struct Outcome {
    /// Pristine to after the warm-up (or the first failed ADD).
    one_time: Vec<Change>,
    /// After the warm-up to after the last DEL (bad-input cells: after the
    /// first failed ADD to after the last).
    left: Vec<Change>,
    /// Bad-input cells: after the last failed ADD to after the runtime's
    /// DELs.
    left_by_del: Vec<Change>,
    /// Each pod namespace, before its ADD to after its DEL.
    pods_left: Vec<Change>,
    /// The failed ADDs' error messages (bad-input cells).
    errors: Vec<String>,
    /// The runtime's DEL after a failed ADD failed (bad-input cells).
    del_error: Option<String>,
    /// Why the side could not run (Go's plugins on a cell they refuse).
    failed: Option<String>,
}

/// A side's node, state and runtime for one cell.
struct Node {
    node: Ns,
    state: tempfile::TempDir,
    _plugins: Option<tempfile::TempDir>,
    list: NetworkConfigList,
    cni: CniConfig,
    tag: String,
}

impl Node {
    /// A fresh node for `side`, prepared for `cell`, the conflist changed
    /// by `edit`.
    fn new(cell: MatrixCell, side: Side, tag: &str, edit: &dyn Fn(&mut Value)) -> Node {
        let node = Ns::new("census-node");
        let state = tempfile::tempdir().expect("state dir");
        let (dir, plugins) = match side {
            Side::Go => (PathBuf::from(GO_PLUGINS), None),
            Side::Ours => {
                let d = tempfile::tempdir().expect("plugin dir");
                for (name, bin) in OURS {
                    std::os::unix::fs::symlink(bin, d.path().join(name)).expect("symlink");
                }
                (d.path().to_path_buf(), Some(d))
            }
        };
        cell.prepare_node(tag, &node.netns())
            .expect("prepare the node");
        let mut conf = cell.conflist_json(tag, state.path());
        edit(&mut conf);
        let list = NetworkConfigList::from_slice(conf.to_string().as_bytes()).expect("conflist");
        let exec = ProcessExec::new().with_timeout(std::time::Duration::from_secs(60));
        let cni =
            CniConfig::new(vec![dir], Arc::new(exec)).with_cache_dir(state.path().join("cache"));
        Node {
            node,
            state,
            _plugins: plugins,
            list,
            cni,
            tag: tag.to_string(),
        }
    }

    fn census(&self) -> Census {
        Census::read(&self.node, Some(self.state.path()))
    }

    fn rt(&self, i: usize, pod: &Ns) -> RuntimeConf {
        RuntimeConf {
            container_id: format!("census-{}-{i}", self.tag),
            netns: pod.path(),
            ifname: "eth0".into(),
            capability_args: pod_capability_args(i),
            ..Default::default()
        }
    }

    /// ADD (or DEL) of `pods` (numbered from `first`), all at once.
    fn run_all(&self, add: bool, first: usize, pods: &[Ns]) -> Vec<Result<(), String>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = pods
                .iter()
                .enumerate()
                .map(|(i, pod)| {
                    s.spawn(move || {
                        let rt = self.rt(first + i, pod);
                        self.node
                            .netns()
                            .run(|| {
                                if add {
                                    self.cni.add_network_list(&self.list, &rt).map(drop)
                                } else {
                                    self.cni.del_network_list(&self.list, &rt)
                                }
                            })
                            .map_err(|e| e.to_string())?
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
                .collect()
        })
    }
}

fn pods(n: usize) -> Vec<Ns> {
    (0..n).map(|_| Ns::new("census-pod")).collect()
}

/// The census of one side of a cell that must work.
fn census_cell(cell: MatrixCell, side: Side, tag: &str) -> Outcome {
    let n = Node::new(cell, side, tag, &|_| {});
    let warm = pods(1);
    let pods = pods(PODS);
    let pod_before: Vec<Census> = pods.iter().map(|p| Census::read(p, None)).collect();
    let pristine = n.census();
    let mut out = Outcome::default();
    let fail = |what: &str, r: Vec<Result<(), String>>| {
        r.into_iter()
            .find_map(Result::err)
            .map(|e| format!("{what}: {e}"))
    };
    if let Some(e) = fail("warm-up ADD", n.run_all(true, PODS, &warm)) {
        out.failed = Some(e);
        return out;
    }
    if let Some(e) = fail("warm-up DEL", n.run_all(false, PODS, &warm)) {
        out.failed = Some(e);
        return out;
    }
    let base = n.census();
    if let Some(e) = fail("ADD", n.run_all(true, 0, &pods)) {
        out.failed = Some(e);
        return out;
    }
    if let Some(e) = fail("DEL", n.run_all(false, 0, &pods)) {
        out.failed = Some(e);
        return out;
    }
    out.one_time = pristine.diff(&base);
    out.left = base.diff(&n.census());
    for (p, before) in pods.iter().zip(&pod_before) {
        out.pods_left.extend(before.diff(&Census::read(p, None)));
    }
    out
}

/// The census of one side of a bad-input cell: every ADD must fail.
fn census_bad(cell: MatrixCell, side: Side, tag: &str, edit: &dyn Fn(&mut Value)) -> Outcome {
    let n = Node::new(cell, side, tag, edit);
    let pods = pods(PODS);
    let pod_before: Vec<Census> = pods.iter().map(|p| Census::read(p, None)).collect();
    let pristine = n.census();
    let mut out = Outcome::default();
    let first = n.run_all(true, 0, &pods[..1]);
    let after_first = n.census();
    let rest = n.run_all(true, 1, &pods[1..]);
    let after_adds = n.census();
    for r in first.into_iter().chain(rest) {
        match r {
            Ok(()) => out.failed = Some("an ADD that must fail succeeded".into()),
            Err(e) => out.errors.push(e),
        }
    }
    // The runtime's DEL after a failed ADD (CRI does one): it must work
    // and change nothing.
    out.del_error = n.run_all(false, 0, &pods).into_iter().find_map(Result::err);
    out.one_time = pristine.diff(&after_first);
    out.left = after_first.diff(&after_adds);
    out.left_by_del = after_adds.diff(&n.census());
    for (p, before) in pods.iter().zip(&pod_before) {
        out.pods_left.extend(before.diff(&Census::read(p, None)));
    }
    out
}

/// Ours and Go's census of a cell, side by side.
fn both(run: impl Fn(Side) -> Outcome + Sync) -> (Outcome, Outcome) {
    std::thread::scope(|s| {
        let go = s.spawn(|| run(Side::Go));
        let ours = run(Side::Ours);
        (ours, go.join().expect("Go's census panicked"))
    })
}

fn lines(v: &[Change]) -> String {
    v.iter().map(|c| format!("\n    {c}")).collect()
}

/// The verdict on ours, the report on both. `against_go`: a shared kind
/// ours keeps must be one Go keeps in the same cell (the good cells; a
/// failed ADD stops Go and ours at different steps, so the bad cells only
/// check that what stays is a documented shared kind).
fn judge(cell: &str, names: &Names, ours: &Outcome, go: &Outcome, against_go: bool) {
    let mut report = format!("census {cell}:");
    let mut faults = Vec::new();
    if let Some(e) = &ours.failed {
        faults.push(format!("ours failed: {e}"));
    }
    if let Some(e) = &ours.del_error {
        faults.push(format!("our DEL after the failed ADD failed: {e}"));
    }
    if !ours.left.is_empty() {
        faults.push(format!(
            "ours left after the last DEL (or failed ADD):{}",
            lines(&ours.left)
        ));
    }
    if !ours.left_by_del.is_empty() {
        faults.push(format!(
            "our DELs after the failed ADDs changed:{}",
            lines(&ours.left_by_del)
        ));
    }
    if !ours.pods_left.is_empty() {
        faults.push(format!(
            "ours left in the pod namespaces:{}",
            lines(&ours.pods_left)
        ));
    }
    let unknown: Vec<Change> = ours
        .one_time
        .iter()
        .filter(|c| shared_kind(c, names).is_none())
        .cloned()
        .collect();
    if !unknown.is_empty() {
        faults.push(format!(
            "ours kept after the network's last DEL, not a documented shared object:{}",
            lines(&unknown)
        ));
    }
    // Shared kinds: ours against Go's.
    for s in SHARED {
        let count = |o: &Outcome| o.one_time.iter().filter(|c| (s.matches)(c, names)).count();
        let (o, g) = (count(ours), count(go));
        if o == 0 && g == 0 {
            continue;
        }
        let go_text = if go.failed.is_some() {
            "-".to_string()
        } else {
            g.to_string()
        };
        report += &format!(
            "\n  shared: {} (ours {o}, Go {go_text}): {}",
            s.kind, s.reason
        );
        if against_go && o > 0 && g == 0 && go.failed.is_none() && s.go_too {
            faults.push(format!(
                "ours keeps {} ({o} objects) where Go's plugins keep none",
                s.kind
            ));
        }
    }
    match &go.failed {
        Some(e) => report += &format!("\n  Go cannot run this cell: {e}"),
        None => {
            let go_unknown: Vec<Change> = go
                .one_time
                .iter()
                .filter(|c| shared_kind(c, names).is_none())
                .cloned()
                .collect();
            for (what, v) in [
                ("Go keeps beyond the shared kinds", &go_unknown),
                ("Go leaves after the last DEL (or failed ADD)", &go.left),
                ("Go's DELs after its failed ADDs change", &go.left_by_del),
                ("Go leaves in the pod namespaces", &go.pods_left),
            ] {
                if !v.is_empty() {
                    report += &format!("\n  {what}:{}", lines(v));
                }
            }
        }
    }
    for (who, o) in [("ours", ours), ("Go", go)] {
        if let Some(e) = o.errors.first() {
            report += &format!("\n  {who} ADD's error: {e}");
        }
        if let Some(e) = &o.del_error {
            report += &format!("\n  {who} DEL after the failed ADD failed: {e}");
        }
    }
    eprintln!("{report}");
    assert!(
        faults.is_empty(),
        "census {cell}:\n  {}\n{report}",
        faults.join("\n  ")
    );
}

/// Runs the census of `cell`: ours must leave nothing, Go's for the record.
fn census(stack: IpStack, chain: PluginChain) {
    if !cni_testkit::premise::require(
        cni_testkit::premise::is_root()
            && Path::new(GO_PLUGINS).join("ptp").is_file()
            && tools_present(),
        "needs root, Go's plugins in /usr/lib/cni, nft, iptables-save, ip",
    ) {
        return;
    }
    let cell = MatrixCell { stack, chain };
    let tag = &suffix()[..6];
    let (ours, go) = both(|side| census_cell(cell, side, tag));
    let names = Names::of(cell, tag);
    judge(&cell.name(), &names, &ours, &go, true);
}

/// A dual-stack network whose pod interface cannot have IPv6 (MTU 1200):
/// ours must fail every ADD with a CNI error naming the interface and
/// IPv6, and leave nothing behind.
fn census_no_ipv6(chain: PluginChain) {
    if !cni_testkit::premise::require(
        cni_testkit::premise::is_root()
            && Path::new(GO_PLUGINS).join("ptp").is_file()
            && tools_present(),
        "needs root, Go's plugins in /usr/lib/cni, nft, iptables-save, ip",
    ) {
        return;
    }
    let cell = MatrixCell {
        stack: IpStack::DualStack,
        chain,
    };
    let tag = &suffix()[..6];
    let mtu = |v: &mut Value| {
        v["plugins"][0]["mtu"] = 1200.into();
    };
    let (ours, go) = both(|side| census_bad(cell, side, tag, &mtu));
    let names = Names::of(cell, tag);
    let name = format!("{} with MTU 1200", cell.name());
    for e in &ours.errors {
        assert!(
            e.contains("eth0") && e.contains("IPv6"),
            "{name}: our error must name the interface and the family: {e}"
        );
    }
    judge(&name, &names, &ours, &go, false);
}

macro_rules! cells {
    ($($name:ident: $stack:ident $chain:ident;)*) => {
        $(
            #[test]
            fn $name() {
                census(IpStack::$stack, PluginChain::$chain);
            }
        )*
    };
}

cells! {
    v4_bridge: V4 Bridge;
    v4_bridge_tuning_bandwidth: V4 BridgeTuned;
    v4_ptp: V4 Ptp;
    v4_macvlan: V4 Macvlan;
    dual_stack_bridge: DualStack Bridge;
    dual_stack_bridge_tuning_bandwidth: DualStack BridgeTuned;
    dual_stack_ptp: DualStack Ptp;
    dual_stack_macvlan: DualStack Macvlan;
    v6_bridge: V6 Bridge;
    v6_bridge_tuning_bandwidth: V6 BridgeTuned;
    v6_ptp: V6 Ptp;
    v6_macvlan: V6 Macvlan;
}

#[test]
fn dual_stack_bridge_without_ipv6_on_the_pod_interface() {
    census_no_ipv6(PluginChain::Bridge);
}

#[test]
fn dual_stack_ptp_without_ipv6_on_the_pod_interface() {
    census_no_ipv6(PluginChain::Ptp);
}

#[test]
fn dual_stack_macvlan_without_ipv6_on_the_pod_interface() {
    census_no_ipv6(PluginChain::Macvlan);
}

/// The census catches a pod left without its DEL: its host veth, the
/// bandwidth IFB, its nftables elements, its reservations, the runtime's
/// cache entry and tuning's backup all show.
#[test]
fn census_sees_a_pod_left_behind() {
    if !cni_testkit::premise::require(
        cni_testkit::premise::is_root() && tools_present(),
        "needs root, nft, iptables-save, ip",
    ) {
        return;
    }
    let cell = MatrixCell {
        stack: IpStack::DualStack,
        chain: PluginChain::BridgeTuned,
    };
    let tag = &suffix()[..6];
    let n = Node::new(cell, Side::Ours, tag, &|_| {});
    let pod = pods(1);
    let before = n.census();
    assert!(n.run_all(true, 0, &pod).iter().all(Result::is_ok));
    let left: Vec<String> = before
        .diff(&n.census())
        .iter()
        .map(ToString::to_string)
        .collect();
    let network = format!("bench-{tag}");
    for (what, prefix) in [
        ("host veth", "+ link veth".to_string()),
        ("IFB", "+ link bwp".to_string()),
        (
            "masquerade element",
            "+ nft elem inet cni_rs_masq".to_string(),
        ),
        (
            "port mapping element",
            "+ nft elem inet cni_rs_hostport".to_string(),
        ),
        ("IPv4 reservation", format!("+ file ipam/{network}/10.")),
        ("IPv6 reservation", format!("+ file ipam/{network}/fd")),
        ("cache entry", "+ file cache/results/".to_string()),
        ("tuning backup", "+ file tuning/".to_string()),
    ] {
        assert!(
            left.iter().any(|l| l.starts_with(&prefix)),
            "the census misses the pod's {what} ({prefix}):\n{}",
            left.join("\n")
        );
    }
    assert!(n.run_all(false, 0, &pod).iter().all(Result::is_ok));
}
