//! Differential tests against the Go reference `host-local`
//! (`/usr/lib/cni/host-local`): same results byte for byte, the same files
//! in the same layout, and one data directory shared by both binaries.
//! Skipped (with a note) when the Go binary is not installed.

use std::path::Path;

use crate::host_local_support::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn resolv_conf(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("resolv.conf");
    std::fs::write(
        &path,
        "# test\nnameserver 10.0.0.53\nnameserver 2001:db8::53\ndomain example.com\nsearch a.example b.example\noptions ndots:2 edns0\n",
    )
    .unwrap();
    path
}

fn configs(dir: &Path) -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({
                "ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/64"}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8:1::9"}],
                "resolvConf": resolv_conf(dir),
            }),
            "",
        ),
        (
            json!({
                "subnet": "10.9.0.0/16",
                "rangeStart": "10.9.1.10",
                "rangeEnd": "10.9.1.20",
                "gateway": "10.9.1.1",
                "routes": [{"dst": "192.168.0.0/16", "gw": "10.9.1.254"}],
            }),
            "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.9.1.15",
        ),
    ]
}

#[test]
fn add_results_and_files_match_go_for_every_version() {
    let Some(go_bin) = go(GO_HOST_LOCAL) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let versions = supported_versions(&go_bin);
    assert!(versions.len() >= 6, "{versions:?}");
    let mut compared = 0;
    for version in &versions {
        for (i, (ipam, args)) in configs(tmp.path()).into_iter().enumerate() {
            let go_dir = tmp.path().join(format!("go-{version}-{i}"));
            let our_dir = tmp.path().join(format!("ours-{version}-{i}"));
            let call = Call::new("ADD", "ctr-1").args(args);
            let go_out = run(
                &go_bin,
                call.clone(),
                &host_local_conf(version, "net", &go_dir, ipam.clone()),
            );
            let ours = run(
                HOST_LOCAL,
                call,
                &host_local_conf(version, "net", &our_dir, ipam),
            );
            assert!(go_out.ok(), "Go {version}: {go_out:?}");
            assert!(ours.ok(), "ours {version}: {ours:?}");
            assert_eq!(
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&without_empty_dns_1x(version, &go_out.stdout)),
                "result for {version}, config {i}"
            );
            assert_eq!(
                snapshot(&our_dir.join("net")),
                snapshot(&go_dir.join("net")),
                "files for {version}, config {i}"
            );
            compared += 1;
        }
    }
    eprintln!("compared {compared} results with Go for versions {versions:?}");
}

#[test]
fn version_reports_every_spec_version() {
    let ours = supported_versions(Path::new(HOST_LOCAL));
    assert_eq!(
        ours,
        ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
    );
    if let Some(go_bin) = go(GO_HOST_LOCAL) {
        for v in supported_versions(&go_bin) {
            assert!(ours.contains(&v), "Go supports {v}, we do not");
        }
    }
}

/// Both binaries take turns in one dataDir; a second dataDir sees the same
/// operations done by Go alone. The two must stay identical, file for file.
#[test]
fn shared_data_dir_with_go_matches_go_alone() {
    let Some(go_bin) = go(GO_HOST_LOCAL) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ipam = json!({"ranges": [[{"subnet": "10.7.0.0/29"}], [{"subnet": "2001:db8:7::/120"}]]});
    let mixed = host_local_conf("1.0.0", "mix", &tmp.path().join("mixed"), ipam.clone());
    let alone = host_local_conf("1.0.0", "mix", &tmp.path().join("alone"), ipam);
    let mixed_dir = tmp.path().join("mixed/mix");
    let alone_dir = tmp.path().join("alone/mix");
    let ids: Vec<String> = (0..5).map(|i| format!("ctr-{i}")).collect();

    let step = |bin: &Path, call: Call<'_>| {
        let m = run(bin, call.clone(), &mixed);
        let a = run(&go_bin, call.clone(), &alone);
        assert_eq!(m.code, a.code, "{call:?}: {m:?} vs {a:?}");
        if call.command == "ADD" {
            assert_eq!(
                String::from_utf8_lossy(&without_empty_dns_1x("1.0.0", &m.stdout)),
                String::from_utf8_lossy(&without_empty_dns_1x("1.0.0", &a.stdout))
            );
        }
        assert_eq!(snapshot(&mixed_dir), snapshot(&alone_dir), "after {call:?}");
    };
    let ours = Path::new(HOST_LOCAL);

    // ADD alternately: .2 Go, .3 ours, .4 Go, ...
    for (i, id) in ids.iter().enumerate() {
        let bin = if i % 2 == 0 { go_bin.as_path() } else { ours };
        step(bin, Call::new("ADD", id));
    }
    // CHECK each other's reservations.
    for (i, id) in ids.iter().enumerate() {
        let bin = if i % 2 == 0 { ours } else { go_bin.as_path() };
        assert!(run(bin, Call::new("CHECK", id), &mixed).ok(), "CHECK {id}");
    }
    // Exhausted (/29 has 5 addresses): same error from both.
    let full_ours = run(ours, Call::new("ADD", "ctr-x"), &mixed);
    let full_go = run(&go_bin, Call::new("ADD", "ctr-x"), &alone);
    assert_eq!(full_ours.msg(), full_go.msg());
    // Release each other's: ours DELs Go's reservations and vice versa.
    for (i, id) in ids.iter().enumerate().take(3) {
        let bin = if i % 2 == 0 { ours } else { go_bin.as_path() };
        step(bin, Call::new("DEL", id));
    }
    // Round robin continues after the last reserved address for both.
    step(ours, Call::new("ADD", "ctr-5"));
    step(go_bin.as_path(), Call::new("ADD", "ctr-6"));
    for id in ["ctr-3", "ctr-4", "ctr-5", "ctr-6"] {
        let bin = if id == "ctr-4" {
            go_bin.as_path()
        } else {
            ours
        };
        step(bin, Call::new("DEL", id));
    }
    // DEL of an unknown container succeeds for both.
    step(ours, Call::new("DEL", "never-added"));
    let left: Vec<String> = snapshot(&mixed_dir).into_keys().collect();
    assert_eq!(left, ["last_reserved_ip.0", "last_reserved_ip.1", "lock"]);
}
