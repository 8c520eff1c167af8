//! Routes: add (exclusive, ECMP or replace), delete, list.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteMetric, RouteNextHop, RouteProtocol,
    RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::Result;
use crate::handle::Handle;
use crate::AddressFamilyFilter;

/// The main routing table (`RT_TABLE_MAIN`).
pub const TABLE_MAIN: u32 = 254;
/// `RT_SCOPE_UNIVERSE`: the default scope, as Go's netlink uses.
pub const SCOPE_UNIVERSE: u8 = 0;
/// `RT_SCOPE_LINK`: a directly connected destination.
pub const SCOPE_LINK: u8 = 253;
/// `RT_SCOPE_HOST`.
pub const SCOPE_HOST: u8 = 254;

/// One path of a multipath (ECMP) route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    /// Gateway of this path.
    pub gateway: Option<IpAddr>,
    /// Output link index.
    pub oif: u32,
    /// Relative weight (1..=256).
    pub weight: u16,
}

/// A route, both to install and as read back from the kernel.
///
/// Build one with [`KernelRoute::new`] and struct update syntax:
/// `KernelRoute { gateway: Some(gw), oif: Some(idx), ..KernelRoute::new(dst) }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination (`0.0.0.0/0` or `::/0` for a default route).
    pub dst: IpNetwork,
    /// Gateway.
    pub gateway: Option<IpAddr>,
    /// Output link index (`dev`).
    pub oif: Option<u32>,
    /// Preferred source address.
    pub src: Option<IpAddr>,
    /// Routing table; `None` means main when adding. Always set on routes
    /// read back.
    pub table: Option<u32>,
    /// Scope (`RT_SCOPE_*`); `None` means universe when adding, any when
    /// deleting.
    pub scope: Option<u8>,
    /// Metric (`priority`).
    pub priority: Option<u32>,
    /// Path MTU (`RTAX_MTU`).
    pub mtu: Option<u32>,
    /// Advertised MSS (`RTAX_ADVMSS`).
    pub advmss: Option<u32>,
    /// Paths of a multipath route (then `gateway`/`oif` stay unset).
    pub multipath: Vec<NextHop>,
    /// KernelRoute protocol (`RTPROT_*`); read back only, added routes use
    /// `RTPROT_BOOT` like Go's netlink and `ip route`.
    pub protocol: u8,
    /// KernelRoute type (`RTN_*`); read back only, added routes are unicast.
    pub kind: u8,
}

impl KernelRoute {
    /// A route to `dst` with nothing else set.
    pub fn new(dst: IpNetwork) -> KernelRoute {
        KernelRoute {
            dst,
            gateway: None,
            oif: None,
            src: None,
            table: None,
            scope: None,
            priority: None,
            mtu: None,
            advmss: None,
            multipath: Vec::new(),
            protocol: 0,
            kind: 0,
        }
    }

    /// A default route (`0.0.0.0/0` or `::/0`, by the gateway's family)
    /// via `gateway`.
    pub fn default_via(gateway: IpAddr) -> KernelRoute {
        let any = match gateway {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        // Prefix 0 is always valid; the fallback only satisfies the types.
        let dst = IpNetwork::new(any, 0).unwrap_or_else(|_| IpNetwork::from(any));
        KernelRoute {
            gateway: Some(gateway),
            ..KernelRoute::new(dst)
        }
    }

    /// The destination is `0.0.0.0/0` or `::/0`.
    pub fn is_default(&self) -> bool {
        self.dst.prefix() == 0
    }

    fn from_message(m: &RouteMessage) -> Option<KernelRoute> {
        let family = m.header.address_family;
        let unspecified = match family {
            AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => return None,
        };
        let mut dst = unspecified;
        let mut r = KernelRoute::new(IpNetwork::new(unspecified, 0).ok()?);
        r.table = Some(u32::from(m.header.table));
        r.scope = Some(u8::from(m.header.scope));
        r.protocol = u8::from(m.header.protocol);
        r.kind = u8::from(m.header.kind);
        for a in &m.attributes {
            match a {
                RouteAttribute::Destination(d) => dst = route_ip(d)?,
                RouteAttribute::Gateway(g) => r.gateway = route_ip(g),
                RouteAttribute::PrefSource(s) => r.src = route_ip(s),
                RouteAttribute::Oif(i) => r.oif = Some(*i),
                RouteAttribute::Priority(p) => r.priority = Some(*p),
                RouteAttribute::Table(t) => r.table = Some(*t),
                RouteAttribute::Metrics(ms) => {
                    for metric in ms {
                        match metric {
                            RouteMetric::Mtu(v) => r.mtu = Some(*v),
                            RouteMetric::Advmss(v) => r.advmss = Some(*v),
                            _ => {}
                        }
                    }
                }
                RouteAttribute::MultiPath(hops) => {
                    r.multipath = hops
                        .iter()
                        .map(|h| NextHop {
                            gateway: h.attributes.iter().find_map(|a| match a {
                                RouteAttribute::Gateway(g) => route_ip(g),
                                _ => None,
                            }),
                            oif: h.interface_index,
                            weight: u16::from(h.hops) + 1,
                        })
                        .collect()
                }
                _ => {}
            }
        }
        r.dst = IpNetwork::new(dst, m.header.destination_prefix_length).ok()?;
        Some(r)
    }
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// Builds the RTM_NEWROUTE/RTM_DELROUTE body. For a delete, unset scope,
/// protocol and type match anything (as `ip route del` does).
pub(crate) fn route_message(r: &KernelRoute, delete: bool) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = if r.dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.destination_prefix_length = r.dst.prefix();
    let table = r.table.unwrap_or(TABLE_MAIN);
    // Tables above 255 only fit in RTA_TABLE (iproute2 does the same).
    m.header.table = u8::try_from(table).unwrap_or(0);
    if delete {
        m.header.scope = RouteScope::from(r.scope.unwrap_or(255));
        m.header.protocol = RouteProtocol::Unspec;
        m.header.kind = RouteType::Unspec;
    } else {
        m.header.scope = RouteScope::from(r.scope.unwrap_or(SCOPE_UNIVERSE));
        m.header.protocol = RouteProtocol::Boot;
        m.header.kind = RouteType::Unicast;
    }
    let a = &mut m.attributes;
    if r.dst.prefix() > 0 {
        a.push(RouteAttribute::Destination(RouteAddress::from(
            r.dst.network(),
        )));
    }
    if let Some(g) = r.gateway {
        a.push(RouteAttribute::Gateway(RouteAddress::from(g)));
    }
    if let Some(s) = r.src {
        a.push(RouteAttribute::PrefSource(RouteAddress::from(s)));
    }
    if let Some(i) = r.oif {
        a.push(RouteAttribute::Oif(i));
    }
    if let Some(p) = r.priority {
        a.push(RouteAttribute::Priority(p));
    }
    a.push(RouteAttribute::Table(table));
    let mut metrics = Vec::new();
    if let Some(v) = r.mtu {
        metrics.push(RouteMetric::Mtu(v));
    }
    if let Some(v) = r.advmss {
        metrics.push(RouteMetric::Advmss(v));
    }
    if !metrics.is_empty() {
        a.push(RouteAttribute::Metrics(metrics));
    }
    if !r.multipath.is_empty() {
        let hops = r
            .multipath
            .iter()
            .map(|nh| {
                let mut hop = RouteNextHop::default();
                hop.interface_index = nh.oif;
                hop.hops = u8::try_from(nh.weight.clamp(1, 256) - 1).unwrap_or(0);
                if let Some(g) = nh.gateway {
                    hop.attributes
                        .push(RouteAttribute::Gateway(RouteAddress::from(g)));
                }
                hop
            })
            .collect();
        a.push(RouteAttribute::MultiPath(hops));
    }
    m
}

fn describe(h: &Handle, r: &KernelRoute) -> String {
    let mut s = r.dst.to_string();
    if let Some(g) = r.gateway {
        s.push_str(&format!(" via {g}"));
    }
    if let Some(i) = r.oif {
        s.push_str(&format!(" dev {}", h.ifname_for(i)));
    }
    if let Some(t) = r.table {
        s.push_str(&format!(" table {t}"));
    }
    if let Some(p) = r.priority {
        s.push_str(&format!(" metric {p}"));
    }
    for nh in &r.multipath {
        s.push_str(" nexthop");
        if let Some(g) = nh.gateway {
            s.push_str(&format!(" via {g}"));
        }
        s.push_str(&format!(" dev {}", h.ifname_for(nh.oif)));
    }
    s
}

impl Handle {
    /// Adds a route; an identical existing route is an error (`EEXIST`).
    pub fn add_route(&self, r: &KernelRoute) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(route_message(r, false)),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add route {}", describe(self, r)),
        )
        .map(drop)
    }

    /// Adds a route without `NLM_F_EXCL`, as Go's `netlink.RouteAddEcmp`:
    /// a second route to the same destination with another gateway becomes
    /// an equal-cost path instead of failing.
    pub fn add_route_ecmp(&self, r: &KernelRoute) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(route_message(r, false)),
            NLM_F_CREATE,
            || format!("add route {}", describe(self, r)),
        )
        .map(drop)
    }

    /// Adds or replaces a route (`ip route replace`).
    pub fn replace_route(&self, r: &KernelRoute) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(route_message(r, false)),
            NLM_F_CREATE | NLM_F_REPLACE,
            || format!("replace route {}", describe(self, r)),
        )
        .map(drop)
    }

    /// Deletes a route; a missing one gives an error whose
    /// [`crate::Error::is_not_found`] is true.
    pub fn del_route(&self, r: &KernelRoute) -> Result<()> {
        self.request(
            RouteNetlinkMessage::DelRoute(route_message(r, true)),
            0,
            || format!("delete route {}", describe(self, r)),
        )
        .map(drop)
    }

    /// Every route of `family` in every table (filter on
    /// [`KernelRoute::table`], e.g. [`TABLE_MAIN`]).
    pub fn routes(&self, family: AddressFamilyFilter) -> Result<Vec<KernelRoute>> {
        let mut m = RouteMessage::default();
        m.header.address_family = family.address_family();
        let replies = self.dump(RouteNetlinkMessage::GetRoute(m), || "list routes".into())?;
        Ok(replies
            .iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewRoute(m) => KernelRoute::from_message(m),
                _ => None,
            })
            .filter(|r| family.matches(r.dst.ip()))
            .collect())
    }
}
