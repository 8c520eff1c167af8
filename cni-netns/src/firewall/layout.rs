//! The tables and per-attachment rules of each firewall feature, as pure
//! functions from specs to the [`model`](super::model). Backends only encode
//! what these return.
//!
//! The shared objects of a table (maps, fixed chains and their rules) are
//! written by the first ADD and then left alone (see [`attach_batch`]), so a
//! future change of their shape must come with new map or table names: an
//! ADD that misses a map rebuilds the shared objects, one that finds them
//! does not look at them.

use ipnetwork::IpNetwork;

use super::conditions::parse_conditions;
use super::model::{
    AttachmentRules, BaseChain, Batch, Chain, ChainType, CmpOp, Command, Element, Expr, Family,
    Hook, KeyType, Map, Rule, Stmt, Value, PRIORITY_DSTNAT, PRIORITY_SRCNAT,
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

const MASQ_MAP_V4: &str = "masq4";
const MASQ_MAP_V6: &str = "masq6";
const HOSTPORTS_MAP: &str = "hostports";
const HOSTIP4_MAP: &str = "hostip4_hostports";
const HOSTIP6_MAP: &str = "hostip6_hostports";
const PORTS_MAP: &str = "ports";

/// The table of `kind`.
pub fn table(kind: RuleKind, masq_mark: u32) -> super::model::Table {
    match kind {
        RuleKind::Masquerade => masquerade_table(),
        RuleKind::PortMapping => hostport_table(masq_mark),
        RuleKind::MacSpoofCheck => mac_spoof_table(),
    }
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

/// `inet cni_rs_masq`: multicast is never masqueraded (as in the Go
/// reference), then one lookup of the source address picks the owner's chain.
pub fn masquerade_table() -> super::model::Table {
    let multicast_return = |v6: bool, net: &str| {
        Rule::new(vec![
            match_eq(
                Expr::payload(ipx(v6), "daddr"),
                Value::Prefix(const_net(net)),
            ),
            Stmt::Return,
        ])
    };
    super::model::Table {
        family: Family::Inet,
        name: MASQ_TABLE,
        owner_prefix: "masq",
        maps: vec![
            Map {
                name: MASQ_MAP_V4,
                key: vec![KeyType::Ipv4Addr],
            },
            Map {
                name: MASQ_MAP_V6,
                key: vec![KeyType::Ipv6Addr],
            },
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
                Rule::new(vec![Stmt::Vmap {
                    key: vec![Expr::payload("ip", "saddr")],
                    map: MASQ_MAP_V4.into(),
                }]),
                Rule::new(vec![Stmt::Vmap {
                    key: vec![Expr::payload("ip6", "saddr")],
                    map: MASQ_MAP_V6.into(),
                }]),
            ],
        }],
    }
}

/// `inet cni_rs_hostport`: traffic to a local address is dispatched by
/// `daddr . proto . port` (mappings with a host IP) then `proto . port` to
/// the owner's chain, from other hosts (prerouting) and from the node
/// itself (output). Postrouting masquerades DNATed connections whose
/// first packet got the masquerade mark in an owner's chain.
pub fn hostport_table(masq_mark: u32) -> super::model::Table {
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
    super::model::Table {
        family: Family::Inet,
        name: HOSTPORT_TABLE,
        owner_prefix: "pm",
        maps: vec![
            Map {
                name: HOSTPORTS_MAP,
                key: vec![KeyType::InetProto, KeyType::InetService],
            },
            Map {
                name: HOSTIP4_MAP,
                key: vec![KeyType::Ipv4Addr, KeyType::InetProto, KeyType::InetService],
            },
            Map {
                name: HOSTIP6_MAP,
                key: vec![KeyType::Ipv6Addr, KeyType::InetProto, KeyType::InetService],
            },
        ],
        chains: vec![
            Chain {
                name: "dispatch".into(),
                base: None,
                rules: vec![
                    Rule::new(vec![Stmt::Vmap {
                        key: [vec![Expr::payload("ip", "daddr")], l4()].concat(),
                        map: HOSTIP4_MAP.into(),
                    }]),
                    Rule::new(vec![Stmt::Vmap {
                        key: [vec![Expr::payload("ip6", "daddr")], l4()].concat(),
                        map: HOSTIP6_MAP.into(),
                    }]),
                    Rule::new(vec![Stmt::Vmap {
                        key: l4(),
                        map: HOSTPORTS_MAP.into(),
                    }]),
                ],
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
    }
}

/// `bridge cni_rs_macspoofchk`: frames entering the bridge are dispatched by
/// input port to the owner's chain, which lets the container's MAC through
/// and drops the rest (the Go reference's `pkg/link/spoofcheck.go`
/// semantics, with one lookup instead of one rule per port).
pub fn mac_spoof_table() -> super::model::Table {
    super::model::Table {
        family: Family::Bridge,
        name: MAC_SPOOF_TABLE,
        owner_prefix: "sc",
        maps: vec![Map {
            name: PORTS_MAP,
            key: vec![KeyType::IfName],
        }],
        chains: vec![Chain {
            name: "prerouting".into(),
            base: Some(BaseChain {
                chain_type: ChainType::Filter,
                hook: Hook::Prerouting,
                priority: -300,
            }),
            rules: vec![Rule::new(vec![Stmt::Vmap {
                key: vec![Expr::meta("iifname")],
                map: PORTS_MAP.into(),
            }])],
        }],
    }
}

/// The rules and elements of one attachment's masquerade.
pub fn masquerade_rules(spec: &MasqueradeSpec) -> AttachmentRules {
    masquerade_rules_all(&spec.attachment, &[spec.address])
}

/// The rules and elements of one attachment's masquerade of several
/// addresses (a dual-stack pod): the attachment owns one chain, so all its
/// addresses must be installed together or a later add would flush the
/// rules of the earlier ones.
pub fn masquerade_rules_all(attachment: &AttachmentId, addresses: &[IpNetwork]) -> AttachmentRules {
    let table = masquerade_table();
    let tag = attachment.tag();
    let chain = table.owner_chain(&attachment.owner_hash());
    let mut rules = Vec::new();
    let mut elements = Vec::new();
    for address in addresses {
        let v6 = address.is_ipv6();
        rules.push(Rule {
            stmts: vec![
                Stmt::Match {
                    left: Expr::payload(ipx(v6), "daddr"),
                    op: CmpOp::Ne,
                    right: Value::Prefix(masked(*address)),
                },
                Stmt::Masquerade,
            ],
            comment: Some(tag.clone()),
        });
        elements.push(Element {
            map: if v6 { MASQ_MAP_V6 } else { MASQ_MAP_V4 }.into(),
            key: vec![Value::Addr(address.ip())],
            target: chain.clone(),
            comment: Some(tag.clone()),
        });
    }
    AttachmentRules {
        rules,
        elements,
        chain,
    }
}

/// The rules and elements of one attachment's port mappings; `None` when
/// there is nothing to install (no mappings, or only host IPs of a family
/// the container has no address in).
pub fn port_mapping_rules(
    spec: &PortMappingSpec,
    masq_mark: u32,
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
    let table = hostport_table(masq_mark);
    let tag = spec.attachment.tag();
    let chain = table.owner_chain(&spec.attachment.owner_hash());
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

    let rule = |stmts: Vec<Stmt>| Rule {
        stmts,
        comment: Some(tag.clone()),
    };
    let mut rules = Vec::new();
    if spec.snat || spec.masq_all {
        for &(v6, net, conds) in &families {
            let head = [vec![nfproto(v6)], conds.to_vec()].concat();
            let mark = Stmt::SetMarkBits(masq_mark);
            if spec.masq_all {
                rules.push(rule([head.clone(), vec![mark]].concat()));
                continue;
            }
            // Hairpin: the whole subnet, as the Go reference's iptables
            // backend, so a neighbour pod reaching the host port gets replies
            // through the node rather than straight from the pod.
            let from_subnet = match_eq(Expr::payload(ipx(v6), "saddr"), Value::Prefix(masked(net)));
            rules.push(rule(
                [head.clone(), vec![from_subnet, mark.clone()]].concat(),
            ));
            if !v6 {
                // Localhost (IPv4 only: the kernel never routes ::1 off the node).
                let from_lo = match_eq(
                    Expr::payload("ip", "saddr"),
                    Value::Prefix(const_net("127.0.0.0/8")),
                );
                rules.push(rule([head, vec![from_lo, mark]].concat()));
            }
        }
    }

    let mut elements: Vec<Element> = Vec::new();
    let mut dnat_specific = Vec::new();
    let mut dnat_wildcard = Vec::new();
    for m in &spec.mappings {
        for &(v6, net, conds) in &families {
            let host_ip = match m.host_ip {
                Some(ip) if ip.is_ipv6() != v6 => continue,
                Some(ip) if ip.is_unspecified() => None,
                other => other,
            };
            let mut stmts = [vec![nfproto(v6)], conds.to_vec()].concat();
            let (map, key) = match host_ip {
                Some(ip) => {
                    stmts.push(match_eq(Expr::payload(ipx(v6), "daddr"), Value::Addr(ip)));
                    (
                        if v6 { HOSTIP6_MAP } else { HOSTIP4_MAP },
                        vec![
                            Value::Addr(ip),
                            Value::str(m.protocol.as_str()),
                            Value::Num(m.host_port.into()),
                        ],
                    )
                }
                None => (
                    HOSTPORTS_MAP,
                    vec![
                        Value::str(m.protocol.as_str()),
                        Value::Num(m.host_port.into()),
                    ],
                ),
            };
            stmts.push(match_eq(
                Expr::payload(m.protocol.as_str(), "dport"),
                Value::Num(m.host_port.into()),
            ));
            stmts.push(Stmt::Dnat {
                addr: net.ip(),
                port: m.container_port,
            });
            if host_ip.is_some() {
                dnat_specific.push(rule(stmts));
            } else {
                dnat_wildcard.push(rule(stmts));
            }
            if !elements.iter().any(|e| e.map == map && e.key == key) {
                elements.push(Element {
                    map: map.into(),
                    key,
                    target: chain.clone(),
                    comment: Some(tag.clone()),
                });
            }
        }
    }
    if elements.is_empty() {
        return Ok(None);
    }
    // Host-IP rules first: they are the more precise match for a port that
    // is also mapped on every address.
    rules.extend(dnat_specific);
    rules.extend(dnat_wildcard);
    Ok(Some(AttachmentRules {
        chain,
        rules,
        elements,
    }))
}

/// The rules and elements of one attachment's MAC spoof check.
pub fn mac_spoof_rules(spec: &MacSpoofCheckSpec) -> AttachmentRules {
    let table = mac_spoof_table();
    let tag = spec.attachment.tag();
    let chain = table.owner_chain(&spec.attachment.owner_hash());
    let mac = spec.mac.to_string();
    AttachmentRules {
        rules: vec![
            Rule {
                stmts: vec![
                    match_eq(Expr::payload("ether", "saddr"), Value::Str(mac)),
                    Stmt::Return,
                ],
                comment: Some(tag.clone()),
            },
            Rule {
                stmts: vec![Stmt::Drop],
                comment: Some(tag.clone()),
            },
        ],
        elements: vec![Element {
            map: PORTS_MAP.into(),
            key: vec![Value::Str(spec.host_ifname.clone())],
            target: chain.clone(),
            comment: Some(tag),
        }],
        chain,
    }
}

/// The batch installing `rules` together with the table's shared objects:
/// the table, maps and fixed chains are created if missing and the fixed
/// chains' rules rewritten (flush + add, atomic), so it also repairs them.
/// Rewriting a rule that looks a verdict map up makes the kernel re-validate
/// every chain the map reaches, a cost that grows with the number of
/// attachments, so this batch is only used when [`attach_batch`] fails for
/// lack of the shared objects.
pub fn add_batch(table: &super::model::Table, rules: &AttachmentRules) -> Batch {
    let mut commands = vec![Command::AddTable];
    commands.extend(table.maps.iter().cloned().map(Command::AddMap));
    for c in &table.chains {
        commands.push(Command::AddChain {
            name: c.name.clone(),
            base: c.base,
        });
    }
    for c in &table.chains {
        commands.push(Command::FlushChain(c.name.clone()));
        for r in &c.rules {
            commands.push(Command::AddRule {
                chain: c.name.clone(),
                rule: r.clone(),
            });
        }
    }
    commands.extend(attach_batch(table, rules).commands);
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The batch installing `rules` alone: the attachment's chain (created or
/// flushed), its rules and its map elements. Its cost does not depend on the
/// number of attachments; it fails (`No such file or directory`) when the
/// table or its maps do not exist yet.
pub fn attach_batch(table: &super::model::Table, rules: &AttachmentRules) -> Batch {
    let mut commands = vec![
        Command::AddChain {
            name: rules.chain.clone(),
            base: None,
        },
        Command::FlushChain(rules.chain.clone()),
    ];
    for r in &rules.rules {
        commands.push(Command::AddRule {
            chain: rules.chain.clone(),
            rule: r.clone(),
        });
    }
    commands.extend(rules.elements.iter().cloned().map(Command::AddElement));
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The batch removing an attachment's chain and the elements going to it.
/// With `chain_exists` false only the elements are removed.
pub fn remove_batch(
    table: &super::model::Table,
    chain: &str,
    chain_exists: bool,
    elements: &[(String, Vec<Value>)],
) -> Batch {
    let mut commands = Vec::new();
    let mut maps: Vec<&str> = elements.iter().map(|(m, _)| m.as_str()).collect();
    maps.dedup();
    maps.sort_unstable();
    maps.dedup();
    for map in maps {
        commands.push(Command::DeleteElements {
            map: map.to_owned(),
            keys: elements
                .iter()
                .filter(|(m, _)| m == map)
                .map(|(_, k)| k.clone())
                .collect(),
        });
    }
    if chain_exists {
        commands.push(Command::FlushChain(chain.to_owned()));
        commands.push(Command::DeleteChain(chain.to_owned()));
    }
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The one-batch DEL: the elements `rules` names and its chain, written so
/// that it also succeeds when they are already gone (a repeated DEL): the
/// chain and the elements are first added (no-ops when present), then
/// deleted. It still fails as a whole, changing nothing, when one of the
/// keys goes to another attachment's chain (`File exists` on the add) or
/// the attachment owns elements `rules` does not name (the kernel refuses to
/// delete a chain still referenced); the caller then reads the state.
/// Failing batches are avoided on purpose: on ENOENT nft searches every
/// chain of the table for a similar name to suggest, a cost that grows with
/// the number of attachments.
pub fn delete_batch(table: &super::model::Table, rules: &AttachmentRules) -> Batch {
    let elements: Vec<(String, Vec<Value>)> = rules
        .elements
        .iter()
        .map(|e| (e.map.clone(), e.key.clone()))
        .collect();
    let mut commands = vec![Command::AddChain {
        name: rules.chain.clone(),
        base: None,
    }];
    commands.extend(rules.elements.iter().cloned().map(Command::AddElement));
    commands.extend(remove_batch(table, &rules.chain, true, &elements).commands);
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The map keys of `rules` as text (`hostports tcp . 8080`), for messages.
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

fn value_text(v: &Value) -> String {
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

    #[test]
    fn port_mappings_dispatch_by_map() {
        let r = port_mapping_rules(&pm_spec(), DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        assert_eq!(
            r.chain,
            format!(
                "pm-{}",
                AttachmentId::new("net", "cid", "eth0").owner_hash()
            )
        );
        // One wildcard element shared by both families, one host-IP element
        // for v4 only (the v6 address has no v4 host IP).
        assert_eq!(r.elements.len(), 2);
        assert_eq!(r.elements[0].map, HOSTPORTS_MAP);
        assert_eq!(r.elements[0].key, vec![Value::str("tcp"), Value::Num(8080)]);
        assert_eq!(r.elements[1].map, HOSTIP4_MAP);
        // snat: subnet + localhost for v4, subnet for v6; then 1 host-IP
        // DNAT (first) and 2 wildcard DNATs.
        assert_eq!(r.rules.len(), 3 + 3);
        assert!(matches!(
            r.rules[3].stmts.last(),
            Some(Stmt::Dnat { port: 5353, .. })
        ));
        assert!(
            r.rules
                .iter()
                .all(|x| x.comment.as_deref()
                    == Some(&*AttachmentId::new("net", "cid", "eth0").tag()))
        );
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

        let mut spec = pm_spec();
        spec.snat = false;
        spec.mappings[1].host_ip = Some("0.0.0.0".parse().unwrap());
        let r = port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        assert_eq!(r.rules.len(), 3);
        assert_eq!(r.elements.len(), 2);
        assert!(r.elements.iter().all(|e| e.map == HOSTPORTS_MAP));
    }

    #[test]
    fn masquerade_excludes_own_subnet() {
        let spec = MasqueradeSpec {
            attachment: AttachmentId::new("net", "cid", "eth0"),
            address: "10.88.3.4/16".parse().unwrap(),
        };
        let r = masquerade_rules(&spec);
        assert_eq!(
            r.rules[0].stmts[0],
            Stmt::Match {
                left: Expr::payload("ip", "daddr"),
                op: CmpOp::Ne,
                right: Value::Prefix("10.88.0.0/16".parse().unwrap()),
            }
        );
        assert_eq!(
            r.elements[0].key,
            vec![Value::Addr("10.88.3.4".parse().unwrap())]
        );
    }

    #[test]
    fn dual_stack_masquerade_is_one_chain_with_a_rule_per_family() {
        let id = AttachmentId::new("net", "cid", "eth0");
        let r = masquerade_rules_all(
            &id,
            &[
                "10.88.3.4/16".parse().unwrap(),
                "fd00:88::4/64".parse().unwrap(),
            ],
        );
        assert_eq!(r.rules.len(), 2);
        assert_eq!(
            r.rules[1].stmts[0],
            Stmt::Match {
                left: Expr::payload("ip6", "daddr"),
                op: CmpOp::Ne,
                right: Value::Prefix("fd00:88::/64".parse().unwrap()),
            }
        );
        let maps: Vec<&str> = r.elements.iter().map(|e| e.map.as_str()).collect();
        assert_eq!(maps, [MASQ_MAP_V4, MASQ_MAP_V6]);
        assert!(r.elements.iter().all(|e| e.target == r.chain));
    }

    #[test]
    fn delete_batch_removes_elements_then_chain() {
        let spec = MacSpoofCheckSpec {
            attachment: AttachmentId::new("net", "cid", "eth0"),
            host_ifname: "veth1".into(),
            mac: crate::MacAddr([2, 0, 0, 0, 0, 1]),
        };
        let r = mac_spoof_rules(&spec);
        let b = delete_batch(&mac_spoof_table(), &r);
        assert_eq!(
            b.commands,
            vec![
                Command::AddChain {
                    name: r.chain.clone(),
                    base: None
                },
                Command::AddElement(r.elements[0].clone()),
                Command::DeleteElements {
                    map: "ports".into(),
                    keys: vec![vec![Value::str("veth1")]]
                },
                Command::FlushChain(r.chain.clone()),
                Command::DeleteChain(r.chain.clone()),
            ]
        );
        assert!(describe_keys(&r).contains("veth1"));
    }
}
