//! The kernel floor: the kernel requests of one chain's ADD and DEL for a
//! cell of the matrix (`cni_testkit::matrix`), issued in-process through
//! `cni-netns` without our plugins (no process, no IPAM store, no config
//! parsing, no result cache), for N pods back to back in a fresh node
//! namespace. The modes' floor (`--floor`, and after the modes) is the
//! IPv4 bridge chain's; `e2e --matrix` runs every cell's beside ours and
//! Go's.
//!
//! ADD, per pod: the pod's namespace opened (as each plugin process opens
//! it), then by chain
//!
//! * bridge chains (bridge, + tuning/bandwidth, `vlan`, two ranges,
//!   flannel's delegate): the veth pair created into the pod on the bridge,
//!   host end up (with `accept_ra` off, as `setup_veth_with` does); the
//!   bridge's `accept_ra`, the forwarding switches, the pod end's DAD and
//!   ARP settings, the port's hairpin (flannel) and VLANs (`vlan`),
//!   portmap's `route_localnet`; the pod end up;
//! * ptp: the veth pair (`setup_veth`), the forwarding switches;
//! * macvlan, ipvlan: the link created into the pod on the node's master
//!   under a temporary name and renamed, its ARP and ND notifications;
//!
//! then the addresses and routes through `configure_interface_with` (the
//! plugins' own code), ptp's point-to-point routes
//! and node side (ptp's own functions), tuning's sysctl, the nf_tables
//! elements (masquerade, one port mapping; native backend), bandwidth's
//! qdiscs, IFB and filter, and the bridge port's wait to be operationally
//! up. The node's shared objects (bridge, its gateway addresses, macvlan's
//! master) are made before the first pod, as an untimed warm-up pod would.
//!
//! IPv6 DAD on the pod's interface is the plugin's own: the [`Dad`] its
//! config gives for the cell's conflist (`BridgeConf::dad`, `PtpConf::dad`,
//! `MacvlanConf::dad`, `IpvlanConf::dad`), set and waited for by the same
//! `cni-netns` functions the plugins call, so the floor waits where, and
//! only where, the plugin waits.
//!
//! DEL, per pod: the pod's namespace opened, bandwidth's qdiscs removed,
//! then the link deleted (the host end of a veth; the macvlan in the pod:
//! the kernel's unregister path, what most of a DEL waits for) while the
//! nf_tables elements and bandwidth's IFB are removed and tuning's sysctl
//! restored, as our plugins overlap them. ADD's requests are issued one
//! after the other.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use cni_firewall::{
    AttachmentId, Firewall, HostPortMapping, MasqueradeSpec, NativeFirewall, PortMappingSpec,
    Protocol, RuleSpec,
};
use cni_netns::kernel::NetnsHandle;
use cni_netns::tc::{self, PschedClock, RedirectFilterKind, Tbf};
use cni_netns::{
    configure_interface_with, set_dad, sysctl, AddressOptions, BridgePortOptions, BridgeSpec,
    BridgeVlan, Dad, Handle, IpNetwork, Ipv4Conf, IpvlanMode, IpvlanSpec, KernelRoute, Link,
    MacvlanMode, MacvlanSpec, OperState, OwnedNetns, VethSpec,
};
use cni_plugins::bridge::BridgeConf;
use cni_plugins::ipvlan::IpvlanConf;
use cni_plugins::macvlan::MacvlanConf;
use cni_plugins::ptp::PtpConf;
use cni_testkit::matrix::{MatrixCell, PluginChain};
use cni_types::NetworkConfig;

use super::{Fallible, Samples, Scratch, INTERRUPTED};

/// The floor's latencies, in seconds.
pub(crate) struct FloorReport {
    /// ADD: everything the kernel does for one attachment.
    pub(crate) add: Samples,
    /// DEL: everything the kernel does to remove it.
    pub(crate) del: Samples,
    /// DEL's part: the firewall elements' removal.
    pub(crate) del_fw: Samples,
    /// DEL's part: the link's deletion alone.
    pub(crate) del_link: Samples,
    /// ADD by step, in the order first taken (the steps depend on the
    /// chain: link, settings, addresses and routes, masquerade, port
    /// mapping, ...).
    pub(crate) steps: Vec<(&'static str, Samples)>,
    /// Not part of ADD (with `starts` only): right after each ADD, the
    /// start of two `/bin/true` processes (ours-exec runs two on the bridge
    /// chain: bridge, with host-local in it, and portmap), to see whether a
    /// process start itself slows down as the node grows (its CPUs shared
    /// with the kernel's per-port work).
    pub(crate) starts: Samples,
}

/// The IPv4 bridge chain's floor for `n` attachments, with the process
/// starts beside it (the modes' and `--floor`'s).
pub(crate) fn run(n: usize) -> Fallible<FloorReport> {
    run_cell(super::BENCH, n, false, true)
}

/// `cell`'s floor for `n` attachments in a fresh node namespace; with
/// `warm_up`, one more attachment first, untimed (as the modes' warm-up
/// pod: the nf_tables table, the first port), removed last.
pub(crate) fn run_cell(
    cell: MatrixCell,
    n: usize,
    warm_up: bool,
    starts: bool,
) -> Fallible<FloorReport> {
    let scratch = Scratch::new()?;
    super::experiment_node(&scratch.node)?;
    cell.prepare_node(&scratch.tag, scratch.node.netns())
        .map_err(|e| e.to_string())?;
    let pods = (0..n + usize::from(warm_up))
        .map(|_| OwnedNetns::new("cnibench-fpod").map_err(|e| e.to_string()))
        .collect::<Fallible<Vec<_>>>()?;
    scratch
        .node
        .netns()
        .run(|| {
            let node = Node::new(cell, &scratch.tag, &scratch.state)?;
            node.run(&pods, warm_up, starts)
        })
        .map_err(|e| e.to_string())?
}

/// The node's side of a cell's floor: what the chain's ADDs share.
struct Node {
    cell: MatrixCell,
    fw: NativeFirewall,
    /// The bridge (bridge chains).
    bridge: Option<Link>,
    /// macvlan's or ipvlan's master.
    master: Option<Link>,
    /// The pods' subnets (their first address is the gateway).
    subnets: Vec<IpNetwork>,
    /// The routes besides the default route of each family (flannel's
    /// cluster networks).
    networks: Vec<IpNetwork>,
    clock: PschedClock,
    /// The pod interface's IPv6 DAD, as the chain's plugin configures it.
    dad: Dad,
}

/// What one ADD made, for its DEL.
struct Attached {
    /// The veth's host end (veth chains).
    host_veth: Option<u32>,
    /// The pod's interface.
    pod_link: u32,
    rules: Vec<RuleSpec>,
    ifb: Option<u32>,
    /// tuning's sysctl's value before the ADD.
    somaxconn: Option<String>,
}

/// The chain's MTU (flannel's `subnet.env` sets 1450).
fn mtu(chain: PluginChain) -> Option<u32> {
    (chain == PluginChain::Flannel).then_some(1450)
}

fn kernel(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn parse(s: &str) -> Fallible<IpNetwork> {
    s.parse().map_err(|e| format!("{s}: {e}"))
}

/// Address `k` of `net` (0 is the network's own), with `net`'s prefix.
fn nth(net: IpNetwork, k: usize) -> Fallible<IpNetwork> {
    let ip = match net.network() {
        IpAddr::V4(a) => IpAddr::from((u32::from(a) + k as u32).to_be_bytes()),
        IpAddr::V6(a) => IpAddr::from((u128::from(a) + k as u128).to_be_bytes()),
    };
    IpNetwork::new(ip, net.prefix()).map_err(|e| format!("address {k} of {net}: {e}"))
}

/// ADD step names by index.
const STEPS: [&str; 9] = [
    "link",
    "settings",
    "addresses+routes",
    "ptp routes",
    "tuning",
    "masquerade",
    "port mapping",
    "bandwidth",
    "port up",
];

/// The pod interface's IPv6 DAD that the cell's interface plugin (for
/// flannel, its bridge delegate) gives for the cell's conflist.
fn plugin_dad(cell: MatrixCell, tag: &str, state: &std::path::Path) -> Fallible<Dad> {
    let list = cell.conflist_json(tag, state);
    let mut plugin = list["plugins"][0].clone();
    if cell.chain == PluginChain::Flannel {
        plugin = plugin["delegate"].clone();
        plugin["type"] = "bridge".into();
    }
    plugin["cniVersion"] = list["cniVersion"].clone();
    plugin["name"] = list["name"].clone();
    let config = NetworkConfig::from_slice(plugin.to_string().as_bytes())
        .map_err(|e| format!("the {} plugin's config: {e}", cell.name()))?;
    let e = |e: &dyn std::fmt::Display| format!("the {} plugin's config: {e}", cell.name());
    Ok(match cell.chain {
        PluginChain::Ptp => PtpConf::load(&config).map_err(|x| e(&x))?.dad(),
        PluginChain::Macvlan => MacvlanConf::load(&config, "").map_err(|x| e(&x))?.dad(),
        PluginChain::Ipvlan => IpvlanConf::load(&config).map_err(|x| e(&x))?.dad(),
        _ => BridgeConf::load(&config, "").map_err(|x| e(&x))?.dad(),
    })
}

impl Node {
    fn new(cell: MatrixCell, tag: &str, state: &std::path::Path) -> Fallible<Node> {
        let host = Handle::current().map_err(kernel)?;
        let subnets = cell
            .pod_subnets(tag)
            .iter()
            .map(|s| parse(s))
            .collect::<Fallible<Vec<_>>>()?;
        let networks = if cell.chain == PluginChain::Flannel {
            cell.subnets(tag)
                .iter()
                .map(|s| parse(s))
                .collect::<Fallible<_>>()?
        } else {
            Vec::new()
        };
        let mut bridge = None;
        if cell.chain.on_bridge() {
            let b = host
                .ensure_bridge(&BridgeSpec {
                    name: MatrixCell::bridge_name(tag),
                    mtu: mtu(cell.chain),
                    vlan_filtering: cell.chain == PluginChain::BridgeVlan,
                    ..Default::default()
                })
                .map_err(kernel)?;
            host.set_up(b.index).map_err(kernel)?;
            // The gateways on the bridge (with `vlan`, Go's bridge puts
            // them on a `<bridge>.<vlan>` veth: made once per node, not
            // part of a pod's ADD either way).
            for net in &subnets {
                host.add_address(b.index, nth(*net, 1)?, AddressOptions::default())
                    .map_err(kernel)?;
            }
            bridge = Some(b);
        }
        let master = match cell.chain {
            PluginChain::Macvlan | PluginChain::Ipvlan => Some(
                host.link_by_name(&MatrixCell::macvlan_master(tag))
                    .map_err(kernel)?,
            ),
            _ => None,
        };
        Ok(Node {
            cell,
            fw: NativeFirewall::new(),
            bridge,
            master,
            subnets,
            networks,
            clock: PschedClock::read(),
            dad: plugin_dad(cell, tag, state)?,
        })
    }

    fn run(&self, pods: &[OwnedNetns], warm_up: bool, starts: bool) -> Fallible<FloorReport> {
        let mut steps: Vec<(&'static str, Samples)> = Vec::new();
        let mut report = FloorReport {
            add: Samples::default(),
            del: Samples::default(),
            del_fw: Samples::default(),
            del_link: Samples::default(),
            steps: Vec::new(),
            starts: Samples::default(),
        };
        let mut attached = Vec::with_capacity(pods.len());
        for (i, pod_ns) in pods.iter().enumerate() {
            if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
                return Err("interrupted".into());
            }
            let timed = !(warm_up && i == 0);
            let mut laps = [0.0; STEPS.len()];
            let t = Instant::now();
            let a = self.attach(i, pod_ns, &mut laps)?;
            let took = t.elapsed().as_secs_f64();
            attached.push(a);
            if !timed {
                continue;
            }
            report.add.0.push(took);
            for (k, lap) in laps.iter().enumerate() {
                if *lap > 0.0 {
                    match steps.iter_mut().find(|(n, _)| *n == STEPS[k]) {
                        Some((_, s)) => s.0.push(*lap),
                        None => steps.push((STEPS[k], Samples(vec![*lap]))),
                    }
                }
            }
            if starts {
                let t = Instant::now();
                for _ in 0..2 {
                    std::process::Command::new("/bin/true")
                        .status()
                        .map_err(|e| format!("/bin/true: {e}"))?;
                }
                report.starts.0.push(t.elapsed().as_secs_f64());
            }
        }
        // The warm-up attachment goes last.
        if warm_up && !attached.is_empty() {
            attached.rotate_left(1);
        }
        let order: Vec<usize> = if warm_up && !pods.is_empty() {
            (1..pods.len()).chain([0]).collect()
        } else {
            (0..pods.len()).collect()
        };
        for (k, a) in order.into_iter().zip(attached) {
            let timed = !(warm_up && k == 0);
            let (fw, link, total) = self.detach(&pods[k], a)?;
            if timed {
                report.del_fw.0.push(fw);
                report.del_link.0.push(link);
                report.del.0.push(total);
            }
        }
        report.steps = steps;
        Ok(report)
    }

    /// One ADD's kernel requests for pod `i`; each step's time in `laps`
    /// (by [`STEPS`] index; 0 for a step the chain has not).
    fn attach(
        &self,
        i: usize,
        pod_ns: &OwnedNetns,
        laps: &mut [f64; STEPS.len()],
    ) -> Fallible<Attached> {
        let chain = self.cell.chain;
        let mut lap = Instant::now();
        let mut step = |k: usize| {
            let now = Instant::now();
            laps[k] += (now - lap).as_secs_f64().max(1e-9);
            lap = now;
        };
        let pod = Handle::in_netns(pod_ns.netns()).map_err(kernel)?;
        let host = Handle::current().map_err(kernel)?;
        let (v4, v6) = (self.cell.stack.has_v4(), self.cell.stack.has_v6());
        let mut host_veth = None;
        let pod_link = if let Some(bridge) = &self.bridge {
            let hv = host
                .setup_veth_with(&VethSpec {
                    peer_name: "eth0".into(),
                    peer_netns: Some(pod_ns.netns()),
                    mtu: mtu(chain),
                    up: true,
                    master: Some(bridge.index),
                    ..Default::default()
                })
                .map_err(kernel)?;
            let eth0 = hv.parent_index.ok_or("veth without peer index")?;
            step(0);
            let _ = host.sysctl_set(&sysctl::accept_ra(&bridge.name), "0");
            host.enable_forwarding(v4, v6).map_err(kernel)?;
            // The bridge's pod settings: its DAD (before the link comes
            // up), ARP notifications.
            set_dad(&pod, "eth0", self.dad);
            let _ = pod.set_ipv4_conf(eth0, &[(Ipv4Conf::ArpNotify, 1)]);
            if chain == PluginChain::Flannel {
                host.set_bridge_port(
                    hv.index,
                    &BridgePortOptions {
                        hairpin: Some(true),
                        ..Default::default()
                    },
                )
                .map_err(kernel)?;
            }
            if chain == PluginChain::BridgeVlan {
                host.del_bridge_vlans(hv.index, &[BridgeVlan::tagged(1)], false)
                    .map_err(kernel)?;
                host.add_bridge_vlans(hv.index, &[BridgeVlan::native(100)], false)
                    .map_err(kernel)?;
            }
            // portmap's `route_localnet` on the bridge.
            let _ = host.set_ipv4_conf(bridge.index, &[(Ipv4Conf::RouteLocalnet, 1)]);
            pod.set_up(eth0).map_err(kernel)?;
            step(1);
            host_veth = Some(hv);
            eth0
        } else if let Some(master) = &self.master {
            let tmp = format!("tmp{i:05}");
            if chain == PluginChain::Ipvlan {
                host.add_ipvlan(&IpvlanSpec {
                    name: tmp.clone(),
                    parent: master.index,
                    mode: IpvlanMode::L2,
                    mtu: None,
                    netns: Some(pod_ns.netns()),
                })
            } else {
                host.add_macvlan(&MacvlanSpec {
                    name: tmp.clone(),
                    parent: master.index,
                    mode: MacvlanMode::Bridge,
                    mtu: None,
                    mac: None,
                    netns: Some(pod_ns.netns()),
                })
            }
            .map_err(kernel)?;
            let link = pod.link_by_name(&tmp).map_err(kernel)?;
            pod.rename(link.index, "eth0").map_err(kernel)?;
            step(0);
            let _ = pod.set_ipv4_conf(link.index, &[(Ipv4Conf::ArpNotify, 1)]);
            let _ = pod.sysctl_set("net/ipv6/conf/eth0/ndisc_notify", "1");
            step(1);
            link.index
        } else {
            // ptp
            host.enable_forwarding(v4, v6).map_err(kernel)?;
            let hv = host
                .setup_veth("eth0", pod_ns.netns(), None, None)
                .map_err(kernel)?;
            let eth0 = pod.link_by_name("eth0").map_err(kernel)?;
            step(0);
            host_veth = Some(hv);
            eth0.index
        };
        let addresses: Vec<(IpNetwork, Option<IpAddr>)> = self
            .subnets
            .iter()
            .map(|net| Ok((nth(*net, 2 + i)?, Some(nth(*net, 1)?.ip()))))
            .collect::<Fallible<_>>()?;
        let mut routes: Vec<KernelRoute> = addresses
            .iter()
            .map(|(a, _)| {
                let any = if a.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
                parse(any).map(KernelRoute::new)
            })
            .collect::<Fallible<_>>()?;
        routes.extend(self.networks.iter().map(|n| KernelRoute::new(*n)));
        // The bridge set its DAD above and configures with the
        // namespace's; the others configure with theirs.
        let dad = if chain.on_bridge() {
            Dad::Kernel
        } else {
            self.dad
        };
        configure_interface_with(&pod, "eth0", &addresses, &routes, dad).map_err(kernel)?;
        step(2);
        if chain == PluginChain::Ptp {
            let container = pod.link_by_index(pod_link).map_err(kernel)?;
            let hv = host_veth.as_ref().ok_or("ptp without a veth")?;
            for &(address, gw) in &addresses {
                let gw = gw.ok_or("no gateway")?;
                cni_plugins::ptp::point_to_point(&pod, &container, address, gw)
                    .map_err(|e| e.to_string())?;
                cni_plugins::ptp::gateway_on_host(&host, hv, address, gw, self.dad)
                    .map_err(|e| e.to_string())?;
            }
            step(3);
        }
        let mut somaxconn = None;
        if chain == PluginChain::BridgeTuned {
            let key = "net/core/somaxconn";
            somaxconn = pod.sysctl_get(key).map_err(kernel)?;
            pod.sysctl_set(key, "1024").map_err(kernel)?;
            step(4);
        }
        let mut rules = Vec::new();
        let pod_addresses: Vec<IpNetwork> = addresses.iter().map(|(a, _)| *a).collect();
        let id = AttachmentId::new("floor", format!("floor-{i:05}"), "eth0");
        let masquerade = matches!(
            chain,
            PluginChain::Bridge
                | PluginChain::BridgeTuned
                | PluginChain::BridgeVlan
                | PluginChain::BridgeTwoRanges
                | PluginChain::Ptp
        );
        if masquerade {
            let masq = RuleSpec::Masquerade(MasqueradeSpec {
                attachment: id.clone(),
                addresses: pod_addresses.clone(),
            });
            self.fw.add(&masq).map_err(kernel)?;
            rules.push(masq);
            step(5);
        }
        if chain.on_bridge() {
            let mut pm = PortMappingSpec::new(id);
            for a in &pod_addresses {
                match a {
                    IpNetwork::V4(n) => pm.container_v4 = Some(*n),
                    IpNetwork::V6(n) => pm.container_v6 = Some(*n),
                }
            }
            pm.mappings = vec![HostPortMapping {
                host_port: u16::try_from(20000 + i).map_err(|e| e.to_string())?,
                container_port: 80,
                protocol: Protocol::Tcp,
                host_ip: None,
            }];
            let pm = RuleSpec::PortMappings(pm);
            self.fw.add(&pm).map_err(kernel)?;
            rules.push(pm);
            step(6);
        }
        let mut ifb = None;
        if chain == PluginChain::BridgeTuned {
            // Kubernetes' annotations as `pod_capability_args` gives them:
            // 100 Mbit/s each way, bursts of 1 MB.
            let hv = host_veth.as_ref().ok_or("bandwidth without a veth")?;
            let tbf = Tbf::from_rate_and_burst(100_000_000, 8_000_000, self.clock);
            host.add_tbf(hv.index, &tbf).map_err(kernel)?;
            let dev = host
                .add_ifb(&format!("bwfloor{i:05}"), hv.mtu, None)
                .map_err(kernel)?;
            host.add_ingress_qdisc(hv.index).map_err(kernel)?;
            host.add_redirect_filter(hv.index, dev.index, RedirectFilterKind::U32GoCompatible)
                .map_err(kernel)?;
            host.add_tbf(dev.index, &tbf).map_err(kernel)?;
            ifb = Some(dev.index);
            step(7);
        }
        if let (Some(hv), true) = (&host_veth, chain.on_bridge()) {
            // The bridge's (and Go's) wait for the host end to be
            // operationally up: the kernel's linkwatch work, asynchronous
            // to the requests above, polled as the bridge polls.
            let up = host
                .wait_oper_up(hv.index, Duration::from_secs(3))
                .map_err(kernel)?;
            if up.oper_state != OperState::Up {
                return Err("the host end of the veth never came up".into());
            }
            step(8);
        }
        Ok(Attached {
            host_veth: host_veth.map(|l| l.index),
            pod_link,
            rules,
            ifb,
            somaxconn,
        })
    }

    /// One DEL's kernel requests: (firewall, link, total) seconds. As our
    /// plugins do, the link's deletion (10-30 ms of RCU grace periods) runs
    /// while the rest is removed.
    fn detach(&self, pod_ns: &OwnedNetns, a: Attached) -> Fallible<(f64, f64, f64)> {
        let t = Instant::now();
        let pod = Handle::in_netns(pod_ns.netns()).map_err(kernel)?;
        let host = Handle::current().map_err(kernel)?;
        if let (Some(_), Some(hv)) = (a.ifb, a.host_veth) {
            host.delete_qdisc(hv, tc::HANDLE_ROOT).map_err(kernel)?;
            host.delete_qdisc(hv, tc::HANDLE_INGRESS).map_err(kernel)?;
        }
        let delete_link = || {
            let t = Instant::now();
            match a.host_veth {
                Some(hv) => host.delete_link(hv),
                None => pod.delete_link(a.pod_link),
            }
            .map_err(kernel)?;
            Ok::<_, String>(t.elapsed().as_secs_f64())
        };
        let rest = || {
            let t = Instant::now();
            for r in a.rules.iter().rev() {
                self.fw.delete(r).map_err(kernel)?;
            }
            let fw = t.elapsed().as_secs_f64();
            if let Some(dev) = a.ifb {
                host.delete_link(dev).map_err(kernel)?;
            }
            if let Some(v) = &a.somaxconn {
                pod.sysctl_set("net/core/somaxconn", v.trim())
                    .map_err(kernel)?;
            }
            Ok::<_, String>(fw)
        };
        let (link, fw) = std::thread::scope(|s| {
            let link = s.spawn(delete_link);
            let fw = rest();
            (
                link.join()
                    .unwrap_or_else(|_| Err("link deletion panicked".into())),
                fw,
            )
        });
        Ok((fw?, link?, t.elapsed().as_secs_f64()))
    }
}
