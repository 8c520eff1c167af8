//! What the macvlan, ipvlan and host-device plugins need beyond
//! [`crate::link`]: ipvlan links, the per-kind details CHECK compares
//! (macvlan and ipvlan mode, the macvlan broadcast queue), the alias
//! host-device keeps a moved link's original name in, and lookups of a
//! link by MAC address or by the default route.

use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoMacVlan, IpVlanMode, LinkAttribute, LinkInfo, LinkMessage,
    MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{IpvlanMode, Link, MacAddr, MacvlanMode};
use crate::error::Result;
use crate::handle::Handle;
use crate::AddressFamilyFilter;

/// A link with the attributes only some kinds or plugins use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkDetails {
    /// The common attributes.
    pub link: Link,
    /// `IFLA_IFALIAS`.
    pub alias: Option<String>,
    /// For a macvlan: its mode.
    pub macvlan_mode: Option<MacvlanMode>,
    /// For a macvlan: the requested broadcast queue length.
    pub bc_queue_len: Option<u32>,
    /// For an ipvlan: its mode.
    pub ipvlan_mode: Option<IpvlanMode>,
}

impl LinkDetails {
    fn from_message(msg: &LinkMessage) -> LinkDetails {
        let mut d = LinkDetails {
            link: Link::from_message(msg),
            alias: None,
            macvlan_mode: None,
            bc_queue_len: None,
            ipvlan_mode: None,
        };
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfAlias(a) if !a.is_empty() => d.alias = Some(a.clone()),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Data(InfoData::MacVlan(opts)) => {
                                for o in opts {
                                    match o {
                                        InfoMacVlan::Mode(m) => {
                                            d.macvlan_mode = macvlan_mode_from(*m);
                                        }
                                        InfoMacVlan::BcQueueLen(n) => d.bc_queue_len = Some(*n),
                                        _ => {}
                                    }
                                }
                            }
                            LinkInfo::Data(InfoData::IpVlan(opts)) => {
                                for o in opts {
                                    if let InfoIpVlan::Mode(m) = o {
                                        d.ipvlan_mode = ipvlan_mode_from(*m);
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
        d
    }
}

fn macvlan_mode_from(m: MacVlanMode) -> Option<MacvlanMode> {
    match m {
        MacVlanMode::Private => Some(MacvlanMode::Private),
        MacVlanMode::Vepa => Some(MacvlanMode::Vepa),
        MacVlanMode::Bridge => Some(MacvlanMode::Bridge),
        MacVlanMode::Passthrough => Some(MacvlanMode::Passthru),
        _ => None,
    }
}

fn ipvlan_mode_from(m: IpVlanMode) -> Option<IpvlanMode> {
    match m {
        IpVlanMode::L2 => Some(IpvlanMode::L2),
        IpVlanMode::L3 => Some(IpvlanMode::L3),
        IpVlanMode::L3S => Some(IpvlanMode::L3s),
        _ => None,
    }
}

impl Handle {
    /// Looks a link up by name with its alias and per-kind details;
    /// [`Error::LinkNotFound`](crate::Error::LinkNotFound) when it is missing.
    pub fn link_details(&self, name: &str) -> Result<LinkDetails> {
        Ok(LinkDetails::from_message(&self.link_message(name)?))
    }

    /// Sets (or, with `""`, clears) a link's alias (`ip link set X alias`).
    pub fn set_alias(&self, index: u32, alias: &str) -> Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes.push(LinkAttribute::IfAlias(alias.to_owned()));
        self.request(RouteNetlinkMessage::SetLink(m), 0, || {
            format!("set alias {alias:?} on {}", self.ifname_for(index))
        })
        .map(drop)
    }

    /// The first link whose hardware address is `mac`, in the kernel's
    /// listing order (Go's host-device `hwaddr` lookup).
    pub fn link_by_mac(&self, mac: MacAddr) -> Result<Option<Link>> {
        Ok(self.links()?.into_iter().find(|l| l.mac == Some(mac)))
    }

    /// The link of the first default route of the main table, IPv4 before
    /// IPv6 (Go's `getDefaultRouteInterfaceName` in the macvlan and ipvlan
    /// plugins); `None` when there is no default route with a device.
    pub fn default_route_link(&self) -> Result<Option<Link>> {
        let oif = self
            .routes(AddressFamilyFilter::All)?
            .into_iter()
            .filter(|r| r.is_default() && r.table == Some(crate::TABLE_MAIN))
            .find_map(|r| r.oif.or_else(|| r.multipath.first().map(|n| n.oif)));
        oif.map(|i| self.link_by_index(i)).transpose()
    }
}
