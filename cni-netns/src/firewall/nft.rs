//! The `nft` process backend: each call is one `nft -j -f -` batch (plus,
//! where the state must be read, one `nft -j list table`).

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};

use serde_json::{json, Value as Json};

use super::backend::RuleBackend;
use super::layout::{self, DEFAULT_MASQ_MARK};
use super::model::{AttachmentRules, Batch, Command, Expr, Stmt, Table, Value};
use super::{AttachmentId, FirewallOp, OwnedAttachment, RuleKind};
use crate::{Error, Result};

/// [`Firewall`](super::Firewall) implemented by running the `nft` binary with JSON batches.
///
/// ```no_run
/// use cni_netns::firewall::{AttachmentId, Firewall, MasqueradeSpec, NftFirewall};
///
/// let fw = NftFirewall::in_netns("/run/netns/test");
/// fw.add_masquerade(&MasqueradeSpec {
///     attachment: AttachmentId::new("mynet", "cid", "eth0"),
///     address: "10.88.0.5/16".parse()?,
/// })?;
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

    /// Runs `nft` with `args` and optional stdin; `Ok(Err(stderr))` when nft
    /// itself failed.
    fn run(
        &self,
        op: FirewallOp,
        who: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        let mut cmd = Process::new(&self.program);
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let netns = match &self.netns {
            Some(path) => Some(File::open(path).map_err(|source| Error::FirewallNetns {
                path: path.clone(),
                source,
            })?),
            None => None,
        };
        if let Some(ns) = &netns {
            let fd = ns.as_raw_fd();
            // SAFETY: between fork and exec only the async-signal-safe setns
            // syscall runs; `fd` stays open in the child until exec (it is
            // owned by `netns`, alive for the whole spawn).
            unsafe {
                cmd.pre_exec(move || {
                    let ns = std::os::fd::BorrowedFd::borrow_raw(fd);
                    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let spawn_err = |source| Error::NftSpawn {
            op,
            attachment: who.to_owned(),
            program: self.program.clone(),
            source,
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input).map_err(spawn_err)?;
        }
        let out = child.wait_with_output().map_err(spawn_err)?;
        drop(netns);
        if out.status.success() {
            Ok(Ok(out.stdout))
        } else {
            let msg = String::from_utf8_lossy(&out.stderr);
            // nft prefixes its first line with a location
            // (`internal:0:0-0: Error: ...`) that means nothing for JSON input.
            let msg = msg.lines().next().unwrap_or("").trim();
            let msg = msg.find("Error: ").map_or(msg, |i| &msg[i..]);
            let msg = if msg.is_empty() {
                format!("exited with {}", out.status)
            } else {
                msg.to_owned()
            };
            Ok(Err(msg))
        }
    }

    fn apply(
        &self,
        op: FirewallOp,
        who: &str,
        batch: &Batch,
    ) -> Result<std::result::Result<(), String>> {
        if batch.commands.is_empty() {
            return Ok(Ok(()));
        }
        let input = encode_batch(batch).to_string();
        Ok(self
            .run(op, who, &["-j", "-f", "-"], Some(input.as_bytes()))?
            .map(|_| ()))
    }

    /// Reads `table`; `None` if it does not exist.
    fn list(&self, op: FirewallOp, who: &str, table: &Table) -> Result<Option<Listing>> {
        let out = self.run(
            op,
            who,
            &["-j", "list", "table", table.family.as_str(), table.name],
            None,
        )?;
        match out {
            Ok(stdout) => parse_listing(&stdout)
                .map(Some)
                .map_err(|message| Error::NftOutput {
                    op,
                    attachment: who.to_owned(),
                    message,
                }),
            Err(msg) if msg.contains("No such file or directory") => Ok(None),
            Err(message) => Err(Error::Nft {
                op,
                attachment: who.to_owned(),
                message,
            }),
        }
    }

    fn add(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules) -> Result<()> {
        let op = FirewallOp::Add(kind);
        let table = layout::table(kind, self.masq_mark);
        let who = id.to_string();
        let mut result = self.apply(op, &who, &layout::attach_batch(&table, rules))?;
        if matches!(&result, Err(m) if m.contains("No such file or directory")) {
            // First attachment (or the shared objects were removed): create
            // them in the same batch as the attachment.
            result = self.apply(op, &who, &layout::add_batch(&table, rules))?;
        }
        match result {
            Ok(()) => Ok(()),
            // Only map elements can clash on `add`: the key belongs to
            // another attachment's chain.
            Err(message) if message.contains("File exists") => Err(Error::FirewallConflict {
                op,
                attachment: who,
                key: layout::describe_keys(rules),
                message,
            }),
            Err(message) => Err(Error::Nft {
                op,
                attachment: who,
                message,
            }),
        }
    }

    fn del(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules) -> Result<()> {
        let op = FirewallOp::Delete(kind);
        let table = layout::table(kind, self.masq_mark);
        match self.apply(op, &id.to_string(), &layout::delete_batch(&table, rules))? {
            Ok(()) => Ok(()),
            // Already gone, or the keys given are not exactly the owner's:
            // read the state once and remove precisely what it owns.
            Err(_) => self.remove_owner(kind, id).map(|_| ()),
        }
    }

    /// Removes everything of `kind` owned by `id`; returns whether anything
    /// was found.
    fn remove_owner(&self, kind: RuleKind, id: &AttachmentId) -> Result<bool> {
        let op = FirewallOp::Delete(kind);
        let who = id.to_string();
        let table = layout::table(kind, self.masq_mark);
        let chain = table.owner_chain(&id.owner_hash());
        // Cheap probe before reading the whole table: deleting the chain
        // fails with ENOENT when the attachment owns nothing (the kernel
        // never lets an element outlive the chain it goes to) and with EBUSY
        // when elements still go to it; a failed batch changes nothing.
        let probe = layout::remove_batch(&table, &chain, true, &[]);
        match self.apply(op, &who, &probe)? {
            Ok(()) => return Ok(true),
            Err(m) if m.contains("No such file or directory") => return Ok(false),
            Err(_) => {}
        }
        let Some(listing) = self.list(op, &who, &table)? else {
            return Ok(false);
        };
        let exists = listing.chains.contains_key(&chain);
        let elements = listing.elements_to(&chain);
        if !exists && elements.is_empty() {
            return Ok(false);
        }
        let batch = layout::remove_batch(&table, &chain, exists, &elements);
        self.apply(op, &who, &batch)?
            .map_err(|message| Error::Nft {
                op,
                attachment: who,
                message,
            })?;
        Ok(true)
    }

    fn check(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules) -> Result<()> {
        let op = FirewallOp::Check(kind);
        let who = id.to_string();
        let table = layout::table(kind, self.masq_mark);
        let missing = |missing: String| Error::FirewallCheck {
            op,
            attachment: who.clone(),
            missing,
        };
        let listing = self.list(op, &who, &table)?.ok_or_else(|| {
            missing(format!(
                "table {} {} is missing",
                table.family.as_str(),
                table.name
            ))
        })?;
        let chain_rules = listing
            .chains
            .get(&rules.chain)
            .ok_or_else(|| missing(format!("chain {} is missing", rules.chain)))?;
        let tag = id.tag();
        let tagged = chain_rules
            .iter()
            .filter(|c| c.as_deref() == Some(&*tag))
            .count();
        if tagged != rules.rules.len() {
            return Err(missing(format!(
                "chain {} has {tagged} rules tagged for it, expected {}",
                rules.chain,
                rules.rules.len()
            )));
        }
        for e in &rules.elements {
            let key = encode_key(&e.key);
            let found = listing
                .elements
                .iter()
                .find(|l| l.map == e.map && l.raw_key == key);
            match found {
                Some(l) if l.target.as_deref() == Some(&*rules.chain) => {}
                Some(l) => {
                    return Err(missing(format!(
                        "{} {} goes to {:?}, not {}",
                        e.map, key, l.target, rules.chain
                    )))
                }
                None => return Err(missing(format!("element {} {} is missing", e.map, key))),
            }
        }
        Ok(())
    }

    fn owners(&self, listing: &Listing, table: &Table) -> Vec<OwnedAttachment> {
        let mut out = Vec::new();
        for (chain, comments) in &listing.chains {
            let Some(hash) = table.owner_of_chain(chain) else {
                continue;
            };
            let from_elements = listing
                .elements
                .iter()
                .filter(|e| e.target.as_deref() == Some(chain))
                .map(|e| &e.comment);
            let parsed = comments
                .iter()
                .chain(from_elements)
                .flatten()
                .find_map(|c| AttachmentId::from_tag(c));
            let (attachment, complete) =
                parsed.unwrap_or_else(|| (AttachmentId::new("", "", ""), false));
            out.push(OwnedAttachment {
                attachment,
                owner_hash: hash.to_owned(),
                complete,
            });
        }
        out
    }
}

impl RuleBackend for NftFirewall {
    fn masq_mark(&self) -> u32 {
        self.masq_mark
    }

    fn add_rules(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules) -> Result<()> {
        self.add(kind, id, rules)
    }

    fn del_rules(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules) -> Result<()> {
        self.del(kind, id, rules)
    }

    fn check_rules(
        &self,
        kind: RuleKind,
        id: &AttachmentId,
        rules: &AttachmentRules,
    ) -> Result<()> {
        self.check(kind, id, rules)
    }

    fn remove_owner(&self, kind: RuleKind, id: &AttachmentId) -> Result<bool> {
        NftFirewall::remove_owner(self, kind, id)
    }

    fn list_owners(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>> {
        let table = layout::table(kind, self.masq_mark);
        let op = FirewallOp::List(kind);
        let who = format!("table {} {}", table.family.as_str(), table.name);
        Ok(match self.list(op, &who, &table)? {
            Some(listing) => self.owners(&listing, &table),
            None => Vec::new(),
        })
    }

    fn gc_owners(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> Result<Vec<OwnedAttachment>> {
        let table = layout::table(kind, self.masq_mark);
        let op = FirewallOp::Gc(kind);
        let who = format!("network {network:?}");
        let Some(listing) = self.list(op, &who, &table)? else {
            return Ok(Vec::new());
        };
        let keep: HashSet<String> = valid
            .iter()
            .filter(|a| a.network == network)
            .map(AttachmentId::owner_hash)
            .collect();
        let net_prefix = format!("{}-", super::network_hash(network));
        let dead: Vec<OwnedAttachment> = self
            .owners(&listing, &table)
            .into_iter()
            .filter(|o| o.owner_hash.starts_with(&net_prefix) && !keep.contains(&o.owner_hash))
            .collect();
        let mut commands = Vec::new();
        for o in &dead {
            let chain = table.owner_chain(&o.owner_hash);
            let elements = listing.elements_to(&chain);
            commands.extend(layout::remove_batch(&table, &chain, true, &elements).commands);
        }
        let batch = Batch {
            family: table.family,
            table: table.name,
            commands,
        };
        self.apply(op, &who, &batch)?
            .map_err(|message| Error::Nft {
                op,
                attachment: who,
                message,
            })?;
        Ok(dead)
    }
}

/// What a listing of one of our tables says: chains with the comments of
/// their rules, and map elements.
#[derive(Debug, Default)]
struct Listing {
    chains: BTreeMap<String, Vec<Option<String>>>,
    elements: Vec<ListedElement>,
}

#[derive(Debug)]
struct ListedElement {
    map: String,
    raw_key: Json,
    target: Option<String>,
    comment: Option<String>,
}

impl Listing {
    fn elements_to(&self, chain: &str) -> Vec<(String, Vec<Value>)> {
        self.elements
            .iter()
            .filter(|e| e.target.as_deref() == Some(chain))
            .map(|e| (e.map.clone(), decode_key(&e.raw_key)))
            .collect()
    }
}

fn parse_listing(stdout: &[u8]) -> std::result::Result<Listing, String> {
    let doc: Json = serde_json::from_slice(stdout).map_err(|e| e.to_string())?;
    let items = doc
        .get("nftables")
        .and_then(Json::as_array)
        .ok_or("no \"nftables\" array")?;
    let mut listing = Listing::default();
    for item in items {
        if let Some(chain) = item.get("chain") {
            if let Some(name) = chain.get("name").and_then(Json::as_str) {
                listing.chains.entry(name.to_owned()).or_default();
            }
        } else if let Some(rule) = item.get("rule") {
            let chain = rule
                .get("chain")
                .and_then(Json::as_str)
                .ok_or("rule without chain")?;
            let comment = rule
                .get("comment")
                .and_then(Json::as_str)
                .map(str::to_owned);
            listing
                .chains
                .entry(chain.to_owned())
                .or_default()
                .push(comment);
        } else if let Some(map) = item.get("map") {
            let name = map
                .get("name")
                .and_then(Json::as_str)
                .ok_or("map without name")?;
            for elem in map
                .get("elem")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                let pair = elem
                    .as_array()
                    .filter(|p| p.len() == 2)
                    .ok_or("map element is not a pair")?;
                let (key, comment) = match pair[0].get("elem") {
                    Some(e) => (
                        e.get("val").cloned().ok_or("element without val")?,
                        e.get("comment").and_then(Json::as_str).map(str::to_owned),
                    ),
                    None => (pair[0].clone(), None),
                };
                let target = ["goto", "jump"]
                    .iter()
                    .find_map(|v| pair[1].get(v))
                    .and_then(|t| t.get("target"))
                    .and_then(Json::as_str)
                    .map(str::to_owned);
                listing.elements.push(ListedElement {
                    map: name.to_owned(),
                    raw_key: key,
                    target,
                    comment,
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
        other => Value::Str(other.to_string()),
    };
    match raw.get("concat").and_then(Json::as_array) {
        Some(parts) => parts.iter().map(one).collect(),
        None => vec![one(raw)],
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
            Command::AddTable => json!({"add": {"table": {"family": family, "name": table}}}),
            Command::AddMap(m) => {
                let types: Vec<&str> = m.key.iter().map(|k| k.as_str()).collect();
                let ty = if types.len() == 1 {
                    json!(types[0])
                } else {
                    json!(types)
                };
                json!({"add": {"map": obj(json!({"name": m.name, "type": ty, "map": "verdict"}))}})
            }
            Command::AddChain { name, base: None } => {
                json!({"add": {"chain": obj(json!({"name": name}))}})
            }
            Command::AddChain {
                name,
                base: Some(b),
            } => json!({"add": {"chain": obj(json!({
                "name": name,
                "type": b.chain_type.as_str(),
                "hook": b.hook.as_str(),
                "prio": b.priority,
                "policy": "accept",
            }))}}),
            Command::FlushChain(name) => json!({"flush": {"chain": obj(json!({"name": name}))}}),
            Command::AddRule { chain, rule } => {
                let mut r = obj(json!({
                    "chain": chain,
                    "expr": rule.stmts.iter().map(encode_stmt).collect::<Vec<_>>(),
                }));
                if let (Some(c), Some(o)) = (&rule.comment, r.as_object_mut()) {
                    o.insert("comment".into(), json!(c));
                }
                json!({"add": {"rule": r}})
            }
            Command::AddElement(e) => {
                let mut elem = json!({"val": encode_key(&e.key)});
                if let (Some(c), Some(o)) = (&e.comment, elem.as_object_mut()) {
                    o.insert("comment".into(), json!(c));
                }
                json!({"add": {"element": obj(json!({
                    "name": e.map,
                    "elem": [[{"elem": elem}, {"goto": {"target": e.target}}]],
                }))}})
            }
            Command::DeleteElements { map, keys } => json!({"delete": {"element": obj(json!({
                "name": map,
                "elem": keys.iter().map(|k| encode_key(k)).collect::<Vec<_>>(),
            }))}}),
            Command::DeleteChain(name) => json!({"delete": {"chain": obj(json!({"name": name}))}}),
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
        Stmt::Vmap { key, map } => {
            let key = match key.as_slice() {
                [one] => encode_expr(one),
                many => json!({"concat": many.iter().map(encode_expr).collect::<Vec<_>>()}),
            };
            json!({"vmap": {"key": key, "data": format!("@{map}")}})
        }
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
        Stmt::Goto(target) => json!({"goto": {"target": target}}),
        Stmt::Return => json!({"return": null}),
        Stmt::Drop => json!({"drop": null}),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AttachmentId, MasqueradeSpec, PortMapping, PortMappingSpec, Protocol};
    use super::*;

    #[test]
    fn add_batch_json_shape() {
        let mut spec = PortMappingSpec::new(AttachmentId::new("net", "cid", "eth0"));
        spec.container_v4 = Some("10.0.0.5/24".parse().unwrap());
        spec.mappings = vec![PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        }];
        let rules = layout::port_mapping_rules(&spec, DEFAULT_MASQ_MARK)
            .unwrap()
            .unwrap();
        let table = layout::hostport_table(DEFAULT_MASQ_MARK);
        let doc = encode_batch(&layout::add_batch(&table, &rules));
        let cmds = doc["nftables"].as_array().unwrap();
        assert_eq!(
            cmds[1],
            json!({"add": {"table": {"family": "inet", "name": "cni_rs_hostport"}}})
        );
        assert_eq!(
            cmds[2],
            json!({"add": {"map": {"family": "inet", "table": "cni_rs_hostport", "name": "hostports",
                "type": ["inet_proto", "inet_service"], "map": "verdict"}}})
        );
        let last = cmds.last().unwrap();
        assert_eq!(
            last["add"]["element"]["elem"],
            json!([[{"elem": {"val": {"concat": ["tcp", 8080]}, "comment": spec.attachment.tag()}},
                    {"goto": {"target": rules.chain}}]])
        );
        let dnat = cmds
            .iter()
            .filter_map(|c| c["add"]["rule"]["expr"].as_array())
            .flatten()
            .find(|s| s.get("dnat").is_some())
            .unwrap();
        assert_eq!(
            dnat,
            &json!({"dnat": {"family": "ip", "addr": "10.0.0.5", "port": 80}})
        );
        // The shared chains are rewritten, the owner chain flushed, so a
        // repeated ADD leaves the same state.
        let flushes = cmds.iter().filter(|c| c.get("flush").is_some()).count();
        assert_eq!(flushes, table.chains.len() + 1);

        // The steady-state batch touches only the attachment's own objects.
        let doc = encode_batch(&layout::attach_batch(&table, &rules));
        let cmds = doc["nftables"].as_array().unwrap();
        assert_eq!(
            cmds[1],
            json!({"add": {"chain": {"family": "inet", "table": "cni_rs_hostport", "name": rules.chain}}})
        );
        assert_eq!(
            cmds[2],
            json!({"flush": {"chain": {"family": "inet", "table": "cni_rs_hostport", "name": rules.chain}}})
        );
        assert!(cmds
            .iter()
            .all(|c| c["add"].get("table").is_none() && c["add"].get("map").is_none()));
        assert_eq!(cmds.len(), 1 + 2 + rules.rules.len() + rules.elements.len());
    }

    #[test]
    fn delete_batch_json_shape() {
        let spec = MasqueradeSpec {
            attachment: AttachmentId::new("net", "cid", "eth0"),
            address: "fd00::5/64".parse().unwrap(),
        };
        let rules = layout::masquerade_rules(&spec);
        let doc = encode_batch(&layout::delete_batch(&layout::masquerade_table(), &rules));
        assert_eq!(
            doc["nftables"][3],
            json!({"delete": {"element": {"family": "inet", "table": "cni_rs_masq", "name": "masq6", "elem": ["fd00::5"]}}})
        );
        assert_eq!(
            doc["nftables"][5]["delete"]["chain"]["name"],
            json!(rules.chain)
        );
    }

    #[test]
    fn parses_listing() {
        let out = br#"{"nftables": [{"metainfo": {}},
          {"table": {"family": "inet", "name": "cni_rs_hostport"}},
          {"map": {"name": "hostports", "elem": [[{"elem": {"val": {"concat": ["tcp", 8080]}, "comment": "c"}}, {"goto": {"target": "pm-x"}}], [{"concat": ["udp", 53]}, {"goto": {"target": "pm-y"}}]]}},
          {"chain": {"name": "pm-x"}},
          {"rule": {"chain": "pm-x", "comment": "c", "expr": []}}]}"#;
        let l = parse_listing(out).unwrap();
        assert_eq!(l.chains["pm-x"], vec![Some("c".to_owned())]);
        assert_eq!(l.elements.len(), 2);
        assert_eq!(
            l.elements_to("pm-y"),
            vec![(
                "hostports".to_owned(),
                vec![Value::str("udp"), Value::Num(53)]
            )]
        );
        assert!(parse_listing(b"{}").is_err());
    }
}
