//! The `nft` process backend: each call is one `nft -j -f -` batch (plus,
//! where the state must be read, one `nft -j list table`). The first ADD
//! of a table also sends the shared objects as one nft-syntax batch
//! (`nft -f -`): nft 1.0's JSON cannot declare a map with concatenated data
//! (`ipv4_addr . inet_service`, the DNAT maps).

use std::path::{Path, PathBuf};

use serde_json::{json, Value as Json};

use ipnetwork::IpNetwork;

use super::batch;
use super::engine::{
    traced_batch, Driver, ListedElement, ListedRule, Listing, Refusal, RefusalKind,
};
#[cfg(test)]
use super::model::RuleRef;
use super::model::{AttachmentRules, Batch, Expr, KeyType, Map, NftCommand, Stmt, Table, Value};
use super::nfconn::NfConn;
use super::{FirewallOp, DEFAULT_MASQ_MARK};
use crate::{Error, Result};

/// [`Firewall`](super::Firewall) implemented by running the `nft` binary with JSON batches.
///
/// ```no_run
/// use cni_firewall::{AttachmentId, Firewall, MasqueradeSpec, NftFirewall, RuleSpec};
///
/// let fw = NftFirewall::in_netns("/run/netns/test");
/// fw.add(&RuleSpec::Masquerade(MasqueradeSpec {
///     attachment: AttachmentId::new("mynet", "cid", "eth0"),
///     addresses: vec!["10.88.0.5/16".parse()?],
/// }))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct NftFirewall {
    program: PathBuf,
    netns: Option<PathBuf>,
    masq_mark: u32,
}

impl Default for NftFirewall {
    fn default() -> Self {
        NftFirewall::new()
    }
}

impl NftFirewall {
    /// Programs the current network namespace with `nft` from `PATH`.
    pub fn new() -> Self {
        NftFirewall {
            program: PathBuf::from("nft"),
            netns: None,
            masq_mark: DEFAULT_MASQ_MARK,
        }
    }

    /// Programs the network namespace at `path` (e.g. `/run/netns/x`): each
    /// `nft` process enters it before it starts, the caller's threads never
    /// do.
    pub fn in_netns(path: impl Into<PathBuf>) -> Self {
        NftFirewall {
            netns: Some(path.into()),
            ..NftFirewall::new()
        }
    }

    /// Uses this `nft` binary instead of the one on `PATH`.
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    /// Uses `mark` (one or more bits; default
    /// [`DEFAULT_MASQ_MARK`]) to ask for masquerade of port-mapped
    /// connections. The rule acting on the mark is shared by the node and
    /// written when the table is created, so every user of a node must use
    /// the same mark; 0 keeps the default.
    pub fn with_masq_mark(mut self, mark: u32) -> Self {
        if mark != 0 {
            self.masq_mark = mark;
        }
        self
    }

    /// The network namespace this firewall programs, if not the current one.
    pub fn netns(&self) -> Option<&Path> {
        self.netns.as_deref()
    }

    /// A netlink connection to the same namespace's nf_tables, for what
    /// `nft` cannot do.
    fn conn(&self) -> NfConn {
        NfConn::new(self.netns.clone())
    }

    /// Runs `nft` with `args` and optional stdin; `Ok(Err(stderr))` when nft
    /// itself failed.
    fn run(
        &self,
        op: FirewallOp,
        who: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        let out = cni_netns::run_at(self.netns.as_deref(), || {
            cni_netns::tool::run(&self.program, args, stdin)
        })?
        .map_err(|source| Error::NftSpawn {
            op,
            attachment: who.to_owned(),
            program: self.program.clone(),
            source,
        })?;
        if out.status.success() {
            Ok(Ok(out.stdout))
        } else {
            Ok(Err(cni_netns::tool::nft_error(&out)))
        }
    }

    fn refusal(op: FirewallOp, who: &str, message: String) -> Refusal {
        let kind = if message.contains("No such file or directory") {
            RefusalKind::NotFound
        } else if message.contains("File exists") {
            RefusalKind::Exists
        } else {
            RefusalKind::Other
        };
        Refusal {
            kind,
            error: Error::Nft {
                op,
                attachment: who.to_owned(),
                message: message.clone(),
            },
            message,
        }
    }
}

impl Driver for NftFirewall {
    fn masq_mark(&self) -> u32 {
        self.masq_mark
    }

    fn send(
        &self,
        op: FirewallOp,
        who: &str,
        _table: &Table,
        batch: &Batch,
    ) -> Result<std::result::Result<(), Refusal>> {
        if batch.commands.is_empty() {
            return Ok(Ok(()));
        }
        traced_batch("nft", op, who, batch.commands.len(), || {
            let input = encode_batch(batch).to_string();
            Ok(self
                .run(op, who, &["-j", "-f", "-"], Some(input.as_bytes()))?
                .map(|_| ())
                .map_err(|m| Self::refusal(op, who, m)))
        })
    }

    // nft 1.0's JSON parser cannot declare a map whose data is a
    // concatenation (`ipv4_addr . inet_service`: it declares a set
    // instead), so the shared objects go as one nft-syntax batch (atomic:
    // the table is complete or untouched), then the attachment as JSON.
    fn send_with_shared(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        rules: &AttachmentRules,
    ) -> Result<std::result::Result<(), Refusal>> {
        let shared = traced_batch("nft", op, who, 1, || {
            let text = shared_text(table);
            Ok(self
                .run(op, who, &["-f", "-"], Some(text.as_bytes()))?
                .map(drop)
                .map_err(|m| Self::refusal(op, who, m)))
        })?;
        if let Err(refusal) = shared {
            return Ok(Err(refusal));
        }
        self.send(op, who, table, &batch::attach(table, rules, true))
    }

    // The `nft` program cannot commit on a condition: these go over
    // netlink (a generation read and element deletes, which every
    // nf_tables kernel takes natively).
    fn generation(&self, op: FirewallOp, who: &str) -> Result<u32> {
        self.conn().generation(op, who)
    }

    fn send_at(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
        generation: u32,
    ) -> Result<std::result::Result<(), Refusal>> {
        self.conn().commit(op, who, table, batch, Some(generation))
    }

    fn read(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        rules_only: bool,
    ) -> Result<Option<Listing>> {
        let fam = table.family.as_str();
        let args: Vec<&str> = match (rules_only, table.conditions_chain) {
            (true, Some(chain)) => vec!["-j", "list", "chain", fam, table.name, chain],
            (true, None) => return Ok(Some(Listing::default())),
            (false, _) => vec!["-j", "list", "table", fam, table.name],
        };
        let out = self.run(op, who, &args, None)?;
        match out {
            Ok(stdout) => {
                parse_listing(&stdout, table)
                    .map(Some)
                    .map_err(|message| Error::NftOutput {
                        op,
                        attachment: who.to_owned(),
                        message,
                    })
            }
            Err(msg) if msg.contains("No such file or directory") => Ok(None),
            Err(message) => Err(Error::Nft {
                op,
                attachment: who.to_owned(),
                message,
            }),
        }
    }

    fn key_id(&self, _map: &Map, key: &[Value]) -> Option<String> {
        Some(encode_key(key).to_string())
    }

    fn data_id(&self, _map: &Map, data: &[Value]) -> Option<String> {
        Some(encode_key(data).to_string())
    }
}

fn parse_listing(stdout: &[u8], table: &Table) -> std::result::Result<Listing, String> {
    let doc: Json = serde_json::from_slice(stdout).map_err(|e| e.to_string())?;
    let items = doc
        .get("nftables")
        .and_then(Json::as_array)
        .ok_or("no \"nftables\" array")?;
    let mut listing = Listing::default();
    for item in items {
        if let Some(rule) = item.get("rule") {
            let chain = rule
                .get("chain")
                .and_then(Json::as_str)
                .ok_or("rule without chain")?;
            if Some(chain) != table.conditions_chain {
                continue;
            }
            let handle = rule
                .get("handle")
                .and_then(Json::as_u64)
                .ok_or("rule without handle")?;
            let comment = rule
                .get("comment")
                .and_then(Json::as_str)
                .map(str::to_owned);
            listing.rules.push(ListedRule {
                chain: chain.to_owned(),
                handle,
                comment,
            });
        } else if let Some(map) = item.get("map").or_else(|| item.get("set")) {
            let name = map
                .get("name")
                .and_then(Json::as_str)
                .ok_or("map without name")?;
            if table.map(name).is_none() {
                continue;
            }
            for elem in map
                .get("elem")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                let (key_part, data) = match elem.as_array() {
                    Some(pair) if pair.len() == 2 => (&pair[0], pair[1].clone()),
                    _ => (elem, Json::Null),
                };
                let (key, comment, expires) = match key_part.get("elem") {
                    Some(e) => (
                        e.get("val").cloned().ok_or("element without val")?,
                        e.get("comment").and_then(Json::as_str).map(str::to_owned),
                        e.get("expires").and_then(Json::as_u64),
                    ),
                    None => (key_part.clone(), None, None),
                };
                listing.elements.push(ListedElement {
                    map: name.to_owned(),
                    key: decode_key(&key),
                    key_id: key.to_string(),
                    data_id: data.to_string(),
                    comment,
                    expiring: expires.is_some_and(|s| s * 1000 < batch::EXPIRING_MS),
                });
            }
        }
    }
    Ok(listing)
}

fn decode_key(raw: &Json) -> Vec<Value> {
    let one = |v: &Json| match v {
        Json::Number(n) => n
            .as_u64()
            .map(Value::Num)
            .unwrap_or_else(|| Value::Str(n.to_string())),
        Json::String(s) => Value::Str(s.clone()),
        Json::Object(o) => o
            .get("prefix")
            .and_then(|p| {
                let addr = p.get("addr")?.as_str()?;
                let len = p.get("len")?.as_u64()?;
                format!("{addr}/{len}").parse::<IpNetwork>().ok()
            })
            .map(Value::Prefix)
            .unwrap_or_else(|| Value::Str(v.to_string())),
        other => Value::Str(other.to_string()),
    };
    match raw.get("concat").and_then(Json::as_array) {
        Some(parts) => parts.iter().map(one).collect(),
        None => vec![one(raw)],
    }
}

/// The table's shared objects ([`batch::shared`]) in nft syntax.
pub(crate) fn shared_text(table: &Table) -> String {
    let mut out = String::new();
    let (fam, t) = (table.family.as_str(), table.name);
    for c in &batch::shared(table).commands {
        let line = match c {
            NftCommand::AddTable => format!("add table {fam} {t}"),
            NftCommand::AddMap(m) => {
                let types =
                    |k: &[KeyType]| k.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(" . ");
                let flags = if m.interval {
                    " flags interval,timeout;"
                } else {
                    " flags timeout;"
                };
                format!(
                    "add map {fam} {t} {} {{ type {} : {};{flags} }}",
                    m.name,
                    types(&m.key),
                    types(&m.data)
                )
            }
            NftCommand::AddChain { name, base: None } => format!("add chain {fam} {t} {name}"),
            NftCommand::AddChain {
                name,
                base: Some(b),
            } => format!(
                "add chain {fam} {t} {name} {{ type {} hook {} priority {}; policy accept; }}",
                b.chain_type.as_str(),
                b.hook.as_str(),
                b.priority
            ),
            NftCommand::FlushChain(name) => format!("flush chain {fam} {t} {name}"),
            NftCommand::AddRule { chain, rule } => {
                let stmts: Vec<String> = rule.stmts.iter().map(stmt_text).collect();
                format!("add rule {fam} {t} {chain} {}", stmts.join(" "))
            }
            // Not part of the shared objects.
            NftCommand::AddElement { .. }
            | NftCommand::ExpireElements(_)
            | NftCommand::DeleteElements { .. }
            | NftCommand::DeleteRule(_) => continue,
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn expr_text(e: &Expr) -> String {
    match e {
        Expr::Payload { protocol, field } => format!("{protocol} {field}"),
        Expr::Meta(key) => format!("meta {key}"),
        Expr::Ct(key) => format!("ct {key}"),
        Expr::FibDaddrType => "fib daddr type".into(),
        Expr::MarkAnd(mask) => format!("meta mark & {mask:#x}"),
    }
}

fn key_text(key: &[Expr]) -> String {
    key.iter().map(expr_text).collect::<Vec<_>>().join(" . ")
}

fn stmt_text(s: &Stmt) -> String {
    match s {
        Stmt::Match { left, op, right } => {
            let op = match op {
                super::model::CmpOp::Eq if matches!(left, Expr::MarkAnd(_)) => "== ".into(),
                super::model::CmpOp::Eq | super::model::CmpOp::In => String::new(),
                other => format!("{} ", other.as_str()),
            };
            let right = match right {
                Value::Num(n) => format!("{n:#x}"),
                Value::Str(s) if s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') => {
                    s.clone()
                }
                Value::Str(s) => format!("\"{s}\""),
                other => batch::value_text(other),
            };
            format!("{} {op}{right}", expr_text(left))
        }
        Stmt::Lookup { key, map, negate } => {
            let op = if *negate { "!= " } else { "" };
            format!("{} {op}@{map}", key_text(key))
        }
        Stmt::DnatMap { v6, key, map } => {
            format!(
                "dnat {} to {} map @{map}",
                if *v6 { "ip6" } else { "ip" },
                key_text(key)
            )
        }
        Stmt::SetMarkBits(bits) => format!("meta mark set meta mark | {bits:#x}"),
        Stmt::Masquerade => "masquerade".into(),
        Stmt::Dnat { addr, port } => match addr {
            std::net::IpAddr::V4(a) => format!("dnat ip to {a}:{port}"),
            std::net::IpAddr::V6(a) => format!("dnat ip6 to [{a}]:{port}"),
        },
        Stmt::Jump(target) => format!("jump {target}"),
        Stmt::Return => "return".into(),
        Stmt::Drop => "drop".into(),
        Stmt::Accept => "accept".into(),
    }
}

/// The `{"nftables": [...]}` document of a batch.
pub(crate) fn encode_batch(batch: &Batch) -> Json {
    let family = batch.family.as_str();
    let table = batch.table;
    let obj = |extra: Json| {
        let mut o = json!({"family": family, "table": table});
        if let (Some(o), Json::Object(extra)) = (o.as_object_mut(), extra) {
            o.extend(extra);
        }
        o
    };
    let mut cmds = vec![json!({"metainfo": {"json_schema_version": 1}})];
    for c in &batch.commands {
        cmds.push(match c {
            NftCommand::AddTable => json!({"add": {"table": {"family": family, "name": table}}}),
            NftCommand::AddMap(m) => {
                let ty = |k: &[KeyType]| {
                    let types: Vec<&str> = k.iter().map(|k| k.as_str()).collect();
                    if types.len() == 1 {
                        json!(types[0])
                    } else {
                        json!(types)
                    }
                };
                let flags = if m.interval {
                    json!(["interval", "timeout"])
                } else {
                    json!(["timeout"])
                };
                let o = obj(
                    json!({"name": m.name, "type": ty(&m.key), "map": ty(&m.data), "flags": flags}),
                );
                json!({"add": {"map": o}})
            }
            NftCommand::AddChain { name, base: None } => {
                json!({"add": {"chain": obj(json!({"name": name}))}})
            }
            NftCommand::AddChain {
                name,
                base: Some(b),
            } => json!({"add": {"chain": obj(json!({
                "name": name,
                "type": b.chain_type.as_str(),
                "hook": b.hook.as_str(),
                "prio": b.priority,
                "policy": "accept",
            }))}}),
            NftCommand::FlushChain(name) => json!({"flush": {"chain": obj(json!({"name": name}))}}),
            NftCommand::AddRule { chain, rule } => {
                let mut r = obj(json!({
                    "chain": chain,
                    "expr": rule.stmts.iter().map(encode_stmt).collect::<Vec<_>>(),
                }));
                if let (Some(c), Some(o)) = (&rule.comment, r.as_object_mut()) {
                    o.insert("comment".into(), json!(c));
                }
                json!({"add": {"rule": r}})
            }
            NftCommand::AddElement {
                element: e,
                exclusive,
            } => {
                let mut elem = json!({
                    "val": encode_key(&e.key),
                    "timeout": batch::ELEMENT_TIMEOUT_MS / 1000,
                });
                if let (Some(c), Some(o)) = (&e.comment, elem.as_object_mut()) {
                    o.insert("comment".into(), json!(c));
                }
                let body = json!({"element": obj(json!({
                    "name": e.map,
                    "elem": [[{"elem": elem}, encode_key(&e.data)]],
                }))});
                if *exclusive {
                    json!({ "create": body })
                } else {
                    json!({ "add": body })
                }
            }
            // nft's JSON takes expirations in whole seconds: a 1 s linger
            // would let the key be refused to its next owner, so this
            // backend deletes (and pays the RCU wait at exit, as it always
            // did).
            NftCommand::ExpireElements(elements) => json!({"delete": {"element": obj(json!({
                "name": elements.first().map(|e| e.map.clone()).unwrap_or_default(),
                "elem": elements.iter().map(|e| encode_key(&e.key)).collect::<Vec<_>>(),
            }))}}),
            NftCommand::DeleteElements { map, keys } => json!({"delete": {"element": obj(json!({
                "name": map,
                "elem": keys.iter().map(|k| encode_key(k)).collect::<Vec<_>>(),
            }))}}),
            NftCommand::DeleteRule(r) => json!({"delete": {"rule": obj(json!({
                "chain": r.chain,
                "handle": r.handle,
            }))}}),
        });
    }
    json!({ "nftables": cmds })
}

fn encode_key(parts: &[Value]) -> Json {
    match parts {
        [one] => encode_value(one),
        many => json!({"concat": many.iter().map(encode_value).collect::<Vec<_>>()}),
    }
}

fn encode_value(v: &Value) -> Json {
    match v {
        Value::Str(s) => json!(s),
        Value::Num(n) => json!(n),
        Value::Addr(a) => json!(a.to_string()),
        Value::Prefix(p) => json!({"prefix": {"addr": p.ip().to_string(), "len": p.prefix()}}),
        Value::Range(a, b) => json!({"range": [encode_value(a), encode_value(b)]}),
        Value::Set(items) => json!({"set": items.iter().map(encode_value).collect::<Vec<_>>()}),
    }
}

fn encode_expr(e: &Expr) -> Json {
    match e {
        Expr::Payload { protocol, field } => {
            json!({"payload": {"protocol": protocol, "field": field}})
        }
        Expr::Meta(key) => json!({"meta": {"key": key}}),
        Expr::Ct(key) => json!({"ct": {"key": key}}),
        Expr::FibDaddrType => json!({"fib": {"result": "type", "flags": ["daddr"]}}),
        Expr::MarkAnd(mask) => json!({"&": [{"meta": {"key": "mark"}}, mask]}),
    }
}

fn encode_stmt(s: &Stmt) -> Json {
    match s {
        Stmt::Match { left, op, right } => json!({"match": {
            "op": op.as_str(),
            "left": encode_expr(left),
            "right": encode_value(right),
        }}),
        Stmt::Lookup { key, map, negate } => json!({"match": {
            "op": if *negate { "!=" } else { "==" },
            "left": encode_key_expr(key),
            "right": format!("@{map}"),
        }}),
        Stmt::DnatMap { v6, key, map } => json!({"dnat": {
            "family": if *v6 { "ip6" } else { "ip" },
            "addr": {"map": {"key": encode_key_expr(key), "data": format!("@{map}")}},
        }}),
        Stmt::SetMarkBits(bits) => json!({"mangle": {
            "key": {"meta": {"key": "mark"}},
            "value": {"|": [{"meta": {"key": "mark"}}, bits]},
        }}),
        Stmt::Masquerade => json!({"masquerade": null}),
        Stmt::Dnat { addr, port } => json!({"dnat": {
            "family": if addr.is_ipv6() { "ip6" } else { "ip" },
            "addr": addr.to_string(),
            "port": port,
        }}),
        Stmt::Jump(target) => json!({"jump": {"target": target}}),
        Stmt::Return => json!({"return": null}),
        Stmt::Drop => json!({"drop": null}),
        Stmt::Accept => json!({"accept": null}),
    }
}

fn encode_key_expr(key: &[Expr]) -> Json {
    match key {
        [one] => encode_expr(one),
        many => json!({"concat": many.iter().map(encode_expr).collect::<Vec<_>>()}),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        hostport, masquerade, AttachmentId, HostPortMapping, PortMappingSpec, Protocol,
    };
    use super::*;

    fn spec() -> PortMappingSpec {
        let mut spec = PortMappingSpec::new(AttachmentId::new("net", "cid", "eth0"));
        spec.container_v4 = Some("10.0.0.5/24".parse().unwrap());
        spec.mappings = vec![HostPortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        }];
        spec
    }

    #[test]
    fn attach_batch_json_shape() {
        let spec = spec();
        let rules = hostport::elements(&spec).unwrap().unwrap();
        let table = hostport::table(DEFAULT_MASQ_MARK);
        let doc = encode_batch(&batch::attach(&table, &rules, true));
        let cmds = doc["nftables"].as_array().unwrap();
        let dnat = cmds
            .iter()
            .find(|c| c["create"]["element"]["name"] == "hp_dnat4")
            .unwrap();
        assert_eq!(
            dnat["create"]["element"]["elem"],
            json!([[{"elem": {"val": {"concat": ["tcp", 8080]}, "timeout": 315_360_000, "comment": spec.attachment.tag()}},
                    {"concat": ["10.0.0.5", 80]}]])
        );
        let masq = cmds
            .iter()
            .find(|c| c["create"]["element"]["name"] == "hp_masq4")
            .unwrap();
        assert_eq!(
            masq["create"]["element"]["elem"][0][0]["elem"]["val"],
            json!({"concat": [{"prefix": {"addr": "10.0.0.0", "len": 24}}, "tcp", 8080]})
        );
        // The steady state touches no table, map, chain or rule.
        assert!(cmds.iter().skip(1).all(|c| c.get("create").is_some()));
        assert_eq!(cmds.len(), 1 + rules.elements.len());
    }

    #[test]
    fn shared_objects_as_nft_syntax() {
        let text = shared_text(&hostport::table(DEFAULT_MASQ_MARK));
        assert!(
            text.starts_with("add table inet cni_rs_hostport\n"),
            "{text}"
        );
        assert!(text.contains(
            "add map inet cni_rs_hostport hp_dnat4 { type inet_proto . inet_service : ipv4_addr . inet_service; flags timeout; }"
        ));
        assert!(text.contains(
            "add map inet cni_rs_hostport hp_masq4 { type ipv4_addr . inet_proto . inet_service : mark; flags interval,timeout; }"
        ));
        assert!(text.contains(
            "add rule inet cni_rs_hostport dispatch dnat ip to meta l4proto . th dport map @hp_dnat4\n"
        ));
        assert!(text.contains(
            "add rule inet cni_rs_hostport masquerading ct status dnat meta mark & 0x2000 == 0x2000 masquerade\n"
        ));
        assert!(text.contains("add chain inet cni_rs_hostport prerouting { type nat hook prerouting priority -100; policy accept; }"));
        // The conditions chain is created, never flushed.
        assert!(text.contains("add chain inet cni_rs_hostport conditions\n"));
        assert!(!text.contains("flush chain inet cni_rs_hostport conditions"));
        let masq = shared_text(&masquerade::table());
        assert!(masq.contains(
            "add rule inet cni_rs_masq postrouting ip saddr @masq_src4 ip saddr . ip daddr != @masq_nets4 masquerade\n"
        ), "{masq}");
    }

    #[test]
    fn delete_batch_json_shape() {
        let rules = masquerade::elements(&super::super::MasqueradeSpec {
            attachment: AttachmentId::new("net", "cid", "eth0"),
            addresses: vec!["fd00::5/64".parse().unwrap()],
        });
        let table = masquerade::table();
        let doc = encode_batch(&batch::delete(&table, &rules, &[]));
        let cmds = doc["nftables"].as_array().unwrap();
        assert!(cmds[1]["add"]["element"].is_object());
        assert!(cmds.contains(
            &json!({"delete": {"element": {"family": "inet", "table": "cni_rs_masq", "name": "masq_src6",
                "elem": ["fd00::5"]}}})
        ));
        // The shared subnet key is never deleted by a DEL.
        let text = doc.to_string();
        assert!(!text.contains("masq_nets6"), "{text}");
        // ... but added (if missing) by an ADD.
        let add = encode_batch(&batch::attach(&table, &rules, true)).to_string();
        assert!(add.contains(r#"{"add":{"element":{"family":"inet","table":"cni_rs_masq","name":"masq_nets6","elem":[[{"elem":{"val":{"concat":[{"prefix":{"addr":"fd00::","len":64}},{"prefix":{"addr":"fd00::","len":64}}]}"#), "{add}");
        assert!(
            add.contains(r#""comment":"fd00::/64, subnet of net: net"}},0]]"#),
            "{add}"
        );
        let doc = encode_batch(&batch::remove(
            &hostport::table(DEFAULT_MASQ_MARK),
            &[],
            &[RuleRef {
                chain: "conditions".into(),
                handle: 42,
            }],
        ));
        assert_eq!(
            doc["nftables"][1],
            json!({"delete": {"rule": {"family": "inet", "table": "cni_rs_hostport", "chain": "conditions", "handle": 42}}})
        );
    }

    #[test]
    fn parses_listing() {
        let out = br#"{"nftables": [{"metainfo": {}},
          {"table": {"family": "inet", "name": "cni_rs_hostport"}},
          {"map": {"name": "hp_dnat4", "elem": [[{"elem": {"val": {"concat": ["tcp", 8080]}, "comment": "c"}}, {"concat": ["10.0.0.5", 80]}], [{"concat": ["udp", 53]}, {"concat": ["10.0.0.6", 53]}]]}},
          {"map": {"name": "hp_masq4", "elem": [[{"elem": {"val": {"concat": [{"prefix": {"addr": "10.0.0.0", "len": 24}}, "tcp", 8080]}, "comment": "c"}}, 7]]}},
          {"map": {"name": "old_map", "elem": [[{"concat": ["udp", 53]}, 1]]}},
          {"rule": {"chain": "conditions", "handle": 9, "comment": "c", "expr": []}},
          {"rule": {"chain": "dispatch", "handle": 3, "expr": []}}]}"#;
        let table = hostport::table(DEFAULT_MASQ_MARK);
        let l = parse_listing(out, &table).unwrap();
        assert_eq!(l.elements.len(), 3);
        assert_eq!(l.elements[0].key, vec![Value::str("tcp"), Value::Num(8080)]);
        assert_eq!(
            l.elements[0].key_id,
            encode_key(&[Value::str("tcp"), Value::Num(8080)]).to_string()
        );
        assert_eq!(l.elements[0].data_id, r#"{"concat":["10.0.0.5",80]}"#);
        assert_eq!(
            l.elements[2].key[0],
            Value::Prefix("10.0.0.0/24".parse().unwrap())
        );
        assert_eq!(l.rules.len(), 1);
        assert_eq!(l.rules[0].handle, 9);
        assert!(parse_listing(b"{}", &table).is_err());
    }
}
