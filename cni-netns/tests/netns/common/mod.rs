//! Helpers for root integration tests: per-test namespaces and the
//! independent `ip -j` / `bridge -j` oracles.
#![allow(dead_code)]

use std::process::Command;

use cni_netns::{Handle, OwnedNetns};
use serde_json::Value;

/// A fresh namespace with a unique name, deleted on drop, and a handle in it.
pub(crate) fn netns() -> (OwnedNetns, Handle) {
    let ns = OwnedNetns::new("cnitest").expect("create test netns");
    let h = Handle::in_netns(&ns).expect("open handle");
    (ns, h)
}

fn run_json(cmd: &str, args: &[&str]) -> Value {
    let out = Command::new(cmd).args(args).output().expect("spawn oracle");
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Value::Array(vec![]);
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}: {text}"))
}

/// `ip -j -n <ns> <args>` parsed.
pub(crate) fn ip(ns: &OwnedNetns, args: &[&str]) -> Value {
    let mut a = vec!["-j", "-n", ns.name()];
    a.extend_from_slice(args);
    run_json("ip", &a)
}

/// `bridge -j -n <ns> <args>` parsed.
pub(crate) fn bridge(ns: &OwnedNetns, args: &[&str]) -> Value {
    let mut a = vec!["-j", "-n", ns.name()];
    a.extend_from_slice(args);
    run_json("bridge", &a)
}

/// `ip -n <ns> <args>`, asserting success.
pub(crate) fn ip_cmd(ns: &OwnedNetns, args: &[&str]) {
    let mut a = vec!["-n", ns.name()];
    a.extend_from_slice(args);
    let out = Command::new("ip").args(&a).output().expect("spawn ip");
    assert!(
        out.status.success(),
        "ip {a:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The single object of `ip -j link show dev <name>`.
pub(crate) fn link(ns: &OwnedNetns, name: &str) -> Value {
    let v = ip(ns, &["-d", "link", "show", "dev", name]);
    v[0].clone()
}

/// Names of the links in a namespace.
pub(crate) fn link_names(ns: &OwnedNetns) -> Vec<String> {
    ip(ns, &["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_owned())
        .collect()
}

/// `local/prefixlen` strings of `ip -j addr show dev <name>`.
pub(crate) fn addrs(ns: &OwnedNetns, name: &str) -> Vec<String> {
    ip(ns, &["addr", "show", "dev", name])[0]["addr_info"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| format!("{}/{}", i["local"].as_str().unwrap(), i["prefixlen"]))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a sysctl inside the namespace through `ip netns exec`.
pub(crate) fn sysctl_in(ns: &OwnedNetns, key: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "cat",
            &format!("/proc/sys/{key}"),
        ])
        .output()
        .expect("spawn ip netns exec");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
