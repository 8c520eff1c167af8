//! Allocation cost with 60,000 reservations already in a /16.
//! Run: `cargo test -p cni-ipam --release --test perf -- --ignored --nocapture`

use std::fs;
use std::net::Ipv4Addr;
use std::time::Instant;

use cni_ipam::host_local::{self, HostLocalConfig};
use serde_json::json;

#[test]
#[ignore = "measurement; run explicitly"]
fn allocate_with_60k_reservations() {
    let tmp = tempfile::tempdir().unwrap();
    let net = tmp.path().join("bignet");
    fs::create_dir_all(&net).unwrap();
    let base = u32::from(Ipv4Addr::new(10, 20, 0, 2));
    for i in 0..60_000u32 {
        let ip = Ipv4Addr::from(base + i);
        fs::write(net.join(ip.to_string()), format!("container-{i}\r\neth0")).unwrap();
    }
    let conf = json!({"cniVersion": "1.0.0", "name": "bignet", "ipam": {
        "type": "host-local", "dataDir": tmp.path(), "subnet": "10.20.0.0/16"}});
    let c = HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap();

    let mut report = |label: &str, f: &mut dyn FnMut()| {
        let runs = 5;
        let mut best = f64::MAX;
        for _ in 0..runs {
            let t = Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        eprintln!("{label}: best of {runs}: {best:.2} ms");
    };
    // No last_reserved_ip: the walk starts at .1 and passes 60,000 taken addresses.
    report("ADD from rangeStart (60k taken)", &mut || {
        let _ = fs::remove_file(net.join("last_reserved_ip.0"));
        host_local::add(&c, "new", "eth0").unwrap();
        host_local::del(&c, "new", "eth0").unwrap();
    });
    report("ADD round robin (60k taken)", &mut || {
        host_local::add(&c, "new", "eth0").unwrap();
        host_local::del(&c, "new", "eth0").unwrap();
    });
    let t = Instant::now();
    host_local::add(&c, "new", "eth0").unwrap();
    eprintln!("ADD alone: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    host_local::del(&c, "new", "eth0").unwrap();
    eprintln!("DEL alone: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    host_local::check(&c, "container-59999", "eth0").unwrap();
    eprintln!("CHECK: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
}
