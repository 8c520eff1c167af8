//! portmap ADD and DEL cost, ours next to the Go reference
//! (`/usr/lib/cni/portmap`, iptables backend), as exec'd plugins in a fresh
//! node namespace holding N other attachments' mappings. Prints the p50 of
//! each case. Ignored (slow, timing); run it with
//! `cargo test --release -p cni-plugins --test portmap_bench -- --ignored --nocapture`.

// The figures are this test's output.
#![allow(clippy::print_stdout)]

#[path = "common/nodenet.rs"]
mod nodenet;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nodenet::{is_root, Ns};

const SAMPLES: usize = 21;

fn conf(n: usize, pod: &Ns) -> String {
    // 10.77.0.0/16 on br0: container n gets 10.77.<n/250>.<n%250+2>
    let ip = format!("10.77.{}.{}", n / 250, n % 250 + 2);
    format!(
        r#"{{"cniVersion":"0.4.0","name":"bench","type":"portmap","snat":true,
            "runtimeConfig":{{"portMappings":[{{"hostPort":{},"containerPort":80,"protocol":"tcp"}}]}},
            "prevResult":{{"cniVersion":"0.4.0",
              "interfaces":[{{"name":"eth0","sandbox":"{}"}}],
              "ips":[{{"version":"4","address":"{ip}/16","interface":0}}]}}}}"#,
        10000 + n,
        pod.path()
    )
}

fn exec(node: &Ns, plugin: &Path, cmd: &str, n: usize, pod: &Ns) -> Duration {
    let mut c = Command::new(plugin);
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", format!("bench-{n}"))
        .env("CNI_NETNS", pod.path())
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/usr/lib/cni");
    let stdin = conf(n, pod);
    let start = Instant::now();
    let out = node.output(c, stdin.as_bytes());
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{} {cmd} {n}: {}{}",
        plugin.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// (ADD p50, DEL p50) with `existing` other attachments installed.
fn measure(plugin: &Path, existing: usize) -> (Duration, Duration) {
    let node = Ns::new("pmbench");
    let pod = Ns::new("pmbpod");
    node.ip(&["link", "add", "br0", "type", "bridge"]);
    node.ip(&["addr", "add", "10.77.255.254/16", "dev", "br0"]);
    node.ip(&["link", "set", "br0", "up"]);
    for n in 0..existing {
        exec(&node, plugin, "ADD", n, &pod);
    }
    let (mut adds, mut dels) = (Vec::new(), Vec::new());
    for i in 0..SAMPLES {
        let n = existing + i;
        adds.push(exec(&node, plugin, "ADD", n, &pod));
        dels.push(exec(&node, plugin, "DEL", n, &pod));
    }
    (p50(adds), p50(dels))
}

#[test]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
fn portmap_add_del_vs_go() {
    if !is_root() {
        return;
    }
    let ours = Path::new(env!("CARGO_BIN_EXE_portmap"));
    let go = Path::new("/usr/lib/cni/portmap");
    let mut cases: Vec<(&str, &Path, usize)> = Vec::new();
    for n in [50, 200] {
        if go.exists() {
            cases.push(("go (iptables)", go, n));
        }
        cases.push(("ours (nftables)", ours, n));
    }
    cases.push(("ours (nftables)", ours, 1000));
    println!(
        "{:<16} {:>9} {:>12} {:>12}",
        "portmap", "existing", "ADD p50", "DEL p50"
    );
    for (name, plugin, n) in cases {
        let (add, del) = measure(plugin, n);
        println!(
            "{name:<16} {n:>9} {:>9.2} ms {:>9.2} ms",
            add.as_secs_f64() * 1e3,
            del.as_secs_f64() * 1e3
        );
    }
}
