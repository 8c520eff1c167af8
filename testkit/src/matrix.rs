//! The configuration matrix of real-world nodes (issue #29): IP stacks
//! {IPv4, dual-stack, IPv6-only} x plugin chains {bridge + host-local +
//! portmap, the same + tuning + bandwidth, ptp + host-local, macvlan +
//! host-local}, each written as users write it (a cniVersion 1.0.0
//! conflist; bridge with `isGateway` and `ipMasq`; host-local ranges with
//! a default route per family; portmap and bandwidth through their
//! capabilities; tuning with a sysctl; ptp with `ipMasq`; macvlan in mode
//! bridge on a link of the node). The end-to-end benchmark (`e2e
//! --matrix`) and the leak census test run the same cells.
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

use cni_netns::{Handle, Netns, VethSpec};
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
}

impl PluginChain {
    /// Every chain, in table order.
    pub const ALL: [PluginChain; 4] = [
        PluginChain::Bridge,
        PluginChain::BridgeTuned,
        PluginChain::Ptp,
        PluginChain::Macvlan,
    ];

    /// The short name: `bridge`, `bridge-tb`, `ptp`, `macvlan`.
    pub fn name(self) -> &'static str {
        match self {
            PluginChain::Bridge => "bridge",
            PluginChain::BridgeTuned => "bridge-tb",
            PluginChain::Ptp => "ptp",
            PluginChain::Macvlan => "macvlan",
        }
    }

    /// The plugins, in order, for tables.
    pub fn label(self) -> &'static str {
        match self {
            PluginChain::Bridge => "bridge+host-local+portmap",
            PluginChain::BridgeTuned => "bridge+host-local+portmap+tuning+bandwidth",
            PluginChain::Ptp => "ptp+host-local",
            PluginChain::Macvlan => "macvlan+host-local",
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
        }
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
    /// wait for their IPv6 addresses to leave the tentative state. Ours do
    /// not (ptp turns DAD off on its veth, macvlan uses optimistic DAD).
    pub fn waits_for_dad(self) -> bool {
        self.stack.has_v6() && matches!(self.chain, PluginChain::Ptp | PluginChain::Macvlan)
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

    /// The cell's subnets for `tag` (up to 6 hex digits: a run's random
    /// tag, which also picks the subnets): an IPv4 /16 in 10.128.0.0/9
    /// and an IPv6 /64 in fd00::/8, as the stack has them.
    pub fn subnets(self, tag: &str) -> Vec<String> {
        let t = u32::from_str_radix(tag, 16).unwrap_or(0) & 0xff_ffff;
        let mut out = Vec::new();
        if self.stack.has_v4() {
            out.push(format!("10.{}.0.0/16", 128 + (t % 8) * 16 + self.index()));
        }
        if self.stack.has_v6() {
            out.push(format!(
                "fd{:02x}:{:04x}:{:x}::/64",
                t >> 16,
                t & 0xffff,
                self.index()
            ));
        }
        out
    }

    /// The conflist as JSON (for callers that change a key first): network
    /// `bench-<tag>`, bridge `cb<tag>`, host-local's `dataDir` at
    /// `<state>/ipam`, tuning's at `<state>/tuning` (not /run/cni/tuning).
    pub fn conflist_json(self, tag: &str, state: &Path) -> Value {
        let default_route = |subnet: &String| {
            if subnet.contains(':') {
                json!({"dst": "::/0"})
            } else {
                json!({"dst": "0.0.0.0/0"})
            }
        };
        let subnets = self.subnets(tag);
        let ipam = json!({
            "type": "host-local",
            "dataDir": state.join("ipam"),
            "ranges": subnets.iter().map(|s| json!([{"subnet": s}])).collect::<Vec<_>>(),
            "routes": subnets.iter().map(default_route).collect::<Vec<_>>(),
        });
        let bridge = json!({"type": "bridge", "bridge": Self::bridge_name(tag),
            "isGateway": true, "ipMasq": true, "ipam": ipam});
        let portmap = json!({"type": "portmap", "capabilities": {"portMappings": true}});
        let plugins = match self.chain {
            PluginChain::Bridge => vec![bridge, portmap],
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

    /// What the cell needs in the node namespace before its first pod:
    /// macvlan's master, one end (`mv<tag>`) of a veth pair whose ends are
    /// both up. Nothing for the other chains.
    pub fn prepare_node(self, tag: &str, node: &Netns) -> Result<(), Error> {
        if self.chain != PluginChain::Macvlan {
            return Ok(());
        }
        let op = || format!("make macvlan's master {}", Self::macvlan_master(tag));
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
        let mut seen = std::collections::HashSet::new();
        for cell in MatrixCell::all() {
            let parsed = cell.conflist("a1b2c3", Path::new("/state"));
            assert!(parsed.is_ok(), "{}: {parsed:?}", cell.name());
            let subnets = cell.subnets("a1b2c3");
            let want = usize::from(cell.stack.has_v4()) + usize::from(cell.stack.has_v6());
            assert_eq!(subnets.len(), want);
            for s in &subnets {
                let (addr, len) = s.split_once('/').unwrap();
                assert!(addr.parse::<std::net::IpAddr>().is_ok(), "{s}");
                assert!(len.parse::<u8>().is_ok(), "{s}");
                assert!(seen.insert(s.clone()), "{s} twice");
            }
            let v = cell.conflist_json("a1b2c3", Path::new("/state"));
            let ipam = &v["plugins"][0]["ipam"];
            assert_eq!(ipam["routes"].as_array().map(Vec::len), Some(want));
            assert_eq!(ipam["dataDir"], "/state/ipam");
        }
    }
}
