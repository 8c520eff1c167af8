//! One connection to nf_tables over `NETLINK_NETFILTER`, shared by both
//! firewall backends: the native backend does all its work through it, the
//! `nft` backend its generation reads and generation-bound commits (which
//! the `nft` program cannot do). The messages are encoded here ([`encode`]
//! over the constants of [`wire`]) and sent one `sendmsg` per batch.

pub(super) mod encode;
mod socket;
pub(super) mod wire;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::batch;
use super::engine::{ListedElement, ListedRule, Listing, Refusal, RefusalKind};
use super::model::{Batch, Element, Map, Table, Value};
use super::FirewallOp;
use crate::{Error, Result};
use encode::{family_byte, Msg};
use socket::{BatchError, NfSocket};
use wire::*;

/// How often a batch refused with a transient error (`EAGAIN`, `EINTR`,
/// `EBUSY` from a concurrent commit of the same objects) is sent again.
const RETRIES: usize = 3;

/// A netlink socket to nf_tables in one network namespace, opened on first
/// use (by a short-lived thread inside the namespace: the caller's threads
/// never enter it).
#[derive(Debug, Default)]
pub(super) struct NfConn {
    netns: Option<PathBuf>,
    socket: Mutex<Option<NfSocket>>,
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

impl NfConn {
    /// A connection to the nf_tables of the namespace at `netns` (the
    /// current one for `None`).
    pub(super) fn new(netns: Option<PathBuf>) -> NfConn {
        NfConn {
            netns,
            socket: Mutex::new(None),
        }
    }

    /// The network namespace this connection programs, if not the current one.
    pub(super) fn netns(&self) -> Option<&Path> {
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
            let s = cni_netns::run_at(netns, NfSocket::open)?.map_err(|source| {
                Error::NftNetlinkOpen {
                    op,
                    attachment: who.to_owned(),
                    netns: cni_netns::netns_label(netns),
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
    pub(super) fn commit(
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
        let send = || self.commit_now(op, who, table, batch, generation);
        crate::engine::traced_batch("netlink", op, who, batch.commands.len(), send)
    }

    fn commit_now(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
        generation: Option<u32>,
    ) -> Result<std::result::Result<(), Refusal>> {
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

    /// [`Driver::generation`](super::engine::Driver::generation): the
    /// ruleset's generation id.
    pub(super) fn generation(&self, op: FirewallOp, who: &str) -> Result<u32> {
        self.with_socket(op, who, |s| s.generation().map_err(Failure::Io))?
            .map_err(|f| Self::fail(op, who, f))
    }

    /// [`Driver::read`](super::engine::Driver::read): the table's
    /// listing, read again when a concurrent commit interrupts the dump.
    pub(super) fn read(
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

    /// [`Driver::wait_expired`](super::engine::Driver::wait_expired):
    /// whether `anchor` has expired, asked for up to 50 ms.
    pub(super) fn wait_expired(
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
        let (gone, ()) = cni_netns::poll::until(std::time::Duration::from_millis(50), || {
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
}

/// Whether the batch can be encoded natively; the reason when it cannot.
pub(super) fn unsupported(table: &Table, batch: &Batch) -> Option<String> {
    encode::encode_batch(table, batch).err().map(|u| u.0)
}

/// [`Driver::key_id`](super::engine::Driver::key_id): the key's bytes as the kernel lists them.
pub(super) fn key_id(map: &Map, key: &[Value]) -> Option<String> {
    let (start, end) = encode::encode_interval_key(&map.key, key).ok()?;
    Some(raw_id(&start, map.interval.then_some(end.as_slice())))
}

/// [`Driver::data_id`](super::engine::Driver::data_id): the data's bytes as the kernel lists them.
pub(super) fn data_id(map: &Map, data: &[Value]) -> Option<String> {
    encode::encode_key(&map.data, data)
        .ok()
        .map(|d| raw_id(&d, None))
}

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
