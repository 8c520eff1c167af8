//! [`RecordingTables`]: the node's firewall tables in memory, for testing
//! code that writes into them without root.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::node_tables::{ForeignTable, IptablesTable, NodeTables};
use crate::NftListedRule;

/// A kind of call on the tables, for [`RecordingTables::fail_nth`] and
/// [`TableCall`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TableOp {
    /// [`IptablesTable::ensure_chain`].
    EnsureChain,
    /// [`IptablesTable::exists`] (also the look-up of the `*_unique` calls).
    Exists,
    /// [`IptablesTable::insert_unique`].
    Insert,
    /// [`IptablesTable::append_unique`].
    Append,
    /// [`IptablesTable::delete`].
    Delete,
    /// [`ForeignTable::rules`].
    NftRules,
    /// [`ForeignTable::apply`].
    NftApply,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableCall {
    /// What was called.
    pub op: TableOp,
    /// `iptables`, `ip6tables` or the nftables `family name`.
    pub table: String,
    /// The chain (empty for [`TableOp::NftApply`]).
    pub chain: String,
}

/// The iptables filter tables (v4 and v6) and nftables tables of a node,
/// in memory: iptables' chains hold their rules as argument lists (no
/// matching beyond equality), `FORWARD`, `INPUT` and `OUTPUT` exist from
/// the start; an nftables table exists once a test creates it
/// ([`RecordingTables::add_nft_chain`], the node's own table) and takes
/// [`crate::NftForeignTable`]'s commands, each batch all or nothing. What
/// the kernel refuses is refused: a rule into a missing chain, a jump to a
/// missing chain, deleting a chain that is not empty or is jumped to, or a
/// rule handle that is not there. Every call is recorded; any can be made
/// to fail ([`RecordingTables::fail_nth`]). Clones share the tables.
///
/// ```
/// use cni_firewall::{NodeTables, RecordingTables, TableOp};
///
/// let tables = RecordingTables::new();
/// let ipt = tables.iptables(false);
/// ipt.ensure_chain("CNI-FORWARD").unwrap();
/// ipt.append_unique("CNI-FORWARD", &["-s", "10.1.0.2/32", "-j", "ACCEPT"]).unwrap();
/// assert_eq!(tables.iptables_rules(false)["CNI-FORWARD"], ["-s 10.1.0.2/32 -j ACCEPT"]);
///
/// tables.fail_nth(TableOp::Delete, 1);
/// assert!(ipt.delete("CNI-FORWARD", &["-s", "10.1.0.2/32", "-j", "ACCEPT"]).is_err());
/// assert!(ipt.delete("CNI-FORWARD", &["-s", "10.1.0.2/32", "-j", "ACCEPT"]).unwrap());
/// ```
#[derive(Debug, Clone, Default)]
pub struct RecordingTables {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Clone, Default)]
struct NftTable {
    chains: BTreeMap<String, Vec<NftListedRule>>,
}

#[derive(Debug)]
struct State {
    /// iptables (v4) and ip6tables: chain → rules.
    iptables: [BTreeMap<String, Vec<Vec<String>>>; 2],
    /// (family, name) → table.
    nft: BTreeMap<(String, String), NftTable>,
    next_handle: u64,
    calls: Vec<TableCall>,
    /// Per kind: the calls still to pass before the armed one fails.
    faults: Vec<(TableOp, usize)>,
}

impl Default for State {
    fn default() -> State {
        let builtin = || {
            ["INPUT", "FORWARD", "OUTPUT"]
                .into_iter()
                .map(|c| (c.to_owned(), Vec::new()))
                .collect()
        };
        State {
            iptables: [builtin(), builtin()],
            nft: BTreeMap::new(),
            next_handle: 1,
            calls: Vec::new(),
            faults: Vec::new(),
        }
    }
}

/// iptables' own targets (no chain behind them).
const TARGETS: &[&str] = &["ACCEPT", "DROP", "RETURN", "REJECT", "LOG", "MARK"];

fn fault(op: TableOp, table: &str, chain: &str) -> Error {
    Error::FirewallTool {
        op: format!("{op:?}"),
        command: format!("{table} {chain}"),
        message: "injected fault".to_owned(),
    }
}

fn refused(op: &str, table: &str, message: String) -> Error {
    Error::FirewallTool {
        op: op.to_owned(),
        command: table.to_owned(),
        message,
    }
}

impl State {
    /// Records a call; fails it when a fault is armed for it.
    fn enter(&mut self, op: TableOp, table: &str, chain: &str) -> Result<()> {
        self.calls.push(TableCall {
            op,
            table: table.to_owned(),
            chain: chain.to_owned(),
        });
        let mut hit = false;
        self.faults.retain_mut(|(o, left)| {
            if *o != op || hit {
                return true;
            }
            if *left == 0 {
                hit = true;
                return false;
            }
            *left -= 1;
            true
        });
        if hit {
            Err(fault(op, table, chain))
        } else {
            Ok(())
        }
    }
}

impl RecordingTables {
    /// Empty tables (iptables' built-in chains only).
    pub fn new() -> RecordingTables {
        RecordingTables::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the `n`-th call (1-based, counted from now) of kind `op` fail
    /// with [`Error::FirewallTool`] before it changes anything.
    pub fn fail_nth(&self, op: TableOp, n: usize) {
        self.lock().faults.push((op, n.saturating_sub(1)));
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<TableCall> {
        self.lock().calls.clone()
    }

    /// The iptables (`v6`: ip6tables) filter table: chain → its rules,
    /// each its arguments joined by spaces.
    pub fn iptables_rules(&self, v6: bool) -> BTreeMap<String, Vec<String>> {
        self.lock().iptables[usize::from(v6)]
            .iter()
            .map(|(c, rules)| (c.clone(), rules.iter().map(|r| r.join(" ")).collect()))
            .collect()
    }

    /// Creates the nftables table `family name` if missing and its chain
    /// `chain` (the node's own table and base chain).
    pub fn add_nft_chain(&self, family: &str, name: &str, chain: &str) {
        self.lock()
            .nft
            .entry((family.to_owned(), name.to_owned()))
            .or_default()
            .chains
            .entry(chain.to_owned())
            .or_default();
    }

    /// The nftables table `family name`: chain → its rules, each
    /// `<comment>: <expressions as JSON>`; `None` when it does not exist.
    pub fn nft_rules(&self, family: &str, name: &str) -> Option<BTreeMap<String, Vec<String>>> {
        let state = self.lock();
        let t = state.nft.get(&(family.to_owned(), name.to_owned()))?;
        Some(
            t.chains
                .iter()
                .map(|(c, rules)| {
                    let rules = rules
                        .iter()
                        .map(|r| format!("{}: {}", r.comment.as_deref().unwrap_or(""), r.expr))
                        .collect();
                    (c.clone(), rules)
                })
                .collect(),
        )
    }
}

impl NodeTables for RecordingTables {
    fn iptables(&self, v6: bool) -> Box<dyn IptablesTable> {
        Box::new(RecordingIptables {
            tables: self.clone(),
            v6,
        })
    }

    fn nft_table(&self, family: &str, name: &str) -> Box<dyn ForeignTable> {
        Box::new(RecordingNft {
            tables: self.clone(),
            family: family.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// One family's filter table of a [`RecordingTables`].
#[derive(Debug)]
struct RecordingIptables {
    tables: RecordingTables,
    v6: bool,
}

fn owned(rule: &[&str]) -> Vec<String> {
    rule.iter().map(|a| a.to_string()).collect()
}

impl RecordingIptables {
    fn program(&self) -> &'static str {
        if self.v6 {
            "ip6tables"
        } else {
            "iptables"
        }
    }

    /// Runs `f` on the family's chains after recording the call.
    fn with<T>(
        &self,
        op: TableOp,
        chain: &str,
        f: impl FnOnce(&mut BTreeMap<String, Vec<Vec<String>>>) -> Result<T>,
    ) -> Result<T> {
        let mut state = self.tables.lock();
        state.enter(op, self.program(), chain)?;
        f(&mut state.iptables[usize::from(self.v6)])
    }

    /// The look-up of a `*_unique` call (iptables `-C`), then `put`.
    fn add_unique(
        &self,
        op: TableOp,
        chain: &str,
        rule: &[&str],
        put: impl FnOnce(&mut Vec<Vec<String>>, Vec<String>) -> std::result::Result<(), String>,
    ) -> Result<()> {
        if self.exists(chain, rule)? {
            return Ok(());
        }
        let program = self.program();
        self.with(op, chain, |chains| {
            let target = rule
                .iter()
                .position(|a| *a == "-j")
                .and_then(|i| rule.get(i + 1));
            if let Some(t) = target {
                if !TARGETS.contains(t) && !chains.contains_key(*t) {
                    return Err(refused(
                        "add rule",
                        program,
                        format!("Couldn't load target `{t}'"),
                    ));
                }
            }
            let rules = chains.get_mut(chain).ok_or_else(|| {
                refused(
                    "add rule",
                    program,
                    format!("No chain/target/match by that name ({chain})"),
                )
            })?;
            put(rules, owned(rule)).map_err(|message| refused("add rule", program, message))
        })
    }
}

impl IptablesTable for RecordingIptables {
    fn ensure_chain(&self, chain: &str) -> Result<()> {
        self.with(TableOp::EnsureChain, chain, |chains| {
            chains.entry(chain.to_owned()).or_default();
            Ok(())
        })
    }

    fn exists(&self, chain: &str, rule: &[&str]) -> Result<bool> {
        self.with(TableOp::Exists, chain, |chains| {
            Ok(chains
                .get(chain)
                .is_some_and(|rules| rules.contains(&owned(rule))))
        })
    }

    fn insert_unique(&self, chain: &str, pos: u32, rule: &[&str]) -> Result<()> {
        self.add_unique(TableOp::Insert, chain, rule, |rules, r| {
            // As iptables: positions run from 1 to one past the last rule.
            let at = usize::try_from(pos).unwrap_or(usize::MAX);
            if at == 0 {
                return Err("Invalid rule number `0'".into());
            }
            if at > rules.len() + 1 {
                return Err("Index of insertion too big.".into());
            }
            rules.insert(at - 1, r);
            Ok(())
        })
    }

    fn append_unique(&self, chain: &str, rule: &[&str]) -> Result<()> {
        self.add_unique(TableOp::Append, chain, rule, |rules, r| {
            rules.push(r);
            Ok(())
        })
    }

    fn delete(&self, chain: &str, rule: &[&str]) -> Result<bool> {
        self.with(TableOp::Delete, chain, |chains| {
            let Some(rules) = chains.get_mut(chain) else {
                return Ok(false);
            };
            let rule = owned(rule);
            match rules.iter().position(|r| *r == rule) {
                Some(i) => {
                    rules.remove(i);
                    Ok(true)
                }
                None => Ok(false),
            }
        })
    }
}

/// One nftables table of a [`RecordingTables`].
#[derive(Debug)]
struct RecordingNft {
    tables: RecordingTables,
    family: String,
    name: String,
}

/// The chain a rule's expressions jump to.
fn jump_target(expr: &Json) -> Option<&str> {
    expr.as_array()?
        .iter()
        .find_map(|e| e.get("jump")?.get("target")?.as_str())
}

impl RecordingNft {
    fn describe(&self) -> String {
        format!("{} {}", self.family, self.name)
    }

    /// Applies one command of [`crate::NftForeignTable`]'s builders.
    fn command(&self, t: &mut NftTable, next_handle: &mut u64, cmd: &Json) -> Result<()> {
        let table = self.describe();
        let bad = |m: &str| refused("apply", &table, format!("{m}: {cmd}"));
        let (verb, body) = ["add", "insert", "delete"]
            .into_iter()
            .find_map(|v| Some((v, cmd.get(v)?)))
            .ok_or_else(|| bad("unknown command"))?;
        if let Some(chain) = body.get("chain") {
            let name = chain["name"].as_str().ok_or_else(|| bad("chain name"))?;
            match verb {
                "add" => {
                    t.chains.entry(name.to_owned()).or_default();
                }
                "delete" => {
                    match t.chains.get(name) {
                        None => return Err(bad("No such file or directory")),
                        Some(rules) if !rules.is_empty() => {
                            return Err(bad("Device or resource busy"))
                        }
                        Some(_) => {}
                    }
                    let jumped = t
                        .chains
                        .values()
                        .flatten()
                        .any(|r| jump_target(&r.expr) == Some(name));
                    if jumped {
                        return Err(bad("Device or resource busy"));
                    }
                    t.chains.remove(name);
                }
                _ => return Err(bad("unknown command")),
            }
            return Ok(());
        }
        let rule = body.get("rule").ok_or_else(|| bad("unknown object"))?;
        let chain = rule["chain"].as_str().ok_or_else(|| bad("rule chain"))?;
        if verb == "delete" {
            let handle = rule["handle"].as_u64().ok_or_else(|| bad("rule handle"))?;
            let rules = t
                .chains
                .get_mut(chain)
                .ok_or_else(|| bad("No such file or directory"))?;
            let i = rules
                .iter()
                .position(|r| r.handle == handle)
                .ok_or_else(|| bad("No such file or directory"))?;
            rules.remove(i);
            return Ok(());
        }
        if let Some(target) = jump_target(&rule["expr"]) {
            if !t.chains.contains_key(target) {
                return Err(bad("No such file or directory"));
            }
        }
        let rules = t
            .chains
            .get_mut(chain)
            .ok_or_else(|| bad("No such file or directory"))?;
        let listed = NftListedRule {
            handle: *next_handle,
            comment: rule["comment"].as_str().map(str::to_owned),
            expr: rule["expr"].clone(),
        };
        *next_handle += 1;
        if verb == "insert" {
            rules.insert(0, listed);
        } else {
            rules.push(listed);
        }
        Ok(())
    }
}

impl ForeignTable for RecordingNft {
    fn rules(&self, chain: &str) -> Result<Option<Vec<NftListedRule>>> {
        let mut state = self.tables.lock();
        state.enter(TableOp::NftRules, &self.describe(), chain)?;
        Ok(state
            .nft
            .get(&(self.family.clone(), self.name.clone()))
            .and_then(|t| t.chains.get(chain).cloned()))
    }

    fn apply(&self, op: &str, commands: &[Json]) -> Result<()> {
        let mut state = self.tables.lock();
        state.enter(TableOp::NftApply, &self.describe(), "")?;
        if commands.is_empty() {
            return Ok(());
        }
        let key = (self.family.clone(), self.name.clone());
        let mut table =
            state.nft.get(&key).cloned().ok_or_else(|| {
                refused(op, &self.describe(), "No such file or directory".to_owned())
            })?;
        let mut next = state.next_handle;
        for cmd in commands {
            self.command(&mut table, &mut next, cmd)?;
        }
        state.nft.insert(key, table);
        state.next_handle = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NftForeignTable;

    #[test]
    fn nft_batches_are_all_or_nothing_and_refuse_what_the_kernel_refuses() {
        let tables = RecordingTables::new();
        let cmd = NftForeignTable::new("inet", "filter");
        let t = tables.nft_table("inet", "filter");
        // No table yet.
        assert_eq!(t.rules("forward").unwrap(), None);
        assert!(t.apply("x", &[cmd.add_chain("ours")]).is_err());
        tables.add_nft_chain("inet", "filter", "forward");
        let open = [
            cmd.add_chain("ours"),
            cmd.add_rule(
                "ours",
                NftForeignTable::accept_from([10, 1, 0, 2].into()),
                "a",
            ),
            cmd.insert_rule("forward", NftForeignTable::jump("ours"), "jump"),
        ];
        t.apply("open", &open).unwrap();
        let before = tables.nft_rules("inet", "filter");
        assert_eq!(before.as_ref().map(|c| c["ours"].len()), Some(1));
        // A jumped-to chain that is not empty cannot go; the batch's first
        // command is undone with it.
        let ours = t.rules("ours").unwrap().unwrap();
        let close = [
            cmd.delete_rule("ours", ours[0].handle),
            cmd.delete_chain("ours"),
        ];
        assert!(t.apply("close", &close).is_err());
        assert_eq!(tables.nft_rules("inet", "filter"), before);
        // A handle that is not there, a jump to a missing chain.
        assert!(t.apply("x", &[cmd.delete_rule("ours", 999)]).is_err());
        let jump = cmd.add_rule("forward", NftForeignTable::jump("none"), "j");
        assert!(t.apply("x", &[jump]).is_err());
        assert_eq!(tables.nft_rules("inet", "filter"), before);
        let ops: Vec<TableOp> = tables.calls().iter().map(|c| c.op).collect();
        assert_eq!(ops.iter().filter(|o| **o == TableOp::NftApply).count(), 5);
    }

    #[test]
    fn iptables_refuses_a_missing_chain_or_target_and_faults_count_per_kind() {
        let tables = RecordingTables::new();
        let ipt = tables.iptables(true);
        let accept = ["-s", "fd00::2/128", "-j", "ACCEPT"];
        assert!(ipt.append_unique("CNI-FORWARD", &accept).is_err());
        assert!(ipt
            .insert_unique("FORWARD", 1, &["-j", "CNI-FORWARD"])
            .is_err());
        assert!(!ipt.delete("CNI-FORWARD", &accept).unwrap());
        ipt.ensure_chain("CNI-FORWARD").unwrap();
        tables.fail_nth(TableOp::Append, 2);
        ipt.append_unique("CNI-FORWARD", &accept).unwrap();
        // Already there: no append, so no fault.
        ipt.append_unique("CNI-FORWARD", &accept).unwrap();
        assert!(ipt
            .append_unique("CNI-FORWARD", &["-d", "fd00::2/128", "-j", "ACCEPT"])
            .is_err());
        assert_eq!(
            tables.iptables_rules(true)["CNI-FORWARD"],
            ["-s fd00::2/128 -j ACCEPT"]
        );
        assert!(!tables.iptables_rules(false).contains_key("CNI-FORWARD"));
    }
}
