//! host-local allocation (ADD then DEL of one attachment, the library path
//! a host-local process runs) with 10, 1,000 and 60,000 reservations already
//! in a /16, on disk in the Go reference's layout.

// A benchmark's setup failing is a broken benchmark: unwrap and expect stop
// it with the reason (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::path::Path;

use cni_ipam::host_local::{self, HostLocalConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn config(data_dir: &Path) -> HostLocalConfig {
    let conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "bench", "type": "host-local",
        "ipam": {"type": "host-local", "dataDir": data_dir,
                 "ranges": [[{"subnet": "10.128.0.0/16"}]]}
    });
    HostLocalConfig::load(conf.to_string().as_bytes(), "").expect("config")
}

/// Writes `n` reservations as a Go host-local would have left them.
fn prefill(data_dir: &Path, n: u32) {
    let dir = data_dir.join("bench");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let base = u32::from(Ipv4Addr::new(10, 128, 0, 2));
    let mut last = base;
    for i in 0..n {
        last = base + i;
        let ip = Ipv4Addr::from(last);
        std::fs::write(dir.join(ip.to_string()), format!("prefill-{i}\r\neth0")).expect("write");
    }
    std::fs::write(
        dir.join("last_reserved_ip.0"),
        Ipv4Addr::from(last).to_string(),
    )
    .expect("write");
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("host-local ADD+DEL");
    g.sample_size(30);
    for n in [10u32, 1_000, 60_000] {
        let tmp = tempfile::tempdir().expect("tempdir");
        prefill(tmp.path(), n);
        let cfg = config(tmp.path());
        // First operation builds the owner index from the directory.
        host_local::add(&cfg, "warm", "eth0").expect("warm add");
        host_local::del(&cfg, "warm", "eth0").expect("warm del");
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let r = host_local::add(&cfg, "bench-c", "eth0").expect("add");
                host_local::del(&cfg, "bench-c", "eth0").expect("del");
                black_box(r)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
