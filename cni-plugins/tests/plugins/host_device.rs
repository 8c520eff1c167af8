//! host-device: differential against the Go reference (the link moves into
//! the pod as `CNI_IFNAME` with its name in the alias, and back on DEL)
//! by `device`, `hwaddr`, with and without IPAM, in every version; our
//! additions: DEL with a vanished link or netns, rollback, STATUS, and the
//! `kernelpath`/`pciBusID`/`deviceID` errors (no spare PCI NIC here).

use crate::ptp_common::*;
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

const DEV_MAC: &str = "02:42:00:00:00:07";

fn setup(node: &Node) {
    node.ip(&[
        "link",
        "add",
        "hostdev0",
        "type",
        "veth",
        "peer",
        "name",
        "hostdev0p",
    ]);
    node.ip(&["link", "set", "hostdev0", "address", DEV_MAC]);
}

fn conf(version: &str, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": version,
        "name": "hdnet",
        "type": "host-device",
        "device": "hostdev0",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.86.0.0/24"}]],
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
        plugin: "host-device",
        conf,
        setup: &setup,
        args: "",
    }
}

#[test]
fn host_device_matches_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-device")]) {
        return;
    }
    for v in ["0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        let run = differential_idempotent_del(&sc(conf(v, json!({}))));
        assert!(run.add.is_ok(), "{run:?}");
        assert!(
            run.pod_after_add
                .iter()
                .any(|l| l.starts_with("link eth0 kind=veth") && l.ends_with("alias=hostdev0")),
            "{:#?}",
            run.pod_after_add
        );
        assert!(run
            .pod_after_add
            .contains(&"addr eth0 10.86.0.2/24 scope=global".to_string()));
        // Back on the node under its own name.
        assert!(run
            .node_after_del
            .iter()
            .any(|l| l.starts_with("link hostdev0 ")));
        assert!(!run
            .node_after_add
            .iter()
            .any(|l| l.starts_with("link hostdev0 ")));
    }
    // By MAC, without IPAM.
    let run = differential_idempotent_del(&sc(conf(
        "1.0.0",
        json!({"device": null, "hwaddr": DEV_MAC, "ipam": null}),
    )));
    assert_eq!(run.add.as_ref().unwrap()["interfaces"][0]["name"], "eth0");
    // Errors: nothing named, no such device.
    for bad in [
        json!({"device": null}),
        json!({"device": "nope0"}),
        json!({"device": null, "hwaddr": "02:00:00:00:00:99"}),
        json!({"device": null, "kernelpath": "/tmp/x"}),
        json!({"device": null, "pciBusID": "0000:ff:1f.7"}),
        json!({"device": null, "runtimeConfig": {"deviceID": "0000:ff:1f.7"}}),
    ] {
        // Go 1.1.1 cannot DEL a config it refuses; compare ADD and state.
        let s = sc(conf("1.0.0", bad.clone()));
        let (go, ours) = (run_scenario(Impl::Go, &s), run_scenario(Impl::Ours, &s));
        assert!(ours.add.is_err(), "{bad}");
        assert_eq!(go.add, ours.add, "{bad}");
        assert_eq!(go.node_after_add, ours.node_after_add, "{bad}");
        assert_eq!(go.pod_after_add, ours.pod_after_add, "{bad}");
    }
}

#[test]
fn host_device_del_is_idempotent_and_rollback_moves_the_link_back() {
    if !premise::require_root() {
        return;
    }
    let mut node = Node::new();
    setup(&node);
    let bin = plugin_path(Impl::Ours, "host-device");
    let pod = node.pod();
    let env = CniEnv::new(&pod);
    let mut c = conf("1.0.0", json!({}));
    // An off-link gateway fails the ADD after the move and IPAM.
    c["ipam"] = node.host_local("10.87.0.0/24");
    c["ipam"]["routes"] = json!([{"dst": "10.200.0.0/16", "gw": "192.0.2.1"}]);
    let before = kernel_state(node.name());
    let out = node.exec(&bin, "ADD", &env, &c);
    assert!(!out.ok, "{out:?}");
    assert_eq!(kernel_state(node.name()), before);

    c["ipam"] = node.host_local("10.87.0.0/24");
    let r = node.exec(&bin, "ADD", &env, &c).expect_ok("ADD").json();
    let mut chk = c.clone();
    chk["prevResult"] = r;
    node.exec(&bin, "CHECK", &env, &chk).expect_ok("CHECK");
    node.exec(&bin, "DEL", &env, &c).expect_ok("DEL");
    node.exec(&bin, "DEL", &env, &c).expect_ok("DEL again");
    assert!(kernel_state(node.name())
        .iter()
        .any(|l| l.starts_with("link hostdev0 ")));

    // A netns that is gone: the veth went with it; DEL still succeeds.
    let pod2 = node.pod();
    let env2 = CniEnv::new(&pod2);
    node.exec(&bin, "ADD", &env2, &c).expect_ok("ADD");
    std::process::Command::new("ip")
        .args(["netns", "del", ns_name(&pod2)])
        .status()
        .unwrap();
    node.exec(&bin, "DEL", &env2, &c).expect_ok("DEL");
    let st = json!({"cniVersion": "1.1.0", "name": "hdnet", "type": "host-device", "device": "x"});
    node.exec(&bin, "STATUS", &env, &st).expect_ok("STATUS");
}

#[test]
fn host_device_dual_stack_matches_go_but_for_optimistic_dad() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-device")]) {
        return;
    }
    // The device's peer is up: DAD needs a carrier.
    let setup = |node: &Node| {
        setup(node);
        node.ip(&["link", "set", "hostdev0p", "up"]);
    };
    let ipam = json!({"type": "host-local",
                      "ranges": [[{"subnet": "10.86.0.0/24"}], [{"subnet": "fd00:86::/64"}]],
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]});
    for (extra, want) in [
        // The deliberate difference (`differential_idempotent_del` applies
        // it to Go's run): optimistic DAD on the pod's interface.
        (
            json!({"ipam": ipam.clone()}),
            "optimistic_dad=1 use_optimistic=1",
        ),
        // `optimisticDad: false` is Go's.
        (
            json!({"ipam": ipam.clone(), "optimisticDad": false}),
            "optimistic_dad=0 use_optimistic=0",
        ),
    ] {
        let run = differential_idempotent_del(&Scenario {
            plugin: "host-device",
            conf: conf("1.0.0", extra),
            setup: &setup,
            args: "",
        });
        assert!(
            run.dad.contains(&format!("pod eth0 accept_dad=1 {want}")),
            "{:?}",
            run.dad
        );
    }
}
