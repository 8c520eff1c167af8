//! Neighbour (ARP / NDP) entries.

use std::net::IpAddr;

use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::Result;
use crate::handle::Handle;
use crate::link::MacAddr;
use crate::AddressFamilyFilter;

/// A neighbour table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Neighbour {
    /// Link index.
    pub index: u32,
    /// The neighbour's IP address.
    pub ip: IpAddr,
    /// Its hardware address, once resolved.
    pub mac: Option<MacAddr>,
    /// `NUD_*` state bits.
    pub state: u16,
}

impl Handle {
    /// Neighbour entries, optionally only those of one link.
    pub fn neighbours(
        &self,
        index: Option<u32>,
        family: AddressFamilyFilter,
    ) -> Result<Vec<Neighbour>> {
        let mut m = NeighbourMessage::default();
        m.header.family = family.address_family();
        let replies = self.dump(RouteNetlinkMessage::GetNeighbour(m), || {
            "list neighbours".into()
        })?;
        let mut out = Vec::new();
        for r in &replies {
            let RouteNetlinkMessage::NewNeighbour(m) = r else {
                continue;
            };
            let mut ip = None;
            let mut mac = None;
            for a in &m.attributes {
                match a {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                        ip = Some(IpAddr::V4(*v4))
                    }
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                        ip = Some(IpAddr::V6(*v6))
                    }
                    NeighbourAttribute::LinkLayerAddress(l) => {
                        mac = <[u8; 6]>::try_from(l.as_slice()).ok().map(MacAddr)
                    }
                    _ => {}
                }
            }
            let Some(ip) = ip else { continue };
            if index.is_some_and(|i| i != m.header.ifindex) || !family.matches(ip) {
                continue;
            }
            out.push(Neighbour {
                index: m.header.ifindex,
                ip,
                mac,
                state: u16::from(m.header.state),
            });
        }
        Ok(out)
    }
}
