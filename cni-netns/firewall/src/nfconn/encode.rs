//! The [`model`](crate::model) encoded as nf_tables netlink
//! messages, expression by expression as `nft` 1.0 linearizes the same rule
//! (implicit protocol dependencies, prefix matches trimmed to whole bytes,
//! registers of concatenations), so `nft list` shows both the same.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::wire::*;
use crate::model::{
    Batch, CmpOp, Element, Expr, Hook, KeyType, Map, NftCommand, NftFamily, NftRule, Stmt, Table,
    Value,
};

const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_SET_DESC: u16 = 9;
const NFTA_SET_DESC_CONCAT: u16 = 2;
const NFTA_SET_FIELD_LEN: u16 = 1;
pub(crate) const NFTA_SET_ELEM_KEY_END: u16 = 10;
const NFT_SET_INTERVAL: u32 = 0x4;
const NFT_SET_CONCAT: u32 = 0x80;
const NFT_SET_TIMEOUT: u32 = 0x10;
pub(crate) const NFTA_SET_ELEM_TIMEOUT: u16 = 4;
pub(crate) const NFTA_SET_ELEM_EXPIRATION: u16 = 5;
const NFT_LOOKUP_F_INV: u32 = 1;

/// One nf_tables message of a batch, before framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Msg {
    /// `NFT_MSG_*`.
    pub(crate) kind: u16,
    /// Netlink flags besides `NLM_F_REQUEST | NLM_F_ACK`.
    pub(crate) flags: u16,
    /// The attributes.
    pub(crate) attrs: Vec<u8>,
    /// What the message does, for errors (`add rule to chain pm-x`).
    pub(crate) what: String,
}

/// Something the native encoder does not know how to express (an extra
/// condition beyond the layout's own shapes); the caller falls back to the
/// `nft` process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsupported(pub(crate) String);

type Enc<T> = std::result::Result<T, Unsupported>;

fn unsupported<T>(what: impl Into<String>) -> Enc<T> {
    Err(Unsupported(what.into()))
}

pub(crate) fn family_byte(f: NftFamily) -> u8 {
    match f {
        NftFamily::Inet => 1,
        NftFamily::Ip => 2,
        NftFamily::Bridge => 7,
        NftFamily::Ip6 => 10,
    }
}

// nf_tables.h attribute numbers.
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_FLAGS: u16 = 2;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_DATA_TYPE: u16 = 6;
const NFTA_SET_DATA_LEN: u16 = 7;
const NFTA_SET_ID: u16 = 10;
const NFTA_SET_USERDATA: u16 = 13;
pub(crate) const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub(crate) const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub(crate) const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub(crate) const NFTA_SET_ELEM_KEY: u16 = 1;
pub(crate) const NFTA_SET_ELEM_DATA: u16 = 2;
pub(crate) const NFTA_SET_ELEM_USERDATA: u16 = 6;
pub(crate) const NFTA_DATA_VALUE: u16 = 1;
pub(crate) const NFTA_DATA_VERDICT: u16 = 2;
pub(crate) const NFTA_VERDICT_CODE: u16 = 1;
pub(crate) const NFTA_VERDICT_CHAIN: u16 = 2;

const NFT_SET_MAP: u32 = 0x8;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NFT_JUMP: u32 = (-3i32) as u32;
const NFT_RETURN: u32 = (-5i32) as u32;

/// The comment TLV of rule and element user data
/// (`NFTNL_UDATA_RULE_COMMENT` / `NFTNL_UDATA_SET_ELEM_COMMENT`, both 0): a
/// one-byte type, a one-byte length, the NUL-terminated text.
pub(crate) fn comment_udata(comment: &str) -> Vec<u8> {
    let text = comment.as_bytes();
    // The comment is at most 128 bytes (the tag is cut there), so it fits
    // the one-byte length with its NUL.
    let len = text.len().min(254);
    let mut v = vec![0u8, (len + 1) as u8];
    v.extend_from_slice(&text[..len]);
    v.push(0);
    v
}

/// The comment in rule or element user data, if any.
pub(crate) fn udata_comment(udata: &[u8]) -> Option<String> {
    let mut rest = udata;
    while rest.len() >= 2 {
        let (ty, len) = (rest[0], rest[1] as usize);
        let value = rest.get(2..2 + len)?;
        if ty == 0 {
            return Some(attr_str(value));
        }
        rest = &rest[2 + len..];
    }
    None
}

/// The batch as messages: the table's maps give the key types of elements.
pub(crate) fn encode_batch(table: &Table, batch: &Batch) -> Enc<Vec<Msg>> {
    let mut set_id = 0u32;
    let mut out = Vec::with_capacity(batch.commands.len());
    for c in &batch.commands {
        out.push(encode_command(table, batch, c, &mut set_id)?);
    }
    Ok(out)
}

fn find_map<'a>(table: &'a Table, name: &str) -> Enc<&'a Map> {
    match table.maps.iter().find(|m| m.name == name) {
        Some(m) => Ok(m),
        None => unsupported(format!("unknown map {name}")),
    }
}

fn encode_command(table: &Table, batch: &Batch, c: &NftCommand, set_id: &mut u32) -> Enc<Msg> {
    let t = batch.table;
    let fam = batch.family;
    Ok(match c {
        NftCommand::AddTable => {
            let mut a = Attrs::new();
            a.str(NFTA_TABLE_NAME, t).u32(NFTA_TABLE_FLAGS, 0);
            Msg {
                kind: NFT_MSG_NEWTABLE,
                flags: NLM_F_CREATE,
                attrs: a.0,
                what: format!("add table {} {t}", fam.as_str()),
            }
        }
        NftCommand::AddMap(m) => {
            *set_id += 1;
            let mut flags = NFT_SET_MAP | NFT_SET_TIMEOUT;
            if m.interval {
                flags |= NFT_SET_INTERVAL | NFT_SET_CONCAT;
            }
            let mut a = Attrs::new();
            a.str(NFTA_SET_TABLE, t)
                .str(NFTA_SET_NAME, m.name)
                .u32(NFTA_SET_FLAGS, flags)
                .u32(NFTA_SET_KEY_TYPE, key_type_id(&m.key))
                .u32(NFTA_SET_KEY_LEN, key_len(&m.key) as u32)
                .u32(NFTA_SET_DATA_TYPE, key_type_id(&m.data))
                .u32(NFTA_SET_DATA_LEN, key_len(&m.data) as u32)
                .u32(NFTA_SET_ID, *set_id);
            if m.interval {
                // The field lengths let the kernel pick the pipapo set
                // (intervals per part of a concatenation).
                let mut fields = Attrs::new();
                for k in &m.key {
                    let mut f = Attrs::new();
                    f.u32(NFTA_SET_FIELD_LEN, part_len(*k) as u32);
                    fields.nested(NFTA_LIST_ELEM, &f);
                }
                let mut desc = Attrs::new();
                desc.nested(NFTA_SET_DESC_CONCAT, &fields);
                a.nested(NFTA_SET_DESC, &desc);
            }
            a.bytes(NFTA_SET_USERDATA, &set_udata(&m.key, &m.data));
            Msg {
                kind: NFT_MSG_NEWSET,
                flags: NLM_F_CREATE,
                attrs: a.0,
                what: format!("add map {} in {} {t}", m.name, fam.as_str()),
            }
        }
        NftCommand::AddChain { name, base } => {
            let mut a = Attrs::new();
            a.str(NFTA_CHAIN_TABLE, t).str(NFTA_CHAIN_NAME, name);
            if let Some(b) = base {
                let mut hook = Attrs::new();
                hook.u32(NFTA_HOOK_HOOKNUM, hook_num(b.hook))
                    .u32(NFTA_HOOK_PRIORITY, b.priority as u32);
                a.str(NFTA_CHAIN_TYPE, b.chain_type.as_str())
                    .u32(NFTA_CHAIN_POLICY, NF_ACCEPT)
                    .nested(NFTA_CHAIN_HOOK, &hook);
            }
            Msg {
                kind: NFT_MSG_NEWCHAIN,
                flags: NLM_F_CREATE,
                attrs: a.0,
                what: format!("add chain {name} in {} {t}", fam.as_str()),
            }
        }
        NftCommand::FlushChain(name) => {
            let mut a = Attrs::new();
            a.str(NFTA_RULE_TABLE, t).str(NFTA_RULE_CHAIN, name);
            Msg {
                kind: NFT_MSG_DELRULE,
                flags: 0,
                attrs: a.0,
                what: format!("flush chain {name} in {} {t}", fam.as_str()),
            }
        }
        NftCommand::AddRule { chain, rule } => {
            let mut a = Attrs::new();
            a.str(NFTA_RULE_TABLE, t)
                .str(NFTA_RULE_CHAIN, chain)
                .nested(NFTA_RULE_EXPRESSIONS, &encode_rule(table, fam, rule)?);
            if let Some(c) = &rule.comment {
                a.bytes(NFTA_RULE_USERDATA, &comment_udata(c));
            }
            Msg {
                kind: NFT_MSG_NEWRULE,
                flags: NLM_F_CREATE | NLM_F_APPEND,
                attrs: a.0,
                what: format!("add rule to chain {chain} in {} {t}", fam.as_str()),
            }
        }
        NftCommand::AddElement {
            element: e,
            exclusive,
        } => {
            let map = find_map(table, &e.map)?;
            let mut a = Attrs::new();
            a.str(NFTA_SET_ELEM_LIST_TABLE, t)
                .str(NFTA_SET_ELEM_LIST_SET, &e.map)
                .nested(NFTA_SET_ELEM_LIST_ELEMENTS, &element_list(map, e, false)?);
            Msg {
                kind: NFT_MSG_NEWSETELEM,
                flags: NLM_F_CREATE | if *exclusive { NLM_F_EXCL } else { 0 },
                attrs: a.0,
                what: format!(
                    "{} element {} {} : {} in {} {t}",
                    if *exclusive { "create" } else { "add" },
                    e.map,
                    key_text(&e.key),
                    key_text(&e.data),
                    fam.as_str()
                ),
            }
        }
        NftCommand::ExpireElements(elements) => {
            let Some(first) = elements.first() else {
                return unsupported("expire no elements");
            };
            let map = find_map(table, &first.map)?;
            let mut list = Attrs::new();
            for e in elements {
                if e.map != first.map {
                    return unsupported("expire elements of several maps in one message");
                }
                let one = element_list(map, e, true)?;
                list.0.extend_from_slice(&one.0);
            }
            let mut a = Attrs::new();
            a.str(NFTA_SET_ELEM_LIST_TABLE, t)
                .str(NFTA_SET_ELEM_LIST_SET, &first.map)
                .nested(NFTA_SET_ELEM_LIST_ELEMENTS, &list);
            let texts: Vec<String> = elements.iter().map(|e| key_text(&e.key)).collect();
            Msg {
                kind: NFT_MSG_NEWSETELEM,
                flags: NLM_F_CREATE,
                attrs: a.0,
                what: format!(
                    "expire elements {{ {} }} of map {} in {} {t}",
                    texts.join(", "),
                    first.map,
                    fam.as_str()
                ),
            }
        }
        NftCommand::DeleteElements { map, keys } => {
            let m = find_map(table, map)?;
            let mut list = Attrs::new();
            for k in keys {
                list.nested(NFTA_LIST_ELEM, &key_attrs(m, k)?);
            }
            let mut a = Attrs::new();
            a.str(NFTA_SET_ELEM_LIST_TABLE, t)
                .str(NFTA_SET_ELEM_LIST_SET, map)
                .nested(NFTA_SET_ELEM_LIST_ELEMENTS, &list);
            let texts: Vec<String> = keys.iter().map(|k| key_text(k)).collect();
            Msg {
                kind: NFT_MSG_DELSETELEM,
                flags: 0,
                attrs: a.0,
                what: format!(
                    "delete elements {{ {} }} of map {map} in {} {t}",
                    texts.join(", "),
                    fam.as_str()
                ),
            }
        }
        NftCommand::DeleteRule(r) => {
            let mut a = Attrs::new();
            a.str(NFTA_RULE_TABLE, t)
                .str(NFTA_RULE_CHAIN, &r.chain)
                .bytes(NFTA_RULE_HANDLE, &r.handle.to_be_bytes());
            Msg {
                kind: NFT_MSG_DELRULE,
                flags: 0,
                attrs: a.0,
                what: format!(
                    "delete rule handle {} of chain {} in {} {t}",
                    r.handle,
                    r.chain,
                    fam.as_str()
                ),
            }
        }
    })
}

/// An element's `NFTA_SET_ELEM_KEY` (and `_KEY_END` for interval maps).
pub(crate) fn key_attrs(map: &Map, key: &[Value]) -> Enc<Attrs> {
    let (start, end) = encode_interval_key(&map.key, key)?;
    let mut k = Attrs::new();
    k.bytes(NFTA_DATA_VALUE, &start);
    let mut elem = Attrs::new();
    elem.nested(NFTA_SET_ELEM_KEY, &k);
    if map.interval {
        let mut e = Attrs::new();
        e.bytes(NFTA_DATA_VALUE, &end);
        elem.nested(NFTA_SET_ELEM_KEY_END, &e);
    }
    Ok(elem)
}

/// `NFTA_SET_ELEM_LIST_ELEMENTS` with one `key : data` element (timeout
/// first, as nft orders it), expiring in 1 ms with `expire`.
fn element_list(map: &Map, e: &Element, expire: bool) -> Enc<Attrs> {
    let mut elem = Attrs::new();
    elem.bytes(
        NFTA_SET_ELEM_TIMEOUT,
        &crate::batch::ELEMENT_TIMEOUT_MS.to_be_bytes(),
    );
    if expire {
        elem.bytes(NFTA_SET_ELEM_EXPIRATION, &1u64.to_be_bytes());
    }
    elem.0.extend_from_slice(&key_attrs(map, &e.key)?.0);
    let mut data = Attrs::new();
    data.bytes(NFTA_DATA_VALUE, &encode_key(&map.data, &e.data)?);
    elem.nested(NFTA_SET_ELEM_DATA, &data);
    if let Some(c) = &e.comment {
        elem.bytes(NFTA_SET_ELEM_USERDATA, &comment_udata(c));
    }
    let mut list = Attrs::new();
    list.nested(NFTA_LIST_ELEM, &elem);
    Ok(list)
}
fn verdict_data(code: u32, chain: Option<&str>) -> Attrs {
    let mut v = Attrs::new();
    v.u32(NFTA_VERDICT_CODE, code);
    if let Some(c) = chain {
        v.str(NFTA_VERDICT_CHAIN, c);
    }
    let mut d = Attrs::new();
    d.nested(NFTA_DATA_VERDICT, &v);
    d
}

fn hook_num(h: Hook) -> u32 {
    match h {
        Hook::Prerouting => 0,
        Hook::Output => 3,
        Hook::Postrouting => 4,
    }
}

/// nft's datatype ids (`enum datatypes` in nftables' datatype.h);
/// concatenations pack them 6 bits each.
fn type_id(k: KeyType) -> u32 {
    match k {
        KeyType::Ipv4Addr => 7,
        KeyType::Ipv6Addr => 8,
        KeyType::InetProto => 12,
        KeyType::InetService => 13,
        KeyType::IfName => 41,
        KeyType::EtherAddr => 9,
        KeyType::Mark => 19,
    }
}

fn key_type_id(key: &[KeyType]) -> u32 {
    key.iter().fold(0, |acc, k| (acc << 6) | type_id(*k))
}

fn part_len(k: KeyType) -> usize {
    match k {
        KeyType::Ipv4Addr => 4,
        KeyType::Ipv6Addr => 16,
        KeyType::InetProto => 1,
        KeyType::InetService => 2,
        KeyType::IfName => 16,
        KeyType::EtherAddr => 6,
        KeyType::Mark => 4,
    }
}

fn key_len(key: &[KeyType]) -> usize {
    match key {
        [one] => part_len(*one),
        many => many.iter().map(|k| align4(part_len(*k))).sum(),
    }
}

/// The set user data nft writes (key and data byte order, and for
/// concatenations the typeof descriptions), copied so `nft list` prints our
/// maps exactly as its own.
fn set_udata(key: &[KeyType], data: &[KeyType]) -> Vec<u8> {
    let byteorder = |types: &[KeyType]| -> u32 {
        match types {
            [KeyType::IfName | KeyType::Mark] => 1,
            [_] => 2,
            _ => 0,
        }
    };
    let mut v = vec![0u8, 4];
    v.extend_from_slice(&byteorder(key).to_ne_bytes());
    v.extend_from_slice(&[1, 4]);
    v.extend_from_slice(&byteorder(data).to_ne_bytes());
    if key.len() > 1 {
        v.extend_from_slice(&[3, 8, 0, 4, 0x0d, 0, 0, 0, 1, 0]);
    }
    if data.len() > 1 {
        v.extend_from_slice(&[4, 8, 0, 4, 0x0d, 0, 0, 0, 1, 0]);
    }
    v.extend_from_slice(&[6, 4, 0, 0, 0, 0]);
    v
}

/// The bytes of a key or data (concatenated parts each padded to 4 bytes).
pub(crate) fn encode_key(types: &[KeyType], parts: &[Value]) -> Enc<Vec<u8>> {
    let (start, end) = encode_interval_key(types, parts)?;
    if start != end {
        return unsupported(format!("range {} in an exact key", key_text(parts)));
    }
    Ok(start)
}

/// The first and last key of `parts` (equal unless a part is a prefix).
pub(crate) fn encode_interval_key(types: &[KeyType], parts: &[Value]) -> Enc<(Vec<u8>, Vec<u8>)> {
    if types.len() != parts.len() {
        return unsupported(format!("key {} does not fit the map", key_text(parts)));
    }
    let (mut start, mut end) = (Vec::new(), Vec::new());
    for (k, v) in types.iter().zip(parts) {
        let (first, last) = match (k, v) {
            (KeyType::Ipv4Addr, Value::Addr(a @ IpAddr::V4(_)))
            | (KeyType::Ipv6Addr, Value::Addr(a @ IpAddr::V6(_))) => (addr_bytes(a), addr_bytes(a)),
            (KeyType::Ipv4Addr, Value::Prefix(n @ IpNetwork::V4(_)))
            | (KeyType::Ipv6Addr, Value::Prefix(n @ IpNetwork::V6(_))) => {
                (addr_bytes(&n.network()), addr_bytes(&n.broadcast()))
            }
            (KeyType::InetProto, v) => (vec![proto_number(v)?], vec![proto_number(v)?]),
            (KeyType::InetService, Value::Num(n)) if *n <= 0xffff => {
                let b = (*n as u16).to_be_bytes().to_vec();
                (b.clone(), b)
            }
            (KeyType::Mark, Value::Num(n)) if *n <= u64::from(u32::MAX) => {
                let b = (*n as u32).to_ne_bytes().to_vec();
                (b.clone(), b)
            }
            (KeyType::IfName, Value::Str(s)) => (ifname_bytes(s)?, ifname_bytes(s)?),
            (KeyType::EtherAddr, Value::Str(s)) => (mac_bytes(s)?, mac_bytes(s)?),
            _ => return unsupported(format!("key part {v:?} for {}", k.as_str())),
        };
        start.extend_from_slice(&first);
        end.extend_from_slice(&last);
        if types.len() > 1 {
            start.resize(align4(start.len()), 0);
            end.resize(align4(end.len()), 0);
        }
    }
    Ok((start, end))
}

/// The key parts of raw key bytes (the inverse of [`encode_interval_key`];
/// `end` for interval maps).
pub(crate) fn decode_key(types: &[KeyType], raw: &[u8], end: Option<&[u8]>) -> Option<Vec<Value>> {
    let mut parts = Vec::new();
    let mut at = 0usize;
    for k in types {
        let len = part_len(*k);
        let b = raw.get(at..at + len)?;
        let e = match end {
            Some(end) => end.get(at..at + len)?,
            None => b,
        };
        parts.push(match k {
            KeyType::Ipv4Addr | KeyType::Ipv6Addr => {
                let addr = |x: &[u8]| -> Option<IpAddr> {
                    Some(match x.len() {
                        4 => IpAddr::from(<[u8; 4]>::try_from(x).ok()?),
                        _ => IpAddr::from(<[u8; 16]>::try_from(x).ok()?),
                    })
                };
                let first = addr(b)?;
                if b == e {
                    Value::Addr(first)
                } else {
                    let bits =
                        |x: &[u8]| x.iter().fold(0u128, |acc, y| (acc << 8) | u128::from(*y));
                    let diff = bits(b) ^ bits(e);
                    let host = 128 - diff.leading_zeros() as u8;
                    let plen = (8 * len as u8).checked_sub(host)?;
                    Value::Prefix(IpNetwork::new(first, plen).ok()?)
                }
            }
            KeyType::InetProto => Value::Num(u64::from(b[0])),
            KeyType::InetService => Value::Num(u64::from(u16::from_be_bytes([b[0], b[1]]))),
            KeyType::Mark => Value::Num(u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))),
            KeyType::IfName => Value::Str(attr_str(b)),
            KeyType::EtherAddr => Value::Str(
                b.iter()
                    .map(|x| format!("{x:02x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
        });
        at += if types.len() > 1 { align4(len) } else { len };
    }
    Some(parts)
}

fn key_text(parts: &[Value]) -> String {
    parts
        .iter()
        .map(|v| match v {
            Value::Str(s) => s.clone(),
            Value::Num(n) => n.to_string(),
            Value::Addr(a) => a.to_string(),
            other => format!("{other:?}"),
        })
        .collect::<Vec<_>>()
        .join(" . ")
}

fn proto_number(v: &Value) -> Enc<u8> {
    match v {
        Value::Num(n) if *n <= 255 => Ok(*n as u8),
        Value::Str(s) => match s.as_str() {
            "tcp" => Ok(6),
            "udp" => Ok(17),
            "sctp" => Ok(132),
            "icmp" => Ok(1),
            "icmpv6" => Ok(58),
            other => unsupported(format!("protocol {other}")),
        },
        other => unsupported(format!("protocol {other:?}")),
    }
}

fn ifname_bytes(s: &str) -> Enc<Vec<u8>> {
    if s.len() >= 16 || s.contains('*') {
        return unsupported(format!("interface name {s:?}"));
    }
    let mut v = s.as_bytes().to_vec();
    v.resize(16, 0);
    Ok(v)
}

/// One rule's `NFTA_RULE_EXPRESSIONS`.
pub(crate) fn encode_rule(table: &Table, family: NftFamily, rule: &NftRule) -> Enc<Attrs> {
    let mut r = RuleEnc {
        maps: &table.maps,
        family,
        out: Attrs::new(),
        nfproto: None,
        l4proto: None,
    };
    for s in &rule.stmts {
        r.stmt(s)?;
    }
    Ok(r.out)
}

// Registers: NFT_REG_VERDICT, NFT_REG_1 (16 bytes), NFT_REG32_00 (4 bytes).
const REG_VERDICT: u32 = 0;
const REG_1: u32 = 1;
const REG_2: u32 = 2;

/// The register nft names for the 4-byte unit `unit` of the register file:
/// a 16-byte register when aligned to one, else a 32-bit one.
fn reg_for_unit(unit: u32) -> u32 {
    if unit % 4 == 0 {
        REG_1 + unit / 4
    } else {
        8 + unit
    }
}

const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

/// Where a payload field is: (base, offset, length, protocol dependency).
enum Dep {
    None,
    Nfproto(u8),
    L4proto(u8),
}

struct Field {
    base: u32,
    offset: u32,
    len: u32,
    dep: Dep,
}

fn payload_field(protocol: &str, field: &str) -> Enc<Field> {
    let (base, offset, len, dep) = match (protocol, field) {
        ("ip", "saddr") => (1, 12, 4, Dep::Nfproto(NFPROTO_IPV4)),
        ("ip", "daddr") => (1, 16, 4, Dep::Nfproto(NFPROTO_IPV4)),
        ("ip6", "saddr") => (1, 8, 16, Dep::Nfproto(NFPROTO_IPV6)),
        ("ip6", "daddr") => (1, 24, 16, Dep::Nfproto(NFPROTO_IPV6)),
        ("tcp", "sport") => (2, 0, 2, Dep::L4proto(6)),
        ("tcp", "dport") => (2, 2, 2, Dep::L4proto(6)),
        ("udp", "sport") => (2, 0, 2, Dep::L4proto(17)),
        ("udp", "dport") => (2, 2, 2, Dep::L4proto(17)),
        ("sctp", "sport") => (2, 0, 2, Dep::L4proto(132)),
        ("sctp", "dport") => (2, 2, 2, Dep::L4proto(132)),
        ("th", "sport") => (2, 0, 2, Dep::None),
        ("th", "dport") => (2, 2, 2, Dep::None),
        ("ether", "daddr") => (0, 0, 6, Dep::None),
        ("ether", "saddr") => (0, 6, 6, Dep::None),
        _ => return unsupported(format!("{protocol} {field}")),
    };
    Ok(Field {
        base,
        offset,
        len,
        dep,
    })
}

fn meta_key(key: &str) -> Enc<(u32, usize)> {
    Ok(match key {
        "mark" => (3, 4),
        "iif" => (4, 4),
        "oif" => (5, 4),
        "iifname" => (6, 16),
        "oifname" => (7, 16),
        "nfproto" => (15, 1),
        "l4proto" => (16, 1),
        other => return unsupported(format!("meta {other}")),
    })
}

struct RuleEnc<'a> {
    maps: &'a [Map],
    family: NftFamily,
    out: Attrs,
    nfproto: Option<u8>,
    l4proto: Option<u8>,
}

fn expr(name: &str, data: &Attrs) -> Attrs {
    let mut e = Attrs::new();
    e.str(NFTA_EXPR_NAME, name).nested(NFTA_EXPR_DATA, data);
    e
}

fn value_data(bytes: &[u8]) -> Attrs {
    let mut d = Attrs::new();
    d.bytes(NFTA_DATA_VALUE, bytes);
    d
}

fn cmp_op(op: CmpOp) -> Enc<u32> {
    Ok(match op {
        CmpOp::Eq => 0,
        CmpOp::Ne => 1,
        CmpOp::Lt => 2,
        CmpOp::Le => 3,
        CmpOp::Gt => 4,
        CmpOp::Ge => 5,
        CmpOp::In => return unsupported("flag test on this expression"),
    })
}

impl RuleEnc<'_> {
    fn push(&mut self, name: &str, data: &Attrs) {
        let e = expr(name, data);
        self.out.nested(NFTA_LIST_ELEM, &e);
    }

    fn meta_load(&mut self, key: u32, dreg: u32) {
        let mut d = Attrs::new();
        d.u32(2, key).u32(1, dreg);
        self.push("meta", &d);
    }

    fn payload_load(&mut self, f: &Field, len: u32, dreg: u32) {
        let mut d = Attrs::new();
        d.u32(1, dreg).u32(2, f.base).u32(3, f.offset).u32(4, len);
        self.push("payload", &d);
    }

    fn cmp(&mut self, op: u32, bytes: &[u8]) {
        let mut d = Attrs::new();
        d.u32(1, REG_1).u32(2, op).nested(3, &value_data(bytes));
        self.push("cmp", &d);
    }

    fn bitwise(&mut self, len: u32, mask: &[u8], xor: &[u8], with_op: bool) {
        let mut d = Attrs::new();
        d.u32(1, REG_1).u32(2, REG_1);
        if with_op {
            d.u32(6, 0);
        }
        d.u32(3, len)
            .nested(4, &value_data(mask))
            .nested(5, &value_data(xor));
        self.push("bitwise", &d);
    }

    fn immediate(&mut self, dreg: u32, data: &Attrs) {
        let mut d = Attrs::new();
        d.u32(1, dreg).nested(2, data);
        self.push("immediate", &d);
    }

    fn verdict(&mut self, code: u32, chain: Option<&str>) {
        self.immediate(REG_VERDICT, &verdict_data(code, chain));
    }

    /// The implicit match nft adds before a protocol's header field, unless
    /// the rule already established it.
    fn dependency(&mut self, dep: &Dep) -> Enc<()> {
        match *dep {
            Dep::None => {}
            Dep::Nfproto(p) => {
                if self.family == NftFamily::Inet && self.nfproto != Some(p) {
                    self.meta_load(15, REG_1);
                    self.cmp(0, &[p]);
                    self.nfproto = Some(p);
                } else if self.family == NftFamily::Bridge {
                    return unsupported("network header match in a bridge table");
                }
            }
            Dep::L4proto(p) => {
                if self.l4proto != Some(p) {
                    self.meta_load(16, REG_1);
                    self.cmp(0, &[p]);
                    self.l4proto = Some(p);
                }
            }
        }
        Ok(())
    }

    fn map_of(&self, name: &str) -> Enc<&Map> {
        match self.maps.iter().find(|m| m.name == name) {
            Some(m) => Ok(m),
            None => unsupported(format!("unknown map {name}")),
        }
    }

    /// Loads a (concatenated) lookup key into consecutive registers, the
    /// implicit protocol matches first, as nft does.
    fn load_key(&mut self, key: &[Expr], interval: bool) -> Enc<()> {
        for k in key {
            if let Expr::Payload { protocol, field } = k {
                let f = payload_field(protocol, field)?;
                self.dependency(&f.dep)?;
            }
        }
        let mut unit = 0u32;
        for k in key {
            let reg = if key.len() == 1 {
                REG_1
            } else {
                reg_for_unit(unit)
            };
            let len = match k {
                Expr::Payload { protocol, field } => {
                    let f = payload_field(protocol, field)?;
                    self.payload_load(&f, f.len, reg);
                    f.len
                }
                Expr::Meta(m) => {
                    let (code, len) = meta_key(m)?;
                    self.meta_load(code, reg);
                    if interval && m == "l4proto" {
                        // nft converts host-order key parts of interval
                        // (pipapo) keys; for a one-byte protocol the
                        // conversion is a no-op, but it is part of the rule.
                        let mut d = Attrs::new();
                        d.u32(1, reg).u32(2, reg).u32(3, 1).u32(4, 1).u32(5, 2);
                        self.push("byteorder", &d);
                    }
                    len as u32
                }
                other => return unsupported(format!("map key {other:?}")),
            };
            unit += len.div_ceil(4);
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Enc<()> {
        match s {
            Stmt::Match { left, op, right } => self.matches(left, *op, right)?,
            Stmt::Lookup { key, map, negate } => {
                let interval = self.map_of(map)?.interval;
                self.load_key(key, interval)?;
                let mut d = Attrs::new();
                d.u32(2, REG_1).str(1, map);
                if *negate {
                    d.u32(5, NFT_LOOKUP_F_INV);
                }
                self.push("lookup", &d);
            }
            Stmt::DnatMap { v6, key, map } => {
                let (fam, addr_len) = if *v6 {
                    (NFPROTO_IPV6, 16)
                } else {
                    (NFPROTO_IPV4, 4)
                };
                // nft adds no `meta nfproto` match of its own here (only
                // the key's header fields bring one): in an inet table the
                // kernel's nat skips packets of the other family.
                let interval = self.map_of(map)?.interval;
                self.load_key(key, interval)?;
                let mut d = Attrs::new();
                d.u32(2, REG_1).u32(3, REG_1).str(1, map);
                self.push("lookup", &d);
                // No NFTA_NAT_FLAGS, as nft: the kernel sets
                // NF_NAT_RANGE_PROTO_SPECIFIED itself for a port register.
                let mut d = Attrs::new();
                d.u32(1, 1)
                    .u32(2, u32::from(fam))
                    .u32(3, REG_1)
                    .u32(5, reg_for_unit(addr_len / 4));
                self.push("nat", &d);
            }
            Stmt::SetMarkBits(bits) => {
                self.meta_load(3, REG_1);
                self.bitwise(4, &(!bits).to_ne_bytes(), &bits.to_ne_bytes(), true);
                let mut d = Attrs::new();
                d.u32(2, 3).u32(3, REG_1);
                self.push("meta", &d);
            }
            Stmt::Masquerade => self.push("masq", &Attrs::new()),
            Stmt::Dnat { addr, port } => {
                let (fam, bytes) = match addr {
                    IpAddr::V4(a) => (NFPROTO_IPV4, a.octets().to_vec()),
                    IpAddr::V6(a) => (NFPROTO_IPV6, a.octets().to_vec()),
                };
                self.immediate(REG_1, &value_data(&bytes));
                self.immediate(REG_2, &value_data(&port.to_be_bytes()));
                let mut d = Attrs::new();
                // NF_NAT_RANGE_PROTO_SPECIFIED
                d.u32(1, 1)
                    .u32(2, u32::from(fam))
                    .u32(3, REG_1)
                    .u32(5, REG_2)
                    .u32(7, 2);
                self.push("nat", &d);
            }
            Stmt::Jump(c) => self.verdict(NFT_JUMP, Some(c)),
            Stmt::Accept => self.verdict(NF_ACCEPT, None),
            Stmt::Return => self.verdict(NFT_RETURN, None),
            Stmt::Drop => self.verdict(NF_DROP, None),
        }
        Ok(())
    }

    fn matches(&mut self, left: &Expr, op: CmpOp, right: &Value) -> Enc<()> {
        match left {
            Expr::Payload { protocol, field } => {
                let f = payload_field(protocol, field)?;
                self.dependency(&f.dep)?;
                let op = cmp_op(op)?;
                match (protocol.as_str(), right) {
                    ("ip" | "ip6", Value::Addr(a)) => {
                        let b = addr_bytes(a);
                        if b.len() as u32 != f.len {
                            return unsupported("address of the other family");
                        }
                        self.payload_load(&f, f.len, REG_1);
                        self.cmp(op, &b);
                    }
                    ("ip" | "ip6", Value::Prefix(net)) => self.prefix(&f, op, net)?,
                    ("tcp" | "udp" | "sctp" | "th", Value::Num(n)) if *n <= 0xffff => {
                        self.payload_load(&f, 2, REG_1);
                        self.cmp(op, &(*n as u16).to_be_bytes());
                    }
                    ("ether", Value::Str(mac)) => {
                        let b = mac_bytes(mac)?;
                        self.payload_load(&f, 6, REG_1);
                        self.cmp(op, &b);
                    }
                    _ => return unsupported(format!("{protocol} {field} {right:?}")),
                }
            }
            Expr::Meta(key) => {
                let (k, _) = meta_key(key)?;
                let op_n = cmp_op(op)?;
                let bytes = match (key.as_str(), right) {
                    ("nfproto", Value::Str(s)) => vec![match s.as_str() {
                        "ipv4" => NFPROTO_IPV4,
                        "ipv6" => NFPROTO_IPV6,
                        other => return unsupported(format!("nfproto {other}")),
                    }],
                    ("l4proto", v) => vec![proto_number(v)?],
                    ("iifname" | "oifname", Value::Str(s)) => ifname_bytes(s)?,
                    ("mark", Value::Num(n)) if *n <= u64::from(u32::MAX) => {
                        (*n as u32).to_ne_bytes().to_vec()
                    }
                    _ => return unsupported(format!("meta {key} {right:?}")),
                };
                self.meta_load(k, REG_1);
                self.cmp(op_n, &bytes);
                if op == CmpOp::Eq {
                    match key.as_str() {
                        "nfproto" => self.nfproto = Some(bytes[0]),
                        "l4proto" => self.l4proto = Some(bytes[0]),
                        _ => {}
                    }
                }
            }
            Expr::Ct(key) => {
                let (k, mask) = match (key.as_str(), op, right) {
                    ("state", CmpOp::In | CmpOp::Eq, Value::Str(s)) => (0, ct_state(s)?),
                    ("status", CmpOp::In | CmpOp::Eq, Value::Str(s)) => (2, ct_status(s)?),
                    _ => return unsupported(format!("ct {key} {} {right:?}", op.as_str())),
                };
                let mut d = Attrs::new();
                d.u32(2, k).u32(1, REG_1);
                self.push("ct", &d);
                self.bitwise(4, &mask.to_ne_bytes(), &[0; 4], false);
                self.cmp(1, &[0; 4]);
            }
            Expr::FibDaddrType => {
                let ty: u32 = match right {
                    Value::Str(s) if s == "local" => 2,
                    Value::Str(s) if s == "unicast" => 1,
                    _ => return unsupported(format!("fib daddr type {right:?}")),
                };
                let op = cmp_op(op)?;
                let mut d = Attrs::new();
                // NFTA_FIB_FLAGS = NFTA_FIB_F_DADDR, NFTA_FIB_RESULT = ADDRTYPE.
                d.u32(3, 2).u32(2, 3).u32(1, REG_1);
                self.push("fib", &d);
                self.cmp(op, &ty.to_ne_bytes());
            }
            Expr::MarkAnd(mask) => {
                let Value::Num(n) = right else {
                    return unsupported(format!("mark value {right:?}"));
                };
                let op = cmp_op(op)?;
                self.meta_load(3, REG_1);
                self.bitwise(4, &mask.to_ne_bytes(), &[0; 4], true);
                self.cmp(op, &(*n as u32).to_ne_bytes());
            }
        }
        Ok(())
    }

    /// A prefix match as nft linearizes it: whole-byte prefixes compare
    /// only their bytes, others mask the whole address first.
    fn prefix(&mut self, f: &Field, op: u32, net: &IpNetwork) -> Enc<()> {
        let addr = addr_bytes(&net.network());
        if addr.len() as u32 != f.len {
            return unsupported("prefix of the other family");
        }
        let plen = u32::from(net.prefix());
        if plen == 0 {
            return unsupported("zero-length prefix");
        }
        if plen % 8 == 0 {
            let n = plen / 8;
            self.payload_load(f, n, REG_1);
            self.cmp(op, &addr[..n as usize]);
        } else {
            let mut mask = vec![0u8; addr.len()];
            for (i, m) in mask.iter_mut().enumerate() {
                let bits = plen.saturating_sub(8 * i as u32).min(8);
                *m = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
            }
            self.payload_load(f, f.len, REG_1);
            self.bitwise(f.len, &mask, &vec![0u8; addr.len()], false);
            self.cmp(op, &addr);
        }
        Ok(())
    }
}

fn addr_bytes(a: &IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn mac_bytes(s: &str) -> Enc<Vec<u8>> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return unsupported(format!("MAC address {s:?}"));
    }
    parts
        .iter()
        .map(|p| u8::from_str_radix(p, 16).map_err(|_| Unsupported(format!("MAC address {s:?}"))))
        .collect()
}

fn ct_state(s: &str) -> Enc<u32> {
    Ok(match s {
        "invalid" => 1,
        "established" => 2,
        "related" => 4,
        "new" => 8,
        "untracked" => 64,
        other => return unsupported(format!("ct state {other}")),
    })
}

fn ct_status(s: &str) -> Enc<u32> {
    Ok(match s {
        "expected" => 0x1,
        "seen-reply" => 0x2,
        "assured" => 0x4,
        "confirmed" => 0x8,
        "snat" => 0x10,
        "dnat" => 0x20,
        "dying" => 0x200,
        other => return unsupported(format!("ct status {other}")),
    })
}
