//! Address allocation in one range set, in exactly the Go reference's order
//! (containernetworking/plugins `backend/allocator/allocator.go`).

use std::collections::HashSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::error::{Error, Result};
use crate::parse::{ip_to_u128, u128_to_ip};
use crate::range::{Range, RangeSet};
use crate::result::IpConfig;
use crate::store::{LockedStore, Owner, OwnerMatch};

/// Walks the candidate addresses of a range set like Go's `RangeIter`: from
/// the address after the last reserved one if that lies in the set (else
/// from the first range's `rangeStart`), range after range, wrapping around,
/// skipping each range's gateway, and ending when back at the start.
#[derive(Debug, Clone)]
pub struct RangeIter<'a> {
    set: &'a RangeSet,
    range_idx: usize,
    cur: Option<u128>,
    start: Option<u128>,
    done: bool,
}

impl<'a> RangeIter<'a> {
    /// An iterator over `set`, continuing after `last_reserved` when the set
    /// contains it (round robin).
    pub fn new(set: &'a RangeSet, last_reserved: Option<IpAddr>) -> Self {
        let mut iter = RangeIter {
            set,
            range_idx: 0,
            cur: None,
            start: None,
            done: set.ranges().is_empty(),
        };
        let resume = last_reserved.and_then(|ip| {
            set.ranges()
                .iter()
                .position(|r| r.contains(ip))
                .map(|i| (i, ip))
        });
        match resume {
            // The first `next` yields last_reserved + 1.
            Some((idx, ip)) => {
                iter.range_idx = idx;
                iter.cur = Some(ip_to_u128(ip.to_canonical()));
            }
            None => {
                iter.start = set.ranges().first().map(|r| ip_to_u128(r.range_start()));
            }
        }
        iter
    }

    fn range(&self) -> &'a Range {
        &self.set.ranges()[self.range_idx]
    }
}

impl<'a> Iterator for RangeIter<'a> {
    /// A candidate address and the range it belongs to.
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            let mut range = self.range();
            let Some(cur) = self.cur else {
                let first = ip_to_u128(range.range_start());
                self.cur = Some(first);
                self.start = Some(first);
                if first == ip_to_u128(range.gateway()) {
                    continue;
                }
                return Some((range.range_start(), range));
            };
            let cur = if cur == ip_to_u128(range.range_end()) {
                self.range_idx = (self.range_idx + 1) % self.set.ranges().len();
                range = self.range();
                ip_to_u128(range.range_start())
            } else {
                cur + 1
            };
            self.cur = Some(cur);
            match self.start {
                None => self.start = Some(cur),
                Some(start) if start == cur => {
                    self.done = true;
                    return None;
                }
                Some(_) => {}
            }
            if cur == ip_to_u128(range.gateway()) {
                continue;
            }
            return Some((u128_to_ip(range.range_start(), cur), range));
        }
    }
}

/// How many candidates are checked one by one (a `stat` each on disk) before
/// the allocator lists every reservation once: with round robin the first
/// candidate is almost always free, and a full walk over a crowded range
/// costs one directory listing instead of a `stat` per address.
const PROBES_BEFORE_LISTING: usize = 64;

/// Allocates from one range set (index `index` in the configuration, which
/// names its `last_reserved_ip.<index>` file).
#[derive(Debug, Clone, Copy)]
pub struct Allocator<'a> {
    set: &'a RangeSet,
    index: usize,
}

impl<'a> Allocator<'a> {
    /// An allocator for range set `index`.
    pub fn new(set: &'a RangeSet, index: usize) -> Self {
        Allocator { set, index }
    }

    /// Reserves an address for `owner` (Go's `IPAllocator.Get`): `requested`
    /// if given, else the next free one in round-robin order. The store must
    /// be locked.
    pub fn allocate(
        &self,
        store: &mut impl LockedStore,
        owner: &Owner,
        requested: Option<IpAddr>,
    ) -> Result<IpConfig> {
        if let Some(ip) = requested {
            let ip = ip.to_canonical();
            let range = self.set.range_for(ip).ok_or_else(|| Error::NotInRangeSet {
                ip,
                range_set: self.set.to_string(),
            })?;
            if ip == range.gateway() {
                return Err(Error::RequestedGateway(ip));
            }
            if !store.reserve(ip, owner, self.index)? {
                return Err(Error::RequestedUnavailable {
                    ip,
                    range_set: self.set.to_string(),
                });
            }
            return Ok(ip_config(ip, range));
        }

        // Go checks GetByID (exact or legacy match) in directory-walk order,
        // i.e. sorted by file name.
        let mut held: Vec<IpAddr> = store
            .held_by(owner)?
            .into_iter()
            .map(|r| r.ip)
            .filter(|ip| self.set.contains(*ip))
            .collect();
        held.sort_by_key(|ip| ip.to_string());
        if let Some(ip) = held.first() {
            return Err(Error::Duplicate {
                ip: *ip,
                container_id: owner.container_id.clone(),
            });
        }

        let last = store.last_reserved_ip(self.index)?;
        let mut listed: Option<HashSet<IpAddr>> = None;
        for (probes, (ip, range)) in RangeIter::new(self.set, last).enumerate() {
            let taken = match &listed {
                Some(set) => set.contains(&ip),
                None if probes < PROBES_BEFORE_LISTING => store.is_reserved(ip)?,
                None => {
                    let set = store.reserved_ips()?;
                    let taken = set.contains(&ip);
                    listed = Some(set);
                    taken
                }
            };
            // `reserve` is exclusive, so a stale "free" answer only costs a try.
            if !taken && store.reserve(ip, owner, self.index)? {
                return Ok(ip_config(ip, range));
            }
        }
        Err(Error::Exhausted(self.set.to_string()))
    }
}

fn ip_config(ip: IpAddr, range: &Range) -> IpConfig {
    let prefix = range.subnet().prefix();
    IpConfig {
        interface: None,
        // The prefix comes from a valid subnet of the same family.
        address: IpNetwork::new(ip, prefix).unwrap_or_else(|_| range.subnet()),
        gateway: Some(range.gateway()),
    }
}

/// Releases what `owner` holds (Go's `ReleaseByID`, once per range set as
/// `cmdDel` calls it): exact (id, ifname) entries; legacy id-only entries
/// when no exact one was found, or in any case once there are two or more
/// range sets (Go's second call finds no exact entry left). Returns the
/// released addresses, sorted.
pub fn release_owner(
    store: &mut impl LockedStore,
    owner: &Owner,
    range_sets: usize,
) -> Result<Vec<IpAddr>> {
    let mut exact = Vec::new();
    let mut legacy = Vec::new();
    for r in store.held_by(owner)? {
        match r.matches(owner) {
            OwnerMatch::Exact => exact.push(r.ip),
            OwnerMatch::Legacy => legacy.push(r.ip),
            OwnerMatch::None => {}
        }
    }
    let mut victims = exact;
    if victims.is_empty() || range_sets >= 2 {
        victims.extend(legacy);
    }
    let mut released = Vec::new();
    for ip in victims {
        if store.release(ip)? {
            released.push(ip);
        }
    }
    released.sort();
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::RangeConfig;
    use crate::store::{MemoryStore, Store};

    fn set(specs: &[(&str, Option<&str>, Option<&str>)]) -> RangeSet {
        let configs: Vec<RangeConfig> = specs
            .iter()
            .map(|(subnet, start, end)| RangeConfig {
                subnet: Some(subnet.to_string()),
                range_start: start.map(str::to_string),
                range_end: end.map(str::to_string),
                gateway: None,
            })
            .collect();
        RangeSet::canonicalize(&configs).unwrap()
    }

    fn ips(iter: RangeIter<'_>) -> Vec<String> {
        iter.map(|(ip, _)| ip.to_string()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn iter_from_start_skips_gateway_and_broadcast() {
        let s = set(&[("192.168.1.0/29", None, None)]);
        assert_eq!(
            ips(RangeIter::new(&s, None)),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
    }

    #[test]
    fn iter_from_middle_and_end_wraps() {
        let s = set(&[("192.168.1.0/29", None, None)]);
        assert_eq!(
            ips(RangeIter::new(&s, Some(ip("192.168.1.3")))),
            [
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6",
                "192.168.1.2",
                "192.168.1.3"
            ]
        );
        assert_eq!(
            ips(RangeIter::new(&s, Some(ip("192.168.1.6")))),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
        // Outside the set: start over at rangeStart.
        assert_eq!(ips(RangeIter::new(&s, Some(ip("10.0.0.1")))).len(), 5);
    }

    #[test]
    fn iter_multiple_ranges() {
        let s = set(&[
            ("192.168.1.0/30", None, None),
            ("192.168.2.0/30", None, None),
        ]);
        assert_eq!(
            ips(RangeIter::new(&s, None)),
            ["192.168.1.2", "192.168.2.2"]
        );
        assert_eq!(
            ips(RangeIter::new(&s, Some(ip("192.168.1.2")))),
            ["192.168.2.2", "192.168.1.2"]
        );
    }

    #[test]
    fn allocate_round_robin_release_duplicate_exhaustion() {
        let s = set(&[("10.0.0.0/29", None, None)]);
        let store = MemoryStore::new();
        let alloc = Allocator::new(&s, 0);
        let mut lock = store.lock().unwrap();
        let got: Vec<String> = (0..5)
            .map(|i| {
                alloc
                    .allocate(&mut lock, &Owner::new(format!("c{i}"), "eth0"), None)
                    .unwrap()
                    .address
                    .to_string()
            })
            .collect();
        assert_eq!(
            got,
            [
                "10.0.0.2/29",
                "10.0.0.3/29",
                "10.0.0.4/29",
                "10.0.0.5/29",
                "10.0.0.6/29"
            ]
        );
        let err = alloc
            .allocate(&mut lock, &Owner::new("c9", "eth0"), None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no IP addresses available in range set: 10.0.0.1-10.0.0.6"
        );
        let err = alloc
            .allocate(&mut lock, &Owner::new("c1", "eth0"), None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "10.0.0.3 has been allocated to c1, duplicate allocation is not allowed"
        );
        release_owner(&mut lock, &Owner::new("c0", "eth0"), 1).unwrap();
        release_owner(&mut lock, &Owner::new("c2", "eth0"), 1).unwrap();
        // Round robin: last reserved is .6, so .2 (not .4) comes next.
        let next = alloc
            .allocate(&mut lock, &Owner::new("c5", "eth0"), None)
            .unwrap();
        assert_eq!(next.address.to_string(), "10.0.0.2/29");
        let next = alloc
            .allocate(&mut lock, &Owner::new("c6", "eth0"), None)
            .unwrap();
        assert_eq!(next.address.to_string(), "10.0.0.4/29");
    }

    #[test]
    fn requested_ip_errors() {
        let s = set(&[("10.0.0.0/29", None, None)]);
        let store = MemoryStore::new();
        let alloc = Allocator::new(&s, 0);
        let mut lock = store.lock().unwrap();
        let o = Owner::new("c", "eth0");
        let e = |r: Result<IpConfig>| r.unwrap_err().to_string();
        assert_eq!(
            e(alloc.allocate(&mut lock, &o, Some(ip("10.0.0.1")))),
            "requested ip 10.0.0.1 is subnet's gateway"
        );
        assert_eq!(
            e(alloc.allocate(&mut lock, &o, Some(ip("10.0.0.7")))),
            "10.0.0.7 not in range set 10.0.0.1-10.0.0.6"
        );
        let got = alloc.allocate(&mut lock, &o, Some(ip("10.0.0.5"))).unwrap();
        assert_eq!(got.address.to_string(), "10.0.0.5/29");
        assert_eq!(
            e(alloc.allocate(&mut lock, &Owner::new("d", "eth0"), Some(ip("10.0.0.5")))),
            "requested IP address 10.0.0.5 is not available in range set 10.0.0.1-10.0.0.6"
        );
    }

    #[test]
    fn legacy_release_rules() {
        let store = MemoryStore::new();
        store.insert_raw(ip("10.0.0.2"), "c\r\neth0");
        store.insert_raw(ip("10.0.0.3"), "  c \n");
        let mut lock = store.lock().unwrap();
        let o = Owner::new("c", "eth0");
        assert_eq!(release_owner(&mut lock, &o, 1).unwrap(), [ip("10.0.0.2")]);
        assert_eq!(release_owner(&mut lock, &o, 1).unwrap(), [ip("10.0.0.3")]);
        assert!(release_owner(&mut lock, &o, 1).unwrap().is_empty());
    }
}
