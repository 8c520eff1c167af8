//! host-local's allocator with 60,000 reservations already in a /16,
//! in-process on disk (no root): the first operation after foreign writes
//! (full scan and index rebuild), ADD, DEL and CHECK, an ADD walking from
//! rangeStart past every taken address, and one directory listing.
//!
//! ```text
//! cargo build --release -p cni-benches --bin ipam-perf && target/release/ipam-perf
//! ```

// A measurement program: its figures go to stdout.
#![allow(clippy::print_stdout)]

use std::fs;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Instant;

use cni_benches::measure::{ms, run, Fallible};
use cni_ipam::allocator::{release_owner, Allocator};
use cni_ipam::host_local::{self, HostLocalConfig};
use cni_ipam::store::{LockedStore, Owner, Store};
use serde_json::json;

fn best_of(runs: usize, f: &mut dyn FnMut() -> Fallible<f64>) -> Fallible<f64> {
    let mut best = f64::MAX;
    for _ in 0..runs {
        best = best.min(f()?);
    }
    Ok(best)
}

fn main() -> ExitCode {
    run("ipam-perf", measure)
}

fn measure() -> Fallible<()> {
    let tmp = tempfile::tempdir()?;
    let net = tmp.path().join("bignet");
    fs::create_dir_all(&net)?;
    let base = u32::from(Ipv4Addr::new(10, 20, 0, 2));
    // Written like Go would (no owner index), last reserved at the end.
    for i in 0..60_000u32 {
        let ip = Ipv4Addr::from(base + i);
        fs::write(net.join(ip.to_string()), format!("container-{i}\r\neth0"))?;
    }
    fs::write(
        net.join("last_reserved_ip.0"),
        Ipv4Addr::from(base + 59_999).to_string(),
    )?;
    let conf = json!({"cniVersion": "1.0.0", "name": "bignet", "ipam": {
        "type": "host-local", "dataDir": tmp.path(), "subnet": "10.20.0.0/16"}});
    let c = HostLocalConfig::load(conf.to_string().as_bytes(), "")?;

    let t = Instant::now();
    host_local::check(&c, "container-59999", "eth0")?;
    println!(
        "first operation after foreign writes (full scan + index rebuild): {:.1} ms",
        ms(t.elapsed())
    );

    let mut n = 0;
    let add = best_of(20, &mut || {
        n += 1;
        let t = Instant::now();
        host_local::add(&c, &format!("new-{n}"), "eth0")?;
        Ok(ms(t.elapsed()))
    })?;
    println!("ADD, round robin, 60k taken (best of 20): {add:.2} ms");
    let mut m = 0;
    let del = best_of(20, &mut || {
        m += 1;
        let t = Instant::now();
        host_local::del(&c, &format!("new-{m}"), "eth0")?;
        Ok(ms(t.elapsed()))
    })?;
    println!("DEL (best of 20): {del:.2} ms");

    let check = best_of(20, &mut || {
        let t = Instant::now();
        host_local::check(&c, "container-30000", "eth0")?;
        Ok(ms(t.elapsed()))
    })?;
    println!("CHECK (best of 20): {check:.2} ms");

    // A range set without last_reserved_ip walks from rangeStart over all
    // 60,000 taken addresses (64 stats, then one directory listing).
    let store = c.open_store()?;
    let set = c.range_sets.first().ok_or("no range set")?;
    let mut set_index = 6;
    let walk = best_of(5, &mut || {
        // A fresh range-set index each run: no last_reserved_ip yet.
        set_index += 1;
        let mut locked = store.lock()?;
        let owner = Owner::new("walker", "eth0");
        let t = Instant::now();
        let ip = Allocator::new(set, set_index).allocate(&mut locked, &owner, None)?;
        let took = ms(t.elapsed());
        if ip.address.ip().to_string() != "10.20.234.98" {
            return Err(format!("walk allocated {}, not 10.20.234.98", ip.address.ip()).into());
        }
        release_owner(&mut locked, &owner, 1)?;
        Ok(took)
    })?;
    println!("ADD walking from rangeStart past 60k taken (best of 5): {walk:.2} ms");
    let readdir = best_of(5, &mut || {
        let mut locked = store.lock()?;
        let t = Instant::now();
        let n = locked.reserved_ips()?.len();
        let took = ms(t.elapsed());
        if n < 60_000 {
            return Err(format!("listed {n} reservations, expected 60,000").into());
        }
        Ok(took)
    })?;
    println!("one directory listing into a set (best of 5): {readdir:.2} ms");
    Ok(())
}
