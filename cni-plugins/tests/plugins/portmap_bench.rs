//! portmap ADD and DEL cost, ours next to the Go reference
//! (`/usr/lib/cni/portmap`, iptables backend), as exec'd plugins in a fresh
//! node namespace holding N other attachments' mappings. Prints the p50 of
//! each case. Ignored (slow, timing); run it with
//! `cargo test --release -p cni-plugins --test plugins portmap_bench:: -- --ignored --nocapture`.

// The figures are this test's output.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::nodenet::Ns;

const SAMPLES: usize = 31;

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

/// A node namespace holding `existing` attachments of `plugin`.
struct Case {
    name: &'static str,
    plugin: &'static Path,
    existing: usize,
    node: Ns,
    pod: Ns,
    adds: Vec<Duration>,
    dels: Vec<Duration>,
}

impl Case {
    fn new(name: &'static str, plugin: &'static Path, existing: usize) -> Case {
        let node = Ns::new("pmbench");
        let pod = Ns::new("pmbpod");
        node.ip(&["link", "add", "br0", "type", "bridge"]);
        node.ip(&["addr", "add", "10.77.255.254/16", "dev", "br0"]);
        node.ip(&["link", "set", "br0", "up"]);
        for n in 0..existing {
            exec(&node, plugin, "ADD", n, &pod);
        }
        Case {
            name,
            plugin,
            existing,
            node,
            pod,
            adds: Vec::new(),
            dels: Vec::new(),
        }
    }

    fn sample(&mut self, i: usize) {
        let n = self.existing + i;
        self.adds
            .push(exec(&self.node, self.plugin, "ADD", n, &self.pod));
        self.dels
            .push(exec(&self.node, self.plugin, "DEL", n, &self.pod));
    }
}

/// Cases are measured in rounds (one ADD and one DEL of each case per
/// round) so a change of machine load hits all of them alike.
#[test]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
fn portmap_add_del_vs_go() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let ours: &'static Path = Path::new(env!("CARGO_BIN_EXE_portmap"));
    let go: &'static Path = Path::new("/usr/lib/cni/portmap");
    let mut cases: Vec<Case> = Vec::new();
    for n in [50, 200] {
        if go.exists() {
            cases.push(Case::new("go (iptables)", go, n));
        }
        cases.push(Case::new("ours (nftables)", ours, n));
    }
    cases.push(Case::new("ours (nftables)", ours, 1000));
    for i in 0..SAMPLES {
        for c in &mut cases {
            c.sample(i);
        }
    }
    println!(
        "{:<16} {:>9} {:>12} {:>12}",
        "portmap", "existing", "ADD p50", "DEL p50"
    );
    for c in cases {
        println!(
            "{:<16} {:>9} {:>9.2} ms {:>9.2} ms",
            c.name,
            c.existing,
            p50(c.adds).as_secs_f64() * 1e3,
            p50(c.dels).as_secs_f64() * 1e3
        );
    }
}
