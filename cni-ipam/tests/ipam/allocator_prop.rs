//! Property tests of the allocator against a direct model of Go's order:
//! the candidates of a range set are its ranges' addresses in order without
//! gateways; an allocation takes the first free candidate after the last
//! reserved one (cyclically), or from the first candidate when the last
//! reserved address is not in the set.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};

use cni_ipam::allocator::{release_owner, Allocator, RangeIter};
use cni_ipam::range::{RangeConfig, RangeSet};
use cni_ipam::store::{LockedStore, MemoryStore, Owner, Store};
use cni_ipam::Error;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct RangeSpec {
    prefix: u8,
    start_off: Option<u32>,
    end_off: Option<u32>,
    gateway_off: Option<u32>,
}

fn range_spec() -> impl Strategy<Value = RangeSpec> {
    (
        26u8..=30,
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u32>>(),
    )
        .prop_map(|(prefix, s, e, g)| RangeSpec {
            prefix,
            start_off: s,
            end_off: e,
            gateway_off: g,
        })
}

fn build(specs: &[RangeSpec]) -> RangeSet {
    let configs: Vec<RangeConfig> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let base = u32::from(Ipv4Addr::new(10, i as u8, 0, 0));
            let size = 1u32 << (32 - s.prefix);
            // Offsets within [1, size-2] so start <= end always holds.
            let start = s.start_off.map(|o| 1 + o % (size / 2 - 1));
            let end = s.end_off.map(|o| size / 2 + o % (size / 2 - 1));
            let gw = s.gateway_off.map(|o| o % size);
            let ip = |off: u32| Ipv4Addr::from(base + off).to_string();
            RangeConfig {
                subnet: Some(format!("{}/{}", Ipv4Addr::from(base), s.prefix)),
                range_start: start.map(ip),
                range_end: end.map(ip),
                gateway: gw.map(ip),
            }
        })
        .collect();
    RangeSet::canonicalize(&configs).unwrap()
}

fn candidates(set: &RangeSet) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for r in set.ranges() {
        let (IpAddr::V4(s), IpAddr::V4(e)) = (r.range_start(), r.range_end()) else {
            unreachable!()
        };
        for v in u32::from(s)..=u32::from(e) {
            let ip = IpAddr::V4(v.into());
            if ip != r.gateway() {
                out.push(ip);
            }
        }
    }
    out
}

fn model_order(cands: &[IpAddr], last: Option<IpAddr>) -> Vec<IpAddr> {
    match last.and_then(|l| cands.iter().position(|c| *c == l)) {
        Some(p) => cands[p + 1..].iter().chain(&cands[..=p]).copied().collect(),
        None => cands.to_vec(),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    Release(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![3 => (0u8..80).prop_map(Op::Add), 1 => (0u8..80).prop_map(Op::Release)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn iteration_matches_model(
        specs in prop::collection::vec(range_spec(), 1..4),
        last_pick in any::<Option<prop::sample::Index>>(),
    ) {
        let set = build(&specs);
        let cands = candidates(&set);
        let last = last_pick.map(|i| cands[i.index(cands.len())]);
        let got: Vec<IpAddr> = RangeIter::new(&set, last).map(|(ip, _)| ip).collect();
        prop_assert_eq!(got, model_order(&cands, last));
    }

    #[test]
    fn allocation_matches_model(
        specs in prop::collection::vec(range_spec(), 1..4),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let set = build(&specs);
        let cands = candidates(&set);
        let gateways: HashSet<IpAddr> = set.ranges().iter().map(|r| r.gateway()).collect();
        let store = MemoryStore::new();
        let alloc = Allocator::new(&set, 0);
        let mut held: BTreeMap<u8, IpAddr> = BTreeMap::new();
        let mut last: Option<IpAddr> = None;
        for op in ops {
            let mut locked = store.lock().unwrap();
            match op {
                Op::Add(k) => {
                    let owner = Owner::new(format!("c{k}"), "eth0");
                    let got = alloc.allocate(&mut locked, &owner, None);
                    let taken: HashSet<IpAddr> = held.values().copied().collect();
                    if let Some(ip) = held.get(&k) {
                        let is_dup = matches!(got, Err(Error::Duplicate { ip: dup, .. }) if dup == *ip);
                        prop_assert!(is_dup);
                        continue;
                    }
                    let want = model_order(&cands, last).into_iter().find(|c| !taken.contains(c));
                    match want {
                        Some(want) => {
                            let got = got.unwrap().address.ip();
                            prop_assert_eq!(got, want);
                            prop_assert!(!gateways.contains(&got));
                            prop_assert!(set.contains(got));
                            held.insert(k, got);
                            last = Some(got);
                        }
                        None => {
                            prop_assert_eq!(taken.len(), cands.len());
                            prop_assert!(matches!(got, Err(Error::Exhausted(_))));
                        }
                    }
                }
                Op::Release(k) => {
                    let owner = Owner::new(format!("c{k}"), "eth0");
                    let released = release_owner(&mut locked, &owner, 1).unwrap();
                    let expected: Vec<IpAddr> = held.remove(&k).into_iter().collect();
                    prop_assert_eq!(released, expected);
                }
            }
            let reserved = locked.reserved_ips().unwrap();
            prop_assert_eq!(reserved.len(), held.len());
        }
    }

    #[test]
    fn exhausts_after_exactly_the_candidates(specs in prop::collection::vec(range_spec(), 1..3)) {
        let set = build(&specs);
        let n = candidates(&set).len();
        let store = MemoryStore::new();
        let alloc = Allocator::new(&set, 0);
        let mut locked = store.lock().unwrap();
        let mut seen = HashSet::new();
        for i in 0..n {
            let ip = alloc
                .allocate(&mut locked, &Owner::new(format!("c{i}"), "eth0"), None)
                .unwrap()
                .address
                .ip();
            prop_assert!(seen.insert(ip));
        }
        let err = alloc.allocate(&mut locked, &Owner::new("last", "eth0"), None).unwrap_err();
        prop_assert_eq!(err.to_string(), format!("no IP addresses available in range set: {set}"));
    }

    #[test]
    fn canonicalize_never_panics(
        addr in any::<[u8; 16]>(),
        v4 in any::<bool>(),
        prefix in 0u8..=130,
        start in any::<Option<[u8; 4]>>(),
        end in any::<Option<[u8; 4]>>(),
    ) {
        let subnet = if v4 {
            format!("{}/{prefix}", Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
        } else {
            format!("{}/{prefix}", std::net::Ipv6Addr::from(addr))
        };
        let cfg = RangeConfig {
            subnet: Some(subnet),
            range_start: start.map(|a| Ipv4Addr::from(a).to_string()),
            range_end: end.map(|a| Ipv4Addr::from(a).to_string()),
            gateway: None,
        };
        if let Ok(set) = RangeSet::canonicalize(&[cfg]) {
            let r = &set.ranges()[0];
            prop_assert!(r.contains(r.range_start()) && r.contains(r.range_end()));
            prop_assert!(r.size() >= 1);
        }
    }
}
