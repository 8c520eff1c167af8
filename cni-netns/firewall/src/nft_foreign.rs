//! [`NftForeignTable`]: rules of ours inside an nftables table someone else
//! owns (the node's own firewall), through `nft -j` JSON batches in the
//! calling process's network namespace.
//!
//! An accept in a table of our own does not override a drop in another
//! table (every base chain of every table sees the packet), so a plugin
//! that must open the node's firewall writes into the node's table: a chain
//! of its own there, rules tagged by comment, and one jump from the node's
//! chain. The table, its base chain and its policy stay the owner's.

use std::net::IpAddr;
use std::path::PathBuf;

use serde_json::{json, Value as Json};

use crate::error::{Error, Result};

/// One rule of a chain, as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct NftListedRule {
    /// The kernel's handle (to delete it).
    pub handle: u64,
    /// The rule's comment, if any.
    pub comment: Option<String>,
    /// The rule's expressions (nft JSON).
    pub expr: Json,
}

/// One nftables table (family and name) that somebody else owns.
///
/// ```no_run
/// use cni_firewall::NftForeignTable;
///
/// let t = NftForeignTable::new("inet", "filter");
/// let batch = vec![
///     t.add_chain("cni_forward"),
///     t.add_rule("cni_forward", NftForeignTable::accept_from("10.1.0.5".parse()?), "pod a"),
///     t.insert_rule("forward", NftForeignTable::jump("cni_forward"), "jump"),
/// ];
/// t.apply("open the firewall", &batch)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct NftForeignTable {
    program: PathBuf,
    family: String,
    table: String,
}

impl NftForeignTable {
    /// The table `family` (`inet`, `ip`, `ip6`) `name`, with `nft` from `PATH`.
    pub fn new(family: &str, name: &str) -> NftForeignTable {
        NftForeignTable {
            program: "nft".into(),
            family: family.to_owned(),
            table: name.to_owned(),
        }
    }

    /// Uses this `nft` binary.
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> NftForeignTable {
        self.program = program.into();
        self
    }

    /// `family table`, for messages.
    pub fn describe(&self) -> String {
        format!("{} {}", self.family, self.table)
    }

    fn nft(&self, op: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<Result<String, String>> {
        let out = cni_netns::tool::run(&self.program, args, stdin).map_err(|source| {
            Error::ToolSpawn {
                op: op.to_owned(),
                program: self.program.clone(),
                source,
            }
        })?;
        if out.status.success() {
            Ok(Ok(String::from_utf8_lossy(&out.stdout).into_owned()))
        } else {
            Ok(Err(cni_netns::tool::nft_error(&out)))
        }
    }

    fn tool_error(&self, op: &str, command: &str, message: String) -> Error {
        Error::FirewallTool {
            op: op.to_owned(),
            command: format!("{} {command}", self.program.display()),
            message,
        }
    }

    /// Whether a base or regular chain `chain` exists in the table (false
    /// also when the table does not).
    pub fn chain_exists(&self, chain: &str) -> Result<bool> {
        Ok(self.rules(chain)?.is_some())
    }

    /// The rules of `chain` in order; `None` when the chain (or table) does
    /// not exist.
    pub fn rules(&self, chain: &str) -> Result<Option<Vec<NftListedRule>>> {
        let op = format!("list chain {chain} of {}", self.describe());
        let args = ["-j", "list", "chain", &self.family, &self.table, chain];
        let out = match self.nft(&op, &args, None)? {
            Ok(out) => out,
            Err(msg) if msg.contains("No such file or directory") => return Ok(None),
            Err(msg) => return Err(self.tool_error(&op, &args.join(" "), msg)),
        };
        let v: Json = serde_json::from_str(&out)
            .map_err(|e| self.tool_error(&op, &args.join(" "), format!("bad JSON: {e}")))?;
        let items = v["nftables"].as_array().cloned().unwrap_or_default();
        Ok(Some(
            items
                .iter()
                .filter_map(|i| i.get("rule"))
                .filter_map(|r| {
                    Some(NftListedRule {
                        handle: r["handle"].as_u64()?,
                        comment: r["comment"].as_str().map(str::to_owned),
                        expr: r["expr"].clone(),
                    })
                })
                .collect(),
        ))
    }

    /// Sends `commands` as one atomic `nft -j -f -` batch.
    pub fn apply(&self, op: &str, commands: &[Json]) -> Result<()> {
        if commands.is_empty() {
            return Ok(());
        }
        let batch = json!({ "nftables": commands }).to_string();
        match self.nft(op, &["-j", "-f", "-"], Some(batch.as_bytes()))? {
            Ok(_) => Ok(()),
            Err(msg) => {
                Err(self.tool_error(op, &format!("-j -f - ({} in {})", op, self.describe()), msg))
            }
        }
    }

    fn obj(&self, mut o: Json) -> Json {
        o["family"] = json!(self.family);
        o["table"] = json!(self.table);
        o
    }

    /// Command: create regular chain `name` (no error if it exists).
    pub fn add_chain(&self, name: &str) -> Json {
        json!({"add": {"chain": self.obj(json!({"name": name}))}})
    }

    /// Command: delete chain `name` (it must be empty and unreferenced).
    pub fn delete_chain(&self, name: &str) -> Json {
        json!({"delete": {"chain": self.obj(json!({"name": name}))}})
    }

    /// Command: append a rule to `chain`.
    pub fn add_rule(&self, chain: &str, expr: Json, comment: &str) -> Json {
        json!({"add": {"rule": self.obj(json!({"chain": chain, "expr": expr, "comment": comment}))}})
    }

    /// Command: insert a rule at the top of `chain`.
    pub fn insert_rule(&self, chain: &str, expr: Json, comment: &str) -> Json {
        json!({"insert": {"rule": self.obj(json!({"chain": chain, "expr": expr, "comment": comment}))}})
    }

    /// Command: delete the rule with `handle` from `chain`.
    pub fn delete_rule(&self, chain: &str, handle: u64) -> Json {
        json!({"delete": {"rule": self.obj(json!({"chain": chain, "handle": handle}))}})
    }

    /// Expressions: `jump <chain>`.
    pub fn jump(chain: &str) -> Json {
        json!([{"jump": {"target": chain}}])
    }

    /// Expressions: `ip[6] saddr <ip> accept`.
    pub fn accept_from(ip: IpAddr) -> Json {
        json!([addr_match(ip, "saddr"), {"accept": null}])
    }

    /// Expressions: `ip[6] daddr <ip> ct state established,related accept`.
    pub fn accept_replies_to(ip: IpAddr) -> Json {
        json!([
            addr_match(ip, "daddr"),
            {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}},
            {"accept": null}
        ])
    }
}

fn addr_match(ip: IpAddr, field: &str) -> Json {
    let proto = if ip.is_ipv4() { "ip" } else { "ip6" };
    json!({"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": field}}, "right": ip.to_string()}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_name_the_foreign_table() {
        let t = NftForeignTable::new("inet", "filter");
        assert_eq!(
            t.insert_rule("forward", NftForeignTable::jump("cni_fw"), "c"),
            json!({"insert": {"rule": {"chain": "forward", "expr": [{"jump": {"target": "cni_fw"}}],
                "comment": "c", "family": "inet", "table": "filter"}}})
        );
        let r = NftForeignTable::accept_replies_to("fd00::5".parse().unwrap());
        assert_eq!(r[0]["match"]["left"]["payload"]["protocol"], "ip6");
        assert_eq!(r[1]["match"]["right"], json!(["established", "related"]));
        assert_eq!(
            t.delete_rule("cni_fw", 7),
            json!({"delete": {"rule": {"chain": "cni_fw", "handle": 7, "family": "inet", "table": "filter"}}})
        );
    }
}
