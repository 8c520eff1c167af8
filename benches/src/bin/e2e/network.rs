//! The networks the benchmark attaches pods to: an address family and a
//! plugin chain, written as users write them (cniVersion 1.0.0 conflists,
//! host-local ranges with a default route per family). Every mode, the
//! burst, the GC and the matrix build their conflist here.

use std::path::Path;

use cni_netns::{Handle, OwnedNetns, VethSpec};
use cni_types::NetworkConfigList;

use super::Fallible;

/// The address families of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Family {
    V4,
    DualStack,
    V6,
}

impl Family {
    pub(crate) const ALL: [Family; 3] = [Family::V4, Family::DualStack, Family::V6];

    /// The short name `--families` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::DualStack => "ds",
            Family::V6 => "v6",
        }
    }

    /// The name in tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::DualStack => "dual-stack",
            Family::V6 => "IPv6-only",
        }
    }

    pub(crate) fn parse(s: &str) -> Fallible<Family> {
        Family::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown family {s:?} (v4, ds, v6)"))
    }

    fn has_v4(self) -> bool {
        self != Family::V6
    }

    fn has_v6(self) -> bool {
        self != Family::V4
    }
}

/// The plugin chains of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Chain {
    /// bridge (isGateway, ipMasq) + host-local + portmap.
    Bridge,
    /// The same + tuning (a sysctl) + bandwidth (capability).
    BridgeTuned,
    /// ptp (ipMasq) + host-local.
    Ptp,
    /// macvlan (mode bridge, on a veth of the node) + host-local.
    Macvlan,
}

impl Chain {
    pub(crate) const ALL: [Chain; 4] = [
        Chain::Bridge,
        Chain::BridgeTuned,
        Chain::Ptp,
        Chain::Macvlan,
    ];

    /// The short name `--chains` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Chain::Bridge => "bridge",
            Chain::BridgeTuned => "bridge-tb",
            Chain::Ptp => "ptp",
            Chain::Macvlan => "macvlan",
        }
    }

    /// The plugins, in order, for tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Chain::Bridge => "bridge+host-local+portmap",
            Chain::BridgeTuned => "bridge+host-local+portmap+tuning+bandwidth",
            Chain::Ptp => "ptp+host-local",
            Chain::Macvlan => "macvlan+host-local",
        }
    }

    pub(crate) fn parse(s: &str) -> Fallible<Chain> {
        Chain::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown chain {s:?} (bridge, bridge-tb, ptp, macvlan)"))
    }

    /// The plugin binaries the chain runs (the first one is the one whose
    /// absence from a directory skips a run).
    pub(crate) fn plugins(self) -> &'static [&'static str] {
        match self {
            Chain::Bridge => &["bridge", "host-local", "portmap"],
            Chain::BridgeTuned => &["bridge", "host-local", "portmap", "tuning", "bandwidth"],
            Chain::Ptp => &["ptp", "host-local"],
            Chain::Macvlan => &["macvlan", "host-local"],
        }
    }
}

/// One network: a family and a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Network {
    pub(crate) family: Family,
    pub(crate) chain: Chain,
}

/// The macvlan chain's master: one end of a veth pair made in the node.
fn macvlan_master(tag: &str) -> String {
    format!("mv{tag}")
}

impl Network {
    /// The network of the modes, the scaling, the floor's comparison and
    /// the GC: IPv4, bridge + host-local + portmap.
    pub(crate) const BENCH: Network = Network {
        family: Family::V4,
        chain: Chain::Bridge,
    };

    /// `v4/bridge`.
    pub(crate) fn name(self) -> String {
        format!("{}/{}", self.family.name(), self.chain.name())
    }

    /// This network's position in the matrix: it makes its subnets differ
    /// from every other cell's of the same run.
    fn index(self) -> u32 {
        let f = Family::ALL.iter().position(|f| *f == self.family);
        let c = Chain::ALL.iter().position(|c| *c == self.chain);
        (f.unwrap_or(0) * Chain::ALL.len() + c.unwrap_or(0)) as u32
    }

    /// host-local's ranges and default routes: an IPv4 /16 and an IPv6
    /// /64 that differ by cell, and by run through the run's tag.
    fn ipam(self, tag: &str, ipam_dir: &Path) -> serde_json::Value {
        let t = u32::from_str_radix(tag, 16).unwrap_or(0);
        let (mut ranges, mut routes) = (Vec::new(), Vec::new());
        if self.family.has_v4() {
            let second = 128 + (t % 8) * 16 + self.index();
            ranges.push(serde_json::json!([{"subnet": format!("10.{second}.0.0/16")}]));
            routes.push(serde_json::json!({"dst": "0.0.0.0/0"}));
        }
        if self.family.has_v6() {
            let subnet = format!(
                "fd{:02x}:{:04x}:{:x}::/64",
                (t >> 16) & 0xff,
                t & 0xffff,
                self.index()
            );
            ranges.push(serde_json::json!([{ "subnet": subnet }]));
            routes.push(serde_json::json!({"dst": "::/0"}));
        }
        serde_json::json!({"type": "host-local", "dataDir": ipam_dir,
                           "ranges": ranges, "routes": routes})
    }

    /// The conflist as JSON (for callers that change a key first), state
    /// under `state` (host-local's `ipam`, tuning's `tuning`).
    pub(crate) fn conflist_json(self, tag: &str, state: &Path) -> serde_json::Value {
        let ipam = self.ipam(tag, &state.join("ipam"));
        let bridge = serde_json::json!({"type": "bridge", "bridge": format!("cb{tag}"),
            "isGateway": true, "ipMasq": true, "ipam": ipam});
        let portmap =
            serde_json::json!({"type": "portmap", "capabilities": {"portMappings": true}});
        let plugins = match self.chain {
            Chain::Bridge => vec![bridge, portmap],
            Chain::BridgeTuned => vec![
                bridge,
                portmap,
                // tuning's backups in the run's state, not /run/cni/tuning.
                serde_json::json!({"type": "tuning", "sysctl": {"net.core.somaxconn": "1024"},
                                   "dataDir": state.join("tuning")}),
                serde_json::json!({"type": "bandwidth", "capabilities": {"bandwidth": true}}),
            ],
            Chain::Ptp => vec![serde_json::json!({"type": "ptp", "ipMasq": true, "ipam": ipam})],
            Chain::Macvlan => vec![serde_json::json!({"type": "macvlan",
                "master": macvlan_master(tag), "mode": "bridge", "ipam": ipam})],
        };
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": format!("bench-{tag}"),
            "plugins": plugins,
        })
    }

    /// The conflist, state under `state`.
    pub(crate) fn conflist(self, tag: &str, state: &Path) -> Fallible<NetworkConfigList> {
        let v = self.conflist_json(tag, state);
        NetworkConfigList::from_slice(v.to_string().as_bytes()).map_err(|e| e.to_string())
    }

    /// What the network needs in the node before its first pod: macvlan's
    /// master link (one end of a veth pair, both ends up).
    pub(crate) fn prepare_node(self, tag: &str, node: &OwnedNetns) -> Fallible<()> {
        if self.chain != Chain::Macvlan {
            return Ok(());
        }
        let e = |e: cni_netns::Error| e.to_string();
        let h = Handle::in_netns(node.netns()).map_err(e)?;
        let master = h
            .add_veth(&VethSpec {
                name: macvlan_master(tag),
                peer_name: format!("mp{tag}"),
                up: true,
                ..Default::default()
            })
            .map_err(e)?;
        let peer = h.link_by_name(&format!("mp{tag}")).map_err(e)?;
        h.set_up(peer.index).map_err(e)?;
        h.set_up(master.index).map_err(e)
    }
}
