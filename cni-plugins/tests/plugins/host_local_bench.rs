//! host-local timings, printed (ignored by default; run in release):
//!
//! ```text
//! cargo test -p cni-plugins --release --test plugins host_local_bench:: -- --ignored --nocapture
//! ```
//!
//! - exec'd ADD+DEL pairs, ours next to the Go reference in the same run
//!   (target: ours at most 1/3 of Go's time);
//! - exec'd ADD into a /16 holding 60,000 reservations (target < 10 ms).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::host_local_support::*;
use serde_json::{json, Value};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn add_del_pairs(bin: &Path, conf: &Value, n: usize) -> Vec<Duration> {
    let stdin = conf.to_string();
    (0..n)
        .map(|i| {
            let id = format!("bench-{i}");
            let t = Instant::now();
            let add = Call::new("ADD", &id).run(bin, stdin.as_bytes());
            let del = Call::new("DEL", &id).run(bin, stdin.as_bytes());
            let took = t.elapsed();
            assert!(add.ok() && del.ok(), "{add:?} {del:?}");
            took
        })
        .collect()
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn exec_add_del_ours_vs_go() {
    let tmp = tempfile::tempdir().unwrap();
    let ipam = json!({"ranges": [[{"subnet": "10.1.0.0/16"}], [{"subnet": "2001:db8:1::/64"}]]});
    let ours_conf = host_local_conf("1.0.0", "bench", &tmp.path().join("ours"), ipam.clone());
    let go_conf = host_local_conf("1.0.0", "bench", &tmp.path().join("go"), ipam);
    let n = 200;
    // Warm both (page cache, index creation), then interleave rounds so
    // both see the same machine load.
    add_del_pairs(Path::new(HOST_LOCAL), &ours_conf, 5);
    let go_bin = go(GO_HOST_LOCAL);
    if let Some(g) = &go_bin {
        add_del_pairs(g, &go_conf, 5);
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        ours.extend(add_del_pairs(Path::new(HOST_LOCAL), &ours_conf, n / 4));
        if let Some(g) = &go_bin {
            theirs.extend(add_del_pairs(g, &go_conf, n / 4));
        }
    }
    let version = |bin: &Path| {
        median(
            (0..50)
                .map(|_| {
                    let t = Instant::now();
                    assert!(Call::new("VERSION", "").run(bin, b"{}").ok());
                    t.elapsed()
                })
                .collect(),
        )
    };
    eprintln!(
        "exec floor (VERSION), median of 50: ours {:.2} ms",
        ms(version(Path::new(HOST_LOCAL)))
    );
    if let Some(g) = &go_bin {
        eprintln!(
            "exec floor (VERSION), median of 50: Go   {:.2} ms",
            ms(version(g))
        );
    }
    let o = median(ours);
    eprintln!(
        "host-local exec ADD+DEL (dual-stack), median of {n}: ours {:.2} ms",
        ms(o)
    );
    if !theirs.is_empty() {
        let g = median(theirs);
        eprintln!(
            "host-local exec ADD+DEL (dual-stack), median of {n}: Go   {:.2} ms; ours/Go = {:.2} (target <= 0.33)",
            ms(g),
            o.as_secs_f64() / g.as_secs_f64()
        );
    }
}

/// Fills `<dir>` with `count` reservations of 10.2.0.0/16 in Go's layout
/// (as files, which is what 60,000 ADDs would leave).
fn fill(dir: &Path, count: u32) {
    std::fs::create_dir_all(dir).unwrap();
    let mut last = String::new();
    for i in 0..count {
        let n = i + 2;
        let ip = format!("10.2.{}.{}", n >> 8, n & 0xff);
        std::fs::write(dir.join(&ip), format!("fill-{i}\r\neth0")).unwrap();
        last = ip;
    }
    std::fs::write(dir.join("last_reserved_ip.0"), last).unwrap();
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn exec_add_with_60k_reservations() {
    let tmp = tempfile::tempdir().unwrap();
    let count = 60_000;
    let ipam = json!({"ranges": [[{"subnet": "10.2.0.0/16"}]]});
    let ours_conf = host_local_conf("1.0.0", "big", &tmp.path().join("ours"), ipam.clone());
    let go_conf = host_local_conf("1.0.0", "big", &tmp.path().join("go"), ipam);
    fill(&tmp.path().join("ours/big"), count);
    fill(&tmp.path().join("go/big"), count);
    let stdin = ours_conf.to_string();

    // The first ADD builds the owner index from a full scan (once per boot,
    // or after another plugin changed the directory).
    let t = Instant::now();
    assert!(Call::new("ADD", "first")
        .run(Path::new(HOST_LOCAL), stdin.as_bytes())
        .ok());
    let first = t.elapsed();
    let mut adds = Vec::new();
    let mut dels = Vec::new();
    for i in 0..30 {
        let id = format!("steady-{i}");
        let t = Instant::now();
        let out = Call::new("ADD", &id).run(Path::new(HOST_LOCAL), stdin.as_bytes());
        adds.push(t.elapsed());
        assert!(out.ok(), "{out:?}");
        let t = Instant::now();
        assert!(Call::new("DEL", &id)
            .run(Path::new(HOST_LOCAL), stdin.as_bytes())
            .ok());
        dels.push(t.elapsed());
    }
    eprintln!(
        "host-local exec with {count} reservations in a /16: first ADD {:.2} ms (index build), ADD median {:.2} ms (target < 10), DEL median {:.2} ms",
        ms(first),
        ms(median(adds)),
        ms(median(dels))
    );
    if let Some(g) = go(GO_HOST_LOCAL) {
        let stdin = go_conf.to_string();
        let mut go_adds = Vec::new();
        for i in 0..5 {
            let id = format!("go-{i}");
            let t = Instant::now();
            assert!(Call::new("ADD", &id).run(&g, stdin.as_bytes()).ok());
            go_adds.push(t.elapsed());
        }
        eprintln!(
            "Go host-local exec with {count} reservations: ADD median {:.2} ms",
            ms(median(go_adds))
        );
    }
}
