//! Encoding checked against what `nft --debug=mnl` sent for the same rules
//! (fixtures.txt). nft numbers its sets per command and sends those ids with
//! lookups and elements; we address sets by name, so set ids are dropped
//! from both sides before comparing.

use super::encode::*;
use super::wire::*;
use crate::firewall::layout;
use crate::firewall::model::*;

const FIXTURES: &str = include_str!("fixtures.txt");

fn fixture(name: &str) -> Vec<u8> {
    let line = FIXTURES
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no fixture {name}"));
    let hex = line.split_whitespace().nth(1).unwrap();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[derive(Debug, PartialEq)]
enum Node {
    Leaf(u16, Vec<u8>),
    Nest(u16, Vec<Node>),
}

fn parse(mut buf: &[u8]) -> Vec<Node> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let ty = u16::from_ne_bytes([buf[2], buf[3]]);
        let payload = &buf[4..len];
        out.push(if ty & NLA_F_NESTED != 0 {
            Node::Nest(ty & 0x3fff, parse(payload))
        } else {
            Node::Leaf(ty, payload.to_vec())
        });
        buf = &buf[align4(len).min(buf.len())..];
    }
    out
}

/// Drops set ids: NEWSET's NFTA_SET_ID, NEWSETELEM's
/// NFTA_SET_ELEM_LIST_SET_ID and lookup's NFTA_LOOKUP_SET_ID.
fn normalize(kind: u16, nodes: &mut Vec<Node>) {
    match kind {
        NFT_MSG_NEWSET => nodes.retain(|n| !matches!(n, Node::Leaf(10, _))),
        NFT_MSG_NEWSETELEM => nodes.retain(|n| !matches!(n, Node::Leaf(4, _))),
        NFT_MSG_NEWRULE => {
            for n in nodes.iter_mut() {
                if let Node::Nest(4, exprs) = n {
                    for e in exprs.iter_mut() {
                        let Node::Nest(_, parts) = e else { continue };
                        let is_lookup = parts
                            .iter()
                            .any(|p| matches!(p, Node::Leaf(1, name) if name == b"lookup\0"));
                        if is_lookup {
                            for p in parts.iter_mut() {
                                if let Node::Nest(2, data) = p {
                                    data.retain(|d| !matches!(d, Node::Leaf(4, _)));
                                }
                            }
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

fn assert_encodes(name: &str, table: &Table, family: Family, tname: &'static str, cmd: Command) {
    let batch = Batch {
        family,
        table: tname,
        commands: vec![cmd],
    };
    let msgs = encode_batch(table, &batch).unwrap();
    let fx = fixture(name);
    assert_eq!(fx[0], family_byte(family), "{name}: family");
    let mut ours = parse(&msgs[0].attrs);
    let mut theirs = parse(&fx[4..]);
    normalize(msgs[0].kind, &mut ours);
    normalize(msgs[0].kind, &mut theirs);
    assert_eq!(ours, theirs, "{name}: attributes differ from nft's");
}

fn m(left: Expr, op: CmpOp, right: Value) -> Stmt {
    Stmt::Match { left, op, right }
}

fn addr(s: &str) -> Value {
    Value::Addr(s.parse().unwrap())
}

fn prefix(s: &str) -> Value {
    Value::Prefix(s.parse().unwrap())
}

fn commented(stmts: Vec<Stmt>, c: &str) -> Rule {
    Rule {
        stmts,
        comment: Some(c.into()),
    }
}

fn add_rule(chain: &str, rule: Rule) -> Command {
    Command::AddRule {
        chain: chain.into(),
        rule,
    }
}

fn shared_chain_rule(table: &Table, chain: &str, i: usize) -> Command {
    let c = table.chains.iter().find(|c| c.name == chain).unwrap();
    add_rule(chain, c.rules[i].clone())
}

fn shared_chain(table: &Table, chain: &str) -> Command {
    let c = table.chains.iter().find(|c| c.name == chain).unwrap();
    Command::AddChain {
        name: c.name.clone(),
        base: c.base,
    }
}

fn map(table: &Table, name: &str) -> Command {
    Command::AddMap(table.maps.iter().find(|m| m.name == name).unwrap().clone())
}

fn elem(map: &str, key: Vec<Value>, target: &str, c: &str) -> Command {
    Command::AddElement(Element {
        map: map.into(),
        key,
        target: target.into(),
        comment: Some(c.into()),
    })
}

#[test]
fn hostport_table_matches_nft() {
    let t = layout::hostport_table(layout::DEFAULT_MASQ_MARK);
    let (f, n) = (Family::Inet, layout::HOSTPORT_TABLE);
    assert_encodes("table_hostport", &t, f, n, Command::AddTable);
    assert_encodes("chain_prerouting", &t, f, n, shared_chain(&t, "prerouting"));
    assert_encodes(
        "chain_masquerading",
        &t,
        f,
        n,
        shared_chain(&t, "masquerading"),
    );
    let pmx = Command::AddChain {
        name: "pm-x".into(),
        base: None,
    };
    assert_encodes("chain_pmx", &t, f, n, pmx);
    assert_encodes("map_hostports", &t, f, n, map(&t, "hostports"));
    assert_encodes("map_hostip6", &t, f, n, map(&t, "hostip6_hostports"));
    assert_encodes(
        "rule_dispatch_hostip4",
        &t,
        f,
        n,
        shared_chain_rule(&t, "dispatch", 0),
    );
    assert_encodes(
        "rule_dispatch_hostports",
        &t,
        f,
        n,
        shared_chain_rule(&t, "dispatch", 2),
    );
    assert_encodes(
        "rule_prerouting",
        &t,
        f,
        n,
        shared_chain_rule(&t, "prerouting", 0),
    );
    assert_encodes(
        "rule_masquerading",
        &t,
        f,
        n,
        shared_chain_rule(&t, "masquerading", 0),
    );
}

#[test]
fn port_mapping_rules_match_nft() {
    let t = layout::hostport_table(layout::DEFAULT_MASQ_MARK);
    let (f, n) = (Family::Inet, layout::HOSTPORT_TABLE);
    let nf = |v: &str| m(Expr::meta("nfproto"), CmpOp::Eq, Value::str(v));
    let mark = Stmt::SetMarkBits(layout::DEFAULT_MASQ_MARK);
    let snat4 = commented(
        vec![
            nf("ipv4"),
            m(
                Expr::payload("ip", "saddr"),
                CmpOp::Eq,
                prefix("10.0.0.0/24"),
            ),
            mark.clone(),
        ],
        "c1",
    );
    assert_encodes("rule_pm_snat4", &t, f, n, add_rule("pm-x", snat4));
    let snat6 = commented(
        vec![
            nf("ipv6"),
            m(
                Expr::payload("ip6", "saddr"),
                CmpOp::Eq,
                prefix("fd00::/64"),
            ),
            mark,
        ],
        "c1",
    );
    assert_encodes("rule_pm_snat6", &t, f, n, add_rule("pm-x", snat6));
    let dnat4 = commented(
        vec![
            nf("ipv4"),
            m(Expr::payload("ip", "daddr"), CmpOp::Eq, addr("192.0.2.1")),
            m(Expr::payload("udp", "dport"), CmpOp::Eq, Value::Num(53)),
            Stmt::Dnat {
                addr: "10.0.0.5".parse().unwrap(),
                port: 5353,
            },
        ],
        "c1",
    );
    assert_encodes("rule_pm_dnat4", &t, f, n, add_rule("pm-x", dnat4));
    let e = elem(
        "hostports",
        vec![Value::str("tcp"), Value::Num(8080)],
        "pm-x",
        "c1",
    );
    assert_encodes("elem_hostports", &t, f, n, e);
    let e = elem(
        "hostip4_hostports",
        vec![addr("192.0.2.1"), Value::str("udp"), Value::Num(53)],
        "pm-x",
        "c1",
    );
    assert_encodes("elem_hostip4", &t, f, n, e);
}

#[test]
fn deletes_match_nft() {
    let t = layout::hostport_table(layout::DEFAULT_MASQ_MARK);
    let (f, n) = (Family::Inet, layout::HOSTPORT_TABLE);
    let del = |map: &str, key: Vec<Value>| Command::DeleteElements {
        map: map.into(),
        keys: vec![key],
    };
    assert_encodes(
        "del_elem_hostports",
        &t,
        f,
        n,
        del("hostports", vec![Value::str("tcp"), Value::Num(8080)]),
    );
    assert_encodes(
        "del_elem_hostip4",
        &t,
        f,
        n,
        del(
            "hostip4_hostports",
            vec![addr("192.0.2.1"), Value::str("udp"), Value::Num(53)],
        ),
    );
    assert_encodes("flush_pmx", &t, f, n, Command::FlushChain("pm-x".into()));
    assert_encodes(
        "del_chain_pmx",
        &t,
        f,
        n,
        Command::DeleteChain("pm-x".into()),
    );
}

#[test]
fn mac_spoof_and_masquerade_match_nft() {
    let t = layout::mac_spoof_table();
    let (f, n) = (Family::Bridge, layout::MAC_SPOOF_TABLE);
    assert_encodes(
        "chain_sc_prerouting",
        &t,
        f,
        n,
        shared_chain(&t, "prerouting"),
    );
    assert_encodes("map_ports", &t, f, n, map(&t, "ports"));
    let ret = commented(
        vec![
            m(
                Expr::payload("ether", "saddr"),
                CmpOp::Eq,
                Value::str("02:00:00:00:00:01"),
            ),
            Stmt::Return,
        ],
        "c2",
    );
    assert_encodes("rule_sc_return", &t, f, n, add_rule("sc-x", ret));
    let drop = commented(vec![Stmt::Drop], "c2");
    assert_encodes("rule_sc_drop", &t, f, n, add_rule("sc-x", drop));
    let e = elem("ports", vec![Value::str("veth1")], "sc-x", "c2");
    assert_encodes("elem_ports", &t, f, n, e);

    let t = layout::masquerade_table();
    let (f, n) = (Family::Inet, layout::MASQ_TABLE);
    assert_encodes("map_masq4", &t, f, n, map(&t, "masq4"));
    assert_encodes(
        "rule_masq_multicast",
        &t,
        f,
        n,
        shared_chain_rule(&t, "postrouting", 0),
    );
    assert_encodes(
        "rule_masq_vmap",
        &t,
        f,
        n,
        shared_chain_rule(&t, "postrouting", 2),
    );
    let masq = commented(
        vec![
            m(
                Expr::payload("ip", "daddr"),
                CmpOp::Ne,
                prefix("10.88.0.0/16"),
            ),
            Stmt::Masquerade,
        ],
        "c3",
    );
    assert_encodes("rule_masqx", &t, f, n, add_rule("masq-x", masq));
    let e = elem("masq4", vec![addr("10.88.3.4")], "masq-x", "c3");
    assert_encodes("elem_masq4", &t, f, n, e);
}

#[test]
fn prefixes_flags_and_nat_match_nft() {
    let t = Table {
        family: Family::Inet,
        name: "t",
        maps: vec![Map {
            name: "m6",
            key: vec![KeyType::Ipv6Addr],
        }],
        chains: Vec::new(),
        owner_prefix: "pm",
    };
    let (f, n) = (Family::Inet, "t");
    let ret = |proto: &str, field: &str, op: CmpOp, v: Value| {
        add_rule(
            "pm",
            Rule::new(vec![m(Expr::payload(proto, field), op, v), Stmt::Return]),
        )
    };
    let eq = CmpOp::Eq;
    assert_encodes(
        "p_prefix4",
        &t,
        f,
        n,
        ret("ip", "saddr", eq, prefix("224.0.0.0/4")),
    );
    assert_encodes(
        "p_prefix12",
        &t,
        f,
        n,
        ret("ip", "saddr", eq, prefix("10.16.0.0/12")),
    );
    assert_encodes(
        "p_prefix20",
        &t,
        f,
        n,
        ret("ip", "saddr", eq, prefix("10.0.16.0/20")),
    );
    assert_encodes(
        "p_ne8",
        &t,
        f,
        n,
        ret("ip", "saddr", CmpOp::Ne, prefix("10.0.0.0/8")),
    );
    assert_encodes(
        "p_host32",
        &t,
        f,
        n,
        ret("ip", "saddr", eq, prefix("10.0.0.1/32")),
    );
    assert_encodes(
        "p_v6_65",
        &t,
        f,
        n,
        ret("ip6", "saddr", eq, prefix("fd00::/65")),
    );
    assert_encodes(
        "p_v6_8",
        &t,
        f,
        n,
        ret("ip6", "saddr", eq, prefix("ff00::/8")),
    );
    assert_encodes(
        "p_v6_ne64",
        &t,
        f,
        n,
        ret("ip6", "daddr", CmpOp::Ne, prefix("fd00::/64")),
    );
    let nf6 = m(Expr::meta("nfproto"), eq, Value::str("ipv6"));
    let dnat6 = commented(
        vec![
            nf6.clone(),
            m(Expr::payload("tcp", "dport"), eq, Value::Num(8080)),
            Stmt::Dnat {
                addr: "fd00::5".parse().unwrap(),
                port: 80,
            },
        ],
        "c1",
    );
    assert_encodes("p_dnat6", &t, f, n, add_rule("pm", dnat6));
    let mark6 = commented(
        vec![
            nf6,
            m(Expr::payload("ip6", "saddr"), eq, prefix("fd00::/64")),
            Stmt::SetMarkBits(0x2000),
        ],
        "c1",
    );
    assert_encodes("p_mark6", &t, f, n, add_rule("pm", mark6));
    // Conditions as portmap's conditionsV4 parses them.
    let conds = crate::firewall::parse_conditions(&[
        "iifname != \"lo\" ct state established meta l4proto tcp".to_owned(),
    ])
    .unwrap();
    let iif = Rule::new([conds, vec![Stmt::Return]].concat());
    assert_encodes("p_iif_ct", &t, f, n, add_rule("pm", iif));
    let vmap = Rule::new(vec![Stmt::Vmap {
        key: vec![Expr::payload("ip6", "saddr")],
        map: "m6".into(),
    }]);
    assert_encodes("p_vmap6", &t, f, n, add_rule("pm", vmap));
    assert_encodes(
        "p_masq",
        &t,
        f,
        n,
        add_rule("pm", Rule::new(vec![Stmt::Masquerade])),
    );
}

#[test]
fn keys_round_trip_and_unknown_shapes_are_refused() {
    let types = [KeyType::Ipv4Addr, KeyType::InetProto, KeyType::InetService];
    let key = vec![addr("192.0.2.1"), Value::str("udp"), Value::Num(53)];
    let raw = encode_key(&types, &key).unwrap();
    assert_eq!(raw, [192, 0, 2, 1, 17, 0, 0, 0, 0, 53, 0, 0]);
    assert_eq!(
        decode_key(&types, &raw).unwrap(),
        vec![addr("192.0.2.1"), Value::Num(17), Value::Num(53)]
    );
    assert_eq!(
        encode_key(&types, &decode_key(&types, &raw).unwrap()).unwrap(),
        raw
    );
    assert_eq!(udata_comment(&comment_udata("tag")).as_deref(), Some("tag"));

    let set = Rule::new(vec![m(
        Expr::payload("tcp", "sport"),
        CmpOp::Eq,
        Value::Set(vec![Value::Num(1)]),
    )]);
    assert!(encode_rule(Family::Inet, &set).is_err());
}

#[test]
fn batch_framing() {
    let msg = message(
        nft_type(NFT_MSG_NEWTABLE),
        NLM_F_REQUEST | NLM_F_ACK,
        7,
        1,
        0,
        &[1, 2, 3, 4],
    );
    assert_eq!(msg.len(), 24);
    assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), 0x0a00);
    let begin = message(
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        1,
        0,
        NFNL_SUBSYS_NFTABLES,
        &[],
    );
    // nfgenmsg of a batch: family 0, version 0, res_id 10 big endian.
    assert_eq!(&begin[16..], &[0, 0, 0, 10]);
    let both = [begin.clone(), msg].concat();
    let parsed: Vec<_> = messages(&both).collect();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[1].2, 7);
}
