//! ADD and DEL wall time of ptp, macvlan, ipvlan and host-device, ours next
//! to the Go reference in the same run (alternating, same node, same
//! config, Go's host-local as IPAM for both). Ignored by default:
//!
//! `cargo test --release -p cni-plugins --test plugins ptp_perf:: -- --ignored --nocapture`

#![allow(clippy::print_stdout)] // the figures are the test's output

use std::time::Duration;

use crate::ptp_common::*;
use serde_json::{json, Value};

const ROUNDS: usize = 21;

/// A plugin, its config and the node setup it needs.
type Case<'a> = (&'a str, &'a Value, &'a dyn Fn(&Node));

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Median ADD and DEL of `plugin` per implementation.
fn measure(plugin: &str, conf: &Value, setup: &dyn Fn(&Node)) -> [(Duration, Duration); 2] {
    let mut node = Node::new();
    setup(&node);
    let pod = node.pod();
    let env = CniEnv::new(&pod);
    let mut conf = conf.clone();
    if conf.get("ipam").is_some() {
        conf["ipam"] = node.host_local("10.90.0.0/24");
    }
    let mut times = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    for round in 0..ROUNDS {
        for (i, imp) in [Impl::Go, Impl::Ours].into_iter().enumerate() {
            let bin = plugin_path(imp, plugin);
            let add = node.exec(&bin, "ADD", &env, &conf);
            add.expect_ok("ADD");
            let del = node.exec(&bin, "DEL", &env, &conf);
            del.expect_ok("DEL");
            // The first round warms the page cache for both binaries.
            if round > 0 {
                times[i].0.push(add.elapsed);
                times[i].1.push(del.elapsed);
            }
        }
    }
    times.map(|(a, d)| (median(a), median(d)))
}

#[test]
#[ignore = "timing; run with --ignored --nocapture"]
fn add_del_time_next_to_go() {
    if !root() {
        return;
    }
    let ipam = json!({"type": "host-local"});
    let ptp = json!({"cniVersion": "1.0.0", "name": "perf", "type": "ptp", "ipam": ipam});
    let ptp_masq = json!({"cniVersion": "1.0.0", "name": "perf", "type": "ptp", "ipMasq": true,
                          "ipam": ipam});
    let macvlan = json!({"cniVersion": "1.0.0", "name": "perf", "type": "macvlan",
                         "master": "uplink0", "ipam": ipam});
    let ipvlan = json!({"cniVersion": "1.0.0", "name": "perf", "type": "ipvlan",
                        "master": "uplink0", "ipam": ipam});
    let hostdev = json!({"cniVersion": "1.0.0", "name": "perf", "type": "host-device",
                         "device": "hostdev0", "ipam": ipam});
    let no_setup = |_: &Node| {};
    let hd_setup = |n: &Node| {
        n.ip(&[
            "link",
            "add",
            "hostdev0",
            "type",
            "veth",
            "peer",
            "name",
            "hostdev0p",
        ]);
    };
    let has_ipvlan = {
        let n = Node::new();
        std::process::Command::new("ip")
            .args([
                "-n",
                n.name(),
                "link",
                "add",
                "p",
                "link",
                "uplink0",
                "type",
                "ipvlan",
            ])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    println!(
        "median of {} rounds, Go {GO_DIR} vs ours (debug/release as built)",
        ROUNDS - 1
    );
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>10}",
        "plugin", "Go ADD", "ours ADD", "Go DEL", "ours DEL"
    );
    let cases: [Case<'_>; 5] = [
        ("ptp", &ptp, &no_setup),
        ("ptp", &ptp_masq, &no_setup),
        ("macvlan", &macvlan, &no_setup),
        ("ipvlan", &ipvlan, &no_setup),
        ("host-device", &hostdev, &hd_setup),
    ];
    for (plugin, conf, setup) in cases {
        if plugin == "ipvlan" && !has_ipvlan {
            println!("{plugin:<12} (kernel has no ipvlan: not measured)");
            continue;
        }
        let [(go_add, go_del), (our_add, our_del)] = measure(plugin, conf, setup);
        let label = if conf["ipMasq"] == true {
            format!("{plugin}+masq")
        } else {
            plugin.to_owned()
        };
        println!(
            "{label:<12} {:>10} {:>10} {:>10} {:>10}",
            ms(go_add),
            ms(our_add),
            ms(go_del),
            ms(our_del)
        );
    }
}
