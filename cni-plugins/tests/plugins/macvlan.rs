//! macvlan: differential against the Go reference over versions, modes,
//! MTU, MAC (config, CNI_ARGS, runtimeConfig), L2-only, the default-route
//! master and the error cases; then the options Go 1.1.1 lacks
//! (`linkInContainer`, `bcqueuelen`), rollback, a vanished netns, STATUS.

use crate::ptp_common::*;
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

fn conf(version: &str, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": version,
        "name": "mvnet",
        "type": "macvlan",
        "master": "uplink0",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.81.0.0/24"}]],
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
        plugin: "macvlan",
        conf,
        setup: &|_| {},
        args: "",
    }
}

fn pod_link<'a>(run: &'a Run, name: &str) -> &'a str {
    run.pod_after_add
        .iter()
        .find(|l| l.starts_with(&format!("link {name} ")))
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", run.pod_after_add))
}

#[test]
fn macvlan_matches_go_in_every_version_and_mode() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("macvlan")]) {
        return;
    }
    for v in ["0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        let run = differential(&sc(conf(v, json!({}))));
        assert!(pod_link(&run, "eth0").contains("kind=macvlan mtu=1500 up=true mode=bridge"));
        assert!(run.del_ok && run.del_again_ok);
        assert!(!run.pod_after_del.iter().any(|l| l.contains("eth0")));
    }
    for mode in ["bridge", "private", "vepa", "passthru"] {
        let run = differential(&sc(conf("1.0.0", json!({"mode": mode}))));
        assert!(
            pod_link(&run, "eth0").contains(&format!("mode={mode}")),
            "{run:?}"
        );
    }
}

#[test]
fn macvlan_options_match_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("macvlan")]) {
        return;
    }
    let run = differential(&sc(conf(
        "1.0.0",
        json!({"mtu": 1400, "dns": {"nameservers": ["10.81.0.53"]}}),
    )));
    assert!(pod_link(&run, "eth0").contains("mtu=1400"));
    // L2 only: no IPAM, the link just comes up.
    let run = differential(&sc(conf("1.0.0", json!({"ipam": null}))));
    assert!(pod_link(&run, "eth0").contains("up=true"));
    // The master defaults to the device of the node's default route.
    differential(&Scenario {
        plugin: "macvlan",
        conf: conf("1.0.0", json!({"master": null})),
        setup: &|node: &Node| {
            node.ip(&["addr", "add", "192.0.2.2/24", "dev", "uplink0p"]);
            node.ip(&["route", "add", "default", "via", "192.0.2.1"]);
        },
        args: "",
    });
    // Errors: unknown mode, MTU above the master's, missing master, no
    // default route.
    for bad in [
        json!({"mode": "foo"}),
        json!({"mtu": 9000}),
        json!({"master": "nope0"}),
        json!({"master": null}),
    ] {
        // Go 1.1.1 re-validates the config in DEL and so cannot DEL a
        // config it refused; ours DELs it (nothing to remove): compare ADD.
        let scenario = sc(conf("1.0.0", bad.clone()));
        let (go, ours) = (
            run_scenario(Impl::Go, &scenario),
            run_scenario(Impl::Ours, &scenario),
        );
        assert_eq!(go.add, ours.add, "{bad}");
        assert_eq!(
            (&go.node_after_add, &go.pod_after_add),
            (&ours.node_after_add, &ours.pod_after_add)
        );
        assert!(ours.add.is_err(), "{bad}: {ours:?}");
        assert!(ours.del_ok && ours.del_again_ok, "{bad}: {ours:?}");
        assert!(!ours.pod_after_add.iter().any(|l| l.contains("eth0")));
    }
}

#[test]
fn macvlan_mac_sources_match_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("macvlan")]) {
        return;
    }
    let cases = [
        (json!({"mac": "02:11:22:33:44:01"}), "", "02:11:22:33:44:01"),
        (
            json!({"mac": "02:11:22:33:44:01"}),
            "IgnoreUnknown=true;MAC=02:11:22:33:44:02",
            "02:11:22:33:44:02",
        ),
        (
            json!({"mac": "02:11:22:33:44:01", "runtimeConfig": {"mac": "02:11:22:33:44:03"}}),
            "IgnoreUnknown=1;MAC=02:11:22:33:44:02",
            "02:11:22:33:44:03",
        ),
    ];
    for (extra, args, want) in cases {
        for imp in [Impl::Go, Impl::Ours] {
            let mut node = Node::new();
            let pod = node.pod();
            let mut env = CniEnv::new(&pod);
            env.args = args.into();
            let mut c = conf("1.0.0", extra.clone());
            c["ipam"] = node.host_local("10.81.0.0/24");
            let out = node.exec(&plugin_path(imp, "macvlan"), "ADD", &env, &c);
            let r = out.expect_ok("ADD").json();
            assert_eq!(r["interfaces"][0]["mac"], want, "{imp:?} {extra} {args}");
            let link = ip_json_in(ns_name(&pod), &["link", "show", "eth0"]);
            assert_eq!(link[0]["address"], want, "{imp:?}");
        }
    }
}

#[test]
fn macvlan_pods_on_one_master_talk_in_bridge_mode_not_in_private() {
    if !premise::require_root() {
        return;
    }
    let bin = plugin_path(Impl::Ours, "macvlan");
    for (mode, reachable) in [("bridge", true), ("private", false)] {
        let mut node = Node::new();
        let mut c = conf("1.0.0", json!({ "mode": mode }));
        c["ipam"] = node.host_local("10.88.0.0/24");
        let pods: Vec<String> = (0..2).map(|_| node.pod()).collect();
        let ips: Vec<String> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let env = CniEnv {
                    container_id: format!("ctr-{i}"),
                    ..CniEnv::new(p)
                };
                let r = node.exec(&bin, "ADD", &env, &c).expect_ok("ADD").json();
                let a = r["ips"][0]["address"].as_str().unwrap();
                a.split('/').next().unwrap().to_owned()
            })
            .collect();
        assert_eq!(
            tcp_reachable(ns_name(&pods[0]), ns_name(&pods[1]), &ips[1]),
            reachable,
            "{mode}"
        );
    }
}

#[test]
fn macvlan_link_in_container_and_bcqueuelen() {
    if !premise::require_root() {
        return;
    }
    let mut node = Node::new();
    let pod = node.pod();
    let pod_ns = ns_name(&pod).to_owned();
    ip_in(
        &pod_ns,
        &[
            "link", "add", "inner0", "type", "veth", "peer", "name", "inner0p",
        ],
    );
    ip_in(&pod_ns, &["link", "set", "inner0", "up"]);
    let bin = plugin_path(Impl::Ours, "macvlan");
    let env = CniEnv::new(&pod);
    let mut c = conf(
        "1.0.0",
        json!({"master": "inner0", "linkInContainer": true, "bcqueuelen": 2000}),
    );
    c["ipam"] = node.host_local("10.82.0.0/24");
    let r = node.exec(&bin, "ADD", &env, &c).expect_ok("ADD").json();
    let link = ip_json_in(&pod_ns, &["-d", "link", "show", "eth0"]);
    assert_eq!(link[0]["link"], "inner0", "{link}");
    assert_eq!(link[0]["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(
        link[0]["linkinfo"]["info_data"]["bcqueuelen"], 2000,
        "{link}"
    );
    let mut chk = c.clone();
    chk["prevResult"] = r;
    node.exec(&bin, "CHECK", &env, &chk).expect_ok("CHECK");
    // CHECK notices a mode change.
    let mut wrong = chk.clone();
    wrong["mode"] = json!("vepa");
    assert!(!node.exec(&bin, "CHECK", &env, &wrong).ok);
    node.exec(&bin, "DEL", &env, &c).expect_ok("DEL");
    assert!(ip_json_in(&pod_ns, &["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["ifname"] != "eth0"));
    // Nothing was created on the node.
    assert!(!kernel_state(node.name())
        .iter()
        .any(|l| l.contains("macvlan")));
}

#[test]
fn macvlan_failed_add_leaves_nothing_and_del_survives_a_vanished_netns() {
    if !premise::require_root() {
        return;
    }
    let mut node = Node::new();
    let bin = plugin_path(Impl::Ours, "macvlan");
    let pod = node.pod();
    let env = CniEnv::new(&pod);
    let mut c = conf("1.0.0", json!({}));
    // A route whose gateway is off-link fails after IPAM allocated.
    c["ipam"] = node.host_local("10.83.0.0/24");
    c["ipam"]["routes"] = json!([{"dst": "10.200.0.0/16", "gw": "192.0.2.1"}]);
    let out = node.exec(&bin, "ADD", &env, &c);
    assert!(!out.ok, "{out:?}");
    let dir = node.data.path().join("ipam").join("mvnet");
    let leases = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("10."))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(leases, 0);
    assert_eq!(
        kernel_state(ns_name(&pod)),
        vec!["link lo kind=- mtu=65536 up=false mode=- master=- alias=-"]
    );

    c["ipam"] = node.host_local("10.83.0.0/24");
    node.exec(&bin, "ADD", &env, &c).expect_ok("ADD");
    std::process::Command::new("ip")
        .args(["netns", "del", ns_name(&pod)])
        .status()
        .unwrap();
    node.exec(&bin, "DEL", &env, &c).expect_ok("DEL");
    node.exec(&bin, "DEL", &env, &c).expect_ok("DEL again");
    let st =
        json!({"cniVersion": "1.1.0", "name": "mvnet", "type": "macvlan", "master": "uplink0"});
    node.exec(&bin, "STATUS", &CniEnv::new(""), &st)
        .expect_ok("STATUS");
}

#[test]
fn macvlan_gc_and_status_reach_our_host_local_in_1_1_0() {
    if !premise::require_root() {
        return;
    }
    let Some(host_local) = option_env!("CARGO_BIN_EXE_host-local") else {
        cni_testkit::premise::require(false, "needs our host-local binary of this package");
        return;
    };
    let our_dir = std::path::Path::new(host_local)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let mut node = Node::new();
    let bin = plugin_path(Impl::Ours, "macvlan");
    let mut c = conf("1.1.0", json!({}));
    c["ipam"] = node.host_local("10.92.0.0/24");
    let leases = |node: &Node| -> Vec<String> {
        std::fs::read_dir(node.data.path().join("ipam").join("mvnet"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("10."))
                    .collect()
            })
            .unwrap_or_default()
    };
    let pods: Vec<String> = (0..2).map(|_| node.pod()).collect();
    for (i, p) in pods.iter().enumerate() {
        let env = CniEnv {
            container_id: format!("ctr-{i}"),
            cni_path: our_dir.clone(),
            ..CniEnv::new(p)
        };
        node.exec(&bin, "ADD", &env, &c).expect_ok("ADD");
    }
    assert_eq!(leases(&node).len(), 2);
    let gce = CniEnv {
        container_id: String::new(),
        netns: String::new(),
        ifname: String::new(),
        cni_path: our_dir,
        ..CniEnv::new("")
    };
    node.exec(&bin, "STATUS", &gce, &c).expect_ok("STATUS");
    let mut gc = c.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-1", "ifname": "eth0"}]);
    node.exec(&bin, "GC", &gce, &gc).expect_ok("GC");
    assert_eq!(leases(&node), vec!["10.92.0.3".to_string()]);
}

#[test]
fn macvlan_dual_stack_matches_go_but_for_optimistic_dad() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("macvlan")]) {
        return;
    }
    let ipam = json!({"type": "host-local",
                      "ranges": [[{"subnet": "10.81.0.0/24"}], [{"subnet": "fd00:81::/64"}]],
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]});
    // The deliberate difference (`differential` applies it to Go's run):
    // optimistic DAD on the pod's interface.
    let run = differential(&sc(conf("1.0.0", json!({"ipam": ipam.clone()}))));
    assert!(
        run.dad
            .contains(&"pod eth0 accept_dad=1 optimistic_dad=1 use_optimistic=1".into()),
        "{:?}",
        run.dad
    );
    // `optimisticDad: false` is Go's.
    let run = differential(&sc(conf(
        "1.0.0",
        json!({"ipam": ipam, "optimisticDad": false}),
    )));
    assert!(
        run.dad
            .contains(&"pod eth0 accept_dad=1 optimistic_dad=0 use_optimistic=0".into()),
        "{:?}",
        run.dad
    );
}
