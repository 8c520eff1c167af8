//! Several processes on one data directory: this test binary re-runs itself
//! as allocator children (and the Go plugin joins in when installed); and a
//! child killed with SIGKILL mid-operation leaves a consistent store.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cni_ipam::host_local::{self, HostLocalConfig};
use cni_ipam::store::Owner;
use serde_json::json;

const CHILD_ENV: &str = "CNI_IPAM_TEST_CHILD";

fn conf_json(dir: &Path) -> serde_json::Value {
    json!({"cniVersion": "1.0.0", "name": "procnet", "type": "host-local",
           "ipam": {"type": "host-local", "dataDir": dir, "subnet": "10.5.0.0/22"}})
}

fn config(dir: &Path) -> HostLocalConfig {
    HostLocalConfig::load(conf_json(dir).to_string().as_bytes(), "").unwrap()
}

/// Child mode: `<dataDir>|<prefix>|<count>|<churn>`; prints `owner ip` lines.
/// With churn, every other owner is released again (for the kill test).
#[test]
fn child_allocator() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let c = config(Path::new(parts[0]));
    let count: usize = parts[2].parse().unwrap();
    let churn = parts[3] == "1";
    let mut out = std::io::stdout().lock();
    for i in 0..count {
        let owner = format!("{}-{i}", parts[1]);
        let r = host_local::add(&c, &owner, "eth0").unwrap();
        // A marker: libtest prints its own "test ... " prefix on this stream.
        writeln!(out, "\nALLOC {owner} {}", r.ips[0].address.ip()).unwrap();
        out.flush().unwrap();
        if churn && i % 2 == 1 {
            host_local::del(&c, &owner, "eth0").unwrap();
        }
    }
}

fn spawn_child(dir: &Path, prefix: &str, count: usize, churn: bool) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "processes::child_allocator",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{}|{prefix}|{count}|{}", dir.display(), u8::from(churn)),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn parse_lines(stdout: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let (owner, ip) = l.strip_prefix("ALLOC ")?.split_once(' ')?;
            ip.parse::<std::net::IpAddr>().ok()?;
            Some((owner.to_string(), ip.to_string()))
        })
        .collect()
}

fn go_add(dir: &Path, cid: &str) -> Option<String> {
    let mut child = Command::new("/usr/lib/cni/host-local")
        .env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", "/nonexistent/netns")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/usr/lib/cni")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()?
        .write_all(conf_json(dir).to_string().as_bytes())
        .ok()?;
    let out = child.wait_with_output().ok()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let addr = v["ips"][0]["address"].as_str()?;
    Some(addr.split('/').next()?.to_string())
}

#[test]
fn processes_never_share_an_address() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let children: Vec<Child> = (0..4)
        .map(|p| spawn_child(tmp.path(), &format!("p{p}"), 50, false))
        .collect();
    // The Go plugin allocates at the same time, under the same flock.
    let go_results: Vec<(String, String)> = if Path::new("/usr/lib/cni/host-local").exists() {
        (0..20)
            .filter_map(|i| {
                let cid = format!("go-{i}");
                go_add(tmp.path(), &cid).map(|ip| (cid, ip))
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut all = go_results;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        all.extend(parse_lines(&out.stdout));
    }
    let go_count = all.iter().filter(|(o, _)| o.starts_with("go-")).count();
    assert_eq!(all.len(), 200 + go_count);
    let ips: HashSet<&String> = all.iter().map(|(_, ip)| ip).collect();
    assert_eq!(ips.len(), all.len(), "an address was handed out twice");
    let net = tmp.path().join("procnet");
    for (owner, ip) in &all {
        assert_eq!(
            fs::read_to_string(net.join(ip)).unwrap(),
            format!("{owner}\r\neth0")
        );
    }
    // Our index knows the Go-made reservations too.
    let c = config(tmp.path());
    for (owner, _) in all.iter().filter(|(o, _)| o.starts_with("go-")) {
        host_local::check(&c, owner, "eth0").unwrap();
    }
}

#[test]
fn killed_writer_leaves_a_consistent_store() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let net = tmp.path().join("procnet");
    for (round, delay) in [37u64, 91, 173].into_iter().enumerate() {
        let mut child = spawn_child(tmp.path(), &format!("k{round}"), 1000, true);
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        let reported: BTreeMap<String, String> = parse_lines(&out.stdout).into_iter().collect();

        // Every reservation file is complete and names one owner; the last
        // reservation may belong to an ADD that never got to report.
        let c = config(tmp.path());
        let mut owners = HashSet::new();
        // On busy cores the first child may be killed before its first
        // reservation made the network's directory: nothing to check then.
        let entries: Vec<_> = match fs::read_dir(&net) {
            Ok(d) => d.collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && round == 0 => Vec::new(),
            Err(e) => panic!("read {}: {e}", net.display()),
        };
        for entry in entries {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.parse::<std::net::IpAddr>().is_err() {
                continue;
            }
            let content = fs::read_to_string(net.join(&name)).unwrap();
            let (owner, ifname) = content
                .split_once("\r\n")
                .unwrap_or_else(|| panic!("partial reservation {name}: {content:?}"));
            assert_eq!(ifname, "eth0");
            assert!(
                owners.insert(owner.to_string()),
                "{owner} holds two addresses"
            );
            // The index finds it: CHECK passes and a second ADD is refused.
            host_local::check(&c, owner, "eth0").unwrap();
            let e = host_local::add(&c, owner, "eth0").unwrap_err();
            assert!(e.to_string().contains("duplicate allocation"), "{e}");
        }
        // Reported and not released (even indices) must still be there.
        for (owner, ip) in &reported {
            let i: usize = owner.rsplit('-').next().unwrap().parse().unwrap();
            if i % 2 == 0 {
                assert_eq!(
                    fs::read_to_string(net.join(ip)).unwrap(),
                    format!("{owner}\r\neth0")
                );
            }
        }
        // The store keeps working, and a GC that keeps every holder
        // removes the temporary file a writer killed before its link left.
        let after = format!("after-{round}");
        host_local::add(&c, &after, "eth0").unwrap();
        let valid: Vec<Owner> = owners
            .iter()
            .chain([&after])
            .map(|o| Owner::new(o.as_str(), "eth0"))
            .collect();
        assert!(host_local::gc(&c, &valid).unwrap().is_empty());
        let leftovers = fs::read_dir(&net)
            .unwrap()
            .filter(|e| {
                cni_files::atomic::is_temp_name(&e.as_ref().unwrap().file_name().to_string_lossy())
            })
            .count();
        assert_eq!(leftovers, 0);
    }
}
