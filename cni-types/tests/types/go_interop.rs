//! Differential tests against the Go reference: results printed by the Go
//! `host-local` plugin (Debian's containernetworking-plugins, in
//! /usr/lib/cni) in every version it supports parse here, and printing them
//! again in the same version gives the same bytes; our down-conversions
//! from the Go 1.0.0 output equal what Go prints for the older version.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use cni_testkit::premise::{self, Need};
use cni_types::{CniResult, Version};

const GO_HOST_LOCAL: &str = "/usr/lib/cni/host-local";

fn go_add(version: &str, dir: &Path) -> Vec<u8> {
    let resolv = dir.join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 192.0.2.53\nnameserver 2001:db8::53\ndomain example.test\nsearch a.test b.test\noptions ndots:2\n",
    )
    .unwrap();
    let conf = serde_json::json!({
        "cniVersion": version,
        "name": "interop",
        "type": "host-local",
        "ipam": {
            "type": "host-local",
            "dataDir": dir.join("data"),
            "resolvConf": resolv,
            "ranges": [[{"subnet": "10.1.2.0/24", "gateway": "10.1.2.1"}], [{"subnet": "2001:db8:1::/64"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.2.254"}, {"dst": "::/0"}]
        }
    });
    let mut child = Command::new(GO_HOST_LOCAL)
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "interop-c1")
        .env("CNI_NETNS", "/var/run/netns/does-not-exist")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/usr/lib/cni")
        .env("CNI_NETNS_OVERRIDE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn Go host-local");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&conf).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "Go host-local {version} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

const GO_VERSIONS: [Version; 6] = [
    Version::V0_1_0,
    Version::V0_2_0,
    Version::V0_3_0,
    Version::V0_3_1,
    Version::V0_4_0,
    Version::V1_0_0,
];

#[test]
fn go_results_reprint_byte_for_byte() {
    if !premise::require_all(&[Need::GoPlugin("host-local")]) {
        return;
    }
    for v in GO_VERSIONS {
        let dir = tempfile::tempdir().unwrap();
        let go = go_add(&v.to_string(), dir.path());
        let (read_v, r) = CniResult::from_slice(&go, Version::V1_0_0)
            .unwrap_or_else(|e| panic!("{v}: {e}: {}", String::from_utf8_lossy(&go)));
        assert_eq!(read_v, v);
        let ours = r.to_json_pretty(v).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&go),
            "version {v}"
        );
    }
}

#[test]
fn our_down_conversions_equal_go_output() {
    if !premise::require_all(&[Need::GoPlugin("host-local")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let newest = go_add("1.0.0", dir.path());
    let (_, r) = CniResult::from_slice(&newest, Version::V1_0_0).unwrap();
    for v in GO_VERSIONS {
        // A fresh dataDir gives the same first addresses.
        let dir = tempfile::tempdir().unwrap();
        let go = go_add(&v.to_string(), dir.path());
        assert_eq!(
            String::from_utf8_lossy(&r.to_json_pretty(v).unwrap()),
            String::from_utf8_lossy(&go),
            "1.0.0 converted to {v}"
        );
    }
}
