//! DEL and GC run every teardown step, in order, without root: the
//! plugins run on a fake kernel (`fake_kernel_support`). A firewall that
//! fails to remove the masquerade must not keep the pod's address
//! reserved; the rules go before the address is released (a new pod given
//! the same address must never lose its rules to this DEL); a DEL finds
//! nothing to do the second time, and releases the address when the pod's
//! namespace is already gone. The real-kernel oracle for the same paths:
//! `bridge_behaviour::del_*`, `ptp::ptp_failed_add_leaves_nothing_and_del_survives_a_vanished_netns`,
//! `macvlan::macvlan_failed_add_leaves_nothing_and_del_survives_a_vanished_netns`.

use std::sync::Arc;

use cni_exec::{Command, Plugin};
use cni_firewall::{FirewallCall, RuleKind, RuleSpec};
use cni_netns::kernel::KernelOp;
use cni_plugins::bridge::Bridge;
use cni_plugins::macvlan::Macvlan;
use cni_plugins::ptp::Ptp;
use cni_types::CniError;
use serde_json::{json, Value};

use crate::fake_kernel_support::{FailingTeardown, FakeNode, NODE, POD};

/// ADD with the recording firewall, then DEL with one whose removals
/// fail: the DEL reports the failure, and the address and the pod link
/// are gone anyway; then GC with the recording firewall asks it to
/// collect the attachment.
fn del_releases_despite_the_firewall<P: Plugin>(node: &FakeNode, ours: P, failing: P, plugin: Value)
where
    P::Error: std::fmt::Debug,
{
    let conf = node.conf(plugin);
    ours.add(&node.request(Command::Add, &conf, "c1", POD))
        .expect("ADD");
    assert_eq!(node.leases(), ["c1"]);
    let e = failing
        .del(&node.request(Command::Del, &conf, "c1", POD))
        .expect_err("DEL reports the firewall's failure");
    assert!(format!("{e:?}").contains("refused by the test"), "{e:?}");
    assert!(node.leases().is_empty());
    assert_eq!(node.kernel.link_names(POD), ["lo"]);
    assert!(node.node_veths().is_empty(), "{:?}", node.node_veths());

    let mut gc_conf = conf.clone();
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    ours.gc(&node.request(Command::Gc, &gc_conf, "", ""))
        .expect("GC");
    let gc = node.firewall.calls();
    assert!(
        gc.iter()
            .any(|c| matches!(c, FirewallCall::Gc(RuleKind::Masquerade, net, valid) if net == "fakenet" && valid.is_empty())),
        "{gc:?}"
    );
}

#[test]
fn bridge_del_releases_the_address_when_the_firewall_fails() {
    let node = FakeNode::new();
    let failing = Arc::new(FailingTeardown(node.firewall.clone()));
    del_releases_despite_the_firewall(
        &node,
        Bridge::with_kernel(node.kernel.clone(), node.firewall.clone()),
        Bridge::with_kernel(node.kernel.clone(), failing),
        json!({"type": "bridge", "bridge": "fakebr0", "isGateway": true, "ipMasq": true}),
    );
}

#[test]
fn ptp_del_releases_the_address_when_the_firewall_fails() {
    let node = FakeNode::new();
    let failing = Arc::new(FailingTeardown(node.firewall.clone()));
    del_releases_despite_the_firewall(
        &node,
        Ptp::with_kernel(node.kernel.clone(), node.firewall.clone()),
        Ptp::with_kernel(node.kernel.clone(), failing),
        json!({"type": "ptp", "ipMasq": true}),
    );
}

/// ADD, then DEL with a firewall whose removals fail and an IPAM plugin
/// whose DEL fails: both failures are reported, with the first one's code
/// (the firewall's, 999), and the pod link is gone anyway; then GC with
/// that firewall reports every rule kind it could not collect.
fn del_reports_every_failed_step<P: Plugin>(
    node: &FakeNode,
    ours: P,
    failing: P,
    plugin: Value,
    gc_failures: usize,
) where
    P::Error: std::fmt::Debug,
{
    let conf = node.conf(plugin);
    ours.add(&node.request(Command::Add, &conf, "c1", POD))
        .expect("ADD");
    node.refuse_ipam_del();
    let e = failing
        .del(&node.request(Command::Del, &conf, "c1", POD))
        .err()
        .map(Into::<CniError>::into)
        .expect("DEL reports its failures");
    assert!(e.msg.contains("refused by the test"), "{e:?}");
    assert!(e.msg.contains("ipam DEL says no"), "{e:?}");
    assert_eq!(e.code.as_u32(), 999, "the first failure's code: {e:?}");
    assert_eq!(node.leases(), ["c1"], "the IPAM DEL failed");
    assert_eq!(node.kernel.link_names(POD), ["lo"]);

    let mut gc_conf = conf.clone();
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    let e = failing
        .gc(&node.request(Command::Gc, &gc_conf, "", ""))
        .err()
        .map(Into::<CniError>::into)
        .expect("GC reports its failures");
    assert_eq!(
        e.msg.matches("refused by the test").count(),
        gc_failures,
        "{e:?}"
    );
}

#[test]
fn bridge_del_and_gc_report_every_failed_step() {
    let node = FakeNode::new();
    let failing = Arc::new(FailingTeardown(node.firewall.clone()));
    del_reports_every_failed_step(
        &node,
        Bridge::with_kernel(node.kernel.clone(), node.firewall.clone()),
        Bridge::with_kernel(node.kernel.clone(), failing),
        json!({"type": "bridge", "bridge": "fakebr0", "isGateway": true, "ipMasq": true,
               "macspoofchk": true}),
        2,
    );
}

#[test]
fn ptp_del_reports_every_failed_step() {
    let node = FakeNode::new();
    let failing = Arc::new(FailingTeardown(node.firewall.clone()));
    del_reports_every_failed_step(
        &node,
        Ptp::with_kernel(node.kernel.clone(), node.firewall.clone()),
        Ptp::with_kernel(node.kernel.clone(), failing),
        json!({"type": "ptp", "ipMasq": true}),
        1,
    );
}

/// The firewall calls that remove rules.
fn removals(calls: &[FirewallCall]) -> Vec<FirewallCall> {
    calls
        .iter()
        .filter(|c| matches!(c, FirewallCall::Delete(_) | FirewallCall::DeleteOwned(..)))
        .cloned()
        .collect()
}

/// DEL of an attachment made by ADD: what the IPAM plugin saw when asked
/// to release, then DEL again and DEL without a netns succeed.
fn del_twice_after_add<P: Plugin>(node: &FakeNode, plugin: &P, conf: &Value)
where
    P::Error: std::fmt::Debug,
{
    plugin
        .add(&node.request(Command::Add, conf, "c1", POD))
        .expect("ADD");
    plugin
        .del(&node.request(Command::Del, conf, "c1", POD))
        .expect("DEL");
    assert!(node.leases().is_empty());
    assert_eq!(node.kernel.link_names(POD), ["lo"]);
    plugin
        .del(&node.request(Command::Del, conf, "c1", POD))
        .expect("DEL again");
    plugin
        .del(&node.request(Command::Del, conf, "c1", ""))
        .expect("DEL without a netns");
}

#[test]
fn bridge_del_removes_the_rules_before_releasing_the_address() {
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "bridge", "bridge": "fakebr0",
        "isGateway": true, "ipMasq": true, "macspoofchk": true}));
    let bridge = Bridge::with_kernel(node.kernel.clone(), node.firewall.clone());
    del_twice_after_add(&node, &bridge, &conf);
    let del = node
        .ipam_calls()
        .into_iter()
        .find(|c| c.command == "DEL")
        .expect("IPAM DEL");
    let removed = removals(&del.firewall);
    assert!(
        removed
            .iter()
            .any(|c| matches!(c, FirewallCall::DeleteOwned(RuleKind::MacSpoofCheck, _))),
        "{removed:?}"
    );
    assert!(
        removed
            .iter()
            .any(|c| matches!(c, FirewallCall::Delete(RuleSpec::Masquerade(m)) if m.addresses == ["10.231.0.2/24".parse().unwrap()])),
        "the masquerade is removed by the pod's address, read before the link went: {removed:?}"
    );
    // The bridge stays for the node's other pods.
    assert!(node.kernel.link_names(NODE).contains(&"fakebr0".to_owned()));
    assert!(node.node_veths().is_empty());
}

#[test]
fn ptp_del_removes_the_rules_before_releasing_the_address() {
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "ptp", "ipMasq": true}));
    let ptp = Ptp::with_kernel(node.kernel.clone(), node.firewall.clone());
    del_twice_after_add(&node, &ptp, &conf);
    let del = node
        .ipam_calls()
        .into_iter()
        .find(|c| c.command == "DEL")
        .expect("IPAM DEL");
    assert!(
        removals(&del.firewall)
            .iter()
            .any(|c| matches!(c, FirewallCall::DeleteOwned(RuleKind::Masquerade, id) if id.container_id == "c1")),
        "{:?}",
        del.firewall
    );
    // The pair went with the pod end: nothing of it is left on the node.
    assert!(node.node_veths().is_empty());
}

#[test]
fn macvlan_del_deletes_the_link_and_releases_the_address() {
    let node = FakeNode::new();
    node.kernel.add_device(NODE, "uplink0");
    let conf = node.conf(json!({"type": "macvlan", "master": "uplink0"}));
    let macvlan = Macvlan::with_kernel(node.kernel.clone());
    del_twice_after_add(&node, &macvlan, &conf);
    let deleted: Vec<_> = node
        .kernel
        .calls()
        .into_iter()
        .filter(|c| c.op == KernelOp::DeleteLink)
        .collect();
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert_eq!(
        (deleted[0].netns.as_str(), deleted[0].object.as_str()),
        (POD, "eth0")
    );
    // The master is untouched.
    assert_eq!(node.kernel.link_names(NODE), ["lo", "uplink0"]);
}

/// ADD, then the pod's namespace goes, then DEL: the address is released
/// and the rules are removed by their owner.
fn del_after_the_netns_is_gone<P: Plugin>(node: &FakeNode, plugin: &P, conf: &Value)
where
    P::Error: std::fmt::Debug,
{
    plugin
        .add(&node.request(Command::Add, conf, "c1", POD))
        .expect("ADD");
    node.kernel.remove_netns(POD);
    plugin
        .del(&node.request(Command::Del, conf, "c1", POD))
        .expect("DEL");
    plugin
        .del(&node.request(Command::Del, conf, "c1", POD))
        .expect("DEL again");
    assert!(node.leases().is_empty());
    assert!(node.node_veths().is_empty());
}

#[test]
fn bridge_del_after_the_netns_is_gone_releases_and_unmasquerades() {
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "bridge", "bridge": "fakebr0", "ipMasq": true}));
    del_after_the_netns_is_gone(
        &node,
        &Bridge::with_kernel(node.kernel.clone(), node.firewall.clone()),
        &conf,
    );
    assert!(node.firewall.calls().iter().any(
        |c| matches!(c, FirewallCall::Delete(RuleSpec::Masquerade(m)) if m.addresses.is_empty())
    ));
}

#[test]
fn ptp_del_after_the_netns_is_gone_releases_and_unmasquerades() {
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "ptp", "ipMasq": true}));
    del_after_the_netns_is_gone(
        &node,
        &Ptp::with_kernel(node.kernel.clone(), node.firewall.clone()),
        &conf,
    );
    assert!(node
        .firewall
        .calls()
        .iter()
        .any(|c| matches!(c, FirewallCall::DeleteOwned(RuleKind::Masquerade, _))));
}

#[test]
fn macvlan_del_after_the_netns_is_gone_releases() {
    let node = FakeNode::new();
    node.kernel.add_device(NODE, "uplink0");
    let conf = node.conf(json!({"type": "macvlan", "master": "uplink0"}));
    del_after_the_netns_is_gone(&node, &Macvlan::with_kernel(node.kernel.clone()), &conf);
}
