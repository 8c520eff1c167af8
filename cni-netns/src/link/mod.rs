//! Links, by kind: what every link has (lookup, up/down, MTU, MAC,
//! promisc, name, namespace) is here; veth pairs (`veth`), bridges with
//! their ports and VLANs (`bridge`), links stacked on a parent (`stacked`:
//! macvlan, ipvlan, vlan), virtual devices (`virt`: vrf, dummy) and tap
//! devices (`tap`) are in files of their own.

use std::fmt;
use std::str::FromStr;

use netlink_packet_route::link::{
    InfoBridge, InfoData, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use std::os::fd::AsRawFd;

use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::netns::Netns;

mod bridge;
mod details;
mod stacked;
mod tap;
mod veth;
mod virt;

#[cfg(test)]
pub(crate) use bridge::{bridge_port_message, bridge_vlan_message};
pub use bridge::{BridgePortOptions, BridgeSpec, BridgeVlan};
pub use details::LinkDetails;
pub use stacked::{IpvlanMode, IpvlanSpec, MacvlanMode, MacvlanSpec};
pub use stacked::{VlanSpec, VLAN_ID_MAX};
pub use tap::{TapSpec, IFF_MULTI_QUEUE, IFF_NO_PI, IFF_TAP, IFF_VNET_HDR};
#[cfg(test)]
pub(crate) use veth::veth_message;
pub use veth::{VethSpec, VETH_NAME_ATTEMPTS};
pub use virt::{free_vrf_table, Vrf};

/// An Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<MacAddr> {
        let bad = || Error::InvalidArgument {
            op: format!("parse MAC address {s:?}"),
            reason: "expected six hex octets separated by ':' or '-'".into(),
        };
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in &mut out {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

/// RFC 2863 operational state of a link (`IFLA_OPERSTATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OperState {
    /// `IF_OPER_UNKNOWN` (e.g. loopback, or a driver that does not report).
    Unknown,
    /// `IF_OPER_NOTPRESENT`.
    NotPresent,
    /// `IF_OPER_DOWN`.
    Down,
    /// `IF_OPER_LOWERLAYERDOWN` (e.g. a veth whose peer is down).
    LowerLayerDown,
    /// `IF_OPER_TESTING`.
    Testing,
    /// `IF_OPER_DORMANT`.
    Dormant,
    /// `IF_OPER_UP`.
    Up,
}

impl From<u8> for OperState {
    fn from(v: u8) -> Self {
        match v {
            1 => OperState::NotPresent,
            2 => OperState::Down,
            3 => OperState::LowerLayerDown,
            4 => OperState::Testing,
            5 => OperState::Dormant,
            6 => OperState::Up,
            _ => OperState::Unknown,
        }
    }
}

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// `IFLA_INFO_KIND` (`"veth"`, `"bridge"`, ...); `None` for plain devices.
    pub kind: Option<String>,
    /// MTU.
    pub mtu: u32,
    /// Hardware address, when the link has a 6-byte one.
    pub mac: Option<MacAddr>,
    /// Index of the master (bridge) device.
    pub master: Option<u32>,
    /// Operational state.
    pub oper_state: OperState,
    /// `IFF_*` flags (see [`Link::is_up`], [`Link::is_promisc`]).
    pub flags: u32,
    /// `IFLA_LINK`: for a veth, the peer's index (in the peer's namespace).
    pub parent_index: Option<u32>,
    /// `IFLA_LINK_NETNSID`: set when `parent_index` lives in another namespace.
    pub link_netnsid: Option<i32>,
    /// For a bridge: whether VLAN filtering is on.
    pub vlan_filtering: Option<bool>,
}

impl Link {
    /// `IFF_UP` is set.
    pub fn is_up(&self) -> bool {
        self.flags & libc::IFF_UP as u32 != 0
    }

    /// `IFF_PROMISC` is set.
    pub fn is_promisc(&self) -> bool {
        self.flags & libc::IFF_PROMISC as u32 != 0
    }

    /// `IFF_ALLMULTI` is set.
    pub fn is_allmulti(&self) -> bool {
        self.flags & libc::IFF_ALLMULTI as u32 != 0
    }

    pub(crate) fn from_message(msg: &LinkMessage) -> Link {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            mtu: 0,
            mac: None,
            master: None,
            oper_state: OperState::Unknown,
            flags: msg.header.flags.bits(),
            parent_index: None,
            link_netnsid: None,
            vlan_filtering: None,
        };
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Mtu(m) => link.mtu = *m,
                LinkAttribute::Address(a) => {
                    if let Ok(b) = <[u8; 6]>::try_from(a.as_slice()) {
                        link.mac = Some(MacAddr(b));
                    }
                }
                LinkAttribute::Controller(m) if *m != 0 => link.master = Some(*m),
                LinkAttribute::OperState(s) => link.oper_state = OperState::from(u8::from(*s)),
                LinkAttribute::Link(l) if *l != 0 => link.parent_index = Some(*l),
                LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(*id),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Kind(k) => link.kind = Some(k.to_string()),
                            LinkInfo::Data(InfoData::Bridge(opts)) => {
                                for o in opts {
                                    if let InfoBridge::VlanFiltering(v) = o {
                                        link.vlan_filtering = Some(*v);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }
}

pub(crate) fn link_msg(index: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m
}

impl Handle {
    pub(crate) fn set_link(&self, msg: LinkMessage, op: impl FnOnce() -> String) -> Result<()> {
        self.request(RouteNetlinkMessage::SetLink(msg), 0, op)
            .map(drop)
    }

    fn single_link(
        &self,
        replies: Vec<RouteNetlinkMessage>,
        op: impl FnOnce() -> String,
    ) -> Result<Link> {
        for r in replies {
            if let RouteNetlinkMessage::NewLink(m) = r {
                return Ok(Link::from_message(&m));
            }
        }
        Err(self.protocol_error(op(), "no link in reply"))
    }

    /// Looks a link up by name; [`Error::LinkNotFound`] when it is missing.
    pub fn link_by_name(&self, name: &str) -> Result<Link> {
        Ok(Link::from_message(&self.link_message(name)?))
    }

    /// The kernel's link message for `name` (`RTM_GETLINK` by name), for
    /// readers of per-kind attributes; [`Error::LinkNotFound`] when missing.
    pub(crate) fn link_message(&self, name: &str) -> Result<LinkMessage> {
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
        replies
            .into_iter()
            .find_map(|r| match r {
                RouteNetlinkMessage::NewLink(m) => Some(m),
                _ => None,
            })
            .ok_or_else(|| self.protocol_error(op(), "no link in reply"))
    }

    /// Waits until link `index` is operationally up (a bridge port after
    /// its peer came up: the kernel's link watcher reports it
    /// asynchronously), for at most `timeout`. Returns the link as last
    /// read: up, or in whatever state it still was at the timeout (the
    /// caller names that error). Looks on the crate's poll schedule: every
    /// 200 µs for the first 10 ms, where the kernel usually answers, then
    /// at doubling intervals up to 50 ms.
    pub fn wait_oper_up(&self, index: u32, timeout: std::time::Duration) -> Result<Link> {
        let span = cni_types::step_span!("link.wait_up", link.index = index);
        cni_types::trace::in_step(span, || {
            crate::poll::until(timeout, || {
                let link = self.link_by_index(index)?;
                Ok((link.oper_state == OperState::Up, link))
            })
            .map(|(_, link)| link)
        })
    }

    /// Looks a link up by index.
    pub fn link_by_index(&self, index: u32) -> Result<Link> {
        let op = || format!("get link #{index}");
        let r = self.request(RouteNetlinkMessage::GetLink(link_msg(index)), 0, op)?;
        self.single_link(r, op)
    }

    /// Every link in the namespace.
    pub fn links(&self) -> Result<Vec<Link>> {
        let r = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()), || {
            "list links".into()
        })?;
        Ok(r.iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(m) => Some(Link::from_message(m)),
                _ => None,
            })
            .collect())
    }

    fn set_flag(&self, index: u32, flag: LinkFlags, on: bool, what: &str) -> Result<()> {
        let mut m = link_msg(index);
        m.header.change_mask = flag;
        if on {
            m.header.flags = flag;
        }
        self.set_link(m, || format!("set {} {what}", self.ifname_for(index)))
    }

    /// Sets a link administratively up.
    pub fn set_up(&self, index: u32) -> Result<()> {
        self.set_flag(index, LinkFlags::Up, true, "up")
    }

    /// Sets a link administratively down.
    pub fn set_down(&self, index: u32) -> Result<()> {
        self.set_flag(index, LinkFlags::Up, false, "down")
    }

    /// Turns promiscuous mode on or off.
    pub fn set_promisc(&self, index: u32, on: bool) -> Result<()> {
        self.set_flag(
            index,
            LinkFlags::Promisc,
            on,
            if on { "promisc on" } else { "promisc off" },
        )
    }

    /// Turns all-multicast mode on or off (`ip link set ... allmulticast`).
    pub fn set_allmulti(&self, index: u32, on: bool) -> Result<()> {
        self.set_flag(
            index,
            LinkFlags::Allmulti,
            on,
            if on {
                "allmulticast on"
            } else {
                "allmulticast off"
            },
        )
    }

    /// Sets the transmit queue length (`IFLA_TXQLEN`).
    pub fn set_txqlen(&self, index: u32, txqlen: u32) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::TxQueueLen(txqlen));
        self.set_link(m, || {
            format!("set txqueuelen {txqlen} on {}", self.ifname_for(index))
        })
    }

    /// Sets the MTU.
    pub fn set_mtu(&self, index: u32, mtu: u32) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::Mtu(mtu));
        self.set_link(m, || format!("set mtu {mtu} on {}", self.ifname_for(index)))
    }

    /// Sets the hardware address.
    pub fn set_mac(&self, index: u32, mac: MacAddr) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
        self.set_link(m, || {
            format!("set address {mac} on {}", self.ifname_for(index))
        })
    }

    /// Renames a link (the kernel wants it down).
    pub fn rename(&self, index: u32, new_name: &str) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes
            .push(LinkAttribute::IfName(new_name.to_owned()));
        self.set_link(m, || {
            format!("rename {} to {new_name}", self.ifname_for(index))
        })
    }

    /// Moves a link into another namespace.
    pub fn move_to_netns(&self, index: u32, netns: &Netns) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::NetNsFd(netns.as_raw_fd()));
        self.set_link(m, || {
            format!(
                "move {} to {}",
                self.ifname_for(index),
                netns.path().display()
            )
        })
    }

    /// Deletes a link by index.
    pub fn delete_link(&self, index: u32) -> Result<()> {
        let span = cni_types::step_span!("link.delete", link.index = index);
        cni_types::trace::in_step(span, || {
            self.request(RouteNetlinkMessage::DelLink(link_msg(index)), 0, || {
                format!("delete link #{index}")
            })
            .map(drop)
        })
    }

    /// Deletes a link by name; a missing link is not an error. Returns
    /// whether a link was deleted.
    pub fn delete_link_by_name(&self, name: &str) -> Result<bool> {
        let span = cni_types::step_span!("link.delete", link.name = %name);
        cni_types::trace::in_step(span, || {
            let mut m = LinkMessage::default();
            m.attributes.push(LinkAttribute::IfName(name.to_owned()));
            match self.request(RouteNetlinkMessage::DelLink(m), 0, || {
                format!("delete link {name}")
            }) {
                Ok(_) => Ok(true),
                Err(e) if e.is_not_found() => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Go's `ip.DelLinkByNameAddr`: deletes a link and returns its global
    /// unicast addresses (what a plugin needs to undo masquerading).
    /// [`Error::LinkNotFound`] when the link is missing.
    pub fn delete_link_by_name_addrs(&self, name: &str) -> Result<Vec<ipnetwork::IpNetwork>> {
        let link = self.link_by_name(name)?;
        let addrs = self
            .addresses(Some(link.index), crate::AddressFamilyFilter::All)?
            .into_iter()
            .map(|a| a.address)
            .filter(|a| crate::addr::is_global_unicast(a.ip()))
            .collect();
        self.delete_link(link.index)?;
        Ok(addrs)
    }
}

pub(crate) fn info_data(msg: &LinkMessage) -> impl Iterator<Item = &InfoData> {
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
