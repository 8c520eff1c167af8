//! The loopback plugin next to Go's, in fresh pod namespaces.

use crate::common;
use cni_testkit::premise::{self, Need};

use std::path::{Path, PathBuf};

use crate::common::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const OURS: &str = env!("CARGO_BIN_EXE_loopback");

fn call(plugin: &Path, command: &str, netns_path: &str, conf: &Value) -> Reply {
    let node = common::netns("cnin");
    let cni_path = CniPath::new(&[]);
    run(
        &node,
        &Call {
            plugin,
            cni_path: cni_path.path(),
            command,
            container_id: "ctr-lo",
            netns: netns_path,
            ifname: "eth0",
            args: "",
        },
        conf,
    )
}

fn lo_up(pod: &cni_netns::OwnedNetns) -> bool {
    ip(pod, &["link", "show", "dev", "lo"])[0]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP")
}

/// ADD, CHECK and DEL with both implementations; results equal once the
/// sandbox path is normalised.
#[test]
fn same_as_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("loopback")]) {
        return;
    }
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let conf = json!({"cniVersion": version, "name": "lo", "type": "loopback"});
        let mut results = Vec::new();
        for plugin in [Path::new(GO_PLUGINS).join("loopback"), PathBuf::from(OURS)] {
            let pod = cni_netns::OwnedNetns::new("cnip").unwrap();
            let path = netns_path(&pod);
            let add = call(&plugin, "ADD", &path, &conf);
            assert!(add.ok, "{plugin:?}: {:?}", add.json);
            assert!(lo_up(&pod));
            if version >= "0.4.0" {
                assert!(call(&plugin, "CHECK", &path, &conf).ok);
            }
            assert!(call(&plugin, "DEL", &path, &conf).ok);
            assert!(!lo_up(&pod));
            let mut r = add.json.clone();
            r["interfaces"][0]["sandbox"] = json!("SANDBOX");
            if r["dns"] == json!({}) && version >= "1.0.0" {
                r.as_object_mut().unwrap().remove("dns");
            }
            // Go's loopback stamps its 1.0 result with the config's version,
            // so libcni prints it unconverted: 0.3.x/0.4.0 `ips` lack the
            // spec's `version` field. Ours converts, as the spec says.
            for ip in r["ips"].as_array_mut().into_iter().flatten() {
                ip.as_object_mut().unwrap().remove("version");
            }
            results.push(r);
        }
        assert_eq!(results[0], results[1], "cniVersion {version}");
    }
}

#[test]
fn prev_result_passes_through() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("loopback")]) {
        return;
    }
    let pod = cni_netns::OwnedNetns::new("cnip").unwrap();
    let prev = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/x"}],
        "ips": [{"address": "10.1.0.5/24", "interface": 0}]});
    let conf = json!({"cniVersion": "1.0.0", "name": "lo", "type": "loopback", "prevResult": prev});
    let add = call(Path::new(OURS), "ADD", &netns_path(&pod), &conf);
    assert!(add.ok, "{:?}", add.json);
    assert_eq!(add.json["ips"], prev["ips"]);
    assert_eq!(add.json["interfaces"], prev["interfaces"]);
}

#[test]
fn del_tolerates_a_vanished_netns() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("loopback")]) {
        return;
    }
    let conf = json!({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"});
    let pod = cni_netns::OwnedNetns::new("cnip").unwrap();
    let path = netns_path(&pod);
    drop(pod);
    assert!(call(Path::new(OURS), "DEL", &path, &conf).ok);
    assert!(call(Path::new(OURS), "DEL", "", &conf).ok);
    // ADD into a missing namespace fails.
    assert!(!call(Path::new(OURS), "ADD", &path, &conf).ok);
}

#[test]
fn check_fails_when_lo_is_down() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("loopback")]) {
        return;
    }
    let conf = json!({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"});
    let pod = cni_netns::OwnedNetns::new("cnip").unwrap();
    let c = call(Path::new(OURS), "CHECK", &netns_path(&pod), &conf);
    assert!(!c.ok);
    assert_eq!(c.msg(), "loopback interface is down");
}
