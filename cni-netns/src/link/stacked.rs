//! Links stacked on a parent: macvlan, ipvlan and vlan.

use std::fmt;
use std::str::FromStr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVlan, IpVlanMode, LinkAttribute, LinkInfo,
    LinkMessage, MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;
use std::os::fd::AsRawFd;

use super::{info_data, MacAddr};
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::netns::Netns;

/// macvlan modes (`MACVLAN_MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MacvlanMode {
    /// No traffic between macvlans of the same parent.
    Private,
    /// Traffic between macvlans goes through the external switch.
    Vepa,
    /// Macvlans of the same parent talk directly (the CNI default).
    #[default]
    Bridge,
    /// One macvlan takes over the parent.
    Passthru,
}

impl FromStr for MacvlanMode {
    type Err = Error;
    /// Parses the macvlan plugin's `mode` (`""` means bridge, as in Go).
    fn from_str(s: &str) -> Result<MacvlanMode> {
        match s {
            "" | "bridge" => Ok(MacvlanMode::Bridge),
            "private" => Ok(MacvlanMode::Private),
            "vepa" => Ok(MacvlanMode::Vepa),
            "passthru" => Ok(MacvlanMode::Passthru),
            other => Err(Error::InvalidArgument {
                op: "parse macvlan mode".into(),
                reason: format!("unknown mode {other:?}"),
            }),
        }
    }
}

/// A macvlan to create with [`Handle::add_macvlan`].
///
/// `N` is what names the target namespace: a [`Netns`] for [`Handle`];
/// another [`NetnsHandle`](crate::kernel::NetnsHandle) has its own.
#[derive(Debug)]
pub struct MacvlanSpec<'a, N = Netns> {
    /// Name of the new link.
    pub name: String,
    /// Index of the parent (master) link, in the handle's namespace.
    pub parent: u32,
    /// Mode.
    pub mode: MacvlanMode,
    /// MTU.
    pub mtu: Option<u32>,
    /// MAC address.
    pub mac: Option<MacAddr>,
    /// Namespace the link is created in directly (by fd); `None` keeps it
    /// in the handle's namespace.
    pub netns: Option<&'a N>,
}

impl<N> Clone for MacvlanSpec<'_, N> {
    fn clone(&self) -> Self {
        MacvlanSpec {
            name: self.name.clone(),
            parent: self.parent,
            mode: self.mode,
            mtu: self.mtu,
            mac: self.mac,
            netns: self.netns,
        }
    }
}

impl<N> Default for MacvlanSpec<'_, N> {
    fn default() -> Self {
        MacvlanSpec {
            name: Default::default(),
            parent: Default::default(),
            mode: Default::default(),
            mtu: Default::default(),
            mac: Default::default(),
            netns: None,
        }
    }
}

/// The attributes every link stacked on a parent starts with, in the order
/// the kernel fixtures expect: name, parent, MTU, MAC, target namespace.
fn on_parent(
    name: &str,
    parent: u32,
    mtu: Option<u32>,
    mac: Option<MacAddr>,
    netns: Option<&Netns>,
) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_owned()));
    m.attributes.push(LinkAttribute::Link(parent));
    if let Some(mtu) = mtu {
        m.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(mac) = mac {
        m.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
    }
    if let Some(ns) = netns {
        m.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
    }
    m
}

pub(crate) fn macvlan_message(spec: &MacvlanSpec<'_>) -> LinkMessage {
    let mut m = on_parent(&spec.name, spec.parent, spec.mtu, spec.mac, spec.netns);
    let mode = match spec.mode {
        MacvlanMode::Private => MacVlanMode::Private,
        MacvlanMode::Vepa => MacVlanMode::Vepa,
        MacvlanMode::Bridge => MacVlanMode::Bridge,
        MacvlanMode::Passthru => MacVlanMode::Passthrough,
    };
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::MacVlan),
        LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(mode)])),
    ]));
    m
}

impl Handle {
    /// Creates a macvlan on `spec.parent`, directly in `spec.netns` when
    /// given (as Go's macvlan plugin does with `IFLA_NET_NS_FD`).
    pub fn add_macvlan(&self, spec: &MacvlanSpec<'_>) -> Result<()> {
        let span =
            cni_types::step_span!("link.create", link.kind = "macvlan", link.name = %spec.name);
        cni_types::trace::in_step(span, || {
            self.add_link_on_parent(
                "macvlan",
                &spec.name,
                spec.netns,
                spec.parent,
                macvlan_message(spec),
            )
        })
    }

    /// Creates a link stacked on `parent` (macvlan, ipvlan) from `message`,
    /// directly in `netns` when given; errors name the kind, the link, the
    /// namespace and the parent.
    pub(crate) fn add_link_on_parent(
        &self,
        kind: &str,
        name: &str,
        netns: Option<&Netns>,
        parent: u32,
        message: LinkMessage,
    ) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
            || self.on_parent_op(kind, name, netns, parent),
        )
        .map(drop)
    }

    /// "add `kind` `name` [in `netns`] on `parent`", for messages.
    pub(crate) fn on_parent_op(
        &self,
        kind: &str,
        name: &str,
        netns: Option<&Netns>,
        parent: u32,
    ) -> String {
        let ns = netns
            .map(|n| format!(" in {}", n.path().display()))
            .unwrap_or_default();
        format!("add {kind} {name}{ns} on {}", self.ifname_for(parent))
    }
}

/// ipvlan modes (`IPVLAN_MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpvlanMode {
    /// Layer 2: the slaves share the parent's MAC and see ARP (the CNI
    /// default).
    #[default]
    L2,
    /// Layer 3: the parent routes; no broadcast or multicast.
    L3,
    /// Layer 3 with netfilter ("symmetric").
    L3s,
}

impl FromStr for IpvlanMode {
    type Err = Error;
    /// Parses the ipvlan plugin's `mode` (`""` means l2, as in Go).
    fn from_str(s: &str) -> Result<IpvlanMode> {
        match s {
            "" | "l2" => Ok(IpvlanMode::L2),
            "l3" => Ok(IpvlanMode::L3),
            "l3s" => Ok(IpvlanMode::L3s),
            other => Err(Error::InvalidArgument {
                op: "parse ipvlan mode".into(),
                reason: format!("unknown mode {other:?}"),
            }),
        }
    }
}

impl fmt::Display for IpvlanMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpvlanMode::L2 => "l2",
            IpvlanMode::L3 => "l3",
            IpvlanMode::L3s => "l3s",
        })
    }
}

impl fmt::Display for MacvlanMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MacvlanMode::Private => "private",
            MacvlanMode::Vepa => "vepa",
            MacvlanMode::Bridge => "bridge",
            MacvlanMode::Passthru => "passthru",
        })
    }
}

/// An ipvlan to create with [`Handle::add_ipvlan`].
///
/// `N` is what names the target namespace: a [`Netns`] for [`Handle`];
/// another [`NetnsHandle`](crate::kernel::NetnsHandle) has its own.
#[derive(Debug)]
pub struct IpvlanSpec<'a, N = Netns> {
    /// Name of the new link.
    pub name: String,
    /// Index of the parent (master) link, in the handle's namespace.
    pub parent: u32,
    /// Mode.
    pub mode: IpvlanMode,
    /// MTU.
    pub mtu: Option<u32>,
    /// Namespace the link is created in directly (by fd); `None` keeps it
    /// in the handle's namespace.
    pub netns: Option<&'a N>,
}

impl<N> Clone for IpvlanSpec<'_, N> {
    fn clone(&self) -> Self {
        IpvlanSpec {
            name: self.name.clone(),
            parent: self.parent,
            mode: self.mode,
            mtu: self.mtu,
            netns: self.netns,
        }
    }
}

impl<N> Default for IpvlanSpec<'_, N> {
    fn default() -> Self {
        IpvlanSpec {
            name: Default::default(),
            parent: Default::default(),
            mode: Default::default(),
            mtu: Default::default(),
            netns: None,
        }
    }
}

pub(crate) fn ipvlan_message(spec: &IpvlanSpec<'_>) -> LinkMessage {
    let mut m = on_parent(&spec.name, spec.parent, spec.mtu, None, spec.netns);
    let mode = match spec.mode {
        IpvlanMode::L2 => IpVlanMode::L2,
        IpvlanMode::L3 => IpVlanMode::L3,
        IpvlanMode::L3s => IpVlanMode::L3S,
    };
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::IpVlan),
        LinkInfo::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(mode)])),
    ]));
    m
}

impl Handle {
    /// Creates an ipvlan on `spec.parent`, directly in `spec.netns` when
    /// given. A kernel without ipvlan ("Unknown device type") gives
    /// [`Error::Unsupported`].
    pub fn add_ipvlan(&self, spec: &IpvlanSpec<'_>) -> Result<()> {
        let span =
            cni_types::step_span!("link.create", link.kind = "ipvlan", link.name = %spec.name);
        cni_types::trace::in_step(span, || {
            let (name, netns, parent) = (&spec.name, spec.netns, spec.parent);
            self.add_link_on_parent("ipvlan", name, netns, parent, ipvlan_message(spec))
                .map_err(|e| {
                    self.unsupported(
                        self.on_parent_op("ipvlan", name, netns, parent),
                        "ipvlan",
                        e,
                    )
                })
        })
    }

    /// Sets a macvlan's broadcast queue length (`IFLA_MACVLAN_BC_QUEUE_LEN`,
    /// the macvlan plugin's `bcqueuelen`); the queue is shared by every
    /// macvlan of the parent and the kernel uses the largest request.
    pub fn set_macvlan_bc_queue_len(&self, index: u32, len: u32) -> Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::BcQueueLen(len)])),
        ]));
        let op = || format!("set bcqueuelen {len} on {}", self.ifname_for(index));
        self.request(RouteNetlinkMessage::NewLink(m), 0, op)
            .map(drop)
            .map_err(|e| self.unsupported(op(), "macvlan bcqueuelen", e))
    }
}

/// The largest VLAN id a VLAN link may carry (4095 is reserved by
/// 802.1Q; the kernel's `vlan_validate` refuses it).
pub const VLAN_ID_MAX: u16 = 4094;

/// An 802.1Q VLAN link to create with [`Handle::add_vlan`].
///
/// `N` is what names the target namespace: a [`Netns`] for [`Handle`];
/// another [`NetnsHandle`](crate::kernel::NetnsHandle) has its own.
#[derive(Debug)]
pub struct VlanSpec<'a, N = Netns> {
    /// Name of the new link.
    pub name: String,
    /// Index of the parent (master) link, in the handle's namespace.
    pub parent: u32,
    /// VLAN id (0..=[`VLAN_ID_MAX`]).
    pub vlan_id: u16,
    /// MTU; `None` inherits the parent's.
    pub mtu: Option<u32>,
    /// Namespace the link is created in directly (by fd); `None` keeps it
    /// in the handle's namespace.
    pub netns: Option<&'a N>,
}

impl<N> Clone for VlanSpec<'_, N> {
    fn clone(&self) -> Self {
        VlanSpec {
            name: self.name.clone(),
            parent: self.parent,
            vlan_id: self.vlan_id,
            mtu: self.mtu,
            netns: self.netns,
        }
    }
}

impl<N> Default for VlanSpec<'_, N> {
    fn default() -> Self {
        VlanSpec {
            name: Default::default(),
            parent: Default::default(),
            vlan_id: Default::default(),
            mtu: Default::default(),
            netns: None,
        }
    }
}

pub(crate) fn vlan_message(spec: &VlanSpec<'_>) -> LinkMessage {
    let mut m = on_parent(&spec.name, spec.parent, spec.mtu, None, spec.netns);
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Vlan),
        LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(spec.vlan_id)])),
    ]));
    m
}

/// `IFLA_VLAN_ID` of a link message, when it is a VLAN.
fn vlan_id_of(msg: &LinkMessage) -> Option<u16> {
    info_data(msg).find_map(|d| match d {
        InfoData::Vlan(opts) => opts.iter().find_map(|o| match o {
            InfoVlan::Id(id) => Some(*id),
            _ => None,
        }),
        _ => None,
    })
}

impl Handle {
    /// Creates a VLAN link on `spec.parent`, directly in `spec.netns` when
    /// given (Go's vlan plugin, `IFLA_NET_NS_FD`). An id above
    /// [`VLAN_ID_MAX`] is refused before anything is sent; a kernel
    /// without 802.1Q gives [`Error::Unsupported`].
    pub fn add_vlan(&self, spec: &VlanSpec<'_>) -> Result<()> {
        let span = cni_types::step_span!("link.create", link.kind = "vlan", link.name = %spec.name);
        cni_types::trace::in_step(span, || {
            let (name, netns, parent) = (&spec.name, spec.netns, spec.parent);
            if spec.vlan_id > VLAN_ID_MAX {
                return Err(Error::InvalidArgument {
                    op: self.on_parent_op("vlan", name, netns, parent),
                    reason: format!("VLAN id {} is out of range 0..={VLAN_ID_MAX}", spec.vlan_id),
                });
            }
            self.add_link_on_parent("vlan", name, netns, parent, vlan_message(spec))
                .map_err(|e| {
                    self.unsupported(self.on_parent_op("vlan", name, netns, parent), "vlan", e)
                })
        })
    }

    /// The VLAN id of link `name` (`None` when it is not a VLAN);
    /// [`Error::LinkNotFound`] when it is missing.
    pub fn vlan_id(&self, name: &str) -> Result<Option<u16>> {
        Ok(vlan_id_of(&self.link_message(name)?))
    }
}
