//! The link kinds of the vlan, vrf and dummy plugins: creation requests
//! (`IFLA_INFO_KIND` `vlan`, `vrf`, `dummy` with their `IFLA_INFO_DATA`),
//! and what CHECK and the vrf plugin read back (VLAN id, VRF table).
//!
//! A kernel without the kind answers "Unknown device type"
//! (`EOPNOTSUPP`): every creation maps it to [`Error::Unsupported`] naming
//! the kind, so that a plugin fails with a message an operator can act on.

use std::os::fd::AsRawFd;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVlan, InfoVrf, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::link::Link;
use crate::netns::Netns;

/// The largest VLAN id a VLAN link may carry (4095 is reserved by
/// 802.1Q; the kernel's `vlan_validate` refuses it).
pub const VLAN_ID_MAX: u16 = 4094;

/// An 802.1Q VLAN link to create with [`Handle::add_vlan`].
#[derive(Debug, Clone, Default)]
pub struct VlanSpec<'a> {
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
    pub netns: Option<&'a Netns>,
}

/// A VRF device as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Vrf {
    /// The link.
    pub link: Link,
    /// Its routing table (`IFLA_VRF_TABLE`).
    pub table: u32,
}

pub(crate) fn vlan_message(spec: &VlanSpec<'_>) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(spec.name.clone()));
    m.attributes.push(LinkAttribute::Link(spec.parent));
    if let Some(mtu) = spec.mtu {
        m.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(ns) = spec.netns {
        m.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
    }
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Vlan),
        LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(spec.vlan_id)])),
    ]));
    m
}

pub(crate) fn vrf_message(name: &str, table: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_owned()));
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Vrf),
        LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
    ]));
    m
}

pub(crate) fn dummy_message(name: &str) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_owned()));
    m.attributes
        .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Dummy,
        )]));
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

/// `IFLA_VRF_TABLE` of a link message, when it is a VRF.
fn vrf_table_of(msg: &LinkMessage) -> Option<u32> {
    info_data(msg).find_map(|d| match d {
        InfoData::Vrf(opts) => opts.iter().find_map(|o| match o {
            InfoVrf::TableId(t) => Some(*t),
            _ => None,
        }),
        _ => None,
    })
}

fn info_data(msg: &LinkMessage) -> impl Iterator<Item = &InfoData> {
    msg.attributes
        .iter()
        .filter_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => Some(infos),
            _ => None,
        })
        .flatten()
        .filter_map(|i| match i {
            LinkInfo::Data(d) => Some(d),
            _ => None,
        })
}

impl Handle {
    /// Creates a VLAN link on `spec.parent`, directly in `spec.netns` when
    /// given (Go's vlan plugin, `IFLA_NET_NS_FD`). An id above
    /// [`VLAN_ID_MAX`] is refused before anything is sent; a kernel
    /// without 802.1Q gives [`Error::Unsupported`].
    pub fn add_vlan(&self, spec: &VlanSpec<'_>) -> Result<()> {
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
    }

    /// Creates a dummy link named `name` in this handle's namespace (Go's
    /// dummy plugin creates it from inside the pod, so a host link of the
    /// same name does not clash). A kernel without the dummy driver gives
    /// [`Error::Unsupported`].
    pub fn add_dummy(&self, name: &str) -> Result<Link> {
        let op = || format!("add dummy {name}");
        self.request(
            RouteNetlinkMessage::NewLink(dummy_message(name)),
            NLM_F_CREATE | NLM_F_EXCL,
            op,
        )
        .map_err(|e| self.unsupported(op(), "dummy", e))?;
        self.link_by_name(name)
    }

    /// Creates a VRF device routing through `table` and sets it up (Go's
    /// `createVRF`). A kernel without VRF gives [`Error::Unsupported`].
    pub fn add_vrf(&self, name: &str, table: u32) -> Result<Vrf> {
        let op = || format!("add vrf {name} table {table}");
        self.request(
            RouteNetlinkMessage::NewLink(vrf_message(name, table)),
            NLM_F_CREATE | NLM_F_EXCL,
            op,
        )
        .map_err(|e| self.unsupported(op(), "vrf", e))?;
        let link = self.link_by_name(name)?;
        self.set_up(link.index)?;
        Ok(Vrf {
            link: self.link_by_index(link.index)?,
            table,
        })
    }

    /// The VRF named `name`: `None` when no link has that name,
    /// [`Error::WrongLinkKind`] when the link is not a VRF.
    pub fn vrf_by_name(&self, name: &str) -> Result<Option<Vrf>> {
        let link = match self.link_by_name(name) {
            Ok(l) => l,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        self.vrfs()?
            .into_iter()
            .find(|v| v.link.index == link.index)
            .map(Some)
            .ok_or_else(|| Error::WrongLinkKind {
                op: format!("find vrf {name}"),
                name: name.to_owned(),
                found: link.kind.unwrap_or_else(|| "device".into()),
                expected: "vrf",
                netns: self.netns_name().to_owned(),
            })
    }

    /// Every VRF device in the namespace with its table.
    pub fn vrfs(&self) -> Result<Vec<Vrf>> {
        let r = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()), || {
            "list links".into()
        })?;
        Ok(r.iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(m) => {
                    let link = Link::from_message(m);
                    if link.kind.as_deref() != Some("vrf") {
                        return None;
                    }
                    Some(Vrf {
                        table: vrf_table_of(m).unwrap_or(0),
                        link,
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// The VLAN id of link `name` (`None` when it is not a VLAN);
    /// [`Error::LinkNotFound`] when it is missing.
    pub fn vlan_id(&self, name: &str) -> Result<Option<u16>> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_owned()));
        let op = || format!("get link {name}");
        let replies = match self.request(RouteNetlinkMessage::GetLink(m), 0, op) {
            Ok(r) => r,
            Err(e) if e.is_not_found() => {
                return Err(Error::LinkNotFound {
                    op: op(),
                    name: name.to_owned(),
                    netns: self.netns_name().to_owned(),
                })
            }
            Err(e) => return Err(e),
        };
        Ok(replies.iter().find_map(|r| match r {
            RouteNetlinkMessage::NewLink(m) => vlan_id_of(m),
            _ => None,
        }))
    }

    /// The links whose master is `index` (a bridge's ports, a VRF's
    /// members).
    pub fn links_with_master(&self, index: u32) -> Result<Vec<Link>> {
        Ok(self
            .links()?
            .into_iter()
            .filter(|l| l.master == Some(index))
            .collect())
    }
}

/// Go's `findFreeRoutingTableID`: the smallest table id from 1 up that no
/// VRF in `used` routes through (other users of a table do not count).
pub fn free_vrf_table(used: &[u32]) -> Option<u32> {
    (1..u32::MAX).find(|t| !used.contains(t))
}
