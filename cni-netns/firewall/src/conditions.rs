//! Extra match conditions given in nft syntax (portmap's `conditionsV4` /
//! `conditionsV6`), parsed into the rule model so they can be sent as JSON
//! (or netlink) instead of being pasted into a text ruleset.
//!
//! The accepted grammar is a sequence of matches, each
//! `[meta] KEY [OP] VALUE`, `ct KEY [OP] VALUE` or `PROTO FIELD [OP] VALUE`,
//! where a value is a word, a number, an address, a prefix, a range `a-b`
//! or a set `{ a, b }`. That covers what the Go reference's examples and
//! users write (`ip saddr 10.0.0.0/8`, `iifname != "lo"`,
//! `tcp sport { 1000-2000 }`); anything else is refused with a typed error
//! rather than silently misread.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::model::{CmpOp, Expr, Stmt, Value};
use crate::{Error, Result};

const META_KEYS: &[&str] = &[
    "iifname", "oifname", "iif", "oif", "iiftype", "oiftype", "mark", "l4proto", "nfproto",
    "skuid", "skgid", "pkttype", "protocol", "length", "cpu", "iifgroup", "oifgroup",
];
const PROTOCOLS: &[&str] = &[
    "ip", "ip6", "tcp", "udp", "sctp", "th", "ether", "icmp", "icmpv6", "udplite", "dccp",
];
const CT_KEYS: &[&str] = &["state", "status", "mark", "direction", "zone", "label"];

/// Parses nft-syntax match tokens (e.g. `["ip", "saddr", "10.0.0.0/8"]`,
/// or `["ip saddr 10.0.0.0/8"]`) into match statements.
pub fn parse_conditions(tokens: &[String]) -> Result<Vec<Stmt>> {
    let joined = tokens.join(" ");
    let spaced = joined
        .replace('{', " { ")
        .replace('}', " } ")
        .replace(',', " , ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let err = |reason: String| Error::InvalidCondition {
        condition: joined.clone(),
        reason,
    };

    let mut stmts = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        i += 1;
        let (left, implicit_flag) = if word == "meta" {
            let key = *words.get(i).ok_or_else(|| err("meta without key".into()))?;
            i += 1;
            if !META_KEYS.contains(&key) {
                return Err(err(format!("unsupported meta key {key:?}")));
            }
            (Expr::meta(key), false)
        } else if META_KEYS.contains(&word) {
            (Expr::meta(word), false)
        } else if word == "ct" {
            let key = *words.get(i).ok_or_else(|| err("ct without key".into()))?;
            i += 1;
            if !CT_KEYS.contains(&key) {
                return Err(err(format!("unsupported ct key {key:?}")));
            }
            (Expr::Ct(key.to_owned()), key == "state" || key == "status")
        } else if PROTOCOLS.contains(&word) {
            let field = *words
                .get(i)
                .ok_or_else(|| err(format!("{word} without field")))?;
            i += 1;
            if !field
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(err(format!("invalid {word} field {field:?}")));
            }
            (Expr::payload(word, field), false)
        } else {
            return Err(err(format!("unsupported expression starting at {word:?}")));
        };

        let mut op = if implicit_flag { CmpOp::In } else { CmpOp::Eq };
        if let Some(o) = words.get(i).and_then(|w| parse_op(w)) {
            op = o;
            i += 1;
        }
        let (right, used) = parse_value(&words[i..]).map_err(err)?;
        i += used;
        // nft resolves a host name given where an address is expected: a
        // DNS query from inside a CNI call. Refuse anything but addresses.
        if let Expr::Payload { protocol, field } = &left {
            if matches!(protocol.as_str(), "ip" | "ip6")
                && matches!(field.as_str(), "saddr" | "daddr")
                && has_name(&right)
            {
                return Err(err(format!(
                    "{protocol} {field} needs addresses, not names"
                )));
            }
        }
        stmts.push(Stmt::Match { left, op, right });
    }
    Ok(stmts)
}

fn has_name(v: &Value) -> bool {
    match v {
        Value::Str(_) => true,
        Value::Set(items) => items.iter().any(has_name),
        Value::Range(a, b) => has_name(a) || has_name(b),
        Value::Num(_) | Value::Addr(_) | Value::Prefix(_) => false,
    }
}

fn parse_op(word: &str) -> Option<CmpOp> {
    Some(match word {
        "==" | "eq" => CmpOp::Eq,
        "!=" | "ne" => CmpOp::Ne,
        "<" | "lt" => CmpOp::Lt,
        ">" | "gt" => CmpOp::Gt,
        "<=" | "le" => CmpOp::Le,
        ">=" | "ge" => CmpOp::Ge,
        _ => return None,
    })
}

/// Parses one value (or a `{ ... }` set) from the front of `words`; returns
/// it and the number of words used.
fn parse_value(words: &[&str]) -> std::result::Result<(Value, usize), String> {
    match words.first() {
        None => Err("missing value".into()),
        Some(&"{") => {
            let mut items = Vec::new();
            for (n, w) in words.iter().enumerate().skip(1) {
                match *w {
                    "}" => {
                        if items.is_empty() {
                            return Err("empty set".into());
                        }
                        return Ok((Value::Set(items), n + 1));
                    }
                    "," => {}
                    "{" => return Err("nested set".into()),
                    w => items.push(parse_scalar(w)?),
                }
            }
            Err("unterminated set".into())
        }
        Some(w) => Ok((parse_scalar(w)?, 1)),
    }
}

fn parse_scalar(word: &str) -> std::result::Result<Value, String> {
    if matches!(word, "}" | "," | "==" | "!=") {
        return Err(format!("unexpected {word:?}"));
    }
    if let Ok(addr) = word.parse::<IpAddr>() {
        return Ok(Value::Addr(addr));
    }
    if word.contains('/') {
        let net: IpNetwork = word
            .parse()
            .map_err(|e| format!("invalid prefix {word:?}: {e}"))?;
        let masked = IpNetwork::new(net.network(), net.prefix())
            .map_err(|e| format!("invalid prefix {word:?}: {e}"))?;
        return Ok(Value::Prefix(masked));
    }
    if let Some(n) = parse_number(word) {
        return Ok(Value::Num(n));
    }
    if let Some((lo, hi)) = word.split_once('-') {
        if let (Some(lo), Some(hi)) = (parse_number(lo), parse_number(hi)) {
            return Ok(Value::Range(
                Box::new(Value::Num(lo)),
                Box::new(Value::Num(hi)),
            ));
        }
        if let (Ok(lo), Ok(hi)) = (lo.parse::<IpAddr>(), hi.parse::<IpAddr>()) {
            return Ok(Value::Range(
                Box::new(Value::Addr(lo)),
                Box::new(Value::Addr(hi)),
            ));
        }
    }
    let unquoted = word.trim_matches('"');
    if unquoted.is_empty() {
        return Err("empty value".into());
    }
    Ok(Value::Str(unquoted.to_owned()))
}

fn parse_number(word: &str) -> Option<u64> {
    match word.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => word.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_common_conditions() {
        let stmts = parse_conditions(&toks(&["ip", "saddr", "10.1.2.3/8"])).unwrap();
        assert_eq!(
            stmts,
            vec![Stmt::Match {
                left: Expr::payload("ip", "saddr"),
                op: CmpOp::Eq,
                right: Value::Prefix("10.0.0.0/8".parse().unwrap()),
            }]
        );

        let stmts = parse_conditions(&toks(&[
            "iifname != \"lo\"",
            "tcp sport {1000-2000,3000}",
            "ct state established",
        ]))
        .unwrap();
        assert_eq!(stmts.len(), 3);
        assert_eq!(
            stmts[0],
            Stmt::Match {
                left: Expr::meta("iifname"),
                op: CmpOp::Ne,
                right: Value::str("lo"),
            }
        );
        assert_eq!(
            stmts[1],
            Stmt::Match {
                left: Expr::payload("tcp", "sport"),
                op: CmpOp::Eq,
                right: Value::Set(vec![
                    Value::Range(Box::new(Value::Num(1000)), Box::new(Value::Num(2000))),
                    Value::Num(3000)
                ]),
            }
        );
        assert!(matches!(stmts[2], Stmt::Match { op: CmpOp::In, .. }));
    }

    #[test]
    fn rejects_what_it_does_not_understand() {
        for bad in [
            vec!["jump", "x"],
            vec!["ip", "saddr"],
            vec!["ip", "saddr", "{", "1.2.3.4"],
            vec!["meta", "bogus", "1"],
            vec!["counter"],
            vec!["ip", "saddr", "example.com"],
            vec!["ip6", "daddr", "{", "::1,", "localhost", "}"],
        ] {
            let e = parse_conditions(&toks(&bad)).unwrap_err();
            assert!(matches!(e, Error::InvalidCondition { .. }), "{bad:?}: {e}");
        }
        assert!(parse_conditions(&[]).unwrap().is_empty());
    }
}
