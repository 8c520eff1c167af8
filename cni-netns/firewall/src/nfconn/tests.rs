//! Encoding checked against what `nft --debug=mnl` sent for the same rules
//! (fixtures.txt). nft numbers its sets per command and sends those ids with
//! lookups and elements; we address sets by name, so set ids are dropped
//! from both sides before comparing.

use super::encode::*;
use super::wire::*;
use crate::model::*;
use crate::{attachment, hostport, macspoof, masquerade, DEFAULT_MASQ_MARK};

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

fn parse(buf: &[u8]) -> Vec<Node> {
    cni_netns::netlink::attrs_full(buf)
        .map(|(ty, payload, _)| {
            if ty & cni_netns::netlink::NLA_F_NESTED != 0 {
                Node::Nest(ty & 0x3fff, parse(payload))
            } else {
                Node::Leaf(ty, payload.to_vec())
            }
        })
        .collect()
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

fn assert_encodes(
    name: &str,
    table: &Table,
    family: NftFamily,
    tname: &'static str,
    cmd: NftCommand,
) {
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

fn commented(stmts: Vec<Stmt>, c: &str) -> NftRule {
    NftRule {
        stmts,
        comment: Some(c.into()),
    }
}

fn add_rule(chain: &str, rule: NftRule) -> NftCommand {
    NftCommand::AddRule {
        chain: chain.into(),
        rule,
    }
}

fn shared_chain_rule(table: &Table, chain: &str, i: usize) -> NftCommand {
    let c = table.chains.iter().find(|c| c.name == chain).unwrap();
    add_rule(chain, c.rules[i].clone())
}

fn shared_chain(table: &Table, chain: &str) -> NftCommand {
    let c = table.chains.iter().find(|c| c.name == chain).unwrap();
    NftCommand::AddChain {
        name: c.name.clone(),
        base: c.base,
    }
}

fn map(table: &Table, name: &str) -> NftCommand {
    NftCommand::AddMap(table.map(name).unwrap().clone())
}

fn elem(map: &str, key: Vec<Value>, data: Vec<Value>, c: &str) -> NftCommand {
    NftCommand::AddElement {
        element: Element {
            map: map.into(),
            key,
            data,
            comment: Some(c.into()),
        },
        exclusive: false,
    }
}

fn owner() -> Vec<Value> {
    vec![Value::Num(0x1234)]
}

fn del(map: &str, key: Vec<Value>) -> NftCommand {
    NftCommand::DeleteElements {
        map: map.into(),
        keys: vec![key],
    }
}

fn tcp(port: u64) -> [Value; 2] {
    [Value::str("tcp"), Value::Num(port)]
}

#[test]
fn hostport_table_matches_nft() {
    let t = hostport::table(DEFAULT_MASQ_MARK);
    let (f, n) = (NftFamily::Inet, hostport::TABLE);
    assert_encodes("table_hostport", &t, f, n, NftCommand::AddTable);
    assert_encodes("chain_prerouting", &t, f, n, shared_chain(&t, "prerouting"));
    assert_encodes(
        "chain_masquerading",
        &t,
        f,
        n,
        shared_chain(&t, "masquerading"),
    );
    assert_encodes("chain_conditions", &t, f, n, shared_chain(&t, "conditions"));
    assert_encodes("chain_dispatch", &t, f, n, shared_chain(&t, "dispatch"));
    // NEWSET: a concatenated key with mark data; concatenated data; and
    // interval concatenations (pipapo: NFTA_SET_DESC_CONCAT field lengths).
    for name in [
        "hp_owner",
        "hp_dnat4",
        "hip_dnat4",
        "hp_dnat6",
        "hp_masq4",
        "hip_masq4",
        "hp_masq6",
        "hp_lo4",
        "hip_lo4",
        "hp_all4",
        "hip_all6",
    ] {
        assert_encodes(&format!("map_{name}"), &t, f, n, map(&t, name));
    }
    for (i, name) in [
        (0, "rule_dispatch_jump"),
        (1, "rule_dispatch_hip_masq4"),
        (2, "rule_dispatch_hip_lo4"),
        (4, "rule_dispatch_hip_dnat4"),
        (6, "rule_dispatch_hip_all6"),
        (8, "rule_dispatch_hp_masq4"),
        (9, "rule_dispatch_hp_lo4"),
        (10, "rule_dispatch_hp_all4"),
        (11, "rule_dispatch_hp_dnat4"),
        (12, "rule_dispatch_hp_masq6"),
        (14, "rule_dispatch_hp_dnat6"),
    ] {
        assert_encodes(name, &t, f, n, shared_chain_rule(&t, "dispatch", i));
    }
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
fn port_mapping_elements_and_rules_match_nft() {
    let t = hostport::table(DEFAULT_MASQ_MARK);
    let (f, n) = (NftFamily::Inet, hostport::TABLE);
    let any6 = addr("::");
    assert_encodes(
        "elem_hp_owner",
        &t,
        f,
        n,
        elem(
            "hp_owner",
            [vec![any6], tcp(8080).to_vec()].concat(),
            owner(),
            "c1",
        ),
    );
    assert_encodes(
        "elem_hp_owner_hip",
        &t,
        f,
        n,
        elem(
            "hp_owner",
            [vec![addr("::ffff:10.20.0.1")], tcp(9090).to_vec()].concat(),
            owner(),
            "c1",
        ),
    );
    let dest = |a: &str, p: u64| vec![addr(a), Value::Num(p)];
    assert_encodes(
        "elem_hp_dnat4",
        &t,
        f,
        n,
        elem("hp_dnat4", tcp(8080).to_vec(), dest("10.1.0.5", 80), "c1"),
    );
    assert_encodes(
        "elem_hp_dnat6",
        &t,
        f,
        n,
        elem("hp_dnat6", tcp(8080).to_vec(), dest("fd00::5", 80), "c1"),
    );
    assert_encodes(
        "elem_hip_dnat4",
        &t,
        f,
        n,
        elem(
            "hip_dnat4",
            [vec![addr("10.20.0.1")], tcp(9090).to_vec()].concat(),
            dest("10.1.0.5", 90),
            "c1",
        ),
    );
    // NEWSETELEM with NFTA_SET_ELEM_KEY_END: prefixes per part.
    let masq4 = [vec![prefix("10.1.0.0/24")], tcp(8080).to_vec()].concat();
    assert_encodes(
        "elem_hp_masq4",
        &t,
        f,
        n,
        elem("hp_masq4", masq4.clone(), owner(), "c1"),
    );
    assert_encodes(
        "elem_hp_masq4_all",
        &t,
        f,
        n,
        elem(
            "hp_masq4",
            vec![prefix("0.0.0.0/0"), Value::str("udp"), Value::Num(53)],
            owner(),
            "c1",
        ),
    );
    assert_encodes(
        "elem_hip_masq4",
        &t,
        f,
        n,
        elem(
            "hip_masq4",
            [
                vec![prefix("127.0.0.0/8"), addr("10.20.0.1")],
                tcp(9090).to_vec(),
            ]
            .concat(),
            owner(),
            "c1",
        ),
    );
    assert_encodes(
        "elem_hp_masq6",
        &t,
        f,
        n,
        elem(
            "hp_masq6",
            [vec![prefix("fd00::/64")], tcp(8080).to_vec()].concat(),
            owner(),
            "c1",
        ),
    );
    assert_encodes("del_hp_masq4", &t, f, n, del("hp_masq4", masq4));
    assert_encodes(
        "del_hp_dnat4",
        &t,
        f,
        n,
        del("hp_dnat4", tcp(8080).to_vec()),
    );
    assert_encodes(
        "del_hp_owner",
        &t,
        f,
        n,
        del("hp_owner", [vec![addr("::")], tcp(8080).to_vec()].concat()),
    );

    // The conditions rules of a mapping with a host IP, as the layout
    // builds them.
    let mut spec = crate::PortMappingSpec::new(crate::AttachmentId::new("n", "c", "eth0"));
    spec.container_v4 = Some("10.1.0.5/24".parse().unwrap());
    spec.mappings = vec![crate::HostPortMapping {
        host_port: 9090,
        container_port: 90,
        protocol: crate::Protocol::Tcp,
        host_ip: Some("10.20.0.1".parse().unwrap()),
    }];
    spec.conditions_v4 = vec!["ip saddr != 10.66.0.0/16".into()];
    let r = hostport::elements(&spec).unwrap().unwrap();
    assert_eq!(r.rules.len(), 2);
    let pass = commented(r.rules[0].stmts.clone(), "c1");
    assert_encodes("rule_cond_pass", &t, f, n, add_rule("conditions", pass));
    // The stop rule nft was given has no host IP match.
    let stop = commented(
        vec![
            m(Expr::meta("nfproto"), CmpOp::Eq, Value::str("ipv4")),
            m(Expr::payload("tcp", "dport"), CmpOp::Eq, Value::Num(9090)),
            Stmt::Accept,
        ],
        "c1",
    );
    assert_encodes("rule_cond_stop", &t, f, n, add_rule("conditions", stop));
    assert_encodes(
        "del_rule_conditions_h18",
        &t,
        f,
        n,
        NftCommand::DeleteRule(RuleRef {
            chain: "conditions".into(),
            handle: 18,
        }),
    );
    assert_encodes("flush_pmx", &t, f, n, NftCommand::FlushChain("pm-x".into()));
    // A DEL's expiry: the element again, with NFTA_SET_ELEM_EXPIRATION.
    let expire = |map: &str, key: Vec<Value>| {
        NftCommand::ExpireElements(vec![Element {
            map: map.into(),
            key,
            data: owner(),
            comment: Some("c1".into()),
        }])
    };
    assert_encodes(
        "expire_owners",
        &t,
        f,
        n,
        expire(
            "owners",
            vec![Value::Num(0x1234_5678), Value::Num(0x9abc_def0)],
        ),
    );
    assert_encodes(
        "expire_hp_masq4",
        &t,
        f,
        n,
        expire(
            "hp_masq4",
            [vec![prefix("10.1.0.0/24")], tcp(8080).to_vec()].concat(),
        ),
    );
    // The per-attachment anchor: a `mark . mark : mark` map.
    assert_encodes("map_owners", &t, f, n, map(&t, "owners"));
    assert_encodes(
        "elem_owners",
        &t,
        f,
        n,
        elem(
            "owners",
            vec![Value::Num(0x1234_5678), Value::Num(0x9abc_def0)],
            owner(),
            "c1",
        ),
    );
}

#[test]
fn mac_spoof_and_masquerade_match_nft() {
    let t = macspoof::table();
    let (f, n) = (NftFamily::Bridge, macspoof::TABLE);
    assert_encodes(
        "chain_sc_prerouting",
        &t,
        f,
        n,
        shared_chain(&t, "prerouting"),
    );
    assert_encodes("map_sc_ports", &t, f, n, map(&t, "sc_ports"));
    assert_encodes("map_sc_allowed", &t, f, n, map(&t, "sc_allowed"));
    // Two lookups, the second inverted (NFT_LOOKUP_F_INV).
    assert_encodes("rule_sc", &t, f, n, shared_chain_rule(&t, "prerouting", 0));
    assert_encodes(
        "elem_sc_ports",
        &t,
        f,
        n,
        elem("sc_ports", vec![Value::str("veth1")], owner(), "c2"),
    );
    assert_encodes(
        "elem_sc_allowed",
        &t,
        f,
        n,
        elem(
            "sc_allowed",
            vec![Value::str("veth1"), Value::str("02:00:00:00:00:01")],
            owner(),
            "c2",
        ),
    );

    let t = masquerade::table();
    let (f, n) = (NftFamily::Inet, masquerade::TABLE);
    for name in ["masq_src4", "masq_nets4", "masq_src6", "masq_nets6"] {
        assert_encodes(&format!("map_{name}"), &t, f, n, map(&t, name));
    }
    assert_encodes(
        "rule_masq_multicast",
        &t,
        f,
        n,
        shared_chain_rule(&t, "postrouting", 0),
    );
    assert_encodes(
        "rule_masq4",
        &t,
        f,
        n,
        shared_chain_rule(&t, "postrouting", 2),
    );
    assert_encodes(
        "rule_masq6",
        &t,
        f,
        n,
        shared_chain_rule(&t, "postrouting", 3),
    );
    let spec = crate::MasqueradeSpec {
        attachment: crate::AttachmentId::new("n", "c", "eth0"),
        addresses: vec!["10.88.3.4/16".parse().unwrap()],
    };
    let mut els = masquerade::elements(&spec).elements;
    for e in &mut els {
        e.comment = Some("c3".into());
        e.data = owner();
    }
    let cmd = |e: &Element| NftCommand::AddElement {
        element: e.clone(),
        exclusive: true,
    };
    assert_eq!(els[0].map, attachment::OWNERS);
    assert_encodes("elem_masq_src4", &t, f, n, cmd(&els[1]));
}

#[test]
fn prefixes_flags_and_nat_match_nft() {
    let t = Table {
        family: NftFamily::Inet,
        name: "t",
        maps: Vec::new(),
        chains: Vec::new(),
        conditions_chain: None,
    };
    let (f, n) = (NftFamily::Inet, "t");
    let ret = |proto: &str, field: &str, op: CmpOp, v: Value| {
        add_rule(
            "pm",
            NftRule::new(vec![m(Expr::payload(proto, field), op, v), Stmt::Return]),
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
    let conds = crate::parse_conditions(&[
        "iifname != \"lo\" ct state established meta l4proto tcp".to_owned(),
    ])
    .unwrap();
    let iif = NftRule::new([conds, vec![Stmt::Return]].concat());
    assert_encodes("p_iif_ct", &t, f, n, add_rule("pm", iif));
    assert_encodes(
        "p_masq",
        &t,
        f,
        n,
        add_rule("pm", NftRule::new(vec![Stmt::Masquerade])),
    );
}

#[test]
fn keys_round_trip_and_unknown_shapes_are_refused() {
    let types = [KeyType::Ipv4Addr, KeyType::InetProto, KeyType::InetService];
    let key = vec![addr("192.0.2.1"), Value::str("udp"), Value::Num(53)];
    let raw = encode_key(&types, &key).unwrap();
    assert_eq!(raw, [192, 0, 2, 1, 17, 0, 0, 0, 0, 53, 0, 0]);
    assert_eq!(
        decode_key(&types, &raw, None).unwrap(),
        vec![addr("192.0.2.1"), Value::Num(17), Value::Num(53)]
    );
    assert_eq!(
        encode_key(&types, &decode_key(&types, &raw, None).unwrap()).unwrap(),
        raw
    );
    // Interval keys: a prefix part round-trips through first and last key.
    let types = [KeyType::Ipv6Addr, KeyType::Ipv6Addr];
    for key in [
        vec![addr("fd00::4"), prefix("fd00::/64")],
        vec![addr("fd00::4"), prefix("::/0")],
        vec![addr("fd00::4"), addr("fd00::4")],
    ] {
        let (start, end) = encode_interval_key(&types, &key).unwrap();
        assert_eq!(decode_key(&types, &start, Some(&end)).unwrap(), key);
    }
    let types = [KeyType::IfName, KeyType::EtherAddr];
    let key = vec![Value::str("veth1"), Value::str("0a:58:0a:01:00:05")];
    let raw = encode_key(&types, &key).unwrap();
    assert_eq!(raw.len(), 24);
    assert_eq!(decode_key(&types, &raw, None).unwrap(), key);
    assert!(encode_key(&[KeyType::Ipv4Addr], &[prefix("10.0.0.0/8")]).is_err());
    assert_eq!(udata_comment(&comment_udata("tag")).as_deref(), Some("tag"));

    let t = masquerade::table();
    let set = NftRule::new(vec![m(
        Expr::payload("tcp", "sport"),
        CmpOp::Eq,
        Value::Set(vec![Value::Num(1)]),
    )]);
    assert!(encode_rule(&t, NftFamily::Inet, &set).is_err());
    let unknown = NftRule::new(vec![Stmt::Lookup {
        key: vec![Expr::payload("ip", "saddr")],
        map: "nope".into(),
        negate: false,
    }]);
    assert!(encode_rule(&t, NftFamily::Inet, &unknown).is_err());
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
    let parsed: Vec<_> = cni_netns::netlink::messages(&both)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[1].seq, 7);
}

/// The kernel's side of a decision made on a listing: a batch bound to the
/// generation read before the listing commits only while no other batch
/// came in between (`Driver::send_at`, used to remove a network's subnet
/// keys after its last DEL).
#[test]
fn a_batch_bound_to_a_past_generation_is_refused_as_stale() {
    use crate::engine::{Driver, RefusalKind};
    use crate::{AttachmentId, Firewall, FirewallOp, MasqueradeSpec, RuleSpec};
    if !cni_testkit::premise::require_root() {
        return;
    }
    let ns = cni_netns::OwnedNetns::new("cnigen").unwrap();
    let fw = crate::NativeFirewall::in_netns(ns.netns().path());
    let op = FirewallOp::Delete(crate::RuleKind::Masquerade);
    let spec = |cid: &str, a: &str| {
        RuleSpec::Masquerade(MasqueradeSpec {
            attachment: AttachmentId::new("net", cid, "eth0"),
            addresses: vec![a.parse().unwrap()],
        })
    };
    fw.add(&spec("a", "10.3.0.5/24")).unwrap();
    let table = masquerade::table();
    let subnet = prefix("10.3.0.0/24");
    let remove = crate::batch::remove(
        &table,
        &[(
            masquerade::MASQ_NETS4.to_owned(),
            vec![subnet.clone(), subnet],
        )],
        &[],
    );
    let before = fw.generation(op, "test").unwrap();
    fw.add(&spec("b", "10.3.0.6/24")).unwrap();
    let after = fw.generation(op, "test").unwrap();
    assert_ne!(before, after, "a commit moves the generation");
    let refused = fw.send_at(op, "test", &table, &remove, before).unwrap();
    assert!(
        matches!(&refused, Err(r) if r.kind == RefusalKind::Stale),
        "{refused:?}"
    );
    let listed = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "nft",
            "-j",
            "list",
            "map",
            "inet",
        ])
        .args(["cni_rs_masq", masquerade::MASQ_NETS4])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("10.3.0.0"),
        "the stale batch changed nothing"
    );
    fw.send_at(op, "test", &table, &remove, after)
        .unwrap()
        .unwrap();
}
