//! Reservation stores: the [`Store`] trait, the on-disk store in host-local's
//! layout ([`DiskStore`]) and an in-memory one for tests ([`MemoryStore`]).

use std::collections::HashSet;
use std::net::IpAddr;

use crate::error::Result;

mod disk;
mod memory;

pub use disk::{DiskStore, DiskStoreLock, DEFAULT_DATA_DIR};
pub use memory::{MemoryStore, MemoryStoreLock};

/// The attachment an address is reserved for: container id and interface name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The container id (`CNI_CONTAINERID`).
    pub container_id: String,
    /// The interface name in the container (`CNI_IFNAME`).
    pub ifname: String,
}

impl Owner {
    /// An owner from its two parts.
    pub fn new(container_id: impl Into<String>, ifname: impl Into<String>) -> Self {
        Owner {
            container_id: container_id.into(),
            ifname: ifname.into(),
        }
    }

    /// The reservation file content Go's disk backend writes:
    /// `<trimmed container id>\r\n<ifname>`.
    pub fn file_content(&self) -> String {
        format!("{}\r\n{}", self.container_id.trim(), self.ifname)
    }
}

impl From<&cni_types::GcAttachment> for Owner {
    fn from(a: &cni_types::GcAttachment) -> Self {
        Owner::new(a.container_id.clone(), a.ifname.clone())
    }
}

/// One reserved address and who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The reserved address.
    pub ip: IpAddr,
    /// The holder's container id.
    pub container_id: String,
    /// The holder's interface; `None` for legacy (pre-ifname) entries that
    /// only hold a container id.
    pub ifname: Option<String>,
}

/// How a reservation relates to an owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerMatch {
    /// Same container id and interface.
    Exact,
    /// A legacy entry with the same container id and no interface.
    Legacy,
    /// Someone else's.
    None,
}

impl Reservation {
    /// Parses a reservation file's content the way Go compares it: whitespace
    /// trimmed, `<id>\r\n<ifname>`, or a bare `<id>` for legacy entries.
    pub fn from_content(ip: IpAddr, content: &str) -> Reservation {
        let content = content.trim();
        match content.split_once("\r\n") {
            Some((id, ifname)) => Reservation {
                ip,
                container_id: id.to_string(),
                ifname: Some(ifname.to_string()),
            },
            None => Reservation {
                ip,
                container_id: content.to_string(),
                ifname: None,
            },
        }
    }

    /// Whether `owner` holds this reservation (Go: `GetByID`/`ReleaseByID` keys).
    pub fn matches(&self, owner: &Owner) -> OwnerMatch {
        if self.container_id != owner.container_id.trim() {
            return OwnerMatch::None;
        }
        match &self.ifname {
            Some(ifname) if *ifname == owner.ifname => OwnerMatch::Exact,
            Some(_) => OwnerMatch::None,
            None => OwnerMatch::Legacy,
        }
    }
}

/// A reservation store for one network. Every operation happens under
/// [`Store::lock`], which is exclusive across threads and processes.
pub trait Store {
    /// The locked view through which reservations are read and changed.
    type Locked<'a>: LockedStore
    where
        Self: 'a;

    /// Takes the store's exclusive lock (blocking) for one operation.
    fn lock(&self) -> Result<Self::Locked<'_>>;
}

/// Operations on a locked store. Dropping the value releases the lock.
pub trait LockedStore {
    /// Every reservation, in no particular order.
    fn reservations(&mut self) -> Result<Vec<Reservation>>;

    /// The reserved addresses (cheaper than [`LockedStore::reservations`]
    /// where the store can avoid reading owners).
    fn reserved_ips(&mut self) -> Result<HashSet<IpAddr>> {
        Ok(self.reservations()?.into_iter().map(|r| r.ip).collect())
    }

    /// The reservations `owner` holds: exact (id, ifname) entries and legacy
    /// id-only ones (Go's `GetByID`), in no particular order.
    fn held_by(&mut self, owner: &Owner) -> Result<Vec<Reservation>> {
        Ok(self
            .reservations()?
            .into_iter()
            .filter(|r| r.matches(owner) != OwnerMatch::None)
            .collect())
    }

    /// Whether `ip` is reserved.
    fn is_reserved(&mut self, ip: IpAddr) -> Result<bool> {
        Ok(self.reserved_ips()?.contains(&ip))
    }

    /// Reserves `ip` for `owner` unless it is taken (then `Ok(false)`), and
    /// records it as the last reserved address of range set `range_set`.
    fn reserve(&mut self, ip: IpAddr, owner: &Owner, range_set: usize) -> Result<bool>;

    /// The address last reserved in range set `range_set`, if recorded and
    /// readable.
    fn last_reserved_ip(&mut self, range_set: usize) -> Result<Option<IpAddr>>;

    /// Removes the reservation of `ip`; `Ok(false)` if there was none.
    fn release(&mut self, ip: IpAddr) -> Result<bool>;

    /// Rebuilds any derived lookup structure from the reservations (GC calls
    /// it after releasing). The default has nothing to rebuild.
    fn reindex(&mut self) -> Result<()> {
        Ok(())
    }
}
