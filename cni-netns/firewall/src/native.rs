//! The native backend: nf_tables messages encoded here and sent over
//! `NETLINK_NETFILTER`, one `sendmsg` per batch, no `nft` process.
//!
//! It programs exactly the ruleset of [`NftFirewall`] (same
//! batches, expressions linearized as nft does), so the two
//! backends can replace each other on a running node. What is native:
//! every ADD, DEL, CHECK, list, GC and delete of the layout's own rule
//! shapes. The one exception is an ADD whose extra conditions
//! (`conditionsV4`/`conditionsV6`) use something the encoder does not know
//! (anonymous sets `{ a, b }`, ranges, other header fields or meta keys):
//! that ADD alone runs through the `nft` process, and is logged.
//!
//! # Cost
//!
//! A batch is one `sendmsg` and one read of the acknowledgements, so what
//! remains is the kernel's own work. An attachment is only map elements,
//! and adding or deleting data-map elements never makes
//! the kernel validate the table (`nft_table_validate` walks every chain
//! reachable from the base chains, and ran on every commit that added a
//! rule or a `goto` element in the earlier one-chain-per-attachment layout:
//! 85% of an ADD at 1000 attachments). ADD and DEL are one batch of a few
//! elements whatever the number of attachments.
//!
//! A process that exits (or closes its socket) after a commit that deleted
//! something waits for the kernel to free it: the netlink release of a
//! `NETLINK_NETFILTER` socket flushes nf_tables' pending destroy work
//! (`nft_rcv_nl_event` → `nf_tables_trans_destroy_flush_work`), which waits
//! for an RCU grace period (10-20 ms here; it was most of a portmap DEL);
//! `nft` pays the same. So on Linux 6.10 and later (element expiration
//! updates) a DEL makes the elements expire instead of deleting them, and
//! returns once they have (one jiffy): the kernel's set garbage collector
//! frees them later, and nobody waits. GC and a DEL without a spec still
//! delete.

use std::path::{Path, PathBuf};

use super::batch;
use super::engine::{Driver, Listing, Refusal};
use super::model::{AttachmentRules, Batch, Element, Map, Table, Value};
use super::nfconn::{self, NfConn};
use super::{Firewall, FirewallOp, NftFirewall, DEFAULT_MASQ_MARK};
use crate::Result;

/// [`Firewall`] implemented over nf_tables netlink, without `nft`.
///
/// ```no_run
/// use cni_firewall::{AttachmentId, Firewall, MasqueradeSpec, NativeFirewall, RuleSpec};
///
/// let fw = NativeFirewall::in_netns("/run/netns/test");
/// fw.add(&RuleSpec::Masquerade(MasqueradeSpec {
///     attachment: AttachmentId::new("mynet", "cid", "eth0"),
///     addresses: vec!["10.88.0.5/16".parse()?],
/// }))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct NativeFirewall {
    conn: NfConn,
    masq_mark: u32,
    fallback: NftFirewall,
}

impl Default for NativeFirewall {
    fn default() -> Self {
        NativeFirewall::new()
    }
}

impl NativeFirewall {
    /// Programs the current network namespace.
    pub fn new() -> Self {
        NativeFirewall {
            conn: NfConn::new(None),
            masq_mark: DEFAULT_MASQ_MARK,
            fallback: NftFirewall::new(),
        }
    }

    /// Programs the network namespace at `path`: the netlink socket is
    /// opened (on first use) by a short-lived thread inside it, the
    /// caller's threads never enter it.
    pub fn in_netns(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        NativeFirewall {
            conn: NfConn::new(Some(path.clone())),
            masq_mark: DEFAULT_MASQ_MARK,
            fallback: NftFirewall::in_netns(path),
        }
    }

    /// Uses `mark` to ask for masquerade of port-mapped connections (see
    /// [`NftFirewall::with_masq_mark`]); 0 keeps the default.
    pub fn with_masq_mark(mut self, mark: u32) -> Self {
        if mark != 0 {
            self.masq_mark = mark;
        }
        self.fallback = self.fallback.with_masq_mark(mark);
        self
    }

    /// The network namespace this firewall programs, if not the current one.
    pub fn netns(&self) -> Option<&Path> {
        self.conn.netns()
    }
}

impl Driver for NativeFirewall {
    fn masq_mark(&self) -> u32 {
        self.masq_mark
    }

    fn send(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
    ) -> Result<std::result::Result<(), Refusal>> {
        self.conn.commit(op, who, table, batch, None)
    }

    fn generation(&self, op: FirewallOp, who: &str) -> Result<u32> {
        self.conn.generation(op, who)
    }

    fn send_at(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
        generation: u32,
    ) -> Result<std::result::Result<(), Refusal>> {
        self.conn.commit(op, who, table, batch, Some(generation))
    }

    fn read(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        rules_only: bool,
    ) -> Result<Option<Listing>> {
        self.conn.read(op, who, table, rules_only)
    }

    fn expire_on_delete(&self) -> bool {
        *EXPIRY_UPDATES
    }

    fn wait_expired(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        anchor: &Element,
    ) -> Result<bool> {
        self.conn.wait_expired(op, who, table, anchor)
    }

    fn key_id(&self, map: &Map, key: &[Value]) -> Option<String> {
        nfconn::key_id(map, key)
    }

    fn data_id(&self, map: &Map, data: &[Value]) -> Option<String> {
        nfconn::data_id(map, data)
    }

    // Conditions the native encoder cannot express go through `nft` for
    // this ADD only; DEL, CHECK, list and GC stay native.
    fn delegate_add(&self, table: &Table, rules: &AttachmentRules) -> Option<&dyn Firewall> {
        let reason = nfconn::unsupported(table, &batch::add(table, rules))?;
        tracing::debug!(
            reason = %reason,
            "native nf_tables encoder cannot express a rule; using the nft process for this ADD"
        );
        Some(&self.fallback)
    }
}

/// Whether the running kernel updates the expiration of an existing set
/// element (Linux 6.10; older kernels ignore the update, so they get real
/// deletes; a DEL whose elements did not expire deletes them all the same).
static EXPIRY_UPDATES: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| {
            let mut parts = r.trim().split(['.', '-']);
            let major: u32 = parts.next()?.parse().ok()?;
            let minor: u32 = parts.next()?.parse().ok()?;
            Some((major, minor) >= (6, 10))
        })
        .unwrap_or(false)
});
