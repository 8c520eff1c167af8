//! The tables and per-attachment elements of each firewall feature, as
//! pure functions from specs to the [`model`](super::model). Backends only
//! encode what these return.
//!
//! An attachment owns nothing but map elements tagged with its comment
//! (plus, for port mappings with `conditionsV4`/`conditionsV6`, a few tagged
//! rules): adding or removing map elements never makes the kernel
//! re-validate the table (only rules and `jump`/`goto` elements do), so ADD
//! and DEL cost the same whatever the number of attachments.
//!
//! The shared objects of a table (maps, fixed chains and their rules) are
//! written by the first ADD and then left alone (see [`attach_batch`]), so a
//! change of their shape comes with new map names: an ADD that misses a map
//! rebuilds the shared objects, one that finds them does not look at them.
//! The names changed with this layout (earlier ones dispatched through
//! verdict maps to one chain per attachment); that layout was never
//! released, so its leftovers are not migrated: they are unreachable once the
//! fixed chains are rewritten, and harmless.

use std::net::{IpAddr, Ipv6Addr};

use ipnetwork::IpNetwork;

use super::conditions::parse_conditions;
use super::model::{
    AttachmentRules, BaseChain, Batch, Chain, ChainType, CmpOp, Command, Element, Expr, Family,
    Hook, KeyType, Map, Rule, RuleRef, Stmt, Table, Value, PRIORITY_DSTNAT, PRIORITY_SRCNAT,
};
use super::{
    AttachmentId, FirewallOp, MacSpoofCheckSpec, MasqueradeSpec, PortMappingSpec, RuleKind,
};
use crate::{Error, Result};

/// The masquerade table (`inet`); distinct from the Go reference's
/// `cni_plugins_masquerade` so both can run on one node.
pub const MASQ_TABLE: &str = "cni_rs_masq";
/// The port mapping table (`inet`); distinct from the Go reference's
/// `cni_hostport`.
pub const HOSTPORT_TABLE: &str = "cni_rs_hostport";
/// The MAC spoof check table (`bridge`); distinct from the Go reference's
/// `bridge nat`.
pub const MAC_SPOOF_TABLE: &str = "cni_rs_macspoofchk";
/// The packet mark bit that asks for masquerade of port-mapped traffic:
/// bit 13, the Go reference portmap's default `markMasqBit`, so a node
/// running both masquerades the same packets.
pub const DEFAULT_MASQ_MARK: u32 = 1 << 13;

/// One element per attachment in every table (`mark . mark : mark`, the
/// 64-bit owner id to a fingerprint of everything the attachment owns
/// there): a re-ADD finds its own anchor and replaces what it owned, and a
/// DEL whose spec differs from the ADD's clashes on it and falls back to
/// removing by tag, so no element outlives its attachment.
pub const OWNERS: &str = "owners";
/// Pod addresses to masquerade (`ipv4_addr : owner`).
pub const MASQ_SRC4: &str = "masq_src4";
/// Pod addresses to masquerade (`ipv6_addr : owner`).
pub const MASQ_SRC6: &str = "masq_src6";
/// Destinations a pod address reaches without masquerade, its own subnet
/// (`ipv4_addr . ipv4_addr : owner`, intervals).
pub const MASQ_KEEP4: &str = "masq_keep4";
/// The same for IPv6.
pub const MASQ_KEEP6: &str = "masq_keep6";
/// Who holds a host port (`ipv6_addr . inet_proto . inet_service : owner`,
/// the host IP, `::` for any, IPv4 ones mapped): no rule looks it up, it
/// makes a second attachment's ADD of a port in use fail.
pub const HP_OWNER: &str = "hp_owner";
/// Wildcard host port DNAT (`inet_proto . inet_service : ipv4_addr . inet_service`).
pub const HP_DNAT4: &str = "hp_dnat4";
/// The same for IPv6.
pub const HP_DNAT6: &str = "hp_dnat6";
/// Host IP DNAT (`ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service`).
pub const HIP_DNAT4: &str = "hip_dnat4";
/// The same for IPv6.
pub const HIP_DNAT6: &str = "hip_dnat6";
/// Sources to masquerade per wildcard host port
/// (`ipv4_addr . inet_proto . inet_service : owner`, intervals).
pub const HP_MASQ4: &str = "hp_masq4";
/// The same for IPv6.
pub const HP_MASQ6: &str = "hp_masq6";
/// Sources to masquerade per host IP and port
/// (`ipv4_addr . ipv4_addr . inet_proto . inet_service : owner`, intervals).
pub const HIP_MASQ4: &str = "hip_masq4";
/// The same for IPv6.
pub const HIP_MASQ6: &str = "hip_masq6";
/// Wildcard host ports masqueraded from localhost (127.0.0.0/8, `snat`):
/// `inet_proto . inet_service : owner`.
pub const HP_LO4: &str = "hp_lo4";
/// Host IP ports masqueraded from localhost:
/// `ipv4_addr . inet_proto . inet_service : owner`.
pub const HIP_LO4: &str = "hip_lo4";
/// Wildcard host ports masqueraded whatever the source (`masqAll`).
pub const HP_ALL4: &str = "hp_all4";
/// The same for IPv6.
pub const HP_ALL6: &str = "hp_all6";
/// Host IP ports masqueraded whatever the source (`masqAll`).
pub const HIP_ALL4: &str = "hip_all4";
/// The same for IPv6.
pub const HIP_ALL6: &str = "hip_all6";
/// Interfaces whose source MAC is checked (`ifname : owner`).
pub const SC_PORTS: &str = "sc_ports";
/// The MAC allowed per interface (`ifname . ether_addr : owner`).
pub const SC_ALLOWED: &str = "sc_allowed";
/// The port-mapping chain of per-attachment rules (extra conditions).
pub const CONDITIONS_CHAIN: &str = "conditions";

/// The table of `kind`.
pub fn table(kind: RuleKind, masq_mark: u32) -> Table {
    match kind {
        RuleKind::Masquerade => masquerade_table(),
        RuleKind::PortMapping => hostport_table(masq_mark),
        RuleKind::MacSpoofCheck => mac_spoof_table(),
    }
}

/// The 32-bit owner id stored as the data of an attachment's elements,
/// from its owner hash ([`AttachmentId::owner_hash`]).
pub fn owner_id(owner_hash: &str) -> u32 {
    // FNV-1a folded to 32 bits: stable, and two owners of the same key
    // (the case it exists for) collide with negligible probability.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in owner_hash.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h ^ (h >> 32)) as u32
}

/// The owner hash a comment written by [`AttachmentId::tag`] starts with.
pub fn owner_of_comment(comment: &str) -> Option<&str> {
    let hash = comment.split_once(", net: ").map(|(h, _)| h)?;
    let (net, inst) = hash.split_once('-')?;
    let is_hash = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
    (is_hash(net) && is_hash(inst)).then_some(hash)
}

fn ipx(v6: bool) -> &'static str {
    if v6 {
        "ip6"
    } else {
        "ip"
    }
}

fn match_eq(left: Expr, right: Value) -> Stmt {
    Stmt::Match {
        left,
        op: CmpOp::Eq,
        right,
    }
}

fn nfproto(v6: bool) -> Stmt {
    match_eq(
        Expr::meta("nfproto"),
        Value::str(if v6 { "ipv6" } else { "ipv4" }),
    )
}

fn const_net(net: &str) -> IpNetwork {
    net.parse().expect("constant prefix literal")
}

fn masked(net: IpNetwork) -> IpNetwork {
    // ipnetwork keeps host bits; nft wants the network address in a prefix.
    IpNetwork::new(net.network(), net.prefix()).unwrap_or(net)
}

/// A prefix as an interval key part: a full-length prefix is the address
/// itself (as nft lists it).
fn prefix_part(net: IpNetwork) -> Value {
    let net = masked(net);
    let full = if net.is_ipv4() { 32 } else { 128 };
    if net.prefix() == full {
        Value::Addr(net.ip())
    } else {
        Value::Prefix(net)
    }
}

fn map(name: &'static str, key: &[KeyType], data: &[KeyType], interval: bool) -> Map {
    Map {
        name,
        key: key.to_vec(),
        data: data.to_vec(),
        interval,
    }
}

/// `inet cni_rs_masq`: multicast is never masqueraded (as in the Go
/// reference); a pod address is masqueraded unless the destination is in
/// its own subnet: two lookups whatever the number of pods.
pub fn masquerade_table() -> Table {
    use KeyType::*;
    let multicast_return = |v6: bool, net: &str| {
        Rule::new(vec![
            match_eq(
                Expr::payload(ipx(v6), "daddr"),
                Value::Prefix(const_net(net)),
            ),
            Stmt::Return,
        ])
    };
    let masq = |v6: bool| {
        let (src, keep) = if v6 {
            (MASQ_SRC6, MASQ_KEEP6)
        } else {
            (MASQ_SRC4, MASQ_KEEP4)
        };
        Rule::new(vec![
            Stmt::Lookup {
                key: vec![Expr::payload(ipx(v6), "saddr")],
                map: src.into(),
                negate: false,
            },
            Stmt::Lookup {
                key: vec![
                    Expr::payload(ipx(v6), "saddr"),
                    Expr::payload(ipx(v6), "daddr"),
                ],
                map: keep.into(),
                negate: true,
            },
            Stmt::Masquerade,
        ])
    };
    Table {
        family: Family::Inet,
        name: MASQ_TABLE,
        maps: vec![
            map(OWNERS, &[Mark, Mark], &[Mark], false),
            map(MASQ_SRC4, &[Ipv4Addr], &[Mark], false),
            map(MASQ_KEEP4, &[Ipv4Addr, Ipv4Addr], &[Mark], true),
            map(MASQ_SRC6, &[Ipv6Addr], &[Mark], false),
            map(MASQ_KEEP6, &[Ipv6Addr, Ipv6Addr], &[Mark], true),
        ],
        chains: vec![Chain {
            name: "postrouting".into(),
            base: Some(BaseChain {
                chain_type: ChainType::Nat,
                hook: Hook::Postrouting,
                priority: PRIORITY_SRCNAT,
            }),
            rules: vec![
                multicast_return(false, "224.0.0.0/4"),
                multicast_return(true, "ff00::/8"),
                masq(false),
                masq(true),
            ],
        }],
        conditions_chain: None,
    }
}

/// `inet cni_rs_hostport`: traffic to a local address, from other hosts
/// (prerouting) and from the node itself (output), goes through
/// `dispatch`: first the conditions chain (attachments with extra
/// conditions), then per family the host-IP mappings and the wildcard ones:
/// the masquerade mark when the source is one the attachment masquerades
/// (hairpin from its subnet, localhost, or any with `masqAll`), then DNAT
/// from the map. A DNAT that finds its key ends the chain, so a host-IP
/// mapping wins over a wildcard one on the same port. Postrouting
/// masquerades DNATed connections whose first packet got the mark.
pub fn hostport_table(masq_mark: u32) -> Table {
    use KeyType::*;
    let dnat_base = |hook: Hook| Chain {
        name: hook.as_str().into(),
        base: Some(BaseChain {
            chain_type: ChainType::Nat,
            hook,
            priority: PRIORITY_DSTNAT,
        }),
        rules: vec![Rule::new(vec![
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
        let mut rules = vec![Rule::new(vec![
            Stmt::Lookup {
                key: [vec![Expr::payload(ipx(v6), "saddr")], daddr.clone(), l4()].concat(),
                map: masq.into(),
                negate: false,
            },
            mark.clone(),
        ])];
        if !v6 {
            rules.push(Rule::new(vec![
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
        rules.push(Rule::new(all_rule));
        rules.push(Rule::new(vec![Stmt::DnatMap {
            v6,
            key: [daddr, l4()].concat(),
            map: dnat.into(),
        }]));
        rules
    };
    let mut dispatch = vec![Rule::new(vec![Stmt::Jump(CONDITIONS_CHAIN.into())])];
    for host_ip in [true, false] {
        for v6 in [false, true] {
            dispatch.extend(mark_and_dnat(v6, host_ip));
        }
    }
    Table {
        family: Family::Inet,
        name: HOSTPORT_TABLE,
        maps: vec![
            map(OWNERS, &[Mark, Mark], &[Mark], false),
            map(
                HP_OWNER,
                &[Ipv6Addr, InetProto, InetService],
                &[Mark],
                false,
            ),
            map(
                HIP_DNAT4,
                &[Ipv4Addr, InetProto, InetService],
                &[Ipv4Addr, InetService],
                false,
            ),
            map(
                HIP_DNAT6,
                &[Ipv6Addr, InetProto, InetService],
                &[Ipv6Addr, InetService],
                false,
            ),
            map(
                HP_DNAT4,
                &[InetProto, InetService],
                &[Ipv4Addr, InetService],
                false,
            ),
            map(
                HP_DNAT6,
                &[InetProto, InetService],
                &[Ipv6Addr, InetService],
                false,
            ),
            map(
                HIP_MASQ4,
                &[Ipv4Addr, Ipv4Addr, InetProto, InetService],
                &[Mark],
                true,
            ),
            map(
                HIP_MASQ6,
                &[Ipv6Addr, Ipv6Addr, InetProto, InetService],
                &[Mark],
                true,
            ),
            map(HP_MASQ4, &[Ipv4Addr, InetProto, InetService], &[Mark], true),
            map(HP_MASQ6, &[Ipv6Addr, InetProto, InetService], &[Mark], true),
            map(HP_LO4, &[InetProto, InetService], &[Mark], false),
            map(HIP_LO4, &[Ipv4Addr, InetProto, InetService], &[Mark], false),
            map(HP_ALL4, &[InetProto, InetService], &[Mark], false),
            map(HP_ALL6, &[InetProto, InetService], &[Mark], false),
            map(
                HIP_ALL4,
                &[Ipv4Addr, InetProto, InetService],
                &[Mark],
                false,
            ),
            map(
                HIP_ALL6,
                &[Ipv6Addr, InetProto, InetService],
                &[Mark],
                false,
            ),
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
                rules: vec![Rule::new(vec![
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

/// `bridge cni_rs_macspoofchk`: frames entering the bridge from a checked
/// port are dropped unless `port . source MAC` is the allowed pair (the Go
/// reference's `pkg/link/spoofcheck.go` semantics, with two lookups instead
/// of rules per port).
pub fn mac_spoof_table() -> Table {
    use KeyType::*;
    Table {
        family: Family::Bridge,
        name: MAC_SPOOF_TABLE,
        maps: vec![
            map(OWNERS, &[Mark, Mark], &[Mark], false),
            map(SC_PORTS, &[IfName], &[Mark], false),
            map(SC_ALLOWED, &[IfName, EtherAddr], &[Mark], false),
        ],
        chains: vec![Chain {
            name: "prerouting".into(),
            base: Some(BaseChain {
                chain_type: ChainType::Filter,
                hook: Hook::Prerouting,
                priority: -300,
            }),
            rules: vec![Rule::new(vec![
                Stmt::Lookup {
                    key: vec![Expr::meta("iifname")],
                    map: SC_PORTS.into(),
                    negate: false,
                },
                Stmt::Lookup {
                    key: vec![Expr::meta("iifname"), Expr::payload("ether", "saddr")],
                    map: SC_ALLOWED.into(),
                    negate: true,
                },
                Stmt::Drop,
            ])],
        }],
        conditions_chain: None,
    }
}

fn push_unique(elements: &mut Vec<Element>, e: Element) {
    // The first element of a key wins: a second one with other data would
    // make the kernel refuse the whole batch.
    if !elements.iter().any(|x| x.map == e.map && x.key == e.key) {
        elements.push(e);
    }
}

fn fnv64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Puts the attachment's [`OWNERS`] element first: key the 64-bit owner id,
/// data a fingerprint of the other elements and rules.
fn anchored(id: &AttachmentId, mut rules: AttachmentRules) -> AttachmentRules {
    let text = format!("{:?}{:?}", rules.elements, rules.rules);
    let print = fnv64(text.bytes());
    let owner = fnv64(id.owner_hash().bytes());
    rules.elements.insert(
        0,
        Element {
            map: OWNERS.into(),
            key: vec![Value::Num(owner >> 32), Value::Num(owner & 0xffff_ffff)],
            data: vec![Value::Num((print ^ (print >> 32)) & 0xffff_ffff)],
            comment: Some(id.tag()),
        },
    );
    rules
}

fn owner_data(id: &AttachmentId) -> Vec<Value> {
    vec![Value::Num(u64::from(owner_id(&id.owner_hash())))]
}

/// The elements of one attachment's masquerade.
pub fn masquerade_rules(spec: &MasqueradeSpec) -> AttachmentRules {
    masquerade_rules_all(&spec.attachment, &[spec.address])
}

/// The elements of one attachment's masquerade of several addresses (a
/// dual-stack pod).
pub fn masquerade_rules_all(attachment: &AttachmentId, addresses: &[IpNetwork]) -> AttachmentRules {
    let tag = Some(attachment.tag());
    let data = owner_data(attachment);
    let mut elements = Vec::new();
    for address in addresses {
        let v6 = address.is_ipv6();
        push_unique(
            &mut elements,
            Element {
                map: if v6 { MASQ_SRC6 } else { MASQ_SRC4 }.into(),
                key: vec![Value::Addr(address.ip())],
                data: data.clone(),
                comment: tag.clone(),
            },
        );
        push_unique(
            &mut elements,
            Element {
                map: if v6 { MASQ_KEEP6 } else { MASQ_KEEP4 }.into(),
                key: vec![Value::Addr(address.ip()), prefix_part(*address)],
                data: data.clone(),
                comment: tag.clone(),
            },
        );
    }
    anchored(
        attachment,
        AttachmentRules {
            elements,
            rules: Vec::new(),
        },
    )
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
pub fn port_mapping_rules(
    spec: &PortMappingSpec,
    _masq_mark: u32,
) -> Result<Option<AttachmentRules>> {
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
    let mut rules: Vec<Rule> = Vec::new();
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
                let pass = Rule {
                    stmts: [vec![nfproto(v6)], conds.to_vec(), select[1..].to_vec()]
                        .concat()
                        .into_iter()
                        .chain([Stmt::Return])
                        .collect(),
                    comment: tag.clone(),
                };
                let stop = Rule {
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
        AttachmentRules { elements, rules },
    )))
}

/// The elements of one attachment's MAC spoof check.
pub fn mac_spoof_rules(spec: &MacSpoofCheckSpec) -> AttachmentRules {
    let tag = Some(spec.attachment.tag());
    let data = owner_data(&spec.attachment);
    let rules = AttachmentRules {
        elements: vec![
            Element {
                map: SC_PORTS.into(),
                key: vec![Value::Str(spec.host_ifname.clone())],
                data: data.clone(),
                comment: tag.clone(),
            },
            Element {
                map: SC_ALLOWED.into(),
                key: vec![
                    Value::Str(spec.host_ifname.clone()),
                    Value::Str(spec.mac.to_string()),
                ],
                data,
                comment: tag,
            },
        ],
        rules: Vec::new(),
    };
    anchored(&spec.attachment, rules)
}

/// The batch creating the table's shared objects: the table, maps and fixed
/// chains if missing, the fixed chains' rules rewritten (flush + add,
/// atomic), so it also repairs them. Rewriting rules makes the kernel
/// validate the table, so this batch is only used when [`attach_batch`]
/// fails for lack of the shared objects.
pub fn shared_batch(table: &Table) -> Batch {
    let mut commands = vec![Command::AddTable];
    commands.extend(table.maps.iter().cloned().map(Command::AddMap));
    for c in &table.chains {
        commands.push(Command::AddChain {
            name: c.name.clone(),
            base: c.base,
        });
    }
    for c in table.chains.iter().filter(|c| !c.rules.is_empty()) {
        commands.push(Command::FlushChain(c.name.clone()));
        for r in &c.rules {
            commands.push(Command::AddRule {
                chain: c.name.clone(),
                rule: r.clone(),
            });
        }
    }
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// [`shared_batch`] followed by [`attach_batch`], as one batch.
pub fn add_batch(table: &Table, rules: &AttachmentRules) -> Batch {
    let mut b = shared_batch(table);
    b.commands.extend(attach_batch(table, rules, true).commands);
    b
}

/// The batch installing an attachment's elements (and conditions rules).
/// With `exclusive`, any key already present fails the batch (`File
/// exists`), so an ADD never silently shares or takes over a key; without,
/// only a key present with other data (another owner) does. Its cost does
/// not depend on the number of attachments (without conditions rules); it
/// fails (`No such file or directory`) when the table or its maps do not
/// exist yet.
pub fn attach_batch(table: &Table, rules: &AttachmentRules, exclusive: bool) -> Batch {
    let mut commands = Vec::new();
    if let Some(chain) = table.conditions_chain {
        for r in &rules.rules {
            commands.push(Command::AddRule {
                chain: chain.to_owned(),
                rule: r.clone(),
            });
        }
    }
    commands.extend(rules.elements.iter().map(|e| Command::AddElement {
        element: e.clone(),
        exclusive,
    }));
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// Keys per delete message: at most about 100 bytes each (a first and a
/// last 40-byte key with their headers), so a message's element list stays
/// well below the 64 KiB an attribute can hold.
const DELETE_CHUNK: usize = 256;

/// The batch removing elements (by map and key) and rules (by handle).
pub fn remove_batch(table: &Table, elements: &[(String, Vec<Value>)], rules: &[RuleRef]) -> Batch {
    let mut commands = Vec::new();
    let mut maps: Vec<&str> = elements.iter().map(|(m, _)| m.as_str()).collect();
    maps.sort_unstable();
    maps.dedup();
    for map in maps {
        let keys: Vec<Vec<Value>> = elements
            .iter()
            .filter(|(m, _)| m == map)
            .map(|(_, k)| k.clone())
            .collect();
        // A netlink attribute's length is 16 bits: a GC of many attachments
        // needs several messages per map.
        for chunk in keys.chunks(DELETE_CHUNK) {
            commands.push(Command::DeleteElements {
                map: map.to_owned(),
                keys: chunk.to_vec(),
            });
        }
    }
    commands.extend(rules.iter().cloned().map(Command::DeleteRule));
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The one-batch DEL of the elements `rules` names (and the conditions
/// rules `handles`), written so that it also succeeds when they are already
/// gone (a repeated DEL): the elements are first added (no-ops when present
/// with the same data), then deleted. It fails as a whole, changing
/// nothing, when one of the keys is held by another attachment (its owner id
/// or DNAT destination differs: `File exists`); the caller then reads the
/// state. Failing batches are avoided on purpose: `nft` answers ENOENT with
/// a search of the whole table for a similar name to suggest.
pub fn delete_batch(table: &Table, rules: &AttachmentRules, handles: &[RuleRef]) -> Batch {
    let elements: Vec<(String, Vec<Value>)> = rules
        .elements
        .iter()
        .map(|e| (e.map.clone(), e.key.clone()))
        .collect();
    let mut commands: Vec<Command> = rules
        .elements
        .iter()
        .map(|e| Command::AddElement {
            element: e.clone(),
            exclusive: false,
        })
        .collect();
    commands.extend(remove_batch(table, &elements, handles).commands);
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The DEL of [`delete_batch`] without deleting elements: they expire
/// instead ([`Command::ExpireElements`]), so no RCU wait at socket close.
pub fn expire_batch(table: &Table, rules: &AttachmentRules, handles: &[RuleRef]) -> Batch {
    // One message per map: the kernel takes elements of one set per message.
    let mut maps: Vec<&str> = rules.elements.iter().map(|e| e.map.as_str()).collect();
    maps.sort_unstable();
    maps.dedup();
    let mut commands: Vec<Command> = maps
        .into_iter()
        .map(|m| {
            Command::ExpireElements(
                rules
                    .elements
                    .iter()
                    .filter(|e| e.map == m)
                    .cloned()
                    .collect(),
            )
        })
        .collect();
    commands.extend(remove_batch(table, &[], handles).commands);
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The element timeout: elements live "forever" (ten years), and only an
/// element with a timeout can be made to expire later.
pub const ELEMENT_TIMEOUT_MS: u64 = 3650 * 86_400_000;

/// Elements expiring within this long are being removed (an expired DEL),
/// not installed.
pub const EXPIRING_MS: u64 = 86_400_000;

/// The map keys of `rules` as text (`hp_dnat4 tcp . 8080`), for messages.
pub fn describe_keys(rules: &AttachmentRules) -> String {
    rules
        .elements
        .iter()
        .map(|e| {
            let parts: Vec<String> = e.key.iter().map(value_text).collect();
            format!("{} {}", e.map, parts.join(" . "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A value as nft writes it.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Num(n) => n.to_string(),
        Value::Addr(a) => a.to_string(),
        Value::Prefix(p) => p.to_string(),
        Value::Range(a, b) => format!("{}-{}", value_text(a), value_text(b)),
        Value::Set(items) => {
            let inner: Vec<String> = items.iter().map(value_text).collect();
            format!("{{ {} }}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AttachmentId, PortMapping, Protocol};
    use super::*;

    fn pm_spec() -> PortMappingSpec {
        let mut spec = PortMappingSpec::new(AttachmentId::new("net", "cid", "eth0"));
        spec.container_v4 = Some("10.0.0.5/24".parse().unwrap());
        spec.container_v6 = Some("fd00::5/64".parse().unwrap());
        spec.mappings = vec![
            PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: Protocol::Tcp,
                host_ip: None,
            },
            PortMapping {
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
        let r = port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
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
        assert!(describe_keys(&r).contains("hp_dnat4 tcp . 8080"));
    }

    #[test]
    fn port_mappings_edge_cases() {
        let mut spec = pm_spec();
        spec.mappings.clear();
        assert!(port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .is_none());

        let mut spec = pm_spec();
        spec.container_v4 = None;
        spec.mappings.remove(0);
        assert!(port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .is_none());

        let mut spec = pm_spec();
        spec.mappings[0].host_port = 0;
        assert!(matches!(
            port_mapping_rules(&spec, DEFAULT_MASQ_MARK),
            Err(Error::InvalidFirewallSpec { .. })
        ));

        // snat off: no masquerade elements; an unspecified host IP is a
        // wildcard.
        let mut spec = pm_spec();
        spec.snat = false;
        spec.mappings[1].host_ip = Some("0.0.0.0".parse().unwrap());
        let r = port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        assert!(r.elements.iter().all(|e| !e.map.contains("masq")));
        assert_eq!(keys(&r, HP_DNAT4).len(), 2);
        assert!(keys(&r, HIP_DNAT4).is_empty());

        // masqAll: any source, hash keys only.
        let mut spec = pm_spec();
        spec.masq_all = true;
        spec.mappings.truncate(1);
        let r = port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        assert!(r.elements.iter().all(|e| !e.map.contains("masq")));
        assert_eq!(
            keys(&r, HP_ALL4)[0].0,
            vec![Value::str("tcp"), Value::Num(8080)]
        );
        assert_eq!(keys(&r, HP_ALL6).len(), 1);

        // A pod with a /32 address: its hairpin source is the address.
        let mut spec = pm_spec();
        spec.container_v4 = Some("10.0.0.5/32".parse().unwrap());
        let r = port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        assert_eq!(keys(&r, HP_MASQ4)[0].0[0], a("10.0.0.5"));
    }

    #[test]
    fn conditions_become_pass_and_stop_rules() {
        let mut spec = pm_spec();
        spec.mappings.truncate(1);
        spec.conditions_v4 = vec!["iifname".into(), "eth0".into()];
        let r = port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
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
        let b = attach_batch(&hostport_table(DEFAULT_MASQ_MARK), &r, true);
        assert!(
            matches!(&b.commands[0], Command::AddRule { chain, .. } if chain == CONDITIONS_CHAIN)
        );
    }

    #[test]
    fn masquerade_is_source_and_subnet_elements() {
        let id = AttachmentId::new("net", "cid", "eth0");
        let r = masquerade_rules_all(
            &id,
            &[
                "10.88.3.4/16".parse().unwrap(),
                "fd00:88::4/64".parse().unwrap(),
            ],
        );
        let maps: Vec<&str> = r.elements.iter().map(|e| e.map.as_str()).collect();
        assert_eq!(maps, [OWNERS, MASQ_SRC4, MASQ_KEEP4, MASQ_SRC6, MASQ_KEEP6]);
        assert_eq!(r.elements[2].key, vec![a("10.88.3.4"), p("10.88.0.0/16")]);
        assert_eq!(r.elements[4].key, vec![a("fd00:88::4"), p("fd00:88::/64")]);
        assert!(r.rules.is_empty());
        let t = masquerade_table();
        assert!(t.maps.iter().all(|m| m.data == [KeyType::Mark]));
        assert_eq!(t.chains[0].rules.len(), 4);
    }

    #[test]
    fn delete_batch_adds_then_removes() {
        let spec = MacSpoofCheckSpec {
            attachment: AttachmentId::new("net", "cid", "eth0"),
            host_ifname: "veth1".into(),
            mac: crate::MacAddr([2, 0, 0, 0, 0, 1]),
        };
        let r = mac_spoof_rules(&spec);
        let handle = RuleRef {
            chain: "x".into(),
            handle: 7,
        };
        let b = delete_batch(&mac_spoof_table(), &r, std::slice::from_ref(&handle));
        assert_eq!(
            b.commands,
            vec![
                Command::AddElement {
                    element: r.elements[0].clone(),
                    exclusive: false
                },
                Command::AddElement {
                    element: r.elements[1].clone(),
                    exclusive: false
                },
                Command::AddElement {
                    element: r.elements[2].clone(),
                    exclusive: false
                },
                Command::DeleteElements {
                    map: OWNERS.into(),
                    keys: vec![r.elements[0].key.clone()]
                },
                Command::DeleteElements {
                    map: SC_ALLOWED.into(),
                    keys: vec![vec![Value::str("veth1"), Value::str("02:00:00:00:00:01")]]
                },
                Command::DeleteElements {
                    map: SC_PORTS.into(),
                    keys: vec![vec![Value::str("veth1")]]
                },
                Command::DeleteRule(handle),
            ]
        );
        assert!(describe_keys(&r).contains("veth1"));
    }

    #[test]
    fn every_attachment_has_an_anchor_fingerprinting_its_spec() {
        let spec = pm_spec();
        let r = port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        assert_eq!(r.elements[0].map, OWNERS);
        assert_eq!(r.elements.iter().filter(|e| e.map == OWNERS).count(), 1);
        let mut other = pm_spec();
        other.mappings.truncate(1);
        let r2 = port_mapping_rules(&other, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        // Same owner, other spec: same key, other data.
        assert_eq!(r.elements[0].key, r2.elements[0].key);
        assert_ne!(r.elements[0].data, r2.elements[0].data);
        for t in [
            masquerade_table(),
            hostport_table(DEFAULT_MASQ_MARK),
            mac_spoof_table(),
        ] {
            assert!(t.map(OWNERS).is_some());
        }
    }

    #[test]
    fn large_removals_are_chunked() {
        let elements: Vec<(String, Vec<Value>)> = (0..1000u64)
            .map(|i| {
                (
                    HP_DNAT4.to_owned(),
                    vec![Value::str("tcp"), Value::Num(10000 + i)],
                )
            })
            .collect();
        let b = remove_batch(&hostport_table(DEFAULT_MASQ_MARK), &elements, &[]);
        assert_eq!(b.commands.len(), 4);
        let total: usize = b
            .commands
            .iter()
            .map(|c| match c {
                Command::DeleteElements { keys, .. } => keys.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(total, 1000);
    }

    #[test]
    fn owners_from_comments() {
        let id = AttachmentId::new("net", "cid", "eth0");
        assert_eq!(owner_of_comment(&id.tag()), Some(&*id.owner_hash()));
        assert_eq!(owner_of_comment("something else"), None);
        assert_ne!(
            owner_id(&id.owner_hash()),
            owner_id(&AttachmentId::new("net", "cid2", "eth0").owner_hash())
        );
        // The shared batch never flushes the conditions chain.
        let b = shared_batch(&hostport_table(DEFAULT_MASQ_MARK));
        assert!(!b
            .commands
            .contains(&Command::FlushChain(CONDITIONS_CHAIN.into())));
        assert!(b.commands.contains(&Command::FlushChain("dispatch".into())));
    }
}
