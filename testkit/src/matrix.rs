//! The configuration matrix of real-world nodes (issues #29, #38): IP
//! stacks {IPv4, dual-stack, IPv6-only} x plugin chains {bridge +
//! host-local + portmap, the same + tuning + bandwidth, ptp + host-local,
//! macvlan + host-local, ipvlan + host-local, bridge with `vlan`, bridge
//! with two host-local ranges per family, flannel delegating to bridge +
//! portmap}, each written as users write it (a cniVersion 1.0.0 conflist;
//! bridge with `isGateway` and `ipMasq`; host-local ranges with a default
//! route per family; portmap and bandwidth through their capabilities;
//! tuning with a sysctl; ptp with `ipMasq`; macvlan in mode bridge and
//! ipvlan in mode l2 on a link of the node; flannel with the `subnet.env`
//! that [`MatrixCell::prepare_state`] writes in the run's state directory,
//! never /run/flannel). The end-to-end benchmark (`e2e --matrix`) and the
//! leak census test run the same cells; [`PluginChain::kernel_lacks`] says
//! which chains this kernel cannot run.
//!
//! ```
//! use cni_testkit::matrix::{IpStack, MatrixCell, PluginChain};
//!
//! let cell = MatrixCell { stack: IpStack::DualStack, chain: PluginChain::Ptp };
//! assert_eq!(cell.name(), "ds/ptp");
//! let conf = cell.conflist_json("0a1b2c", std::path::Path::new("/tmp/state"));
//! assert_eq!(conf["plugins"][0]["type"], "ptp");
//! assert_eq!(conf["plugins"][0]["ipam"]["ranges"].as_array().map(Vec::len), Some(2));
//! assert!(cell.waits_for_dad());
//! ```

use std::path::Path;

use cni_netns::{BridgeSpec, Handle, IpvlanMode, IpvlanSpec, Netns, OwnedNetns, VethSpec};
use cni_types::NetworkConfigList;
use serde_json::{json, Map, Value};

use crate::Error;

/// The address families of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpStack {
    /// IPv4 only.
    V4,
    /// IPv4 and IPv6.
    DualStack,
    /// IPv6 only.
    V6,
}

impl IpStack {
    /// Every stack, in table order.
    pub const ALL: [IpStack; 3] = [IpStack::V4, IpStack::DualStack, IpStack::V6];

    /// The short name: `v4`, `ds`, `v6`.
    pub fn name(self) -> &'static str {
        match self {
            IpStack::V4 => "v4",
            IpStack::DualStack => "ds",
            IpStack::V6 => "v6",
        }
    }

    /// The name in tables: `IPv4`, `dual-stack`, `IPv6-only`.
    pub fn label(self) -> &'static str {
        match self {
            IpStack::V4 => "IPv4",
            IpStack::DualStack => "dual-stack",
            IpStack::V6 => "IPv6-only",
        }
    }

    /// The stack of a short name.
    pub fn parse(s: &str) -> Option<IpStack> {
        IpStack::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Whether the cell's pods get an IPv4 address.
    pub fn has_v4(self) -> bool {
        self != IpStack::V6
    }

    /// Whether the cell's pods get an IPv6 address.
    pub fn has_v6(self) -> bool {
        self != IpStack::V4
    }
}

/// The plugin chains of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PluginChain {
    /// bridge (`isGateway`, `ipMasq`) + host-local + portmap.
    Bridge,
    /// The same + tuning (`net.core.somaxconn`) + bandwidth (capability).
    BridgeTuned,
    /// ptp (`ipMasq`) + host-local.
    Ptp,
    /// macvlan (mode bridge, on one end of a veth pair of the node) +
    /// host-local.
    Macvlan,
    /// ipvlan (mode l2, on the same kind of master as macvlan) +
    /// host-local.
    Ipvlan,
    /// [`PluginChain::Bridge`] with the bridge's `vlan` (100): VLAN
    /// filtering on the bridge, the pod's port in VLAN 100.
    BridgeVlan,
    /// [`PluginChain::Bridge`] with two host-local ranges per family (one
    /// range set per family): a small first range (8 addresses) the pods
    /// fill, then the second.
    BridgeTwoRanges,
    /// flannel delegating to bridge (flannel's defaults: `isGateway`,
    /// `hairpinMode`, `isDefaultGateway`, the MTU of `subnet.env`, no
    /// `ipMasq` as flanneld masquerades) + portmap.
    Flannel,
}

impl PluginChain {
    /// Every chain, in table order.
    pub const ALL: [PluginChain; 8] = [
        PluginChain::Bridge,
        PluginChain::BridgeTuned,
        PluginChain::Ptp,
        PluginChain::Macvlan,
        PluginChain::Ipvlan,
        PluginChain::BridgeVlan,
        PluginChain::BridgeTwoRanges,
        PluginChain::Flannel,
    ];

    /// The short name: `bridge`, `bridge-tb`, `ptp`, `macvlan`, `ipvlan`,
    /// `bridge-vlan`, `bridge-2r`, `flannel`.
    pub fn name(self) -> &'static str {
        match self {
            PluginChain::Bridge => "bridge",
            PluginChain::BridgeTuned => "bridge-tb",
            PluginChain::Ptp => "ptp",
            PluginChain::Macvlan => "macvlan",
            PluginChain::Ipvlan => "ipvlan",
            PluginChain::BridgeVlan => "bridge-vlan",
            PluginChain::BridgeTwoRanges => "bridge-2r",
            PluginChain::Flannel => "flannel",
        }
    }

    /// Every short name, comma-separated (for usage lines).
    pub fn names() -> String {
        PluginChain::ALL.map(PluginChain::name).join(",")
    }

    /// The plugins, in order, for tables.
    pub fn label(self) -> &'static str {
        match self {
            PluginChain::Bridge => "bridge+host-local+portmap",
            PluginChain::BridgeTuned => "bridge+host-local+portmap+tuning+bandwidth",
            PluginChain::Ptp => "ptp+host-local",
            PluginChain::Macvlan => "macvlan+host-local",
            PluginChain::Ipvlan => "ipvlan+host-local",
            PluginChain::BridgeVlan => "bridge(vlan)+host-local+portmap",
            PluginChain::BridgeTwoRanges => "bridge+host-local(2 ranges/family)+portmap",
            PluginChain::Flannel => "flannel(bridge+host-local)+portmap",
        }
    }

    /// The chain of a short name.
    pub fn parse(s: &str) -> Option<PluginChain> {
        PluginChain::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The plugin binaries the chain runs.
    pub fn plugins(self) -> &'static [&'static str] {
        match self {
            PluginChain::Bridge => &["bridge", "host-local", "portmap"],
            PluginChain::BridgeTuned => &["bridge", "host-local", "portmap", "tuning", "bandwidth"],
            PluginChain::Ptp => &["ptp", "host-local"],
            PluginChain::Macvlan => &["macvlan", "host-local"],
            PluginChain::Ipvlan => &["ipvlan", "host-local"],
            PluginChain::BridgeVlan | PluginChain::BridgeTwoRanges => {
                &["bridge", "host-local", "portmap"]
            }
            PluginChain::Flannel => &["flannel", "bridge", "host-local", "portmap"],
        }
    }

    /// The bridge chains: a veth on a bridge (flannel's delegate too).
    pub fn on_bridge(self) -> bool {
        matches!(
            self,
            PluginChain::Bridge
                | PluginChain::BridgeTuned
                | PluginChain::BridgeVlan
                | PluginChain::BridgeTwoRanges
                | PluginChain::Flannel
        )
    }

    /// Why this kernel cannot run the chain, found by trying what it
    /// needs in a throwaway namespace: an ipvlan link (ipvlan), a bridge
    /// with VLAN filtering (bridge with `vlan`). `None`: it can.
    pub fn kernel_lacks(self) -> Result<Option<String>, Error> {
        if !matches!(self, PluginChain::Ipvlan | PluginChain::BridgeVlan) {
            return Ok(None);
        }
        let op = || format!("probe the kernel for the {} chain", self.name());
        let kernel = |e: cni_netns::Error| Error::Kernel {
            op: op(),
            source: Box::new(e),
        };
        let ns = OwnedNetns::new("cnimatrix-probe").map_err(kernel)?;
        let h = Handle::in_netns(ns.netns()).map_err(kernel)?;
        let tried = if self == PluginChain::Ipvlan {
            let parent = h
                .add_veth(&VethSpec {
                    name: "probe0".into(),
                    peer_name: "probe1".into(),
                    ..Default::default()
                })
                .map_err(kernel)?;
            h.add_ipvlan(&IpvlanSpec {
                name: "probe2".into(),
                parent: parent.index,
                mode: IpvlanMode::L2,
                ..Default::default()
            })
            .map_err(|e| format!("the kernel has no ipvlan ({e})"))
        } else {
            h.ensure_bridge(&BridgeSpec {
                name: "probe0".into(),
                vlan_filtering: true,
                ..Default::default()
            })
            .map(drop)
            .map_err(|e| format!("the kernel refuses bridge vlan_filtering ({e})"))
        };
        Ok(tried.err())
    }
}

/// One cell of the matrix: a stack and a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MatrixCell {
    /// The address families.
    pub stack: IpStack,
    /// The plugins.
    pub chain: PluginChain,
}

impl MatrixCell {
    /// Every cell, stack by stack.
    pub fn all() -> Vec<MatrixCell> {
        IpStack::ALL
            .into_iter()
            .flat_map(|stack| {
                PluginChain::ALL
                    .into_iter()
                    .map(move |chain| MatrixCell { stack, chain })
            })
            .collect()
    }

    /// `ds/ptp`.
    pub fn name(self) -> String {
        format!("{}/{}", self.stack.name(), self.chain.name())
    }

    /// Whether Go's ADD waits for the kernel's IPv6 duplicate address
    /// detection (1-2 s): Go's ptp and macvlan leave `accept_dad` on and
    /// wait for their IPv6 addresses to leave the tentative state (ipvlan
    /// too). Ours do not (ptp turns DAD off on its veth, macvlan and ipvlan
    /// use optimistic DAD).
    pub fn waits_for_dad(self) -> bool {
        self.stack.has_v6()
            && matches!(
                self.chain,
                PluginChain::Ptp | PluginChain::Macvlan | PluginChain::Ipvlan
            )
    }

    /// The cell's position in [`MatrixCell::all`]: its subnets differ
    /// from every other cell's.
    fn index(self) -> u32 {
        let s = IpStack::ALL.iter().position(|s| *s == self.stack);
        let c = PluginChain::ALL.iter().position(|c| *c == self.chain);
        (s.unwrap_or(0) * PluginChain::ALL.len() + c.unwrap_or(0)) as u32
    }

    /// The name of the bridge (bridge chains) for `tag`.
    pub fn bridge_name(tag: &str) -> String {
        format!("cb{tag}")
    }

    /// The name of macvlan's master in the node for `tag` (one end of a
    /// veth pair that [`MatrixCell::prepare_node`] makes).
    pub fn macvlan_master(tag: &str) -> String {
        format!("mv{tag}")
    }

    /// The second octet of the cell's IPv4 /16 and the first 48 bits of
    /// its IPv6 /64 (`fdXX:XXXX:X`), for `tag`.
    fn prefixes(self, tag: &str) -> (u32, String) {
        let t = u32::from_str_radix(tag, 16).unwrap_or(0) & 0xff_ffff;
        (
            128 + (t % 4) * 32 + self.index(),
            format!("fd{:02x}:{:04x}:{:x}", t >> 16, t & 0xffff, self.index()),
        )
    }

    /// The cell's subnets for `tag` (up to 6 hex digits: a run's random
    /// tag, which also picks the subnets): an IPv4 /16 in 10.128.0.0/9
    /// and an IPv6 /64 in fd00::/8, as the stack has them.
    pub fn subnets(self, tag: &str) -> Vec<String> {
        let (v4, v6) = self.prefixes(tag);
        let mut out = Vec::new();
        if self.stack.has_v4() {
            out.push(format!("10.{v4}.0.0/16"));
        }
        if self.stack.has_v6() {
            out.push(format!("{v6}::/64"));
        }
        out
    }

    /// The subnets the pods' addresses come from, within
    /// [`MatrixCell::subnets`]: flannel's node subnets (a /24 and a /80),
    /// the cell's subnets otherwise (both ranges of
    /// [`PluginChain::BridgeTwoRanges`] are in them). Their first address
    /// is the gateway.
    pub fn pod_subnets(self, tag: &str) -> Vec<String> {
        let (v4, v6) = self.prefixes(tag);
        let (a, b) = match self.chain {
            PluginChain::Flannel => (format!("10.{v4}.1.0/24"), format!("{v6}:0:1::/80")),
            _ => return self.subnets(tag),
        };
        let mut out = Vec::new();
        if self.stack.has_v4() {
            out.push(a);
        }
        if self.stack.has_v6() {
            out.push(b);
        }
        out
    }

    /// Flannel's `subnet.env` for the cell (MTU 1450, flanneld
    /// masquerading): the cell's subnets as the cluster's networks, its
    /// [`MatrixCell::pod_subnets`] as the node's.
    pub fn subnet_env(self, tag: &str) -> String {
        let (v4, v6) = self.prefixes(tag);
        let mut env = String::new();
        if self.stack.has_v4() {
            env += &format!("FLANNEL_NETWORK=10.{v4}.0.0/16\nFLANNEL_SUBNET=10.{v4}.1.1/24\n");
        }
        if self.stack.has_v6() {
            env += &format!("FLANNEL_IPV6_NETWORK={v6}::/64\nFLANNEL_IPV6_SUBNET={v6}:0:1::1/80\n");
        }
        env + "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    }

    /// The conflist as JSON (for callers that change a key first): network
    /// `bench-<tag>`, bridge `cb<tag>`, host-local's `dataDir` at
    /// `<state>/ipam`, tuning's at `<state>/tuning` (not /run/cni/tuning),
    /// flannel's `subnetFile` at `<state>/subnet.env` and its `dataDir` at
    /// `<state>/flannel` (not /run/flannel, /var/lib/cni/flannel).
    pub fn conflist_json(self, tag: &str, state: &Path) -> Value {
        let default_route = |subnet: &String| {
            if subnet.contains(':') {
                json!({"dst": "::/0"})
            } else {
                json!({"dst": "0.0.0.0/0"})
            }
        };
        let subnets = self.subnets(tag);
        let ranges: Vec<Value> = if self.chain == PluginChain::BridgeTwoRanges {
            // Per family, two ranges of the cell's subnet, as an operator
            // splits a node's pool: a first of 8 addresses (.2-.9), then
            // one from the upper half. One subnet, one gateway (its first
            // address): bridge's isGateway puts one address per family on
            // the bridge (two subnets in one range set would need two, and
            // both Go's bridge and ours refuse a second IPv4 one).
            let (v4, v6) = self.prefixes(tag);
            let mut r = Vec::new();
            if self.stack.has_v4() {
                let subnet = format!("10.{v4}.0.0/16");
                r.push(json!([
                    {"subnet": subnet, "rangeStart": format!("10.{v4}.0.2"), "rangeEnd": format!("10.{v4}.0.9")},
                    {"subnet": subnet, "rangeStart": format!("10.{v4}.128.1")},
                ]));
            }
            if self.stack.has_v6() {
                let subnet = format!("{v6}::/64");
                r.push(json!([
                    {"subnet": subnet, "rangeStart": format!("{v6}::2"), "rangeEnd": format!("{v6}::9")},
                    {"subnet": subnet, "rangeStart": format!("{v6}::8000:0:0:1")},
                ]));
            }
            r
        } else {
            subnets.iter().map(|s| json!([{"subnet": s}])).collect()
        };
        let ipam = json!({
            "type": "host-local",
            "dataDir": state.join("ipam"),
            "ranges": ranges,
            "routes": subnets.iter().map(default_route).collect::<Vec<_>>(),
        });
        let mut bridge = json!({"type": "bridge", "bridge": Self::bridge_name(tag),
            "isGateway": true, "ipMasq": true, "ipam": ipam});
        let portmap = json!({"type": "portmap", "capabilities": {"portMappings": true}});
        let plugins = match self.chain {
            PluginChain::Bridge | PluginChain::BridgeTwoRanges => vec![bridge, portmap],
            PluginChain::BridgeVlan => {
                bridge["vlan"] = json!(100);
                vec![bridge, portmap]
            }
            PluginChain::BridgeTuned => vec![
                bridge,
                portmap,
                json!({"type": "tuning", "sysctl": {"net.core.somaxconn": "1024"},
                       "dataDir": state.join("tuning")}),
                json!({"type": "bandwidth", "capabilities": {"bandwidth": true}}),
            ],
            PluginChain::Ptp => vec![json!({"type": "ptp", "ipMasq": true, "ipam": ipam})],
            PluginChain::Macvlan => vec![json!({"type": "macvlan",
                "master": Self::macvlan_master(tag), "mode": "bridge", "ipam": ipam})],
            PluginChain::Ipvlan => vec![json!({"type": "ipvlan",
                "master": Self::macvlan_master(tag), "mode": "l2", "ipam": ipam})],
            PluginChain::Flannel => vec![
                json!({"type": "flannel",
                    "subnetFile": state.join("subnet.env"),
                    "dataDir": state.join("flannel"),
                    "ipam": {"dataDir": state.join("ipam")},
                    "delegate": {"hairpinMode": true, "isDefaultGateway": true,
                                 "bridge": Self::bridge_name(tag)}}),
                portmap,
            ],
        };
        json!({"cniVersion": "1.0.0", "name": format!("bench-{tag}"), "plugins": plugins})
    }

    /// [`MatrixCell::conflist_json`], parsed.
    pub fn conflist(self, tag: &str, state: &Path) -> Result<NetworkConfigList, Error> {
        let v = self.conflist_json(tag, state);
        NetworkConfigList::from_slice(v.to_string().as_bytes()).map_err(|e| Error::Setup {
            op: format!("build the conflist of {}", self.name()),
            reason: e.to_string(),
        })
    }

    /// What the cell needs in its state directory before its first pod:
    /// flannel's `subnet.env` ([`MatrixCell::subnet_env`]). Nothing for
    /// the other chains.
    pub fn prepare_state(self, tag: &str, state: &Path) -> Result<(), Error> {
        if self.chain != PluginChain::Flannel {
            return Ok(());
        }
        let path = state.join("subnet.env");
        std::fs::write(&path, self.subnet_env(tag)).map_err(|source| Error::Io {
            op: format!("write {}", path.display()),
            source,
        })
    }

    /// What the cell needs in the node namespace before its first pod:
    /// macvlan's (and ipvlan's) master, one end (`mv<tag>`) of a veth pair
    /// whose ends are both up. Nothing for the other chains.
    pub fn prepare_node(self, tag: &str, node: &Netns) -> Result<(), Error> {
        if !matches!(self.chain, PluginChain::Macvlan | PluginChain::Ipvlan) {
            return Ok(());
        }
        let op = || format!("make the master {}", Self::macvlan_master(tag));
        let kernel = |e: cni_netns::Error| Error::Kernel {
            op: op(),
            source: Box::new(e),
        };
        let h = Handle::in_netns(node).map_err(kernel)?;
        let master = h
            .add_veth(&VethSpec {
                name: Self::macvlan_master(tag),
                peer_name: format!("mp{tag}"),
                up: true,
                ..Default::default()
            })
            .map_err(kernel)?;
        let peer = h.link_by_name(&format!("mp{tag}")).map_err(kernel)?;
        h.set_up(peer.index).map_err(kernel)?;
        h.set_up(master.index).map_err(kernel)
    }
}

/// The capability arguments a runtime passes for pod `i` (they reach the
/// plugins that declare the capability): one port mapping (host port
/// 20000 + `i` to 80/tcp) and Kubernetes' bandwidth annotations (100 Mbit/s
/// each way, bursts of 1 MB).
pub fn pod_capability_args(i: usize) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "portMappings".into(),
        json!([{"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"}]),
    );
    m.insert(
        "bandwidth".into(),
        json!({"ingressRate": 100_000_000u64, "ingressBurst": 8_000_000u64,
               "egressRate": 100_000_000u64, "egressBurst": 8_000_000u64}),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_has_its_own_subnets_and_a_default_route_per_family() {
        for tag in ["a1b2c3", "ffffff", "000000"] {
            let mut seen = std::collections::HashSet::new();
            for cell in MatrixCell::all() {
                let parsed = cell.conflist(tag, Path::new("/state"));
                assert!(parsed.is_ok(), "{}: {parsed:?}", cell.name());
                let subnets = cell.subnets(tag);
                let want = usize::from(cell.stack.has_v4()) + usize::from(cell.stack.has_v6());
                assert_eq!(subnets.len(), want);
                assert_eq!(cell.pod_subnets(tag).len(), want);
                for s in subnets.iter().chain(&cell.pod_subnets(tag)) {
                    let (addr, len) = s.split_once('/').unwrap();
                    assert!(addr.parse::<std::net::IpAddr>().is_ok(), "{s}");
                    assert!(len.parse::<u8>().is_ok(), "{s}");
                }
                for s in &subnets {
                    assert!(seen.insert(s.clone()), "{s} twice");
                }
                let v = cell.conflist_json(tag, Path::new("/state"));
                let first = &v["plugins"][0];
                if cell.chain == PluginChain::Flannel {
                    // flannel's delegate gets its ranges and routes from
                    // subnet.env.
                    assert_eq!(first["subnetFile"], "/state/subnet.env");
                    assert_eq!(first["ipam"]["dataDir"], "/state/ipam");
                    let env = cell.subnet_env(tag);
                    assert_eq!(env.contains("FLANNEL_SUBNET="), cell.stack.has_v4());
                    assert_eq!(env.contains("FLANNEL_IPV6_SUBNET="), cell.stack.has_v6());
                    continue;
                }
                let ipam = &first["ipam"];
                assert_eq!(ipam["routes"].as_array().map(Vec::len), Some(want));
                assert_eq!(ipam["ranges"].as_array().map(Vec::len), Some(want));
                assert_eq!(ipam["dataDir"], "/state/ipam");
            }
        }
    }
}
