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

mod encode;
mod socket;
mod wire;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::batch;
use super::engine::{Driver, ListedElement, ListedRule, Listing, Refusal, RefusalKind};
use super::model::{AttachmentRules, Batch, Element, Map, Table, Value};
use super::{Firewall, FirewallOp, NftFirewall, DEFAULT_MASQ_MARK};
use crate::{Error, Result};
use encode::{family_byte, Msg};
use socket::{BatchError, NfSocket};
use wire::*;

/// How often a batch refused with a transient error (`EAGAIN`, `EINTR`,
/// `EBUSY` from a concurrent commit of the same objects) is sent again.
const RETRIES: usize = 3;

/// [`Firewall`] implemented over nf_tables netlink, without `nft`.
///
/// ```no_run
/// use cni_netns::firewall::{AttachmentId, Firewall, MasqueradeSpec, NativeFirewall, RuleSpec};
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
    netns: Option<PathBuf>,
    masq_mark: u32,
    socket: Mutex<Option<NfSocket>>,
    fallback: NftFirewall,
}

impl Default for NativeFirewall {
    fn default() -> Self {
        NativeFirewall::new()
    }
}

/// A failed request: the kernel's errno and the object it was about.
#[derive(Debug)]
enum Failure {
    Kernel { errno: i32, object: String },
    Io(io::Error),
}

impl Failure {
    fn errno(&self) -> Option<i32> {
        match self {
            Failure::Kernel { errno, .. } => Some(*errno),
            Failure::Io(e) => e.raw_os_error(),
        }
    }
}

impl NativeFirewall {
    /// Programs the current network namespace.
    pub fn new() -> Self {
        NativeFirewall {
            netns: None,
            masq_mark: DEFAULT_MASQ_MARK,
            socket: Mutex::new(None),
            fallback: NftFirewall::new(),
        }
    }

    /// Programs the network namespace at `path`: the netlink socket is
    /// opened (on first use) by a short-lived thread inside it, the
    /// caller's threads never enter it.
    pub fn in_netns(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        NativeFirewall {
            fallback: NftFirewall::in_netns(path.clone()),
            netns: Some(path),
            ..NativeFirewall::new()
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
        self.netns.as_deref()
    }

    fn with_socket<T>(
        &self,
        op: FirewallOp,
        who: &str,
        f: impl FnOnce(&mut NfSocket) -> std::result::Result<T, Failure>,
    ) -> Result<std::result::Result<T, Failure>> {
        let mut guard = self.socket.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let netns = self.netns.as_deref();
            let s = crate::netns::run_at(netns, NfSocket::open)?.map_err(|source| {
                Error::NftNetlinkOpen {
                    op,
                    attachment: who.to_owned(),
                    netns: crate::netns::label(netns),
                    source,
                }
            })?;
            *guard = Some(s);
        }
        match guard.as_mut() {
            Some(s) => Ok(f(s)),
            None => Ok(Err(Failure::Io(io::Error::other("no socket")))),
        }
    }

    fn send(
        &self,
        op: FirewallOp,
        who: &str,
        family: u8,
        msgs: &[Msg],
        generation: Option<u32>,
    ) -> Result<std::result::Result<(), Failure>> {
        self.with_socket(op, who, |s| {
            let mut attempt = 0;
            loop {
                attempt += 1;
                match s.batch(family, msgs, generation) {
                    Ok(()) => return Ok(()),
                    Err(BatchError::Refused { index, errno }) => {
                        // A batch bound to a generation that passed is the
                        // caller's to decide again, not to send again.
                        let transient = matches!(errno, libc::EAGAIN | libc::EINTR)
                            || (errno == libc::ERESTART && generation.is_none());
                        if transient && attempt < RETRIES {
                            continue;
                        }
                        let object = msgs
                            .get(index)
                            .map_or_else(|| "nf_tables batch".to_owned(), |m| m.what.clone());
                        return Err(Failure::Kernel { errno, object });
                    }
                    Err(BatchError::Io(e)) => return Err(Failure::Io(e)),
                }
            }
        })
    }

    /// [`Driver::send`]: `batch` as one atomic nf_tables batch, bound to
    /// `generation` if given; the kernel's refusal as a [`Refusal`].
    pub(crate) fn commit(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
        generation: Option<u32>,
    ) -> Result<std::result::Result<(), Refusal>> {
        if batch.commands.is_empty() {
            return Ok(Ok(()));
        }
        let msgs = encode::encode_batch(table, batch).map_err(|u| Error::NftUnsupported {
            op,
            attachment: who.to_owned(),
            what: u.0,
        })?;
        let sent = self.send(op, who, family_byte(batch.family), &msgs, generation)?;
        Ok(sent.map_err(|f| {
            let kind = match f.errno() {
                Some(libc::ENOENT) => RefusalKind::NotFound,
                Some(libc::EEXIST) => RefusalKind::Exists,
                // An exclusive add of a key an expiring element (a DEL's, a
                // few milliseconds ago) still holds: the ADD waits for it
                // as for an existing one (`add_rules`).
                Some(libc::EBUSY) => RefusalKind::Exists,
                Some(libc::ERESTART) if generation.is_some() => RefusalKind::Stale,
                _ => RefusalKind::Other,
            };
            let message = match &f {
                Failure::Kernel { errno, object } => {
                    format!("{object}: {}", io::Error::from_raw_os_error(*errno))
                }
                Failure::Io(e) => e.to_string(),
            };
            Refusal {
                kind,
                message,
                error: Self::fail(op, who, f),
            }
        }))
    }

    fn fail(op: FirewallOp, who: &str, f: Failure) -> Error {
        match f {
            Failure::Kernel { errno, object } => Error::NftNetlink {
                op,
                attachment: who.to_owned(),
                object,
                source: io::Error::from_raw_os_error(errno),
            },
            Failure::Io(source) => Error::NftNetlink {
                op,
                attachment: who.to_owned(),
                object: "netlink socket".into(),
                source,
            },
        }
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
        self.commit(op, who, table, batch, None)
    }

    fn generation(&self, op: FirewallOp, who: &str) -> Result<u32> {
        self.with_socket(op, who, |s| s.generation().map_err(Failure::Io))?
            .map_err(|f| Self::fail(op, who, f))
    }

    fn send_at(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
        generation: u32,
    ) -> Result<std::result::Result<(), Refusal>> {
        self.commit(op, who, table, batch, Some(generation))
    }

    fn read(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        rules_only: bool,
    ) -> Result<Option<Listing>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res = self.with_socket(op, who, |s| {
                read_table(s, table, rules_only).map_err(Failure::Io)
            })?;
            match res {
                Ok(l) => return Ok(l),
                // A dump interrupted by a concurrent commit: read again.
                Err(f) if f.errno() == Some(libc::EINTR) && attempt < RETRIES => continue,
                Err(f) => return Err(Self::fail(op, who, f)),
            }
        }
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
        let Some(map) = table.map(&anchor.map) else {
            return Ok(true);
        };
        let Ok(key) = encode::key_attrs(map, &anchor.key) else {
            return Ok(true);
        };
        let mut list = Attrs::new();
        list.nested(1, &key);
        let mut req = Attrs::new();
        req.str(encode::NFTA_SET_ELEM_LIST_TABLE, table.name)
            .str(encode::NFTA_SET_ELEM_LIST_SET, map.name)
            .nested(encode::NFTA_SET_ELEM_LIST_ELEMENTS, &list);
        let fam = family_byte(table.family);
        // A get of one element answers ENOENT once it has expired. Bounded:
        // a jiffy is at most 10 ms (HZ=100).
        let (gone, ()) = crate::poll::until(std::time::Duration::from_millis(50), || {
            let res = self.with_socket(op, who, |s| {
                s.get(NFT_MSG_GETSETELEM, fam, &req.0, false)
                    .map_err(Failure::Io)
            })?;
            match res {
                Ok(found) => Ok((found.is_none(), ())),
                Err(f) => Err(Self::fail(op, who, f)),
            }
        })?;
        Ok(gone)
    }

    fn key_id(&self, map: &Map, key: &[Value]) -> Option<String> {
        let (start, end) = encode::encode_interval_key(&map.key, key).ok()?;
        Some(raw_id(&start, map.interval.then_some(end.as_slice())))
    }

    fn data_id(&self, map: &Map, data: &[Value]) -> Option<String> {
        encode::encode_key(&map.data, data)
            .ok()
            .map(|d| raw_id(&d, None))
    }

    // Conditions the native encoder cannot express go through `nft` for
    // this ADD only; DEL, CHECK, list and GC stay native.
    fn delegate_add(&self, table: &Table, rules: &AttachmentRules) -> Option<&dyn Firewall> {
        let unsupported = encode::encode_batch(table, &batch::add(table, rules)).err()?;
        tracing::debug!(
            reason = %unsupported.0,
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

fn raw_id(start: &[u8], end: Option<&[u8]>) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match end {
        Some(e) => format!("{}-{}", hex(start), hex(e)),
        None => hex(start),
    }
}

/// GETTABLE, then dumps of the elements of the table's maps and of the
/// rules of its conditions chain.
fn read_table(s: &mut NfSocket, table: &Table, rules_only: bool) -> io::Result<Option<Listing>> {
    let fam = family_byte(table.family);
    let mut name = Attrs::new();
    name.str(1, table.name);
    if s.get(NFT_MSG_GETTABLE, fam, &name.0, false)?.is_none() {
        return Ok(None);
    }
    let mut listing = Listing::default();
    if let Some(chain) = table.conditions_chain {
        // NFTA_RULE_TABLE / NFTA_RULE_CHAIN filter the dump.
        let mut req = Attrs::new();
        req.str(1, table.name).str(2, chain);
        for body in s
            .get(NFT_MSG_GETRULE, fam, &req.0, true)?
            .unwrap_or_default()
        {
            if attr(&body, 1).map(attr_str).as_deref() != Some(table.name)
                || attr(&body, 2).map(attr_str).as_deref() != Some(chain)
            {
                continue;
            }
            let Some(handle) = attr(&body, 3)
                .and_then(|h| <[u8; 8]>::try_from(h).ok())
                .map(u64::from_be_bytes)
            else {
                continue;
            };
            listing.rules.push(ListedRule {
                chain: chain.to_owned(),
                handle,
                comment: attr(&body, 7).and_then(encode::udata_comment),
            });
        }
    }
    if rules_only {
        return Ok(Some(listing));
    }
    for map in &table.maps {
        let mut req = Attrs::new();
        req.str(encode::NFTA_SET_ELEM_LIST_TABLE, table.name)
            .str(encode::NFTA_SET_ELEM_LIST_SET, map.name);
        // A map missing from the table (deleted by hand) has no elements.
        let Some(bodies) = s.get(NFT_MSG_GETSETELEM, fam, &req.0, true)? else {
            continue;
        };
        for body in bodies {
            let Some(list) = attr(&body, encode::NFTA_SET_ELEM_LIST_ELEMENTS) else {
                continue;
            };
            for (_, elem) in attrs(list) {
                let value = |ty: u16| {
                    attr(elem, ty)
                        .and_then(|k| attr(k, encode::NFTA_DATA_VALUE))
                        .map(<[u8]>::to_vec)
                };
                let Some(start) = value(encode::NFTA_SET_ELEM_KEY) else {
                    continue;
                };
                let end = value(encode::NFTA_SET_ELEM_KEY_END);
                let data = value(encode::NFTA_SET_ELEM_DATA).unwrap_or_default();
                let comment =
                    attr(elem, encode::NFTA_SET_ELEM_USERDATA).and_then(encode::udata_comment);
                let expiring = attr(elem, encode::NFTA_SET_ELEM_EXPIRATION)
                    .and_then(|x| <[u8; 8]>::try_from(x).ok())
                    .map(u64::from_be_bytes)
                    .is_some_and(|ms| ms < batch::EXPIRING_MS);
                let end = if map.interval {
                    Some(end.unwrap_or_else(|| start.clone()))
                } else {
                    None
                };
                let Some(key) = encode::decode_key(&map.key, &start, end.as_deref()) else {
                    continue;
                };
                listing.elements.push(ListedElement {
                    map: map.name.to_owned(),
                    key,
                    key_id: raw_id(&start, end.as_deref()),
                    data_id: raw_id(&data, None),
                    comment,
                    expiring,
                });
            }
        }
    }
    Ok(Some(listing))
}

#[cfg(test)]
mod tests;
