//! Differential tests against the Go reference binary
//! (`/usr/lib/cni/host-local`, Debian's containernetworking-plugins): both
//! implementations share one dataDir, allocate after each other, release
//! each other's reservations, and report the same error messages.
//! Skipped (with a note on stderr) when the binary is not installed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cni_ipam::host_local::{self, HostLocalConfig};
use serde_json::{json, Value};

const GO_HOST_LOCAL: &str = "/usr/lib/cni/host-local";

fn go_binary() -> Option<PathBuf> {
    let p = PathBuf::from(GO_HOST_LOCAL);
    cni_testkit::premise::require(p.exists(), &format!("needs {GO_HOST_LOCAL}")).then_some(p)
}

/// Runs the Go plugin; Ok(stdout JSON) on exit 0, Err(error JSON) otherwise.
fn go(bin: &Path, command: &str, conf: &Value, cid: &str, args: &str) -> Result<Value, Value> {
    let mut child = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", "/nonexistent/netns")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/usr/lib/cni")
        .env("CNI_ARGS", args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout: Value = if out.stdout.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout).unwrap()
    };
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(stdout)
    }
}

fn conf(dir: &Path, ipam: Value) -> Value {
    let mut ipam = ipam;
    ipam["type"] = json!("host-local");
    ipam["dataDir"] = json!(dir);
    json!({"cniVersion": "1.0.0", "name": "mixnet", "type": "host-local", "ipam": ipam})
}

fn ours(conf: &Value, args: &str) -> HostLocalConfig {
    HostLocalConfig::load(conf.to_string().as_bytes(), args).unwrap()
}

fn read(path: PathBuf) -> String {
    fs::read_to_string(path).unwrap()
}

#[test]
fn shared_data_dir_with_go() {
    let Some(bin) = go_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let conf = conf(
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/64"}]]}),
    );
    let c = ours(&conf, "");
    let net = tmp.path().join("mixnet");

    let r = go(&bin, "ADD", &conf, "go-1", "").unwrap();
    assert_eq!(r["ips"][0]["address"], "10.1.2.2/24");
    assert_eq!(r["ips"][1]["address"], "2001:db8:1::2/64");

    // Ours continues Go's round robin and writes the same bytes.
    let r = host_local::add(&c, "rs-2", "eth0").unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.2.3/24");
    assert_eq!(r.ips[1].address.to_string(), "2001:db8:1::3/64");
    assert_eq!(read(net.join("10.1.2.2")), "go-1\r\neth0");
    assert_eq!(read(net.join("10.1.2.3")), "rs-2\r\neth0");
    assert_eq!(read(net.join("2001:db8:1::3")), "rs-2\r\neth0");
    assert_eq!(read(net.join("last_reserved_ip.0")), "10.1.2.3");
    assert_eq!(read(net.join("last_reserved_ip.1")), "2001:db8:1::3");

    // Go continues ours.
    let r = go(&bin, "ADD", &conf, "go-3", "").unwrap();
    assert_eq!(r["ips"][0]["address"], "10.1.2.4/24");
    assert_eq!(read(net.join("last_reserved_ip.0")), "10.1.2.4");

    // Each sees the other's reservations.
    go(&bin, "CHECK", &conf, "rs-2", "").unwrap();
    host_local::check(&c, "go-3", "eth0").unwrap();

    // Duplicate ADD: same message from both.
    let go_err = go(&bin, "ADD", &conf, "rs-2", "").unwrap_err();
    let our_err = host_local::add(&c, "go-1", "eth0").unwrap_err();
    assert_eq!(
        go_err["msg"],
        "failed to allocate for range 0: 10.1.2.3 has been allocated to rs-2, duplicate allocation is not allowed"
    );
    assert_eq!(
        our_err.to_string(),
        "failed to allocate for range 0: 10.1.2.2 has been allocated to go-1, duplicate allocation is not allowed"
    );

    // Release each other's.
    host_local::del(&c, "go-1", "eth0").unwrap();
    go(&bin, "DEL", &conf, "rs-2", "").unwrap();
    let left: Vec<String> = fs::read_dir(&net)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect();
    let mut left = left;
    left.sort();
    assert_eq!(left, ["10.1.2.4", "2001:db8:1::4"]);

    // Requested IP reserved by Go, requested again by us.
    go(&bin, "ADD", &conf, "go-5", "IP=10.1.2.77").unwrap();
    let e = host_local::add(&ours(&conf, "IP=10.1.2.77"), "rs-6", "eth0").unwrap_err();
    let g = go(&bin, "ADD", &conf, "go-6", "IP=10.1.2.77").unwrap_err();
    assert_eq!(g["msg"], e.to_string());
}

#[test]
fn same_allocation_sequence_as_go() {
    let Some(bin) = go_binary() else { return };
    let go_dir = tempfile::tempdir().unwrap();
    let rs_dir = tempfile::tempdir().unwrap();
    let ipam = json!({"ranges": [[
        {"subnet": "10.9.0.0/29", "rangeStart": "10.9.0.3"},
        {"subnet": "10.9.1.0/30", "gateway": "10.9.1.2"}
    ]]});
    let go_conf = conf(go_dir.path(), ipam.clone());
    let c = ours(&conf(rs_dir.path(), ipam), "");
    // Allocate until exhaustion, releasing some on the way, in both.
    let mut go_seq = Vec::new();
    let mut rs_seq = Vec::new();
    for i in 0..8 {
        let id = format!("c{i}");
        if i == 4 {
            go(&bin, "DEL", &go_conf, "c1", "").unwrap();
            host_local::del(&c, "c1", "eth0").unwrap();
        }
        go_seq.push(match go(&bin, "ADD", &go_conf, &id, "") {
            Ok(r) => r["ips"][0]["address"].as_str().unwrap().to_string(),
            Err(e) => e["msg"].as_str().unwrap().to_string(),
        });
        rs_seq.push(match host_local::add(&c, &id, "eth0") {
            Ok(r) => r.ips[0].address.to_string(),
            Err(e) => e.to_string(),
        });
    }
    assert_eq!(go_seq, rs_seq);
    assert_eq!(
        rs_seq.last().map(String::as_str),
        Some("failed to allocate for range 0: no IP addresses available in range set: 10.9.0.3-10.9.0.6,10.9.1.1-10.9.1.2")
    );
}

#[test]
fn config_error_messages_match_go() {
    let Some(bin) = go_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        json!({"subnet": "10.1.2.1/24"}),
        json!({"subnet": "10.1.2.0/31"}),
        json!({"subnet": "2001:db8::/128"}),
        json!({"subnet": "10.1.2.0/24", "rangeStart": "10.1.3.1"}),
        json!({"subnet": "10.1.2.0/24", "rangeEnd": "10.1.3.1"}),
        json!({"ranges": [[{"subnet": "10.1.0.0/22"}, {"subnet": "10.1.2.0/24"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/22"}], [{"subnet": "10.1.2.0/24"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/22"}, {"subnet": "2001:db8::/64"}]]}),
        json!({"ranges": [[]]}),
        json!({}),
    ];
    for ipam in cases {
        let conf = conf(tmp.path(), ipam.clone());
        let g = go(&bin, "ADD", &conf, "c", "").unwrap_err();
        let e = HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap_err();
        assert_eq!(g["msg"].as_str(), Some(e.to_string().as_str()), "{ipam}");
    }
    let conf = conf(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    for args in ["K8S_POD_NAME=x", "IP=1=2"] {
        let g = go(&bin, "ADD", &conf, "c", args).unwrap_err();
        let e = HostLocalConfig::load(conf.to_string().as_bytes(), args).unwrap_err();
        assert_eq!(g["msg"].as_str(), Some(e.to_string().as_str()), "{args}");
    }
}
