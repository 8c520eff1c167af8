//! Allocation cost with 60,000 reservations already in a /16.
//! Run: `cargo test -p cni-ipam --release --test ipam perf:: -- --ignored --nocapture`

use std::fs;
use std::net::Ipv4Addr;
use std::time::Instant;

use cni_ipam::allocator::{release_owner, Allocator};
use cni_ipam::host_local::{self, HostLocalConfig};
use cni_ipam::store::{LockedStore, Owner, Store};
use serde_json::json;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn best_of(runs: usize, f: &mut dyn FnMut() -> f64) -> f64 {
    (0..runs).map(|_| f()).fold(f64::MAX, f64::min)
}

#[test]
#[ignore = "measurement; run explicitly"]
fn allocate_with_60k_reservations() {
    let tmp = tempfile::tempdir().unwrap();
    let net = tmp.path().join("bignet");
    fs::create_dir_all(&net).unwrap();
    let base = u32::from(Ipv4Addr::new(10, 20, 0, 2));
    // Written like Go would (no owner index), last reserved at the end.
    for i in 0..60_000u32 {
        let ip = Ipv4Addr::from(base + i);
        fs::write(net.join(ip.to_string()), format!("container-{i}\r\neth0")).unwrap();
    }
    fs::write(
        net.join("last_reserved_ip.0"),
        Ipv4Addr::from(base + 59_999).to_string(),
    )
    .unwrap();
    let conf = json!({"cniVersion": "1.0.0", "name": "bignet", "ipam": {
        "type": "host-local", "dataDir": tmp.path(), "subnet": "10.20.0.0/16"}});
    let c = HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap();

    let t = Instant::now();
    host_local::check(&c, "container-59999", "eth0").unwrap();
    eprintln!(
        "first operation after foreign writes (full scan + index rebuild): {:.1} ms",
        ms(t)
    );

    let mut n = 0;
    let add = best_of(20, &mut || {
        n += 1;
        let t = Instant::now();
        host_local::add(&c, &format!("new-{n}"), "eth0").unwrap();
        ms(t)
    });
    eprintln!("ADD, round robin, 60k taken (best of 20): {add:.2} ms");
    let mut m = 0;
    let del = best_of(20, &mut || {
        m += 1;
        let t = Instant::now();
        host_local::del(&c, &format!("new-{m}"), "eth0").unwrap();
        ms(t)
    });
    eprintln!("DEL (best of 20): {del:.2} ms");

    let check = best_of(20, &mut || {
        let t = Instant::now();
        host_local::check(&c, "container-30000", "eth0").unwrap();
        ms(t)
    });
    eprintln!("CHECK (best of 20): {check:.2} ms");

    // A range set without last_reserved_ip walks from rangeStart over all
    // 60,000 taken addresses (64 stats, then one directory listing).
    let store = c.open_store().unwrap();
    let set = &c.range_sets[0];
    let mut set_index = 6;
    let walk = best_of(5, &mut || {
        // A fresh range-set index each run: no last_reserved_ip yet.
        set_index += 1;
        let mut locked = store.lock().unwrap();
        let owner = Owner::new("walker", "eth0");
        let t = Instant::now();
        let ip = Allocator::new(set, set_index)
            .allocate(&mut locked, &owner, None)
            .unwrap();
        let took = ms(t);
        assert_eq!(ip.address.ip().to_string(), "10.20.234.98");
        release_owner(&mut locked, &owner, 1).unwrap();
        took
    });
    eprintln!("ADD walking from rangeStart past 60k taken (best of 5): {walk:.2} ms");
    let readdir = best_of(5, &mut || {
        let mut locked = store.lock().unwrap();
        let t = Instant::now();
        assert!(locked.reserved_ips().unwrap().len() >= 60_000);
        ms(t)
    });
    eprintln!("one directory listing into a set (best of 5): {readdir:.2} ms");
}
