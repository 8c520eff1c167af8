//! ptp: differential against the Go reference (result and kernel state in
//! the pod and on the node), then our additions: rollback, DEL without a
//! netns, masquerade in nftables with GC, STATUS.

use crate::ptp_common::*;
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

fn conf(version: &str, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": version,
        "name": "ptpnet",
        "type": "ptp",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/24"}]],
                 "routes": [{"dst": "0.0.0.0/0"}]},
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn sc(conf: Value) -> Scenario<'static> {
    Scenario {
        plugin: "ptp",
        conf,
        setup: &|_| {},
        args: "",
    }
}

#[test]
fn ptp_matches_go_in_every_version() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("ptp")]) {
        return;
    }
    for v in ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        let run = differential(&sc(conf(v, json!({}))));
        assert!(run.add.is_ok(), "{v}: {run:?}");
        assert!(run.del_ok && run.del_again_ok);
        // The oracle, not just equality: the pod's p2p routes and the
        // node's gateway address and host route.
        assert!(
            run.pod_after_add
                .contains(&"route unicast 10.77.0.1 via=- dev=eth0 scope=link proto=- src=10.77.0.2 table=main".to_string()),
            "{:#?}",
            run.pod_after_add
        );
        assert!(
            run.node_after_add
                .contains(&"addr VETH 10.77.0.1/32 scope=global".to_string()),
            "{:#?}",
            run.node_after_add
        );
        assert!(
            !run.node_after_del.iter().any(|l| l.contains("VETH")),
            "{:#?}",
            run.node_after_del
        );
    }
}

#[test]
fn ptp_options_match_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("ptp")]) {
        return;
    }
    let run = differential(&sc(conf(
        "1.0.0",
        json!({"mtu": 1400, "dns": {"nameservers": ["10.77.0.53"], "search": ["svc"]}}),
    )));
    let add = run.add.unwrap();
    assert_eq!(add["dns"]["nameservers"], json!(["10.77.0.53"]));
    assert!(run
        .pod_after_add
        .iter()
        .any(|l| l.starts_with("link eth0 kind=veth mtu=1400")));
    // ipMasq: the kernel state outside the firewall is the same; each
    // implementation's own rules are checked below.
    differential(&sc(conf("1.0.0", json!({"ipMasq": true}))));
}

#[test]
fn ptp_dual_stack_matches_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("ptp")]) {
        return;
    }
    let c = json!({
        "cniVersion": "1.0.0", "name": "ptp6", "type": "ptp",
        "ipam": {"type": "host-local",
                 "ranges": [[{"subnet": "10.78.0.0/24"}], [{"subnet": "fd00:78::/64"}]],
                 "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]},
    });
    let run = differential(&sc(c));
    assert_eq!(run.add.unwrap()["ips"].as_array().unwrap().len(), 2);
}

fn nft_ruleset(node: &Node) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", node.name(), "nft", "-j", "list", "ruleset"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ptp_masquerade_is_removed_by_del_and_gc() {
    if !premise::require_root() {
        return;
    }
    let mut node = Node::new();
    let bin = plugin_path(Impl::Ours, "ptp");
    let mut c = conf("1.0.0", json!({"ipMasq": true}));
    c["ipam"] = node.host_local("10.79.0.0/24");
    // GC and STATUS need 1.1.0, which Go's host-local 1.1.1 does not
    // speak: they run without the IPAM section (nothing to delegate).
    let c11 = json!({"cniVersion": "1.1.0", "name": "ptpnet", "type": "ptp", "ipMasq": true});
    let pods: Vec<String> = (0..2).map(|_| node.pod()).collect();
    let envs: Vec<CniEnv> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| CniEnv {
            container_id: format!("ctr-{i}"),
            ..CniEnv::new(p)
        })
        .collect();
    let added: Vec<Value> = envs
        .iter()
        .map(|e| node.exec(&bin, "ADD", e, &c).expect_ok("ADD").json())
        .collect();
    // Traffic: each pod reaches its gateway on the node and the other
    // pod through the node's host routes.
    let addr = |r: &Value| {
        r["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_owned()
    };
    assert!(tcp_reachable(ns_name(&pods[0]), node.name(), "10.79.0.1"));
    assert!(tcp_reachable(
        ns_name(&pods[0]),
        ns_name(&pods[1]),
        &addr(&added[1])
    ));
    assert!(tcp_reachable(
        node.name(),
        ns_name(&pods[0]),
        &addr(&added[0])
    ));
    let rules = nft_ruleset(&node);
    assert!(
        rules.contains("ctr-0") && rules.contains("ctr-1"),
        "{rules}"
    );
    assert!(rules.contains("masquerade"), "{rules}");
    // CHECK sees the rules.
    let mut chk = c.clone();
    chk["prevResult"] = added[0].clone();
    node.exec(&bin, "CHECK", &envs[0], &chk).expect_ok("CHECK");

    // GC keeps ctr-1 only.
    let mut gc = c11.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-1", "ifname": "eth0"}]);
    let gce = CniEnv {
        container_id: String::new(),
        netns: String::new(),
        ifname: String::new(),
        ..CniEnv::new("")
    };
    node.exec(&bin, "GC", &gce, &gc).expect_ok("GC");
    let rules = nft_ruleset(&node);
    assert!(
        !rules.contains("ctr-0") && rules.contains("ctr-1"),
        "{rules}"
    );
    node.exec(&bin, "DEL", &envs[1], &c).expect_ok("DEL");
    assert!(!nft_ruleset(&node).contains("ctr-1"));
    node.exec(&bin, "DEL", &envs[0], &c).expect_ok("DEL");
    node.exec(&bin, "STATUS", &gce, &c11).expect_ok("STATUS");
}

fn allocated(node: &Node, network: &str) -> Vec<String> {
    let dir = node.data.path().join("ipam").join(network);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

#[test]
fn ptp_failed_add_leaves_nothing_and_del_survives_a_vanished_netns() {
    if !premise::require_root() {
        return;
    }
    let mut node = Node::new();
    let bin = plugin_path(Impl::Ours, "ptp");
    let mut c = conf("1.0.0", json!({"ipMasq": true}));
    c["ipam"] = node.host_local("10.80.0.0/24");
    let pod = node.pod();
    let env = CniEnv::new(&pod);
    // eth0 taken in the pod: the veth cannot be created after IPAM ran.
    ip_in(
        ns_name(&pod),
        &["link", "add", "eth0", "type", "veth", "peer", "name", "x0"],
    );
    let before = kernel_state(node.name());
    let out = node.exec(&bin, "ADD", &env, &c);
    assert!(!out.ok, "{out:?}");
    assert_eq!(out.json()["code"], 999, "{out:?}");
    assert!(allocated(&node, "ptpnet").is_empty());
    assert_eq!(kernel_state(node.name()), before);
    assert!(!nft_ruleset(&node).contains("ctr-p14"));

    // A pod whose netns disappears before DEL.
    let pod2 = node.pod();
    let env2 = CniEnv::new(&pod2);
    node.exec(&bin, "ADD", &env2, &c).expect_ok("ADD");
    assert_eq!(allocated(&node, "ptpnet").len(), 1);
    std::process::Command::new("ip")
        .args(["netns", "del", ns_name(&pod2)])
        .status()
        .unwrap();
    node.exec(&bin, "DEL", &env2, &c).expect_ok("DEL");
    node.exec(&bin, "DEL", &env2, &c).expect_ok("DEL again");
    assert!(allocated(&node, "ptpnet").is_empty());
    assert!(!nft_ruleset(&node).contains("ctr-p14"));
}

#[test]
fn ptp_gc_and_status_reach_our_host_local_in_1_1_0() {
    if !premise::require_root() {
        return;
    }
    let Some(host_local) = option_env!("CARGO_BIN_EXE_host-local") else {
        cni_testkit::premise::require(false, "needs our host-local binary of this package");
        return;
    };
    let mut node = Node::new();
    let bin = plugin_path(Impl::Ours, "ptp");
    let mut c = conf("1.1.0", json!({"ipMasq": true}));
    c["ipam"] = node.host_local("10.91.0.0/24");
    let pods: Vec<String> = (0..2).map(|_| node.pod()).collect();
    let our_dir = std::path::Path::new(host_local)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let envs: Vec<CniEnv> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| CniEnv {
            container_id: format!("ctr-{i}"),
            cni_path: our_dir.clone(),
            ..CniEnv::new(p)
        })
        .collect();
    for e in &envs {
        node.exec(&bin, "ADD", e, &c).expect_ok("ADD");
    }
    assert_eq!(allocated(&node, "ptpnet").len(), 2);
    let gce = CniEnv {
        container_id: String::new(),
        netns: String::new(),
        ifname: String::new(),
        cni_path: our_dir.clone(),
        ..CniEnv::new("")
    };
    node.exec(&bin, "STATUS", &gce, &c).expect_ok("STATUS");
    let mut gc = c.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-1", "ifname": "eth0"}]);
    node.exec(&bin, "GC", &gce, &gc).expect_ok("GC");
    // The dead attachment's lease and rules are gone, the live one's stay.
    assert_eq!(allocated(&node, "ptpnet"), vec!["10.91.0.3".to_string()]);
    let rules = nft_ruleset(&node);
    assert!(
        !rules.contains("ctr-0") && rules.contains("ctr-1"),
        "{rules}"
    );
    node.exec(&bin, "DEL", &envs[1], &c).expect_ok("DEL");
    assert!(allocated(&node, "ptpnet").is_empty());
}
