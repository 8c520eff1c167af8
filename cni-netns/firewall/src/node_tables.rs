//! [`NodeTables`]: the node's own firewall tables a plugin writes rules
//! into (the iptables filter tables, a foreign nftables table), as traits,
//! so that the code writing them can run against [`SystemTables`] (the
//! node's `iptables`/`ip6tables` and `nft`) or an in-memory double
//! (`RecordingTables`, feature `recording`) in tests without root.

use std::fmt;

use serde_json::Value as Json;

use crate::error::Result;
use crate::{Iptables, NftForeignTable, NftListedRule};

/// The rule operations of one iptables table of one family, as
/// [`Iptables`] runs them (its methods of the same names).
pub trait IptablesTable: fmt::Debug {
    /// Creates `chain` unless it exists.
    fn ensure_chain(&self, chain: &str) -> Result<()>;
    /// Whether `rule` is in `chain` (a missing chain counts as no).
    fn exists(&self, chain: &str, rule: &[&str]) -> Result<bool>;
    /// Inserts `rule` at `pos` (1-based) of `chain` unless it is there.
    fn insert_unique(&self, chain: &str, pos: u32, rule: &[&str]) -> Result<()>;
    /// Appends `rule` to `chain` unless it is there.
    fn append_unique(&self, chain: &str, rule: &[&str]) -> Result<()>;
    /// Deletes one copy of `rule` from `chain`; `false` when it was not
    /// there (or the chain is missing).
    fn delete(&self, chain: &str, rule: &[&str]) -> Result<bool>;
}

impl IptablesTable for Iptables {
    fn ensure_chain(&self, chain: &str) -> Result<()> {
        Iptables::ensure_chain(self, chain)
    }

    fn exists(&self, chain: &str, rule: &[&str]) -> Result<bool> {
        Iptables::exists(self, chain, rule)
    }

    fn insert_unique(&self, chain: &str, pos: u32, rule: &[&str]) -> Result<()> {
        Iptables::insert_unique(self, chain, pos, rule)
    }

    fn append_unique(&self, chain: &str, rule: &[&str]) -> Result<()> {
        Iptables::append_unique(self, chain, rule)
    }

    fn delete(&self, chain: &str, rule: &[&str]) -> Result<bool> {
        Iptables::delete(self, chain, rule)
    }
}

/// Reading and changing an nftables table somebody else owns, as
/// [`NftForeignTable`] does (its methods of the same names); the commands
/// are [`NftForeignTable`]'s builders' (`add_chain`, `add_rule`...).
pub trait ForeignTable: fmt::Debug {
    /// The rules of `chain` in order; `None` when the chain (or table)
    /// does not exist.
    fn rules(&self, chain: &str) -> Result<Option<Vec<NftListedRule>>>;
    /// Applies `commands` as one atomic batch (all or none); `op` names
    /// the change in errors.
    fn apply(&self, op: &str, commands: &[Json]) -> Result<()>;
}

impl ForeignTable for NftForeignTable {
    fn rules(&self, chain: &str) -> Result<Option<Vec<NftListedRule>>> {
        NftForeignTable::rules(self, chain)
    }

    fn apply(&self, op: &str, commands: &[Json]) -> Result<()> {
        NftForeignTable::apply(self, op, commands)
    }
}

/// Where a plugin finds the node's firewall tables: [`SystemTables`] in
/// production, an in-memory double in tests.
///
/// ```
/// use cni_firewall::{NodeTables, SystemTables};
///
/// let tables = SystemTables;
/// let filter_v6 = tables.iptables(true);
/// let node = tables.nft_table("inet", "filter");
/// # let _ = (filter_v6, node);
/// ```
pub trait NodeTables: Send + Sync + fmt::Debug {
    /// The filter table of iptables (`v6`: of ip6tables).
    fn iptables(&self, v6: bool) -> Box<dyn IptablesTable>;
    /// The nftables table `family` (`inet`, `ip`, `ip6`) `name`.
    fn nft_table(&self, family: &str, name: &str) -> Box<dyn ForeignTable>;
}

/// The node's tables through its programs: [`Iptables::for_family`] (the
/// system `iptables`/`ip6tables`) and [`NftForeignTable::new`] (`nft`),
/// in the calling process's network namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemTables;

impl NodeTables for SystemTables {
    fn iptables(&self, v6: bool) -> Box<dyn IptablesTable> {
        Box::new(Iptables::for_family(v6))
    }

    fn nft_table(&self, family: &str, name: &str) -> Box<dyn ForeignTable> {
        Box::new(NftForeignTable::new(family, name))
    }
}
