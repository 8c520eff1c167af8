//! IPv6 duplicate address detection (DAD) in the pod, with `ip -j addr`
//! as the oracle: ptp's veth turns DAD off (it cannot find anything
//! there), macvlan, ipvlan and host-device use optimistic DAD (RFC 4429);
//! either way the pod's addresses are usable when ADD returns, in
//! IPv6-only and dual-stack. On a shared segment a duplicate is still
//! detected: the address is flagged `dadfailed` and CHECK reports it.
//!
//! The pods' default `dad_transmits` is 5 (DAD then lasts ~5 s): an ADD
//! that waited for DAD would take that long, and an optimistic address is
//! still in DAD when it is looked at.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::ptp_common::*;
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

/// The two stacks with IPv6: host-local ranges and routes.
fn stacks(v4: &str, v6: &str) -> [(&'static str, Value, Value); 2] {
    [
        ("ipv6", json!([[{"subnet": v6}]]), json!([{"dst": "::/0"}])),
        (
            "dual",
            json!([[{"subnet": v4}], [{"subnet": v6}]]),
            json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]),
        ),
    ]
}

fn host_local(node: &Node, ranges: &Value, routes: &Value) -> Value {
    json!({
        "type": "host-local",
        "dataDir": node.data.path().join("ipam"),
        "ranges": ranges,
        "routes": routes,
    })
}

/// Writes `value` to `/proc/sys/<key>` in namespace `ns` (a name under
/// /run/netns).
fn sysctl_in(ns: &str, key: &str, value: &str) {
    let netns = cni_netns::Netns::open(Path::new(cni_netns::NETNS_RUN_DIR).join(ns)).unwrap();
    netns
        .run(|| std::fs::write(format!("/proc/sys/{key}"), value))
        .unwrap()
        .unwrap_or_else(|e| panic!("{key} in {ns}: {e}"));
}

fn read_sysctl_in(ns: &str, key: &str) -> String {
    let netns = cni_netns::Netns::open(Path::new(cni_netns::NETNS_RUN_DIR).join(ns)).unwrap();
    netns
        .run(|| std::fs::read_to_string(format!("/proc/sys/{key}")))
        .unwrap()
        .unwrap_or_else(|e| panic!("{key} in {ns}: {e}"))
        .trim()
        .to_owned()
}

/// A pod whose new interfaces do DAD for ~5 s.
fn slow_dad_pod(node: &mut Node) -> String {
    let pod = node.pod();
    sysctl_in(ns_name(&pod), "net/ipv6/conf/default/dad_transmits", "5");
    pod
}

/// The IPv6 addresses of `dev` in `ns`, as `ip -j addr` shows them.
fn v6_addrs(ns: &str, dev: &str) -> Vec<Value> {
    ip_json_in(ns, &["-6", "addr", "show", "dev", dev])[0]["addr_info"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn flag(a: &Value, f: &str) -> bool {
    a[f] == json!(true)
}

/// Whether a socket can be bound to `ip` in `ns`: the kernel refuses a
/// tentative (not optimistic) or failed address.
fn bindable(ns: &str, ip: &str) -> bool {
    let netns = cni_netns::Netns::open(Path::new(cni_netns::NETNS_RUN_DIR).join(ns)).unwrap();
    let ip: IpAddr = ip.parse().unwrap();
    netns
        .run(|| UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok())
        .unwrap()
}

/// Whether this kernel has optimistic DAD (`CONFIG_IPV6_OPTIMISTIC_DAD`).
fn kernel_has_optimistic_dad() -> bool {
    Path::new("/proc/sys/net/ipv6/conf/default/optimistic_dad").exists()
}

/// ADD of `plugin` with `conf` in `pod`; its result and how long it took.
fn add(node: &Node, plugin: &str, pod: &str, conf: &Value) -> (Value, Duration) {
    let env = CniEnv::new(pod);
    let start = Instant::now();
    let out = node.exec(&plugin_path(Impl::Ours, plugin), "ADD", &env, conf);
    let took = start.elapsed();
    eprintln!("{plugin} ADD took {took:?}");
    (out.expect_ok("ADD").json(), took)
}

/// What every shared-segment plugin must show right after ADD: each IPv6
/// address of `eth0` (the result's and the link-local one) optimistic
/// while its DAD runs, none failed, the result's bindable and reachable
/// over TCP from `peer` (a namespace under /run/netns and its address on
/// the segment), and then reaching it; the ADD did not wait for DAD. On a
/// kernel without optimistic DAD, the ADD waited.
#[track_caller]
fn assert_optimistic_when_add_returns(
    pod: &str,
    result: &Value,
    took: Duration,
    peer: Option<(&str, &str)>,
) {
    let ns = ns_name(pod);
    let addrs = v6_addrs(ns, "eth0");
    let global: Vec<&str> = result["ips"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|ip| ip["address"].as_str())
        .filter(|a| a.contains(':'))
        .map(|a| a.split('/').next().unwrap())
        .collect();
    assert!(!global.is_empty(), "{result}");
    assert!(
        addrs.iter().any(|a| a["scope"] == "link"),
        "no link-local: {addrs:?}"
    );
    for a in &addrs {
        assert!(!flag(a, "dadfailed"), "{a}");
        if kernel_has_optimistic_dad() {
            assert!(flag(a, "optimistic"), "not optimistic: {a}");
        } else {
            assert!(!flag(a, "tentative"), "still tentative: {a}");
        }
    }
    for ip in &global {
        assert!(addrs.iter().any(|a| a["local"] == *ip), "{ip}: {addrs:?}");
        assert!(bindable(ns, ip), "cannot bind {ip} in the pod");
        if let Some((peer_ns, peer_ip)) = peer {
            // The kernel sends neighbour solicitations only from an address
            // that is not optimistic: the pod resolves a neighbour itself
            // once its link-local address has passed DAD (`dad_transmits`
            // s), and answers one that solicits it at once (learning its
            // MAC from the solicitation).
            assert!(tcp_reachable(peer_ns, ns, ip), "{peer_ip} -> pod {ip}");
            assert!(tcp_reachable(ns, peer_ns, peer_ip), "pod -> {peer_ip}");
        }
    }
    if kernel_has_optimistic_dad() {
        assert!(
            took < Duration::from_secs(4),
            "ADD waited for DAD: {took:?}"
        );
        let dir = "net/ipv6/conf/eth0";
        assert_eq!(read_sysctl_in(ns, &format!("{dir}/optimistic_dad")), "1");
        assert_eq!(read_sysctl_in(ns, &format!("{dir}/use_optimistic")), "1");
    }
}

#[test]
fn ptp_ipv6_addresses_are_usable_when_add_returns() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    for (stack, ranges, routes) in stacks("10.91.0.0/24", "fd00:91::/64") {
        let mut node = Node::new();
        let pod = slow_dad_pod(&mut node);
        let conf = json!({
            "cniVersion": "1.0.0", "name": "dadptp", "type": "ptp",
            "ipam": host_local(&node, &ranges, &routes),
        });
        let (result, took) = add(&node, "ptp", &pod, &conf);
        assert!(
            took < Duration::from_secs(4),
            "{stack}: ADD waited: {took:?}"
        );
        let ns = ns_name(&pod);
        assert_eq!(read_sysctl_in(ns, "net/ipv6/conf/eth0/accept_dad"), "0");
        let addrs = v6_addrs(ns, "eth0");
        assert!(addrs.iter().any(|a| a["scope"] == "link"), "{addrs:?}");
        for a in &addrs {
            assert!(
                !flag(a, "tentative") && !flag(a, "dadfailed"),
                "{stack}: {a}"
            );
        }
        // The pod's addresses and the node's end of them (the gateway on
        // the host veth) can be used at once.
        for ip in result["ips"].as_array().unwrap() {
            let addr = ip["address"].as_str().unwrap();
            let local = addr.split('/').next().unwrap();
            assert!(bindable(ns, local), "{stack}: bind {local} in the pod");
            let gw = ip["gateway"].as_str().unwrap();
            assert!(bindable(node.name(), gw), "{stack}: bind {gw} on the node");
            assert!(tcp_reachable(ns, node.name(), gw), "{stack}: pod -> {gw}");
            assert!(
                tcp_reachable(node.name(), ns, local),
                "{stack}: node -> {local}"
            );
        }
        let host_veth = result["interfaces"][0]["name"].as_str().unwrap();
        for a in v6_addrs(node.name(), host_veth) {
            if a["scope"] == "global" {
                assert!(!flag(&a, "tentative"), "{stack}: node gateway {a}");
            }
        }
        let mut check = conf.clone();
        check["prevResult"] = result;
        node.exec(
            &plugin_path(Impl::Ours, "ptp"),
            "CHECK",
            &CniEnv::new(&pod),
            &check,
        )
        .expect_ok("CHECK");
    }
}

#[test]
fn ptp_with_enabledad_waits_for_dad_as_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let mut node = Node::new();
    let pod = node.pod();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "dadptp", "type": "ptp", "enabledad": true,
        "ipam": host_local(&node, &json!([[{"subnet": "fd00:92::/64"}]]), &json!([])),
    });
    let (result, _) = add(&node, "ptp", &pod, &conf);
    let ns = ns_name(&pod);
    assert_eq!(read_sysctl_in(ns, "net/ipv6/conf/eth0/accept_dad"), "1");
    let local = result["ips"][0]["address"].as_str().unwrap();
    let local = local.split('/').next().unwrap();
    let a = v6_addrs(ns, "eth0")
        .into_iter()
        .find(|a| a["local"] == local)
        .unwrap();
    // DAD ran (no `nodad`) and the ADD waited for it.
    assert!(!flag(&a, "nodad") && !flag(&a, "tentative"), "{a}");
}

#[test]
fn ptp_refuses_an_address_that_is_its_own_gateway() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("static")]) {
        return;
    }
    let mut node = Node::new();
    let pod = node.pod();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "dadptp", "type": "ptp",
        "ipam": {"type": "static",
                 "addresses": [{"address": "fd00:93::1/64", "gateway": "fd00:93::1"}]},
    });
    let env = CniEnv::new(&pod);
    let out = node.exec(&plugin_path(Impl::Ours, "ptp"), "ADD", &env, &conf);
    assert!(!out.ok, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("fd00:93::1/64") && msg.contains("gateway"),
        "{msg}"
    );
    // Refused before the veth was made.
    let links = ip_json_in(ns_name(&pod), &["link", "show"]);
    assert!(
        !links
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["ifname"] == "eth0"),
        "{links}"
    );
}

#[test]
fn macvlan_ipv6_addresses_are_optimistic_when_add_returns() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    for (stack, ranges, routes) in stacks("10.94.0.0/24", "fd00:94::/64") {
        let mut node = Node::new();
        let peer = holder(&mut node, "fd00:94::99/64");
        let pod = slow_dad_pod(&mut node);
        let conf = json!({
            "cniVersion": "1.0.0", "name": "dadmv", "type": "macvlan", "master": "uplink0",
            "ipam": host_local(&node, &ranges, &routes),
        });
        eprintln!("macvlan {stack}");
        let (result, took) = add(&node, "macvlan", &pod, &conf);
        let peer = Some((ns_name(&peer), "fd00:94::99"));
        assert_optimistic_when_add_returns(&pod, &result, took, peer);
    }
}

#[test]
fn host_device_ipv6_addresses_are_optimistic_when_add_returns() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    for (stack, ranges, routes) in stacks("10.95.0.0/24", "fd00:95::/64") {
        let mut node = Node::new();
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
        node.ip(&["link", "set", "hostdev0p", "up"]);
        node.ip(&["addr", "add", "fd00:95::99/64", "dev", "hostdev0p", "nodad"]);
        let pod = slow_dad_pod(&mut node);
        let conf = json!({
            "cniVersion": "1.0.0", "name": "dadhd", "type": "host-device", "device": "hostdev0",
            "ipam": host_local(&node, &ranges, &routes),
        });
        eprintln!("host-device {stack}");
        let (result, took) = add(&node, "host-device", &pod, &conf);
        let peer = Some((node.name(), "fd00:95::99"));
        assert_optimistic_when_add_returns(&pod, &result, took, peer);
        // DEL moves it back (before the node goes).
        node.exec(
            &plugin_path(Impl::Ours, "host-device"),
            "DEL",
            &CniEnv::new(&pod),
            &conf,
        )
        .expect_ok("DEL");
    }
}

#[test]
fn ipvlan_ipv6_addresses_are_optimistic_when_add_returns() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let has_ipvlan = kernel_has_ipvlan();
    for (stack, ranges, routes) in stacks("10.96.0.0/24", "fd00:96::/64") {
        let mut node = Node::new();
        let pod = slow_dad_pod(&mut node);
        let conf = json!({
            "cniVersion": "1.0.0", "name": "dadipv", "type": "ipvlan", "master": "uplink0",
            "mode": "l2", "ipam": host_local(&node, &ranges, &routes),
        });
        if has_ipvlan {
            eprintln!("ipvlan {stack}");
            let (result, took) = add(&node, "ipvlan", &pod, &conf);
            assert_optimistic_when_add_returns(&pod, &result, took, None);
        } else {
            // The clean path: a CNI error, nothing made or allocated.
            let env = CniEnv::new(&pod);
            let out = node.exec(&plugin_path(Impl::Ours, "ipvlan"), "ADD", &env, &conf);
            assert!(!out.ok, "{out:?}");
            let msg = out.json()["msg"].as_str().unwrap().to_owned();
            assert!(msg.contains("ipvlan is not supported"), "{msg}");
            assert!(!kernel_state(ns_name(&pod))
                .iter()
                .any(|l| l.contains("eth0")));
        }
    }
}

/// A macvlan of the node's `uplink0` in a namespace of its own holding
/// `addr` (DAD done): another host on the pod's segment.
fn holder(node: &mut Node, addr: &str) -> String {
    let ns = node.pod();
    let name = ns_name(&ns).to_owned();
    node.ip(&[
        "link", "add", "holder0", "link", "uplink0", "type", "macvlan", "mode", "bridge",
    ]);
    node.ip(&["link", "set", "holder0", "netns", &name]);
    ip_in(&name, &["addr", "add", addr, "dev", "holder0", "nodad"]);
    ip_in(&name, &["link", "set", "holder0", "up"]);
    ns
}

#[test]
fn macvlan_duplicate_address_is_flagged_dadfailed_and_check_reports_it() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("static")]) {
        return;
    }
    if !kernel_has_optimistic_dad() {
        eprintln!("no optimistic DAD in this kernel: the ADD waits (see the Go-mode test)");
        return;
    }
    let mut node = Node::new();
    holder(&mut node, "fd00:97::5/64");
    let pod = node.pod();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "dadmv", "type": "macvlan", "master": "uplink0",
        "ipam": {"type": "static", "addresses": [{"address": "fd00:97::5/64"}]},
    });
    let (result, _) = add(&node, "macvlan", &pod, &conf);
    let ns = ns_name(&pod);
    // The kernel finds the duplicate while the pod already has the
    // address: it flags it and stops using it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let failed = loop {
        let a = v6_addrs(ns, "eth0")
            .into_iter()
            .find(|a| a["local"] == "fd00:97::5")
            .expect("address on eth0");
        if flag(&a, "dadfailed") || Instant::now() > deadline {
            break a;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        flag(&failed, "dadfailed"),
        "duplicate not detected: {failed}"
    );
    assert!(!bindable(ns, "fd00:97::5"));
    let mut check = conf.clone();
    check["prevResult"] = result;
    let env = CniEnv::new(&pod);
    let bin = plugin_path(Impl::Ours, "macvlan");
    let out = node.exec(&bin, "CHECK", &env, &check);
    assert!(!out.ok, "CHECK passed a dadfailed address: {out:?}");
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert_eq!(
        msg,
        "address fd00:97::5/64 on interface eth0 failed duplicate address detection"
    );
    node.exec(&bin, "DEL", &env, &check).expect_ok("DEL");
}

#[test]
fn macvlan_without_optimistic_dad_fails_add_on_a_duplicate_as_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("static")]) {
        return;
    }
    let mut node = Node::new();
    holder(&mut node, "fd00:98::5/64");
    let pod = node.pod();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "dadmv", "type": "macvlan", "master": "uplink0",
        "optimisticDad": false,
        "ipam": {"type": "static",
                 "addresses": [{"address": "fd00:98::5/64", "gateway": "fd00:98::1"}]},
    });
    let env = CniEnv::new(&pod);
    let out = node.exec(&plugin_path(Impl::Ours, "macvlan"), "ADD", &env, &conf);
    assert!(!out.ok, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(msg.contains("failed duplicate address detection"), "{msg}");
    let ns = ns_name(&pod);
    assert_eq!(
        read_sysctl_in(ns, "net/ipv6/conf/default/optimistic_dad"),
        "0"
    );
    assert!(!kernel_state(ns).iter().any(|l| l.contains("eth0")));
}
