//! bandwidth: differential tests against Go's binary (result and kernel
//! state through `tc -j` and `ip -j`), a real transfer limited to the
//! configured rate, rollback, DEL and GC. Every test builds its own node and
//! pod namespaces.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::tuning_bandwidth_common::*;
use cni_testkit::premise;
use serde_json::{json, Value};

const OURS: &str = env!("CARGO_BIN_EXE_bandwidth");
const NET: &str = "bwnet";

fn conf(version: &str, topo: &Topo, limits: Value) -> Value {
    let mut c = json!({
        "cniVersion": version,
        "name": NET,
        "type": "bandwidth",
        "prevResult": topo.prev_result(version),
    });
    for (k, v) in limits.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// `tc -j qdisc show` of the node namespace, with interface names replaced
/// by roles and counters dropped.
fn qdiscs(topo: &Topo, ifb: &str) -> Vec<Value> {
    let mut v: Vec<Value> = json(&[
        "ip",
        "netns",
        "exec",
        topo.node.name(),
        "tc",
        "-j",
        "qdisc",
        "show",
    ])
    .as_array()
    .unwrap()
    .clone();
    for q in &mut v {
        let o = q.as_object_mut().unwrap();
        o.remove("refcnt");
        let dev = o["dev"].as_str().unwrap().to_owned();
        if dev == topo.host_veth {
            o.insert("dev".into(), "<veth>".into());
        } else if dev == ifb {
            o.insert("dev".into(), "<ifb>".into());
        }
    }
    v.retain(|q| q["dev"] != "lo");
    v
}

fn filters(topo: &Topo) -> Value {
    json(&[
        "ip",
        "netns",
        "exec",
        topo.node.name(),
        "tc",
        "-j",
        "filter",
        "show",
        "dev",
        &topo.host_veth,
        "parent",
        "ffff:",
    ])
}

/// The IFB as `ip -j -d link` shows it, without what differs by design
/// (MAC, index, alias) or by time (counters).
fn ifb_link(topo: &Topo) -> Option<Value> {
    let links = json(&["ip", "-n", topo.node.name(), "-j", "-d", "link", "show"]);
    let l = links
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["ifname"].as_str().unwrap().starts_with("bwp"))?;
    Some(json!({
        "ifname": l["ifname"], "mtu": l["mtu"], "flags": l["flags"], "qdisc": l["qdisc"],
        "txqlen": l["txqlen"], "kind": l["linkinfo"]["info_kind"], "operstate": l["operstate"],
    }))
}

fn state(topo: &Topo) -> Value {
    let ifb = ifb_link(topo);
    let name = ifb
        .as_ref()
        .map(|l| l["ifname"].as_str().unwrap().to_owned())
        .unwrap_or_default();
    json!({"qdiscs": qdiscs(topo, &name), "filters": filters(topo), "ifb": ifb})
}

#[test]
fn differential_against_go() {
    let Some(go) = go_bin("bandwidth") else {
        cni_testkit::premise::require(false, "needs the Go bandwidth plugin");
        return;
    };
    if !premise::require_root() {
        return;
    }
    let cases = [
        (
            "1.0.0",
            json!({"ingressRate": 8_000_000, "ingressBurst": 80_000,
                          "egressRate": 16_000_000, "egressBurst": 160_000}),
        ),
        (
            "0.4.0",
            json!({"egressRate": 1_000_000, "egressBurst": 100_000}),
        ),
        (
            "0.3.1",
            json!({"ingressRate": 123_456_789, "ingressBurst": 999_999}),
        ),
        (
            "1.0.0",
            json!({"runtimeConfig": {"bandwidth": {"ingressRate": 5_000_000,
                          "ingressBurst": 50_000, "egressRate": 6_000_000, "egressBurst": 60_000}}}),
        ),
        // Rates past 32 bits of bytes per second need TCA_TBF_RATE64.
        (
            "1.0.0",
            json!({"ingressRate": 40_000_000_000u64, "ingressBurst": 4_000_000,
                          "egressRate": 40_000_000_000u64, "egressBurst": 4_000_000}),
        ),
        // All zero: prevResult passed through, nothing touched.
        ("1.0.0", json!({"ingressRate": 0, "ingressBurst": 0})),
    ];
    for (version, limits) in cases {
        let cid = format!("c{:08x}", rand_u32());
        let mut seen = Vec::new();
        let seed = rand_u32();
        for bin in [go.as_str(), OURS] {
            let topo = Topo::with_seed("bwd", seed);
            let c = conf(version, &topo, limits.clone());
            let p = topo.pod_path();
            let add = run_plugin(bin, &topo.node, "ADD", &cid, &p, &[], &c).ok();
            let result = normalise_result(add.json(), &topo, false);
            let after_add = state(&topo);
            if version != "0.3.1" {
                run_plugin(bin, &topo.node, "CHECK", &cid, &p, &[], &c).ok();
            }
            let mut del_conf = c.clone();
            del_conf["prevResult"] = add.json();
            run_plugin(bin, &topo.node, "DEL", &cid, &p, &[], &del_conf).ok();
            let after_del = state(&topo);
            assert_eq!(after_del["ifb"], Value::Null, "{bin}: IFB left after DEL");
            if bin == OURS {
                // Beyond Go: the host veth is left as the main plugin made it.
                let q = &after_del["qdiscs"];
                assert!(
                    q.as_array().unwrap().iter().all(|q| q["kind"] == "noqueue"),
                    "ours left qdiscs: {q}"
                );
                assert_eq!(after_del["filters"], json!([]));
            }
            seen.push((result, after_add));
        }
        assert_eq!(
            seen[0], seen[1],
            "{version} {limits}: Go (left) and ours differ"
        );
    }
}

#[test]
fn validation_errors_match_go() {
    let Some(go) = go_bin("bandwidth") else {
        return;
    };
    if !premise::require_root() {
        return;
    }
    let topo = Topo::new("bwv");
    let p = topo.pod_path();
    for limits in [
        json!({"ingressRate": 1000}),
        json!({"egressBurst": 1000}),
        json!({"ingressRate": 1000, "ingressBurst": 34_359_738_360u64}),
        json!({"runtimeConfig": {"bandwidth": {"egressRate": 8}}}),
    ] {
        let c = conf("1.0.0", &topo, limits.clone());
        let go_msg = run_plugin(&go, &topo.node, "ADD", "c1", &p, &[], &c).msg();
        let our_msg = run_plugin(OURS, &topo.node, "ADD", "c1", &p, &[], &c).msg();
        assert_eq!(our_msg, go_msg, "{limits}");
    }
    // Not chained.
    let mut c = conf("1.0.0", &topo, json!({"ingressRate": 8, "ingressBurst": 8}));
    c.as_object_mut().unwrap().remove("prevResult");
    let msg = run_plugin(OURS, &topo.node, "ADD", "c1", &p, &[], &c).msg();
    assert_eq!(msg, "must be called as chained plugin");
}

/// Sends `bytes` from a socket made in `from` to a listener in `to` and
/// returns the achieved rate in bits per second.
fn transfer(topo: &Topo, pod_sends: bool, bytes: usize) -> f64 {
    let (srv_ns, dst_ip, cli_ns) = if pod_sends {
        (&topo.node, topo.node_ip.clone(), &topo.pod)
    } else {
        (&topo.pod, topo.pod_ip.clone(), &topo.node)
    };
    let listener = srv_ns
        .run(move || TcpListener::bind((dst_ip.as_str(), 0)))
        .unwrap()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0;
        while got < bytes {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed early");
            got += n;
        }
        Instant::now()
    });
    let mut stream = cli_ns
        .run(move || TcpStream::connect(addr))
        .unwrap()
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let chunk = vec![0x5au8; 1 << 16];
    let start = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        let n = (bytes - sent).min(chunk.len());
        stream.write_all(&chunk[..n]).unwrap();
        sent += n;
    }
    let end = reader.join().unwrap();
    (bytes * 8) as f64 / (end - start).as_secs_f64()
}

#[test]
fn transfer_is_limited_to_the_rate_and_unlimited_after_del() {
    if !premise::require_root() {
        return;
    }
    const RATE: u64 = 20_000_000;
    const BYTES: usize = 4 << 20;
    let topo = Topo::new("bwt");
    let c = conf(
        "1.0.0",
        &topo,
        json!({"ingressRate": RATE, "ingressBurst": 256_000, "egressRate": RATE, "egressBurst": 256_000}),
    );
    let p = topo.pod_path();
    let add = run_plugin(OURS, &topo.node, "ADD", "ct", &p, &[], &c).ok();
    let ingress = transfer(&topo, false, BYTES);
    let egress = transfer(&topo, true, BYTES);
    eprintln!(
        "limited to {} Mbit/s: ingress {:.1} Mbit/s, egress {:.1} Mbit/s",
        RATE / 1_000_000,
        ingress / 1e6,
        egress / 1e6
    );
    // The limit is an upper bound (TBF never lets more through; a busy
    // machine may let less), and the same transfer without it is several
    // times faster: no lower bound on speed, which a loaded machine misses.
    for (dir, r) in [("ingress", ingress), ("egress", egress)] {
        assert!(
            r <= 1.2 * RATE as f64,
            "{dir}: {r} bit/s is above the {RATE} bit/s limit"
        );
    }
    let mut del = c.clone();
    del["prevResult"] = add.json();
    run_plugin(OURS, &topo.node, "DEL", "ct", &p, &[], &del).ok();
    let free_ingress = transfer(&topo, false, BYTES);
    let free_egress = transfer(&topo, true, BYTES);
    eprintln!(
        "after DEL: ingress {:.1} Mbit/s, egress {:.1} Mbit/s",
        free_ingress / 1e6,
        free_egress / 1e6
    );
    for (dir, limited, free) in [
        ("ingress", ingress, free_ingress),
        ("egress", egress, free_egress),
    ] {
        assert!(
            free > 3.0 * limited,
            "{dir}: {free} bit/s after DEL is not well above the {limited} bit/s under the limit"
        );
    }
}

#[test]
fn check_notices_a_changed_rate_and_a_missing_ifb() {
    if !premise::require_root() {
        return;
    }
    let topo = Topo::new("bwc");
    let p = topo.pod_path();
    let c = conf(
        "1.0.0",
        &topo,
        json!({"ingressRate": 8_000_000, "ingressBurst": 80_000, "egressRate": 8_000_000, "egressBurst": 80_000}),
    );
    run_plugin(OURS, &topo.node, "ADD", "cc", &p, &[], &c).ok();
    run_plugin(OURS, &topo.node, "CHECK", "cc", &p, &[], &c).ok();
    let mut other = c.clone();
    other["ingressRate"] = json!(9_000_000);
    let msg = run_plugin(OURS, &topo.node, "CHECK", "cc", &p, &[], &other).msg();
    assert_eq!(msg, "Rate doesn't match");
    let ifb = ifb_link(&topo).unwrap()["ifname"]
        .as_str()
        .unwrap()
        .to_owned();
    sh(&["ip", "-n", topo.node.name(), "link", "del", &ifb]);
    let msg = run_plugin(OURS, &topo.node, "CHECK", "cc", &p, &[], &c).msg();
    assert!(msg.starts_with("get ifb device"), "{msg}");
}

#[test]
fn failed_add_rolls_back() {
    if !premise::require_root() {
        return;
    }
    let topo = Topo::new("bwr");
    let p = topo.pod_path();
    // Somebody else's ingress qdisc: the egress half cannot be set up.
    sh(&[
        "ip",
        "netns",
        "exec",
        topo.node.name(),
        "tc",
        "qdisc",
        "add",
        "dev",
        &topo.host_veth,
        "ingress",
    ]);
    let c = conf(
        "1.0.0",
        &topo,
        json!({"ingressRate": 8_000_000, "ingressBurst": 80_000, "egressRate": 8_000_000, "egressBurst": 80_000}),
    );
    let msg = run_plugin(OURS, &topo.node, "ADD", "cr", &p, &[], &c).msg();
    assert!(msg.starts_with("create ingress qdisc"), "{msg}");
    let s = state(&topo);
    assert_eq!(s["ifb"], Value::Null, "IFB left behind");
    let kinds: Vec<&str> = s["qdiscs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["noqueue", "ingress"],
        "the TBF stayed or the foreign qdisc went"
    );
}

#[test]
fn del_is_idempotent_and_tolerates_a_vanished_netns() {
    if !premise::require_root() {
        return;
    }
    let topo = Topo::new("bwg");
    let p = topo.pod_path();
    let c = conf(
        "1.0.0",
        &topo,
        json!({"egressRate": 8_000_000, "egressBurst": 80_000}),
    );
    let add = run_plugin(OURS, &topo.node, "ADD", "cg", &p, &[], &c).ok();
    let mut del = c.clone();
    del["prevResult"] = add.json();
    run_plugin(OURS, &topo.node, "DEL", "cg", &p, &[], &del).ok();
    run_plugin(OURS, &topo.node, "DEL", "cg", &p, &[], &del).ok();
    // Again with the pod namespace gone (and its veth with it).
    run_plugin(OURS, &topo.node, "ADD", "cg", &p, &[], &c).ok();
    let Topo { node, pod, .. } = topo;
    drop(pod);
    run_plugin(OURS, &node, "DEL", "cg", &p, &[], &del).ok();
    run_plugin(OURS, &node, "DEL", "cg", "", &[], &del).ok();
    let links = json(&["ip", "-n", node.name(), "-j", "link", "show"]);
    assert!(
        links
            .as_array()
            .unwrap()
            .iter()
            .all(|l| !l["ifname"].as_str().unwrap().starts_with("bwp")),
        "{links}"
    );
}

#[test]
fn gc_deletes_only_dead_ifbs_of_its_own_network() {
    if !premise::require_root() {
        return;
    }
    let topo = Topo::new("bwgc");
    let node = topo.node.name().to_owned();
    let ifb = |name: &str, alias: Option<&str>| {
        sh(&["ip", "-n", &node, "link", "add", name, "type", "ifb"]);
        if let Some(a) = alias {
            sh(&["ip", "-n", &node, "link", "set", name, "alias", a]);
        }
    };
    ifb("bwpalive000000", Some("cni-bandwidth/bwnet/alive"));
    ifb("bwpdead0000000", Some("cni-bandwidth/bwnet/dead"));
    ifb("bwpother000000", Some("cni-bandwidth/othernet/dead"));
    ifb("bwpgo000000000", None);
    let c = json!({
        "cniVersion": "1.1.0", "name": NET, "type": "bandwidth",
        "cni.dev/valid-attachments": [{"containerID": "alive", "ifname": "eth0"}]
    });
    run_plugin(OURS, &topo.node, "GC", "", "", &[], &c).ok();
    let mut names: Vec<String> = json(&["ip", "-n", &node, "-j", "link", "show", "type", "ifb"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["bwpalive000000", "bwpgo000000000", "bwpother000000"]
    );
}
