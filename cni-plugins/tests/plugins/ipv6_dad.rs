//! IPv6 duplicate address detection (DAD) in the pod, with `ip -j addr`
//! as the oracle: ptp's veth turns DAD off (it cannot find anything
//! there), so the pod's addresses are usable when ADD returns, in
//! IPv6-only and dual-stack.
//!
//! The pods' default `dad_transmits` is 5 (DAD then lasts ~5 s): an ADD
//! that waited for DAD would take that long.

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

/// ADD of `plugin` with `conf` in `pod`; its result and how long it took.
fn add(node: &Node, plugin: &str, pod: &str, conf: &Value) -> (Value, Duration) {
    let env = CniEnv::new(pod);
    let start = Instant::now();
    let out = node.exec(&plugin_path(Impl::Ours, plugin), "ADD", &env, conf);
    let took = start.elapsed();
    eprintln!("{plugin} ADD took {took:?}");
    (out.expect_ok("ADD").json(), took)
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
