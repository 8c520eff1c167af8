//! vlan, dummy, tap, host-device, vrf, loopback, ipvlan and macvlan on the fake kernel
//! (`fake_kernel_support`), without root: ADD makes the links, addresses
//! and routes the plugin promises (checked in the model, and by the
//! plugin's own CHECK), DEL leaves the namespaces as they were, a kernel
//! failure at each step of ADD leaves nothing, and DEL succeeds again and
//! after the pod's namespace is gone. This node's kernel has no dummy,
//! vlan or vrf link types: for those these tests are the only ADD/DEL
//! coverage here, and a fake told to lack dummy or vrf gives the refusal
//! the real kernel gives (`link_plugins::*_or_clean_refusal`). The real-kernel oracle where the kernel has the type:
//! `link_plugins::tap_*`, `host_device::*`, `loopback::*`.

use cni_exec::{Command, Plugin};
use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
use cni_netns::MacAddr;
use cni_plugins::dummy::Dummy;
use cni_plugins::host_device::HostDevice;
use cni_plugins::ipvlan::Ipvlan;
use cni_plugins::loopback::Loopback;
use cni_plugins::macvlan::Macvlan;
use cni_plugins::tap::Tap;
use cni_plugins::vlan::Vlan;
use cni_plugins::vrf::VrfPlugin;
use cni_types::{CniResult, Route};
use serde_json::{json, Value};

use crate::fake_kernel_support::{cni_error, FakeNode, NODE, POD};

/// Both namespaces' links, addresses and routes (sorted: a rollback may
/// put things back in another order), and the leases.
fn snapshot(node: &FakeNode) -> Vec<Vec<String>> {
    let k = &node.kernel;
    let mut s = vec![
        k.link_list(NODE),
        k.link_list(POD),
        k.address_list(NODE),
        k.address_list(POD),
        k.route_list(NODE),
        k.route_list(POD),
        node.leases(),
    ];
    for part in &mut s {
        part.sort();
    }
    s
}

/// A node whose IPAM result also routes 10.200.0.0/16 via the gateway, so
/// that ADD has a route step.
fn routed_node() -> FakeNode {
    FakeNode::with_ipam(
        vec![Route::new(
            "10.200.0.0/16".parse().unwrap(),
            Some("10.231.0.1".parse().unwrap()),
        )],
        false,
    )
}

/// ADD, CHECK with its result, DEL: the namespaces are as before ADD;
/// DEL again, without a netns and after the namespace is gone succeed.
/// `check` looks at ADD's result and the model right after ADD.
fn add_check_del<P: Plugin>(
    node: &FakeNode,
    plugin: &P,
    conf: &Value,
    check: impl FnOnce(&CniResult),
) where
    P::Error: std::fmt::Debug,
{
    let before = snapshot(node);
    let result = plugin
        .add(&node.request(Command::Add, conf, "c1", POD))
        .expect("ADD");
    check(&result);
    let mut checked = conf.clone();
    checked["prevResult"] = serde_json::to_value(&result).unwrap();
    plugin
        .check(&node.request(Command::Check, &checked, "c1", POD))
        .expect("CHECK");
    plugin
        .del(&node.request(Command::Del, conf, "c1", POD))
        .expect("DEL");
    assert_eq!(
        snapshot(node),
        before,
        "DEL leaves the namespaces as before ADD"
    );
    plugin
        .del(&node.request(Command::Del, conf, "c1", POD))
        .expect("DEL again");
    plugin
        .del(&node.request(Command::Del, conf, "c1", ""))
        .expect("DEL without a netns");
    node.kernel.remove_netns(POD);
    plugin
        .del(&node.request(Command::Del, conf, "c1", POD))
        .expect("DEL after the netns is gone");
}

/// The kernel steps of a successful ADD on `make()`'s node, then for each
/// kind of step (its first occurrence) a fresh node where it fails: ADD
/// fails and leaves the model and the leases as they were, unless the
/// plugin ignores that failure (`tolerated`). Returns the steps tried.
fn each_step_fails<P: Plugin>(
    make: impl Fn() -> FakeNode,
    plugin: impl Fn(&FakeKernel) -> P,
    conf: &Value,
    tolerated: &[(KernelOp, &str)],
) -> Vec<(KernelOp, String)>
where
    P::Error: std::fmt::Debug + Into<cni_types::CniError>,
{
    let node = make();
    let skip = node.kernel.calls().len();
    plugin(&node.kernel)
        .add(&node.request(Command::Add, conf, "c1", POD))
        .expect("ADD without faults");
    let mut steps: Vec<(KernelOp, String)> = Vec::new();
    for c in &node.kernel.calls()[skip..] {
        if !steps.iter().any(|(op, ns)| *op == c.op && *ns == c.netns) {
            steps.push((c.op, c.netns.clone()));
        }
    }
    for (op, netns) in &steps {
        let node = make();
        let before = snapshot(&node);
        node.kernel.fail_next(*op, netns, Errno::ENOMEM);
        let added = plugin(&node.kernel).add(&node.request(Command::Add, conf, "c1", POD));
        if tolerated.contains(&(*op, netns.as_str())) {
            assert!(added.is_ok(), "{op:?} in {netns} is ignored: {added:?}");
            continue;
        }
        let e = cni_error(added.expect_err("ADD fails"));
        assert!(
            format!("{} {}", e.msg, e.details).contains("memory"),
            "{op:?} in {netns}: {e:?}"
        );
        assert_eq!(snapshot(&node), before, "{op:?} in {netns}: nothing left");
    }
    steps
}

fn ops(steps: &[(KernelOp, String)]) -> Vec<(KernelOp, &str)> {
    steps.iter().map(|(op, ns)| (*op, ns.as_str())).collect()
}

// ---- dummy ----

#[test]
fn dummy_add_makes_an_addressed_dummy_and_del_removes_it() {
    let node = routed_node();
    let conf = node.conf(json!({"type": "dummy"}));
    let dummy = Dummy::with_kernel(node.kernel.clone());
    add_check_del(&node, &dummy, &conf, |r| {
        let k = &node.kernel;
        assert_eq!(k.link_list(POD), ["lo", "eth0@dummy up"]);
        assert_eq!(k.address_list(POD), ["10.231.0.2/24 on eth0"]);
        assert_eq!(
            k.route_list(POD),
            [
                "10.231.0.0/24 dev eth0 src 10.231.0.2",
                "10.200.0.0/16 via 10.231.0.1 dev eth0"
            ]
        );
        let eth0 = k.open(POD).unwrap().link_by_name("eth0").unwrap();
        assert_eq!(r.interfaces[0].mac, eth0.mac.unwrap().to_string());
        assert_eq!(
            (r.interfaces[0].sandbox.as_str(), r.ips[0].interface),
            (POD, Some(0))
        );
        // Made from inside the pod: the node is untouched.
        assert_eq!(k.link_list(NODE), ["lo"]);
    });
}

#[test]
fn dummy_kernel_failure_at_each_add_step_leaves_nothing() {
    let conf = routed_node().conf(json!({"type": "dummy"}));
    let steps = each_step_fails(routed_node, |k| Dummy::with_kernel(k.clone()), &conf, &[]);
    assert_eq!(
        ops(&steps),
        [
            (KernelOp::AddLink, POD),
            (KernelOp::AddAddress, POD),
            (KernelOp::SetUp, POD),
            (KernelOp::AddRoute, POD)
        ]
    );
}

/// A kernel without the dummy driver (this node's): ADD fails with the
/// plugin's error naming the link type, as `link_plugins::dummy_*` on such
/// a kernel, the IPAM lease released, nothing made.
#[test]
fn dummy_on_a_kernel_without_dummy_is_refused_cleanly() {
    let node = routed_node();
    node.kernel.lack_link_kind("dummy");
    let conf = node.conf(json!({"type": "dummy"}));
    let before = snapshot(&node);
    let e = cni_error(
        Dummy::with_kernel(node.kernel.clone())
            .add(&node.request(Command::Add, &conf, "c1", POD))
            .unwrap_err(),
    );
    assert_eq!(e.code.as_u32(), 999, "{e:?}");
    assert!(
        e.msg.contains("dummy is not supported by this kernel"),
        "{e:?}"
    );
    assert_eq!(snapshot(&node), before, "nothing left");
}

// ---- vlan ----

fn vlan_node() -> FakeNode {
    let node = routed_node();
    node.kernel.add_device(NODE, "uplink0");
    node
}

#[test]
fn vlan_add_makes_the_vlan_on_its_master_and_del_removes_it() {
    let node = vlan_node();
    let conf = node.conf(json!({"type": "vlan", "master": "uplink0", "vlanId": 42, "mtu": 1400}));
    let vlan = Vlan::with_kernel(node.kernel.clone());
    add_check_del(&node, &vlan, &conf, |r| {
        let k = &node.kernel;
        let pod = k.open(POD).unwrap();
        let uplink = k.current().unwrap().link_by_name("uplink0").unwrap();
        let eth0 = pod.link_by_name("eth0").unwrap();
        assert_eq!(k.link_list(POD), ["lo", "eth0@vlan up"]);
        assert_eq!(pod.vlan_id("eth0").unwrap(), Some(42));
        assert_eq!((eth0.parent_index, eth0.mtu), (Some(uplink.index), 1400));
        assert_eq!(k.address_list(POD), ["10.231.0.2/24 on eth0"]);
        assert!(k
            .route_list(POD)
            .contains(&"10.200.0.0/16 via 10.231.0.1 dev eth0".to_owned()));
        assert_eq!(r.interfaces[0].name, "eth0");
        // Made on the node straight into the pod under a temporary name.
        let added = &k.calls()[0];
        assert_eq!((added.op, added.netns.as_str()), (KernelOp::AddLink, NODE));
        assert!(
            added.object.starts_with("vlan veth") && added.object.ends_with(POD),
            "{added}"
        );
        assert_eq!(k.link_list(NODE), ["lo", "uplink0 up"]);
    });
}

#[test]
fn vlan_in_container_is_made_next_to_its_master_in_the_pod() {
    let node = routed_node();
    node.kernel.add_device(POD, "uplink0");
    let conf = node.conf(json!({"type": "vlan", "master": "uplink0", "vlanId": 7,
        "linkInContainer": true}));
    let vlan = Vlan::with_kernel(node.kernel.clone());
    add_check_del(&node, &vlan, &conf, |_| {
        let k = &node.kernel;
        assert_eq!(k.link_list(POD), ["lo", "uplink0 up", "eth0@vlan up"]);
        assert_eq!(k.open(POD).unwrap().vlan_id("eth0").unwrap(), Some(7));
        assert!(k.calls().iter().all(|c| c.netns == POD), "{:?}", k.calls());
    });
}

#[test]
fn vlan_kernel_failure_at_each_add_step_leaves_nothing() {
    let conf = vlan_node().conf(json!({"type": "vlan", "master": "uplink0", "vlanId": 42}));
    let steps = each_step_fails(vlan_node, |k| Vlan::with_kernel(k.clone()), &conf, &[]);
    assert_eq!(
        ops(&steps),
        [
            (KernelOp::AddLink, NODE),
            (KernelOp::Rename, POD),
            (KernelOp::AddAddress, POD),
            (KernelOp::SetUp, POD),
            (KernelOp::AddRoute, POD)
        ]
    );
}

// ---- ipvlan and macvlan (their other no-root tests: `add_rollback::`,
// `teardown_faults::`) ----

#[test]
fn ipvlan_add_check_del_and_del_on_vanished_state() {
    let node = vlan_node();
    let conf = node.conf(json!({"type": "ipvlan", "master": "uplink0", "mode": "l2"}));
    let ipvlan = Ipvlan::with_kernel(node.kernel.clone());
    add_check_del(&node, &ipvlan, &conf, |r| {
        let k = &node.kernel;
        assert_eq!(k.link_list(POD), ["lo", "eth0@ipvlan up"]);
        assert_eq!(k.address_list(POD), ["10.231.0.2/24 on eth0"]);
        assert_eq!(r.interfaces[0].name, "eth0");
        assert_eq!(k.link_list(NODE), ["lo", "uplink0 up"]);
    });
}

#[test]
fn ipvlan_kernel_failure_at_each_add_step_leaves_nothing() {
    let conf = vlan_node().conf(json!({"type": "ipvlan", "master": "uplink0"}));
    // The pod link's `arp_notify`/`ndisc_notify` are best effort (as Go's).
    let tolerated = [(KernelOp::WriteSysctl, POD)];
    let steps = each_step_fails(
        vlan_node,
        |k| Ipvlan::with_kernel(k.clone()),
        &conf,
        &tolerated,
    );
    let ops = ops(&steps);
    for step in [
        (KernelOp::AddLink, NODE),
        (KernelOp::Rename, POD),
        (KernelOp::AddAddress, POD),
        (KernelOp::SetUp, POD),
        (KernelOp::AddRoute, POD),
    ] {
        assert!(ops.contains(&step), "{step:?} not among {ops:?}");
    }
}

#[test]
fn macvlan_add_check_del_and_del_on_vanished_state() {
    let node = vlan_node();
    let conf = node.conf(json!({"type": "macvlan", "master": "uplink0"}));
    let macvlan = Macvlan::with_kernel(node.kernel.clone());
    add_check_del(&node, &macvlan, &conf, |r| {
        let k = &node.kernel;
        assert_eq!(k.link_list(POD), ["lo", "eth0@macvlan up"]);
        assert_eq!(k.address_list(POD), ["10.231.0.2/24 on eth0"]);
        assert_eq!(r.interfaces[0].name, "eth0");
    });
}

#[test]
fn macvlan_kernel_failure_at_each_add_step_leaves_nothing() {
    let conf = vlan_node().conf(json!({"type": "macvlan", "master": "uplink0"}));
    // The pod link's `arp_notify`/`ndisc_notify` are best effort (as Go's).
    let tolerated = [(KernelOp::WriteSysctl, POD)];
    let steps = each_step_fails(
        vlan_node,
        |k| Macvlan::with_kernel(k.clone()),
        &conf,
        &tolerated,
    );
    let ops = ops(&steps);
    for step in [
        (KernelOp::AddLink, NODE),
        (KernelOp::Rename, POD),
        (KernelOp::AddAddress, POD),
        (KernelOp::SetUp, POD),
        (KernelOp::AddRoute, POD),
    ] {
        assert!(ops.contains(&step), "{step:?} not among {ops:?}");
    }
}

#[test]
fn vlan_mtu_above_the_master_fails_before_anything() {
    let node = vlan_node();
    let conf = node.conf(json!({"type": "vlan", "master": "uplink0", "vlanId": 42, "mtu": 9000}));
    let e = Vlan::with_kernel(node.kernel.clone())
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("9000"), "{e}");
    assert!(node.kernel.calls().is_empty() && node.ipam_calls().is_empty());
}

// ---- tap ----

fn tap_node() -> FakeNode {
    let node = routed_node();
    let pod = node.kernel.open(POD).unwrap();
    pod.ensure_bridge(&cni_netns::BridgeSpec {
        name: "br0".into(),
        ..Default::default()
    })
    .unwrap();
    node
}

#[test]
fn tap_add_makes_a_bridged_tap_with_its_flags_and_del_removes_it() {
    let node = tap_node();
    let conf = node.conf(
        json!({"type": "tap", "mtu": 1400, "mac": "02:00:00:00:00:42",
        "owner": 1000, "group": 1000, "multiQueue": true, "bridge": "br0"}),
    );
    let tap = Tap::with_kernel(node.kernel.clone());
    add_check_del(&node, &tap, &conf, |r| {
        let k = &node.kernel;
        let eth0 = k.open(POD).unwrap().link_by_name("eth0").unwrap();
        assert_eq!(
            k.link_list(POD),
            ["lo", "br0@bridge up", "eth0@tun master br0 up"]
        );
        assert_eq!(eth0.mtu, 1400);
        assert_eq!(
            eth0.mac,
            Some("02:00:00:00:00:42".parse::<MacAddr>().unwrap())
        );
        assert_eq!(r.interfaces[0].mac, "02:00:00:00:00:42");
        // Go's netlink path: vnet_hdr, multi-queue, no packet information.
        let created = k
            .calls()
            .into_iter()
            .find(|c| c.op == KernelOp::AddLink && c.object.starts_with("tap"));
        let created = created.expect("tap created").object;
        assert!(
            created.contains("(flags 0x5102) owner 1000 group 1000"),
            "{created}"
        );
        assert_eq!(
            k.sysctl(POD, "net/ipv4/conf/eth0/arp_notify").as_deref(),
            Some("1")
        );
        assert_eq!(k.address_list(POD), ["10.231.0.2/24 on eth0"]);
    });
}

#[test]
fn tap_kernel_failure_at_each_add_step_leaves_nothing() {
    let conf = tap_node().conf(json!({"type": "tap", "bridge": "br0"}));
    let steps = each_step_fails(
        tap_node,
        |k| Tap::with_kernel(k.clone()),
        &conf,
        // Go ignores a failed arp_notify.
        &[(KernelOp::WriteSysctl, POD)],
    );
    assert_eq!(
        ops(&steps),
        [
            (KernelOp::AddLink, POD),
            (KernelOp::Rename, POD),
            (KernelOp::SetMaster, POD),
            (KernelOp::SetUp, POD),
            (KernelOp::WriteSysctl, POD),
            (KernelOp::AddAddress, POD),
            (KernelOp::AddRoute, POD)
        ]
    );
}

// ---- host-device ----

fn host_device_node() -> FakeNode {
    let node = routed_node();
    node.kernel.add_device(NODE, "nic0");
    node
}

#[test]
fn host_device_add_moves_the_nic_in_and_del_moves_it_back() {
    let node = host_device_node();
    let host = node.kernel.current().unwrap();
    let nic = host.link_by_name("nic0").unwrap();
    for selector in [
        json!({"device": "nic0"}),
        json!({"hwaddr": nic.mac.unwrap().to_string()}),
    ] {
        let mut plugin = json!({"type": "host-device"});
        plugin
            .as_object_mut()
            .unwrap()
            .extend(selector.as_object().unwrap().clone());
        let conf = node.conf(plugin);
        let before = snapshot(&node);
        let hd = HostDevice::with_kernel(node.kernel.clone());
        let r = hd
            .add(&node.request(Command::Add, &conf, "c1", POD))
            .expect("ADD");
        let k = &node.kernel;
        assert_eq!(k.link_list(NODE), ["lo"]);
        assert_eq!(k.link_list(POD), ["lo", "eth0 alias nic0 up"]);
        let eth0 = k.open(POD).unwrap().link_by_name("eth0").unwrap();
        assert_eq!((eth0.index, eth0.mac), (nic.index, nic.mac));
        assert_eq!(r.interfaces[0].mac, nic.mac.unwrap().to_string());
        assert_eq!(k.address_list(POD), ["10.231.0.2/24 on eth0"]);
        let mut checked = conf.clone();
        checked["prevResult"] = serde_json::to_value(&r).unwrap();
        hd.check(&node.request(Command::Check, &checked, "c1", POD))
            .expect("CHECK");
        hd.del(&node.request(Command::Del, &conf, "c1", POD))
            .expect("DEL");
        // Back under its name, without addresses, down, the alias kept
        // (as Go's moveLinkOut leaves it).
        assert_eq!(k.link_list(NODE), ["lo", "nic0 alias nic0"]);
        assert_eq!(k.link_list(POD), ["lo"]);
        assert!(node.leases().is_empty());
        hd.del(&node.request(Command::Del, &conf, "c1", POD))
            .expect("DEL again");
        host.set_alias(nic.index, "").unwrap();
        host.set_up(nic.index).unwrap();
        assert_eq!(snapshot(&node), before);
    }
}

#[test]
fn host_device_del_after_the_netns_is_gone_releases_and_the_nic_is_back() {
    let node = host_device_node();
    let nic = node.kernel.current().unwrap().link_by_name("nic0").unwrap();
    let conf = node.conf(json!({"type": "host-device", "device": "nic0"}));
    let hd = HostDevice::with_kernel(node.kernel.clone());
    hd.add(&node.request(Command::Add, &conf, "c1", POD))
        .expect("ADD");
    node.kernel.remove_netns(POD);
    // The kernel returned the NIC to the node under its pod name.
    let back = node.kernel.current().unwrap().link_by_name("eth0").unwrap();
    assert_eq!(back.index, nic.index);
    hd.del(&node.request(Command::Del, &conf, "c1", POD))
        .expect("DEL");
    hd.del(&node.request(Command::Del, &conf, "c1", POD))
        .expect("DEL again");
    assert!(node.leases().is_empty());
}

#[test]
fn host_device_kernel_failure_at_each_add_step_puts_the_nic_back() {
    let conf = host_device_node().conf(json!({"type": "host-device", "device": "nic0"}));
    let steps = each_step_fails(
        host_device_node,
        |k| HostDevice::with_kernel(k.clone()),
        &conf,
        // The optimistic DAD sysctls: a failed write leaves the kernel's
        // DAD, waited for (as bridge ignores its DAD sysctls).
        &[(KernelOp::WriteSysctl, POD)],
    );
    assert_eq!(
        ops(&steps),
        [
            (KernelOp::MoveLink, NODE),
            (KernelOp::SetDown, POD),
            (KernelOp::SetLinkOption, POD),
            (KernelOp::Rename, POD),
            (KernelOp::WriteSysctl, POD),
            (KernelOp::SetUp, POD),
            (KernelOp::AddAddress, POD),
            (KernelOp::AddRoute, POD)
        ]
    );
}

#[test]
fn host_device_missing_device_fails_before_anything() {
    let node = host_device_node();
    let conf = node.conf(json!({"type": "host-device", "device": "nosuch0"}));
    HostDevice::with_kernel(node.kernel.clone())
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(node.kernel.calls().is_empty() && node.ipam_calls().is_empty());
}

// ---- vrf ----

/// A pod whose eth0 has what a main plugin gave it: 10.231.0.2/24 (and,
/// with `v6`, 2001:db8::2/64 and a route via the IPv4 gateway).
fn vrf_node(v6: bool) -> FakeNode {
    let node = FakeNode::new();
    let index = node.kernel.add_device(POD, "eth0");
    let pod = node.kernel.open(POD).unwrap();
    pod.add_address(index, "10.231.0.2/24".parse().unwrap(), Default::default())
        .unwrap();
    if v6 {
        pod.add_address(index, "2001:db8::2/64".parse().unwrap(), Default::default())
            .unwrap();
        pod.add_route(&cni_netns::KernelRoute {
            gateway: Some("10.231.0.1".parse().unwrap()),
            oif: Some(index),
            ..cni_netns::KernelRoute::new("10.200.0.0/16".parse().unwrap())
        })
        .unwrap();
    }
    node
}

fn vrf_conf(table: u32) -> Value {
    json!({"cniVersion": "1.1.0", "name": "fakenet", "type": "vrf", "vrfname": "blue",
        "table": table,
        "prevResult": {"cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "sandbox": POD}],
            "ips": [{"address": "10.231.0.2/24", "interface": 0}]}})
}

#[test]
fn vrf_add_enslaves_and_moves_routes_and_del_undoes_it() {
    let node = vrf_node(false);
    let vrf = VrfPlugin::with_kernel(node.kernel.clone());
    add_check_del(&node, &vrf, &vrf_conf(1001), |_| {
        let k = &node.kernel;
        assert_eq!(
            k.link_list(POD),
            ["lo", "eth0 master blue up", "blue@vrf up"]
        );
        let mut routes = k.route_list(POD);
        routes.sort();
        assert_eq!(
            routes,
            [
                "10.231.0.0/24 dev eth0 src 10.231.0.2 table 1001",
                "local 10.231.0.2/32 dev eth0 src 10.231.0.2 table 1001"
            ]
        );
    });
}

#[test]
fn vrf_add_restores_ipv6_addresses_and_moves_routes_into_the_table() {
    let node = vrf_node(true);
    let vrf = VrfPlugin::with_kernel(node.kernel.clone());
    let conf = vrf_conf(0);
    vrf.add(&node.request(Command::Add, &conf, "c1", POD))
        .expect("ADD");
    let k = &node.kernel;
    let pod = k.open(POD).unwrap();
    // Table 0: the first free one.
    assert_eq!(pod.vrf_by_name("blue").unwrap().unwrap().table, 1);
    let mut addresses = k.address_list(POD);
    addresses.sort();
    assert_eq!(
        addresses,
        ["10.231.0.2/24 on eth0", "2001:db8::2/64 on eth0"]
    );
    let mut routes = k.route_list(POD);
    routes.sort();
    assert_eq!(
        routes,
        [
            "10.200.0.0/16 via 10.231.0.1 dev eth0 table 1",
            "10.231.0.0/24 dev eth0 src 10.231.0.2 table 1",
            "2001:db8::/64 dev eth0 table 1",
            "local 10.231.0.2/32 dev eth0 src 10.231.0.2 table 1",
            "local 2001:db8::2/128 dev eth0 src 2001:db8::2 table 1"
        ]
    );
    // A second pod interface in the same VRF keeps it through the first's DEL.
    let eth1 = k.add_device(POD, "eth1");
    let mut conf1 = conf.clone();
    conf1["prevResult"]["interfaces"][0]["name"] = json!("eth1");
    vrf.add(&node.request_for(Command::Add, &conf1, "c1", POD, "eth1"))
        .expect("ADD eth1");
    vrf.del(&node.request(Command::Del, &conf, "c1", POD))
        .expect("DEL eth0");
    assert_eq!(
        pod.links_with_master(pod.vrf_by_name("blue").unwrap().unwrap().link.index)
            .unwrap()[0]
            .index,
        eth1
    );
    // Leaving the VRF cycled eth0: its IPv6 address went, as in the kernel.
    assert_eq!(
        k.route_list(POD)
            .iter()
            .filter(|r| r.contains("dev eth0"))
            .collect::<Vec<_>>(),
        ["10.231.0.0/24 dev eth0 src 10.231.0.2"]
    );
    vrf.del(&node.request_for(Command::Del, &conf1, "c1", POD, "eth1"))
        .expect("DEL eth1");
    assert!(pod.vrf_by_name("blue").unwrap().is_none());
}

#[test]
fn vrf_kernel_failure_at_each_add_step_leaves_the_pod_as_it_was() {
    let steps = each_step_fails(
        || vrf_node(true),
        |k| VrfPlugin::with_kernel(k.clone()),
        &vrf_conf(1001),
        &[],
    );
    assert_eq!(
        ops(&steps),
        [
            // The VRF made, then set up (a failure deletes it, as on Linux).
            (KernelOp::AddLink, POD),
            (KernelOp::SetUp, POD),
            (KernelOp::SetMaster, POD),
            (KernelOp::AddAddress, POD),
            (KernelOp::AddRoute, POD)
        ]
    );
}

#[test]
fn vrf_table_mismatch_and_a_non_vrf_name_fail_before_anything() {
    let node = vrf_node(false);
    let pod = node.kernel.open(POD).unwrap();
    pod.add_vrf("blue", 7).unwrap();
    let skip = node.kernel.calls().len();
    let vrf = VrfPlugin::with_kernel(node.kernel.clone());
    let e = vrf
        .add(&node.request(Command::Add, &vrf_conf(1001), "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("different routing table 7"), "{e}");
    node.kernel.add_device(POD, "red");
    let mut conf = vrf_conf(0);
    conf["vrfname"] = json!("red");
    let e = vrf
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("red"), "{e}");
    assert_eq!(node.kernel.calls().len(), skip);
}

/// A kernel without VRF (this node's): ADD fails with the plugin's error
/// naming the link type and the VRF, as `link_plugins::vrf_*` on such a
/// kernel; the interface keeps its addresses and has no master.
#[test]
fn vrf_on_a_kernel_without_vrf_is_refused_cleanly() {
    let node = vrf_node(true);
    node.kernel.lack_link_kind("vrf");
    let before = snapshot(&node);
    let e = cni_error(
        VrfPlugin::with_kernel(node.kernel.clone())
            .add(&node.request(Command::Add, &vrf_conf(1001), "c1", POD))
            .unwrap_err(),
    );
    assert_eq!(e.code.as_u32(), 999, "{e:?}");
    assert!(
        e.msg.contains("vrf is not supported by this kernel"),
        "{e:?}"
    );
    assert!(format!("{} {}", e.msg, e.details).contains("blue"), "{e:?}");
    assert_eq!(snapshot(&node), before, "nothing changed");
}

// ---- loopback ----

#[test]
fn loopback_add_sets_lo_up_and_del_sets_it_down() {
    let node = FakeNode::new();
    let conf = json!({"cniVersion": "1.1.0", "name": "lo", "type": "loopback"});
    let lo = Loopback::with_kernel(node.kernel.clone());
    let r = lo
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .expect("ADD");
    assert_eq!(node.kernel.link_list(POD), ["lo up"]);
    let ips: Vec<String> = r.ips.iter().map(|ip| ip.address.to_string()).collect();
    assert_eq!(ips, ["127.0.0.1/8", "::1/128"]);
    assert_eq!(
        (
            r.interfaces[0].name.as_str(),
            r.interfaces[0].sandbox.as_str()
        ),
        ("lo", POD)
    );
    lo.check(&node.request(Command::Check, &conf, "c1", POD))
        .expect("CHECK");
    lo.del(&node.request(Command::Del, &conf, "c1", POD))
        .expect("DEL");
    // Down: IPv6's ::1 went with it, 127.0.0.1 stays (as in the kernel).
    assert_eq!(node.kernel.link_list(POD), ["lo"]);
    assert_eq!(node.kernel.address_list(POD), ["127.0.0.1/8 on lo"]);
    let e = lo
        .check(&node.request(Command::Check, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("down"), "{e}");
    for netns in [POD, ""] {
        lo.del(&node.request(Command::Del, &conf, "c1", netns))
            .expect("DEL again");
    }
    node.kernel.remove_netns(POD);
    lo.del(&node.request(Command::Del, &conf, "c1", POD))
        .expect("DEL after the netns is gone");
}

#[test]
fn loopback_add_fails_on_a_kernel_failure_or_a_foreign_address() {
    let node = FakeNode::new();
    let conf = json!({"cniVersion": "1.1.0", "name": "lo", "type": "loopback"});
    let lo = Loopback::with_kernel(node.kernel.clone());
    node.kernel.fail_next(KernelOp::SetUp, POD, Errno::ENOMEM);
    let e = lo
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("memory"), "{e}");
    assert_eq!(node.kernel.link_list(POD), ["lo"]);
    let pod = node.kernel.open(POD).unwrap();
    pod.add_address(1, "10.9.9.9/8".parse().unwrap(), Default::default())
        .unwrap();
    let e = lo
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("10.9.9.9"), "{e}");
}
