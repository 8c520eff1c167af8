//! An in-memory [`Store`] (Go has `backend/testing/fake_store.go` for the
//! same purpose): unit tests and embedders that keep state elsewhere.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use super::{LockedStore, Owner, Reservation, Store};
use crate::error::Result;

#[derive(Debug, Default)]
struct State {
    /// Reserved address → raw file content, as the disk store would hold it.
    reserved: BTreeMap<IpAddr, String>,
    last_reserved: HashMap<usize, IpAddr>,
}

/// Reservations held in memory behind a mutex.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

/// A locked [`MemoryStore`].
#[derive(Debug)]
pub struct MemoryStoreLock<'a> {
    state: MutexGuard<'a, State>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a raw entry (e.g. a legacy id-only one) as if written by another
    /// implementation.
    pub fn insert_raw(&self, ip: IpAddr, content: &str) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reserved
            .insert(ip, content.to_string());
    }

    /// Sets the recorded last reserved address of a range set.
    pub fn set_last_reserved(&self, range_set: usize, ip: IpAddr) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_reserved
            .insert(range_set, ip);
    }
}

impl Store for MemoryStore {
    type Locked<'a> = MemoryStoreLock<'a>;

    fn lock(&self) -> Result<MemoryStoreLock<'_>> {
        Ok(MemoryStoreLock {
            // A panic in another holder leaves consistent data: every change
            // is a single map operation.
            state: self.state.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }
}

impl LockedStore for MemoryStoreLock<'_> {
    fn reservations(&mut self) -> Result<Vec<Reservation>> {
        Ok(self
            .state
            .reserved
            .iter()
            .map(|(ip, content)| Reservation::from_content(*ip, content))
            .collect())
    }

    fn reserve(&mut self, ip: IpAddr, owner: &Owner, range_set: usize) -> Result<bool> {
        if self.state.reserved.contains_key(&ip) {
            return Ok(false);
        }
        self.state.reserved.insert(ip, owner.file_content());
        self.state.last_reserved.insert(range_set, ip);
        Ok(true)
    }

    fn last_reserved_ip(&mut self, range_set: usize) -> Result<Option<IpAddr>> {
        Ok(self.state.last_reserved.get(&range_set).copied())
    }

    fn release(&mut self, ip: IpAddr) -> Result<bool> {
        Ok(self.state.reserved.remove(&ip).is_some())
    }
}
