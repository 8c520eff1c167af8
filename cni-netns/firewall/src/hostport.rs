//! Port mappings (portmap): table `inet cni_rs_hostport`. An attachment is,
//! per mapping and address family, the owner of the host port
//! (`hp_owner`), its DNAT destination (`hp_dnat*`, or `hip_dnat*` for a
//! host IP) and one masquerade key (`hp_masq*`: the pod subnet, hairpin;
//! `hp_lo4`: localhost; `hp_all*`: `masqAll`); with
//! `conditionsV4`/`conditionsV6`, also two tagged rules per mapping in
//! chain `conditions`.

use std::net::{IpAddr, Ipv6Addr};

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};

use super::attachment::{anchored, owner_data, push_unique, OWNERS};
use super::conditions::parse_conditions;
use super::model::{
    const_net, ipx, map, match_eq, nfproto, prefix_part, AttachmentRules, BaseChain, Chain,
    ChainType, CmpOp, Element, Expr, Hook, KeyType, NftFamily, NftRule, Stmt, Table, Value,
    PRIORITY_DSTNAT, PRIORITY_SRCNAT,
};
use super::{AttachmentId, FirewallOp, RuleKind};
use crate::{Error, Result};

/// A transport protocol of a port mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The protocol's name in nft and in CNI's `portMappings`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            "sctp" => Ok(Protocol::Sctp),
            other => Err(format!("unknown protocol {other:?}")),
        }
    }
}

/// One host port forwarded to a container port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostPortMapping {
    /// The port on the host.
    pub host_port: u16,
    /// The port in the container.
    pub container_port: u16,
    /// The transport protocol.
    pub protocol: Protocol,
    /// Only traffic to this host address is forwarded (and only for the
    /// container address of the same family); `None` or an unspecified
    /// address (`0.0.0.0`, `::`) means every local address (of that family).
    pub host_ip: Option<IpAddr>,
}

/// The port mappings of one attachment (portmap).
///
/// Traffic is forwarded from other hosts (prerouting), from the node itself
/// (output), including `127.0.0.1:<host port>`, and from the pod's own
/// subnet (hairpin). Reaching the container from `127.0.0.1` needs
/// `net.ipv4.conf.<host interface>.route_localnet=1` on the interface that
/// routes to the container: the kernel otherwise drops packets with a
/// loopback source leaving a non-loopback interface. Setting that sysctl is
/// the caller's job (the Go reference's portmap does it when `snat` is on).
/// On a bridge with `br_netfilter` loaded (`bridge-nf-call-iptables=1`, as
/// on most Kubernetes nodes) a pod's packet to its own host port is DNATed
/// in the bridge path and sent back out the port it came from, which the
/// bridge only does with hairpin mode on that port (the bridge plugin's
/// `hairpinMode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMappingSpec {
    /// The owner of the rules.
    pub attachment: AttachmentId,
    /// The container's IPv4 address with prefix, if it has one.
    pub container_v4: Option<Ipv4Network>,
    /// The container's IPv6 address with prefix, if it has one.
    pub container_v6: Option<Ipv6Network>,
    /// The mappings; empty means there is nothing to do.
    pub mappings: Vec<HostPortMapping>,
    /// Masquerade hairpin traffic (from the container's subnet) and
    /// localhost traffic (from 127.0.0.0/8) sent to the mapped ports.
    /// Default `true`.
    pub snat: bool,
    /// Masquerade all traffic sent to the mapped ports, whatever its source.
    pub masq_all: bool,
    /// Extra nft match conditions (nft syntax tokens, e.g.
    /// `["ip", "saddr", "10.0.0.0/8"]`) every IPv4 mapping must also meet.
    pub conditions_v4: Vec<String>,
    /// The same for IPv6.
    pub conditions_v6: Vec<String>,
}

impl PortMappingSpec {
    /// A spec with no addresses, no mappings and the defaults (`snat` on).
    pub fn new(attachment: AttachmentId) -> Self {
        PortMappingSpec {
            attachment,
            container_v4: None,
            container_v6: None,
            mappings: Vec::new(),
            snat: true,
            masq_all: false,
            conditions_v4: Vec::new(),
            conditions_v6: Vec::new(),
        }
    }

    /// The UDP host ports mapped for the container's IPv4 (`ipv6` false) or
    /// IPv6 address, deduplicated: the ports whose stale conntrack entries
    /// the caller should delete after ADD and DEL
    /// ([`Conntrack::delete_udp_by_dst_ports`](crate::conntrack::Conntrack::delete_udp_by_dst_ports)).
    pub fn udp_host_ports(&self, ipv6: bool) -> Vec<u16> {
        let has_address = if ipv6 {
            self.container_v6.is_some()
        } else {
            self.container_v4.is_some()
        };
        if !has_address {
            return Vec::new();
        }
        let mut ports: Vec<u16> = self
            .mappings
            .iter()
            .filter(|m| m.protocol == Protocol::Udp)
            .filter(|m| m.host_ip.is_none_or(|ip| ip.is_ipv6() == ipv6))
            .map(|m| m.host_port)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

/// The table (`inet`); distinct from the Go reference's `cni_hostport`.
pub(crate) const TABLE: &str = "cni_rs_hostport";
/// The packet mark bit that asks for masquerade of port-mapped traffic:
/// bit 13, the Go reference portmap's default `markMasqBit`, so a node
/// running both masquerades the same packets.
pub const DEFAULT_MASQ_MARK: u32 = 1 << 13;
/// Who holds a host port (`ipv6_addr . inet_proto . inet_service : owner`,
/// the host IP, `::` for any, IPv4 ones mapped): no rule looks it up, it
/// makes a second attachment's ADD of a port in use fail.
pub(crate) const HP_OWNER: &str = "hp_owner";
/// Wildcard host port DNAT (`inet_proto . inet_service : ipv4_addr . inet_service`).
pub(crate) const HP_DNAT4: &str = "hp_dnat4";
/// The same for IPv6.
pub(crate) const HP_DNAT6: &str = "hp_dnat6";
/// Host IP DNAT (`ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service`).
pub(crate) const HIP_DNAT4: &str = "hip_dnat4";
/// The same for IPv6.
pub(crate) const HIP_DNAT6: &str = "hip_dnat6";
/// Sources to masquerade per wildcard host port
/// (`ipv4_addr . inet_proto . inet_service : owner`, intervals).
pub(crate) const HP_MASQ4: &str = "hp_masq4";
/// The same for IPv6.
pub(crate) const HP_MASQ6: &str = "hp_masq6";
/// Sources to masquerade per host IP and port
/// (`ipv4_addr . ipv4_addr . inet_proto . inet_service : owner`, intervals).
pub(crate) const HIP_MASQ4: &str = "hip_masq4";
/// The same for IPv6.
pub(crate) const HIP_MASQ6: &str = "hip_masq6";
/// Wildcard host ports masqueraded from localhost (127.0.0.0/8, `snat`):
/// `inet_proto . inet_service : owner`.
pub(crate) const HP_LO4: &str = "hp_lo4";
/// Host IP ports masqueraded from localhost:
/// `ipv4_addr . inet_proto . inet_service : owner`.
pub(crate) const HIP_LO4: &str = "hip_lo4";
/// Wildcard host ports masqueraded whatever the source (`masqAll`).
pub(crate) const HP_ALL4: &str = "hp_all4";
/// The same for IPv6.
pub(crate) const HP_ALL6: &str = "hp_all6";
/// Host IP ports masqueraded whatever the source (`masqAll`).
pub(crate) const HIP_ALL4: &str = "hip_all4";
/// The same for IPv6.
pub(crate) const HIP_ALL6: &str = "hip_all6";
/// The port-mapping chain of per-attachment rules (extra conditions).
pub(crate) const CONDITIONS_CHAIN: &str = "conditions";

/// `inet cni_rs_hostport`: traffic to a local address, from other hosts
/// (prerouting) and from the node itself (output), goes through
/// `dispatch`: first the conditions chain (attachments with extra
/// conditions), then per family the host-IP mappings and the wildcard ones:
/// the masquerade mark when the source is one the attachment masquerades
/// (hairpin from its subnet, localhost, or any with `masqAll`), then DNAT
/// from the map. A DNAT that finds its key ends the chain, so a host-IP
/// mapping wins over a wildcard one on the same port. Postrouting
/// masquerades DNATed connections whose first packet got the mark.
pub(crate) fn table(masq_mark: u32) -> Table {
    use KeyType::{InetProto as P, InetService as S, Ipv4Addr as A4, Ipv6Addr as A6, Mark as M};
    let dnat_base = |hook: Hook| Chain {
        name: hook.as_str().into(),
        base: Some(BaseChain {
            chain_type: ChainType::Nat,
            hook,
            priority: PRIORITY_DSTNAT,
        }),
        rules: vec![NftRule::new(vec![
            match_eq(Expr::FibDaddrType, Value::str("local")),
            Stmt::Jump("dispatch".into()),
        ])],
    };
    let l4 = || vec![Expr::meta("l4proto"), Expr::payload("th", "dport")];
    // Per family and class (host IP or wildcard): the hairpin mark (source
    // in the pod's subnet: an interval lookup), the localhost mark (IPv4)
    // and the masqAll mark (hash lookups: only hairpin needs intervals, so
    // the interval maps stay small), then the DNAT.
    let mark_and_dnat = |v6: bool, host_ip: bool| {
        let names = |v4: &'static str, v6n: &'static str| if v6 { v6n } else { v4 };
        let (masq, all, dnat) = if host_ip {
            (
                names(HIP_MASQ4, HIP_MASQ6),
                names(HIP_ALL4, HIP_ALL6),
                names(HIP_DNAT4, HIP_DNAT6),
            )
        } else {
            (
                names(HP_MASQ4, HP_MASQ6),
                names(HP_ALL4, HP_ALL6),
                names(HP_DNAT4, HP_DNAT6),
            )
        };
        let daddr: Vec<Expr> = if host_ip {
            vec![Expr::payload(ipx(v6), "daddr")]
        } else {
            Vec::new()
        };
        let mark = Stmt::SetMarkBits(masq_mark);
        let mut rules = vec![NftRule::new(vec![
            Stmt::Lookup {
                key: [vec![Expr::payload(ipx(v6), "saddr")], daddr.clone(), l4()].concat(),
                map: masq.into(),
                negate: false,
            },
            mark.clone(),
        ])];
        if !v6 {
            rules.push(NftRule::new(vec![
                match_eq(
                    Expr::payload("ip", "saddr"),
                    Value::Prefix(const_net("127.0.0.0/8")),
                ),
                Stmt::Lookup {
                    key: [daddr.clone(), l4()].concat(),
                    map: if host_ip { HIP_LO4 } else { HP_LO4 }.into(),
                    negate: false,
                },
                mark.clone(),
            ]));
        }
        let mut all_rule = Vec::new();
        if !host_ip {
            // The key has no address: match the family explicitly.
            all_rule.push(nfproto(v6));
        }
        all_rule.push(Stmt::Lookup {
            key: [daddr.clone(), l4()].concat(),
            map: all.into(),
            negate: false,
        });
        all_rule.push(mark);
        rules.push(NftRule::new(all_rule));
        rules.push(NftRule::new(vec![Stmt::DnatMap {
            v6,
            key: [daddr, l4()].concat(),
            map: dnat.into(),
        }]));
        rules
    };
    let mut dispatch = vec![NftRule::new(vec![Stmt::Jump(CONDITIONS_CHAIN.into())])];
    for host_ip in [true, false] {
        for v6 in [false, true] {
            dispatch.extend(mark_and_dnat(v6, host_ip));
        }
    }
    Table {
        family: NftFamily::Inet,
        name: TABLE,
        // Key : data types (A4, A6 addresses, P protocol, S port, M mark).
        maps: vec![
            map(OWNERS, &[M, M], &[M], false),
            map(HP_OWNER, &[A6, P, S], &[M], false),
            map(HIP_DNAT4, &[A4, P, S], &[A4, S], false),
            map(HIP_DNAT6, &[A6, P, S], &[A6, S], false),
            map(HP_DNAT4, &[P, S], &[A4, S], false),
            map(HP_DNAT6, &[P, S], &[A6, S], false),
            map(HIP_MASQ4, &[A4, A4, P, S], &[M], true),
            map(HIP_MASQ6, &[A6, A6, P, S], &[M], true),
            map(HP_MASQ4, &[A4, P, S], &[M], true),
            map(HP_MASQ6, &[A6, P, S], &[M], true),
            map(HP_LO4, &[P, S], &[M], false),
            map(HIP_LO4, &[A4, P, S], &[M], false),
            map(HP_ALL4, &[P, S], &[M], false),
            map(HP_ALL6, &[P, S], &[M], false),
            map(HIP_ALL4, &[A4, P, S], &[M], false),
            map(HIP_ALL6, &[A6, P, S], &[M], false),
        ],
        chains: vec![
            Chain {
                name: CONDITIONS_CHAIN.into(),
                base: None,
                rules: Vec::new(),
            },
            Chain {
                name: "dispatch".into(),
                base: None,
                rules: dispatch,
            },
            dnat_base(Hook::Prerouting),
            dnat_base(Hook::Output),
            Chain {
                name: "masquerading".into(),
                base: Some(BaseChain {
                    chain_type: ChainType::Nat,
                    hook: Hook::Postrouting,
                    priority: PRIORITY_SRCNAT,
                }),
                rules: vec![NftRule::new(vec![
                    Stmt::Match {
                        left: Expr::Ct("status".into()),
                        op: CmpOp::In,
                        right: Value::str("dnat"),
                    },
                    match_eq(Expr::MarkAnd(masq_mark), Value::Num(u64::from(masq_mark))),
                    Stmt::Masquerade,
                ])],
            },
        ],
        conditions_chain: Some(CONDITIONS_CHAIN),
    }
}

/// The elements (and, with extra conditions, rules) of one attachment's
/// port mappings; `None` when there is nothing to install (no mappings,
/// or only host IPs of a family the container has no address in).
///
/// Attachments with `conditionsV4`/`conditionsV6` cannot be elements alone:
/// they get, per mapping of that family, two tagged rules in the conditions
/// chain (`<conditions> <port> return`, then `<port> accept`), so traffic
/// that fails the conditions leaves the table un-NATed before the maps see
/// it. Adding and deleting those rules makes the kernel validate the table
/// (cost growing with the number of such rules), which only attachments
/// with conditions pay; a wildcard mapping with conditions also shadows a
/// host-IP mapping of another attachment on the same port.
pub(crate) fn elements(spec: &PortMappingSpec) -> Result<Option<AttachmentRules>> {
    let invalid = |reason: String| Error::InvalidFirewallSpec {
        op: FirewallOp::Add(RuleKind::PortMapping),
        attachment: spec.attachment.to_string(),
        reason,
    };
    if spec.mappings.is_empty() {
        return Ok(None);
    }
    if spec.container_v4.is_none() && spec.container_v6.is_none() {
        return Err(invalid("no container address".into()));
    }
    for m in &spec.mappings {
        if m.host_port == 0 || m.container_port == 0 {
            return Err(invalid(format!(
                "invalid port mapping {}:{}/{}: ports must be 1-65535",
                m.host_port,
                m.container_port,
                m.protocol.as_str()
            )));
        }
    }
    let tag = Some(spec.attachment.tag());
    let owner = owner_data(&spec.attachment);
    let conds4 = parse_conditions(&spec.conditions_v4)?;
    let conds6 = parse_conditions(&spec.conditions_v6)?;

    let families: Vec<(bool, IpNetwork, &[Stmt])> = [
        spec.container_v4
            .map(|n| (false, IpNetwork::V4(n), conds4.as_slice())),
        spec.container_v6
            .map(|n| (true, IpNetwork::V6(n), conds6.as_slice())),
    ]
    .into_iter()
    .flatten()
    .collect();

    let elem = |map: &str, key: Vec<Value>, data: Vec<Value>| Element {
        map: map.into(),
        key,
        data,
        comment: tag.clone(),
    };
    let mut elements: Vec<Element> = Vec::new();
    let mut rules: Vec<NftRule> = Vec::new();
    for m in &spec.mappings {
        for &(v6, net, conds) in &families {
            let host_ip = match m.host_ip {
                Some(ip) if ip.is_ipv6() != v6 => continue,
                Some(ip) if ip.is_unspecified() => None,
                other => other,
            };
            let proto = Value::str(m.protocol.as_str());
            let port = Value::Num(m.host_port.into());
            let owner_ip = match host_ip {
                Some(IpAddr::V4(a)) => a.to_ipv6_mapped(),
                Some(IpAddr::V6(a)) => a,
                None => Ipv6Addr::UNSPECIFIED,
            };
            push_unique(
                &mut elements,
                elem(
                    HP_OWNER,
                    vec![
                        Value::Addr(IpAddr::V6(owner_ip)),
                        proto.clone(),
                        port.clone(),
                    ],
                    owner.clone(),
                ),
            );
            let dest = vec![Value::Addr(net.ip()), Value::Num(m.container_port.into())];
            let (dnat_map, masq_map) = match (host_ip.is_some(), v6) {
                (true, false) => (HIP_DNAT4, HIP_MASQ4),
                (true, true) => (HIP_DNAT6, HIP_MASQ6),
                (false, false) => (HP_DNAT4, HP_MASQ4),
                (false, true) => (HP_DNAT6, HP_MASQ6),
            };
            let daddr: Vec<Value> = host_ip.map(Value::Addr).into_iter().collect();
            push_unique(
                &mut elements,
                elem(
                    dnat_map,
                    [daddr.clone(), vec![proto.clone(), port.clone()]].concat(),
                    dest,
                ),
            );
            let l4key = [daddr.clone(), vec![proto.clone(), port.clone()]].concat();
            if spec.masq_all {
                let all = match (host_ip.is_some(), v6) {
                    (true, false) => HIP_ALL4,
                    (true, true) => HIP_ALL6,
                    (false, false) => HP_ALL4,
                    (false, true) => HP_ALL6,
                };
                push_unique(&mut elements, elem(all, l4key, owner.clone()));
            } else if spec.snat {
                // Hairpin: the whole subnet, as the Go reference's iptables
                // backend, so a neighbour pod reaching the host port gets
                // replies through the node rather than straight from the pod.
                push_unique(
                    &mut elements,
                    elem(
                        masq_map,
                        [vec![prefix_part(net)], l4key.clone()].concat(),
                        owner.clone(),
                    ),
                );
                if !v6 {
                    // Localhost too (IPv4 only: the kernel never routes ::1
                    // off the node).
                    let lo = if host_ip.is_some() { HIP_LO4 } else { HP_LO4 };
                    push_unique(&mut elements, elem(lo, l4key, owner.clone()));
                }
            }
            if !conds.is_empty() {
                let mut select = vec![nfproto(v6)];
                if let Some(ip) = host_ip {
                    select.push(match_eq(Expr::payload(ipx(v6), "daddr"), Value::Addr(ip)));
                }
                select.push(match_eq(
                    Expr::payload(m.protocol.as_str(), "dport"),
                    Value::Num(m.host_port.into()),
                ));
                let pass = NftRule {
                    stmts: [vec![nfproto(v6)], conds.to_vec(), select[1..].to_vec()]
                        .concat()
                        .into_iter()
                        .chain([Stmt::Return])
                        .collect(),
                    comment: tag.clone(),
                };
                let stop = NftRule {
                    stmts: select.into_iter().chain([Stmt::Accept]).collect(),
                    comment: tag.clone(),
                };
                if !rules.contains(&pass) {
                    rules.push(pass);
                    rules.push(stop);
                }
            }
        }
    }
    if elements.is_empty() {
        return Ok(None);
    }
    Ok(Some(anchored(
        &spec.attachment,
        AttachmentRules {
            elements,
            rules,
            shared: Vec::new(),
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::super::{batch, macspoof, masquerade, owner_id};
    use super::*;
    use crate::model::NftCommand;

    fn pm_spec() -> PortMappingSpec {
        let mut spec = PortMappingSpec::new(AttachmentId::new("net", "cid", "eth0"));
        spec.container_v4 = Some("10.0.0.5/24".parse().unwrap());
        spec.container_v6 = Some("fd00::5/64".parse().unwrap());
        spec.mappings = vec![
            HostPortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: Protocol::Tcp,
                host_ip: None,
            },
            HostPortMapping {
                host_port: 53,
                container_port: 5353,
                protocol: Protocol::Udp,
                host_ip: Some("192.0.2.1".parse().unwrap()),
            },
        ];
        spec
    }

    fn keys(r: &AttachmentRules, map: &str) -> Vec<(Vec<Value>, Vec<Value>)> {
        r.elements
            .iter()
            .filter(|e| e.map == map)
            .map(|e| (e.key.clone(), e.data.clone()))
            .collect()
    }

    fn a(s: &str) -> Value {
        Value::Addr(s.parse().unwrap())
    }

    fn p(s: &str) -> Value {
        Value::Prefix(s.parse().unwrap())
    }

    #[test]
    fn port_mappings_are_elements_only() {
        let spec = pm_spec();
        let r = elements(&spec).unwrap().unwrap();
        let id = spec.attachment.clone();
        let owner = vec![Value::Num(u64::from(owner_id(&id.owner_hash())))];
        assert!(r.rules.is_empty());
        assert!(r
            .elements
            .iter()
            .all(|e| e.comment.as_deref() == Some(&*id.tag())));
        // One owner element per host port (both families share the
        // wildcard one), IPv4 host IPs as mapped IPv6.
        assert_eq!(
            keys(&r, HP_OWNER),
            vec![
                (
                    vec![a("::"), Value::str("tcp"), Value::Num(8080)],
                    owner.clone()
                ),
                (
                    vec![a("::ffff:192.0.2.1"), Value::str("udp"), Value::Num(53)],
                    owner.clone()
                ),
            ]
        );
        assert_eq!(
            keys(&r, HP_DNAT4),
            vec![(
                vec![Value::str("tcp"), Value::Num(8080)],
                vec![a("10.0.0.5"), Value::Num(80)]
            )]
        );
        assert_eq!(
            keys(&r, HP_DNAT6),
            vec![(
                vec![Value::str("tcp"), Value::Num(8080)],
                vec![a("fd00::5"), Value::Num(80)]
            )]
        );
        // The v4 host IP only for the v4 address.
        assert_eq!(
            keys(&r, HIP_DNAT4),
            vec![(
                vec![a("192.0.2.1"), Value::str("udp"), Value::Num(53)],
                vec![a("10.0.0.5"), Value::Num(5353)]
            )]
        );
        assert!(keys(&r, HIP_DNAT6).is_empty());
        // snat: hairpin (subnet, an interval) for both families, localhost
        // (a hash key) for v4.
        assert_eq!(
            keys(&r, HP_MASQ4),
            vec![(
                vec![p("10.0.0.0/24"), Value::str("tcp"), Value::Num(8080)],
                owner.clone()
            )]
        );
        assert_eq!(
            keys(&r, HP_LO4),
            vec![(vec![Value::str("tcp"), Value::Num(8080)], owner.clone())]
        );
        assert_eq!(
            keys(&r, HP_MASQ6),
            vec![(
                vec![p("fd00::/64"), Value::str("tcp"), Value::Num(8080)],
                owner.clone()
            )]
        );
        assert_eq!(
            keys(&r, HIP_MASQ4),
            vec![(
                vec![
                    p("10.0.0.0/24"),
                    a("192.0.2.1"),
                    Value::str("udp"),
                    Value::Num(53)
                ],
                owner.clone()
            )]
        );
        assert_eq!(
            keys(&r, HIP_LO4),
            vec![(
                vec![a("192.0.2.1"), Value::str("udp"), Value::Num(53)],
                owner
            )]
        );
        assert!(keys(&r, HP_ALL4).is_empty());
        assert!(batch::describe_keys(&r).contains("hp_dnat4 tcp . 8080"));
    }

    #[test]
    fn port_mappings_edge_cases() {
        let mut spec = pm_spec();
        spec.mappings.clear();
        assert!(elements(&spec).unwrap().is_none());

        let mut spec = pm_spec();
        spec.container_v4 = None;
        spec.mappings.remove(0);
        assert!(elements(&spec).unwrap().is_none());

        let mut spec = pm_spec();
        spec.mappings[0].host_port = 0;
        assert!(matches!(
            elements(&spec),
            Err(Error::InvalidFirewallSpec { .. })
        ));

        // snat off: no masquerade elements; an unspecified host IP is a
        // wildcard.
        let mut spec = pm_spec();
        spec.snat = false;
        spec.mappings[1].host_ip = Some("0.0.0.0".parse().unwrap());
        let r = elements(&spec).unwrap().unwrap();
        assert!(r.elements.iter().all(|e| !e.map.contains("masq")));
        assert_eq!(keys(&r, HP_DNAT4).len(), 2);
        assert!(keys(&r, HIP_DNAT4).is_empty());

        // masqAll: any source, hash keys only.
        let mut spec = pm_spec();
        spec.masq_all = true;
        spec.mappings.truncate(1);
        let r = elements(&spec).unwrap().unwrap();
        assert!(r.elements.iter().all(|e| !e.map.contains("masq")));
        assert_eq!(
            keys(&r, HP_ALL4)[0].0,
            vec![Value::str("tcp"), Value::Num(8080)]
        );
        assert_eq!(keys(&r, HP_ALL6).len(), 1);

        // A pod with a /32 address: its hairpin source is the address.
        let mut spec = pm_spec();
        spec.container_v4 = Some("10.0.0.5/32".parse().unwrap());
        let r = elements(&spec).unwrap().unwrap();
        assert_eq!(keys(&r, HP_MASQ4)[0].0[0], a("10.0.0.5"));
    }

    #[test]
    fn conditions_become_pass_and_stop_rules() {
        let mut spec = pm_spec();
        spec.mappings.truncate(1);
        spec.conditions_v4 = vec!["iifname".into(), "eth0".into()];
        let r = elements(&spec).unwrap().unwrap();
        // v4 only: pass (conditions, port, return) then stop (port, accept).
        assert_eq!(r.rules.len(), 2);
        assert_eq!(r.rules[0].stmts.len(), 4);
        assert_eq!(r.rules[0].stmts.last(), Some(&Stmt::Return));
        assert_eq!(
            r.rules[1].stmts,
            vec![
                nfproto(false),
                match_eq(Expr::payload("tcp", "dport"), Value::Num(8080)),
                Stmt::Accept
            ]
        );
        assert!(r
            .rules
            .iter()
            .all(|x| x.comment.as_deref() == Some(&*spec.attachment.tag())));
        // The elements are there all the same.
        assert_eq!(keys(&r, HP_DNAT4).len(), 1);
        let b = batch::attach(&table(DEFAULT_MASQ_MARK), &r, true);
        assert!(
            matches!(&b.commands[0], NftCommand::AddRule { chain, .. } if chain == CONDITIONS_CHAIN)
        );
    }

    #[test]
    fn every_attachment_has_an_anchor_fingerprinting_its_spec() {
        let spec = pm_spec();
        let r = elements(&spec).unwrap().unwrap();
        assert_eq!(r.elements[0].map, OWNERS);
        assert_eq!(r.elements.iter().filter(|e| e.map == OWNERS).count(), 1);
        let mut other = pm_spec();
        other.mappings.truncate(1);
        let r2 = elements(&other).unwrap().unwrap();
        // Same owner, other spec: same key, other data.
        assert_eq!(r.elements[0].key, r2.elements[0].key);
        assert_ne!(r.elements[0].data, r2.elements[0].data);
        for t in [
            masquerade::table(),
            table(DEFAULT_MASQ_MARK),
            macspoof::table(),
        ] {
            assert!(t.map(OWNERS).is_some());
        }
    }

    #[test]
    fn udp_host_ports_per_family() {
        let mut spec = PortMappingSpec::new(AttachmentId::new("n", "c", "eth0"));
        spec.container_v4 = Some("10.0.0.2/24".parse().unwrap());
        let m = |port, protocol, host_ip: Option<&str>| HostPortMapping {
            host_port: port,
            container_port: 1,
            protocol,
            host_ip: host_ip.map(|h| h.parse().unwrap()),
        };
        spec.mappings = vec![
            m(53, Protocol::Udp, None),
            m(53, Protocol::Udp, Some("10.1.1.1")),
            m(54, Protocol::Udp, Some("fd00::1")),
            m(80, Protocol::Tcp, None),
        ];
        assert_eq!(spec.udp_host_ports(false), vec![53]);
        assert!(spec.udp_host_ports(true).is_empty());
        spec.container_v6 = Some("fd00::2/64".parse().unwrap());
        assert_eq!(spec.udp_host_ports(true), vec![53, 54]);
    }
}
