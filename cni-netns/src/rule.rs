//! Routing policy rules (`ip rule`): add, delete, list; copying a route
//! into another table; the routing table of a VRF device.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{RouteProtocol, RouteType};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::Result;
use crate::handle::Handle;
use crate::route::{route_message, KernelRoute};
use crate::AddressFamilyFilter;

/// A routing policy rule that sends matching packets to a table, both to
/// install and as read back from the kernel.
///
/// ```
/// use cni_netns::RoutingRule;
///
/// let r = RoutingRule::from_source("10.1.0.5".parse().unwrap(), 100);
/// assert_eq!(r.src.unwrap().to_string(), "10.1.0.5/32");
/// assert_eq!(r.to_string(), "from 10.1.0.5/32 lookup 100");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingRule {
    /// IPv6 rule (`ip -6 rule`) rather than IPv4.
    pub v6: bool,
    /// `from` selector; `None` is `from all`.
    pub src: Option<IpNetwork>,
    /// `to` selector; `None` is `to all`.
    pub dst: Option<IpNetwork>,
    /// The table looked up (`RT_TABLE_*` or a number); 0 for rules whose
    /// action is not a lookup.
    pub table: u32,
    /// Priority (`pref`); `None` when adding lets the kernel pick one (the
    /// highest free below the lowest existing non-zero priority, as
    /// `ip rule add` without `pref` and Go's `netlink.RuleAdd` do).
    pub priority: Option<u32>,
    /// `FR_ACT_*` action; read back only (added rules are `FR_ACT_TO_TBL`).
    pub action: u8,
}

impl RoutingRule {
    /// `from <ip>/32` (or `/128`) `lookup <table>`, priority chosen by the
    /// kernel.
    pub fn from_source(ip: IpAddr, table: u32) -> RoutingRule {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        // A host prefix is always valid for its family.
        let src = IpNetwork::new(ip, prefix).unwrap_or_else(|_| IpNetwork::from(ip));
        RoutingRule {
            v6: ip.is_ipv6(),
            src: Some(src),
            dst: None,
            table,
            priority: None,
            action: 1,
        }
    }

    fn from_message(m: &RuleMessage) -> Option<RoutingRule> {
        let v6 = match m.header.family {
            AddressFamily::Inet => false,
            AddressFamily::Inet6 => true,
            _ => return None,
        };
        let mut r = RoutingRule {
            v6,
            src: None,
            dst: None,
            table: u32::from(m.header.table),
            priority: None,
            action: u8::from(m.header.action),
        };
        for a in &m.attributes {
            match a {
                RuleAttribute::Source(ip) => r.src = IpNetwork::new(*ip, m.header.src_len).ok(),
                RuleAttribute::Destination(ip) => {
                    r.dst = IpNetwork::new(*ip, m.header.dst_len).ok()
                }
                RuleAttribute::Table(t) => r.table = *t,
                RuleAttribute::Priority(p) => r.priority = Some(*p),
                _ => {}
            }
        }
        Some(r)
    }
}

impl std::fmt::Display for RoutingRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.priority {
            write!(f, "pref {p} ")?;
        }
        match self.src {
            Some(s) => write!(f, "from {s}")?,
            None => write!(f, "from all")?,
        }
        if let Some(d) = self.dst {
            write!(f, " to {d}")?;
        }
        write!(f, " lookup {}", self.table)
    }
}

/// Builds the RTM_NEWRULE/RTM_DELRULE body. The table goes in the header
/// when it fits in a byte and always in `FRA_TABLE` (as iproute2 does).
pub(crate) fn rule_message(r: &RoutingRule) -> RuleMessage {
    let mut m = RuleMessage::default();
    m.header.family = if r.v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    m.header.table = u8::try_from(r.table).unwrap_or(0);
    m.header.action = RuleAction::ToTable;
    if let Some(s) = r.src {
        m.header.src_len = s.prefix();
        m.attributes.push(RuleAttribute::Source(s.ip()));
    }
    if let Some(d) = r.dst {
        m.header.dst_len = d.prefix();
        m.attributes.push(RuleAttribute::Destination(d.ip()));
    }
    if let Some(p) = r.priority {
        m.attributes.push(RuleAttribute::Priority(p));
    }
    m.attributes.push(RuleAttribute::Table(r.table));
    m
}

impl Handle {
    /// Adds a rule (`ip rule add`); an identical existing rule is an error
    /// (`EEXIST`).
    pub fn add_rule(&self, r: &RoutingRule) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRule(rule_message(r)),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add rule {r}"),
        )
        .map(drop)
    }

    /// Deletes a rule; a missing one gives an error whose
    /// [`crate::Error::is_not_found`] is true.
    pub fn del_rule(&self, r: &RoutingRule) -> Result<()> {
        self.request(RouteNetlinkMessage::DelRule(rule_message(r)), 0, || {
            format!("delete rule {r}")
        })
        .map(drop)
    }

    /// Every rule of `family`, in the kernel's order (by priority).
    pub fn rules(&self, family: AddressFamilyFilter) -> Result<Vec<RoutingRule>> {
        let mut m = RuleMessage::default();
        m.header.family = family.address_family();
        let replies = self.dump(RouteNetlinkMessage::GetRule(m), || "list rules".into())?;
        Ok(replies
            .iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewRule(m) => RoutingRule::from_message(m),
                _ => None,
            })
            .filter(|r| match family {
                AddressFamilyFilter::All => true,
                AddressFamilyFilter::V4 => !r.v6,
                AddressFamilyFilter::V6 => r.v6,
            })
            .collect())
    }

    /// Copies a route read back from the kernel into `table` (replacing a
    /// route with the same key there), keeping its protocol, scope, type,
    /// source and metric: Go's sbr `RouteReplace` of a listed route with
    /// only its table changed and its flags cleared.
    pub fn copy_route_to_table(&self, r: &KernelRoute, table: u32) -> Result<()> {
        let moved = KernelRoute {
            table: Some(table),
            ..r.clone()
        };
        let mut m = route_message(&moved, false);
        if r.protocol != 0 {
            m.header.protocol = RouteProtocol::from(r.protocol);
        }
        if r.kind != 0 {
            m.header.kind = RouteType::from(r.kind);
        }
        self.request(
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_REPLACE,
            || format!("copy route {} to table {table}", r.dst),
        )
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::serialize;

    #[test]
    fn rule_request_bytes() {
        let r = RoutingRule::from_source("192.168.1.209".parse().unwrap(), 100);
        let bytes = serialize(RouteNetlinkMessage::NewRule(rule_message(&r)), 0x605, 7);
        // nlmsghdr: len 44, RTM_NEWRULE (32), flags, seq 7, pid 0.
        let mut want = vec![44, 0, 0, 0, 32, 0, 0x05, 0x06, 7, 0, 0, 0, 0, 0, 0, 0];
        // fib_rule_hdr: AF_INET, dst_len 0, src_len 32, tos 0, table 100,
        // res1, res2, action FR_ACT_TO_TBL, flags 0.
        want.extend([2, 0, 32, 0, 100, 0, 0, 1, 0, 0, 0, 0]);
        // FRA_SRC (2) 192.168.1.209, FRA_TABLE (15) 100.
        want.extend([8, 0, 2, 0, 192, 168, 1, 209]);
        want.extend([8, 0, 15, 0, 100, 0, 0, 0]);
        assert_eq!(bytes, want);

        let mut r6 = RoutingRule::from_source("fd00::5".parse().unwrap(), 5000);
        r6.priority = Some(32765);
        let m = rule_message(&r6);
        assert_eq!(m.header.table, 0, "tables above 255 only in FRA_TABLE");
        assert_eq!(m.header.src_len, 128);
        assert!(m.attributes.contains(&RuleAttribute::Priority(32765)));
        assert!(m.attributes.contains(&RuleAttribute::Table(5000)));
        assert_eq!(
            RoutingRule::from_message(&m).unwrap(),
            RoutingRule { action: 1, ..r6 }
        );
    }
}
