//! host-local under concurrent processes and SIGKILL: every address is
//! handed out once, and a killed ADD never leaves a partial reservation.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::host_local_support::*;
use serde_json::{json, Value};

const WORKERS: usize = 4;
const PER_WORKER: usize = 250;

fn parallel(conf: &Value, command: &'static str) -> Vec<Out> {
    let conf = conf.to_string();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let conf = conf.clone();
                s.spawn(move || {
                    (0..PER_WORKER)
                        .map(|i| {
                            let id = format!("ctr-{w}-{i}");
                            Call::new(command, &id).run(Path::new(HOST_LOCAL), conf.as_bytes())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect()
    })
}

#[test]
fn four_processes_allocate_a_thousand_distinct_addresses() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = host_local_conf(
        "1.0.0",
        "stress",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.20.0.0/22"}]]}),
    );
    let dir = tmp.path().join("stress");

    let start = Instant::now();
    let adds = parallel(&conf, "ADD");
    let add_time = start.elapsed();
    let mut ips = BTreeSet::new();
    for out in &adds {
        assert!(out.ok(), "ADD failed: {out:?}");
        let ip = out.json()["ips"][0]["address"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(ips.insert(ip.clone()), "{ip} handed out twice");
    }
    assert_eq!(ips.len(), WORKERS * PER_WORKER);
    let files = reservations(&dir);
    assert_eq!(files.len(), WORKERS * PER_WORKER);
    let owners: BTreeSet<&String> = files.values().collect();
    assert_eq!(owners.len(), WORKERS * PER_WORKER, "one file per container");
    for (ip, content) in &files {
        assert!(ips.contains(&format!("{ip}/22")), "{ip} not in any result");
        assert!(content.starts_with("ctr-") && content.ends_with("\r\neth0"));
    }

    let start = Instant::now();
    let dels = parallel(&conf, "DEL");
    let del_time = start.elapsed();
    for out in &dels {
        assert!(out.ok(), "DEL failed: {out:?}");
    }
    let left: Vec<String> = snapshot(&dir).into_keys().collect();
    assert_eq!(left, ["last_reserved_ip.0", "lock"]);
    eprintln!(
        "{} ADDs in {add_time:?}, {} DELs in {del_time:?} ({WORKERS} processes at a time)",
        adds.len(),
        dels.len()
    );
}

/// ADDs killed with SIGKILL at random moments; afterwards every file named
/// like an address holds a whole `<id>\r\n<ifname>`, no address is held
/// twice, and GC with the completed attachments as the valid list leaves
/// exactly their reservations.
#[test]
fn sigkill_during_add_never_leaves_partial_reservations() {
    let tmp = tempfile::tempdir().unwrap();
    let ipam = json!({"ranges": [[{"subnet": "10.30.0.0/20"}], [{"subnet": "2001:db8:30::/112"}]]});
    let conf = host_local_conf("1.1.0", "crash", tmp.path(), ipam).to_string();
    let dir = tmp.path().join("crash");
    let (mut rng, seed) = Rng::from_time();
    eprintln!("seed {seed}");

    let rounds = 60;
    let mut completed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut killed = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    for round in 0..rounds {
        if Instant::now() > deadline {
            break;
        }
        let mut children = Vec::new();
        for w in 0..WORKERS {
            let id = format!("ctr-{round}-{w}");
            let mut child = Call::new("ADD", &id)
                .command(Path::new(HOST_LOCAL))
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(conf.as_bytes())
                .unwrap();
            children.push((id, child));
        }
        std::thread::sleep(Duration::from_micros(rng.below(6000)));
        for (id, mut child) in children {
            if rng.below(4) != 0 {
                let _ = child.kill();
            }
            let out = child.wait_with_output().unwrap();
            if out.status.success() {
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                let ips = v["ips"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|ip| {
                        ip["address"]
                            .as_str()
                            .unwrap()
                            .split('/')
                            .next()
                            .unwrap()
                            .to_string()
                    })
                    .collect();
                completed.insert(id, ips);
            } else {
                killed += 1;
            }
        }
        for (ip, content) in reservations(&dir) {
            let (id, ifname) = content
                .split_once("\r\n")
                .unwrap_or_else(|| panic!("partial reservation {ip}: {content:?} (seed {seed})"));
            assert!(
                id.starts_with("ctr-") && ifname == "eth0",
                "{ip}: {content:?}"
            );
        }
    }
    eprintln!("{} ADDs completed, {killed} killed", completed.len());

    // No address handed to two completed containers, and each is on disk.
    let files = reservations(&dir);
    let mut seen = BTreeSet::new();
    for (id, ips) in &completed {
        for ip in ips {
            assert!(seen.insert(ip.clone()), "{ip} given twice");
            assert_eq!(
                files.get(ip).map(String::as_str),
                Some(format!("{id}\r\neth0").as_str())
            );
        }
    }

    // GC through the binary: only the completed attachments stay.
    let mut gc_conf: Value = serde_json::from_str(&conf).unwrap();
    gc_conf["cni.dev/valid-attachments"] = completed
        .keys()
        .map(|id| json!({"containerID": id, "ifname": "eth0"}))
        .collect();
    let before = reservations(&dir).len();
    let out = run(HOST_LOCAL, Call::new("GC", ""), &gc_conf);
    assert!(out.ok(), "GC: {out:?}");
    let after: BTreeSet<String> = reservations(&dir).into_keys().collect();
    eprintln!(
        "GC released {} reservations of killed ADDs",
        before - after.len()
    );
    assert_eq!(after, seen, "GC left exactly the completed reservations");
    let others: Vec<String> = snapshot(&dir)
        .into_keys()
        .filter(|n| n.parse::<std::net::IpAddr>().is_err())
        .collect();
    assert_eq!(others, ["last_reserved_ip.0", "last_reserved_ip.1", "lock"]);

    // The Go plugin still works in the directory.
    if let Some(go_bin) = go(GO_HOST_LOCAL) {
        let mut go_conf: Value = serde_json::from_str(&conf).unwrap();
        go_conf["cniVersion"] = json!("1.0.0");
        let out = run(go_bin, Call::new("ADD", "go-after-crash"), &go_conf);
        assert!(out.ok(), "Go ADD after crashes: {out:?}");
    }
}
