//! ipvlan: where the kernel has ipvlan, differential against the Go
//! reference over versions, modes, MTU and chaining; where it does not
//! (this machine: "Unknown device type"), both fail ADD the same way, ours
//! with a message that says so, and nothing is left behind.

use crate::ptp_common::*;
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

fn conf(version: &str, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": version,
        "name": "ipvnet",
        "type": "ipvlan",
        "master": "uplink0",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.84.0.0/24"}]],
                 "routes": [{"dst": "0.0.0.0/0"}]},
    });
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn sc(conf: Value) -> Scenario<'static> {
    Scenario {
        plugin: "ipvlan",
        conf,
        setup: &|_| {},
        args: "",
    }
}

#[test]
fn ipvlan_matches_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("ipvlan")]) {
        return;
    }
    if !kernel_has_ipvlan() {
        // Both refuse; the state is what it was.
        for v in ["0.2.0", "0.3.1", "0.4.0", "1.0.0"] {
            let run = differential(&sc(conf(v, json!({}))));
            assert!(run.add.is_err());
            assert!(run.del_ok && run.del_again_ok);
        }
        return;
    }
    for v in ["0.2.0", "0.3.1", "0.4.0", "1.0.0"] {
        let run = differential(&sc(conf(v, json!({}))));
        assert!(run.add.is_ok(), "{run:?}");
    }
    for mode in ["l2", "l3", "l3s"] {
        let run = differential(&sc(conf("1.0.0", json!({"mode": mode, "mtu": 1400}))));
        assert!(
            run.pod_after_add
                .iter()
                .any(|l| l.starts_with("link eth0 kind=ipvlan mtu=1400")
                    && l.contains(&format!("mode={mode}"))),
            "{:#?}",
            run.pod_after_add
        );
    }
    for bad in [json!({"mode": "l4"}), json!({"master": "nope0"})] {
        let run = differential(&sc(conf("1.0.0", bad)));
        assert!(run.add.is_err());
    }
}

#[test]
fn ipvlan_without_kernel_support_is_a_clean_error() {
    if !premise::require_root() || kernel_has_ipvlan() {
        return;
    }
    let mut node = Node::new();
    let pod = node.pod();
    let env = CniEnv::new(&pod);
    let mut c = conf("1.0.0", json!({}));
    c["ipam"] = node.host_local("10.85.0.0/24");
    let before = (kernel_state(node.name()), kernel_state(ns_name(&pod)));
    let out = node.exec(&plugin_path(Impl::Ours, "ipvlan"), "ADD", &env, &c);
    assert!(!out.ok);
    let err = out.json();
    assert_eq!(err["code"], 999, "{err}");
    let msg = err["msg"].as_str().unwrap();
    assert!(
        msg.contains("ipvlan is not supported by this kernel"),
        "{msg}"
    );
    assert!(msg.contains("uplink0"), "{msg}");
    assert_eq!(
        (kernel_state(node.name()), kernel_state(ns_name(&pod))),
        before
    );
    // Nothing allocated: the link is made before IPAM runs.
    let dir = node.data.path().join("ipam").join("ipvnet");
    let leases = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("10."))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(leases, 0);
    // DEL of the failed attachment succeeds.
    node.exec(&plugin_path(Impl::Ours, "ipvlan"), "DEL", &env, &c)
        .expect_ok("DEL");
}

#[test]
fn ipvlan_chained_master_comes_from_the_previous_result() {
    if !premise::require_root() {
        return;
    }
    let mut node = Node::new();
    let pod = node.pod();
    let env = CniEnv::new(&pod);
    let bin = plugin_path(Impl::Ours, "ipvlan");
    // Two interfaces in the previous result: no master can be chosen.
    let mut c = conf("1.0.0", json!({"master": null, "ipam": null}));
    c["prevResult"] = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "a"}, {"name": "b"}]});
    let out = node.exec(&bin, "ADD", &env, &c);
    assert!(
        out.stdout
            .contains("PrevResult lacks a single named interface"),
        "{out:?}"
    );
    let st =
        json!({"cniVersion": "1.1.0", "name": "ipvnet", "type": "ipvlan", "master": "uplink0"});
    node.exec(&bin, "STATUS", &env, &st).expect_ok("STATUS");
}
