//! A failed ADD takes back everything it did, newest first, without root:
//! the plugins run on a fake kernel (`fake_kernel_support`) whose failures
//! are injected where the real kernel's would come from. The real-kernel
//! oracle for the same paths: `bridge_behaviour::{ipam_exhaustion_leaves_nothing_behind,
//! failing_ipam_delegate_leaves_no_veth, add_into_a_missing_netns_releases_the_address,
//! failure_after_ipam_add_releases_the_address}`,
//! `ptp::ptp_failed_add_leaves_nothing_and_del_survives_a_vanished_netns`,
//! `macvlan::macvlan_failed_add_leaves_nothing_and_del_survives_a_vanished_netns`.

use std::sync::Arc;

use cni_exec::{Command, Plugin};
use cni_firewall::{
    AttachmentId, Firewall, FirewallCall, OwnedAttachment, RecordingFirewall, RuleKind, RuleSpec,
};
use cni_netns::kernel::{Errno, KernelOp, NetKernel, NetnsHandle};
use cni_plugins::bridge::Bridge;
use cni_plugins::ipvlan::Ipvlan;
use cni_plugins::macvlan::Macvlan;
use cni_plugins::ptp::Ptp;
use cni_types::{ErrorCode, Route};
use serde_json::json;

use crate::fake_kernel_support::{cni_error, FakeNode, NODE, POD};

/// Nothing of the attachment is left: no lease, no pod link, no veth on
/// the node, no rule added and not removed.
fn nothing_left(node: &FakeNode) {
    assert!(node.leases().is_empty(), "{:?}", node.leases());
    assert_eq!(node.kernel.link_names(POD), ["lo"]);
    assert!(node.node_veths().is_empty(), "{:?}", node.node_veths());
    let calls = node.firewall.calls();
    for added in calls.iter().filter_map(|c| match c {
        FirewallCall::Add(spec) => Some(spec),
        _ => None,
    }) {
        let kind = match added {
            RuleSpec::Masquerade(_) => RuleKind::Masquerade,
            RuleSpec::MacSpoofCheck(_) => RuleKind::MacSpoofCheck,
            other => panic!("unexpected rule {other:?}"),
        };
        assert!(
            calls
                .iter()
                .any(|c| matches!(c, FirewallCall::DeleteOwned(k, _) if *k == kind)),
            "{calls:?}"
        );
    }
}

fn bridge(node: &FakeNode) -> Bridge<cni_netns::kernel::FakeKernel> {
    Bridge::with_kernel(node.kernel.clone(), node.firewall.clone())
}

#[test]
fn bridge_failing_ipam_passes_its_error_on_and_leaves_no_veth() {
    let node = FakeNode::with_ipam(Vec::new(), true);
    let conf = node.conf(json!({"type": "bridge", "bridge": "fakebr0", "ipMasq": true}));
    let e = bridge(&node)
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    let e = cni_error(e);
    assert_eq!(
        (e.code, e.msg.as_str()),
        (ErrorCode::TryAgainLater, "ipam says no")
    );
    nothing_left(&node);
}

#[test]
fn bridge_add_into_a_missing_netns_releases_the_address() {
    // IPAM runs while the namespace is opened: its lease must go when the
    // namespace turns out not to exist.
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "bridge", "bridge": "fakebr0", "isGateway": true}));
    let e = bridge(&node)
        .add(&node.request(Command::Add, &conf, "c1", "/run/netns/no-such-pod"))
        .unwrap_err();
    assert!(format!("{e}").contains("no-such-pod"), "{e}");
    nothing_left(&node);
}

#[test]
fn bridge_failure_after_ipam_add_undoes_rules_lease_and_veth() {
    let node = FakeNode::new();
    // The bridge already has another address: the gateway step fails,
    // after the masquerade was committed.
    let host = node.kernel.current().unwrap();
    let br = host
        .ensure_bridge(&cni_netns::BridgeSpec {
            name: "fakebr0".into(),
            ..Default::default()
        })
        .unwrap();
    host.add_address(br.index, "10.0.0.1/24".parse().unwrap(), Default::default())
        .unwrap();
    let conf = node.conf(json!({"type": "bridge", "bridge": "fakebr0",
        "isGateway": true, "ipMasq": true, "macspoofchk": true}));
    let e = bridge(&node)
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(
        format!("{e}").contains("already has an IP address different from 10.231.0.1/24"),
        "{e}"
    );
    nothing_left(&node);
    // Undone newest first: the rules, then the lease (while the pod link
    // still exists: dhcp releases over it), then the link.
    let del = node
        .ipam_calls()
        .into_iter()
        .find(|c| c.command == "DEL")
        .unwrap();
    assert_eq!(del.pod_links, ["lo", "eth0"]);
    let removed: Vec<_> = del
        .firewall
        .iter()
        .filter(|c| matches!(c, FirewallCall::DeleteOwned(..)))
        .collect();
    assert_eq!(removed.len(), 2, "masquerade and spoof check: {removed:?}");
}

#[test]
fn bridge_kernel_failure_undoes_everything() {
    // Each kernel step failing in turn: the pod's default route and
    // address, the gateway address on the bridge, bringing the pod end and
    // the bridge up, making the veth.
    for (op, netns) in [
        (KernelOp::AddRoute, POD),
        (KernelOp::AddAddress, POD),
        (KernelOp::AddAddress, NODE),
        (KernelOp::SetUp, POD),
        (KernelOp::SetUp, NODE),
        (KernelOp::AddLink, NODE),
    ] {
        let node = FakeNode::new();
        node.kernel.fail_next(op, netns, Errno::ENOMEM);
        let conf = node.conf(json!({"type": "bridge", "bridge": "fakebr0",
            "isDefaultGateway": true, "ipMasq": true}));
        let e = bridge(&node)
            .add(&node.request(Command::Add, &conf, "c1", POD))
            .expect_err("ADD fails");
        assert!(
            format!("{e}").contains("Out of memory"),
            "{op:?} in {netns}: {e}"
        );
        nothing_left(&node);
    }
}

#[test]
fn ptp_failed_add_leaves_nothing() {
    // eth0 taken in the pod: the veth cannot be made after IPAM ran.
    let node = FakeNode::new();
    node.kernel.add_device(POD, "eth0");
    let conf = node.conf(json!({"type": "ptp", "ipMasq": true}));
    let ptp = Ptp::with_kernel(node.kernel.clone(), node.firewall.clone());
    let e = ptp
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert_eq!(cni_error(e).code, ErrorCode::Internal);
    assert!(node.leases().is_empty());
    assert_eq!(node.kernel.link_names(POD), ["lo", "eth0"]);
    assert!(node.node_veths().is_empty());
    assert!(node
        .firewall
        .calls()
        .iter()
        .all(|c| !matches!(c, FirewallCall::Add(_))));
}

#[test]
fn ptp_kernel_failure_undoes_everything() {
    for (op, netns) in [
        (KernelOp::DelRoute, POD),
        (KernelOp::AddRoute, POD),
        (KernelOp::AddAddress, NODE),
        (KernelOp::AddRoute, NODE),
        (KernelOp::WriteSysctl, NODE),
    ] {
        let node = FakeNode::new();
        node.kernel.fail_next(op, netns, Errno::EPERM);
        let conf = node.conf(json!({"type": "ptp", "ipMasq": true}));
        let ptp = Ptp::with_kernel(node.kernel.clone(), node.firewall.clone());
        let e = ptp
            .add(&node.request(Command::Add, &conf, "c1", POD))
            .expect_err("ADD fails");
        assert!(
            format!("{e}").contains("not permitted"),
            "{op:?} in {netns}: {e}"
        );
        nothing_left(&node);
    }
}

/// The recording firewall, except that adding rules fails.
#[derive(Debug)]
struct FailingAdd(Arc<RecordingFirewall>);

impl Firewall for FailingAdd {
    fn add(&self, spec: &RuleSpec) -> cni_firewall::Result<()> {
        self.0.add(spec)?;
        Err(cni_firewall::Error::FirewallTool {
            op: "add".into(),
            command: "test".into(),
            message: "refused by the test".into(),
        })
    }
    fn delete(&self, spec: &RuleSpec) -> cni_firewall::Result<()> {
        self.0.delete(spec)
    }
    fn check(&self, spec: &RuleSpec) -> cni_firewall::Result<()> {
        self.0.check(spec)
    }
    fn delete_owned(&self, kind: RuleKind, id: &AttachmentId) -> cni_firewall::Result<()> {
        self.0.delete_owned(kind, id)
    }
    fn list(&self, kind: RuleKind) -> cni_firewall::Result<Vec<OwnedAttachment>> {
        self.0.list(kind)
    }
    fn gc(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> cni_firewall::Result<Vec<OwnedAttachment>> {
        self.0.gc(kind, network, valid)
    }
}

#[test]
fn ptp_failed_masquerade_undoes_it_and_everything_before() {
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "ptp", "ipMasq": true}));
    let ptp = Ptp::with_kernel(
        node.kernel.clone(),
        Arc::new(FailingAdd(node.firewall.clone())),
    );
    let e = ptp
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("refused by the test"), "{e}");
    nothing_left(&node);
}

#[test]
fn bridge_failed_masquerade_undoes_everything() {
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "bridge", "bridge": "fakebr0", "ipMasq": true}));
    let plugin = Bridge::with_kernel(
        node.kernel.clone(),
        Arc::new(FailingAdd(node.firewall.clone())),
    );
    let e = plugin
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("refused by the test"), "{e}");
    assert!(node.leases().is_empty());
    assert_eq!(node.kernel.link_names(POD), ["lo"]);
    assert!(node.node_veths().is_empty());
}

#[test]
fn macvlan_failed_add_leaves_nothing() {
    // A route whose gateway is off-link fails after IPAM allocated.
    let node = FakeNode::with_ipam(
        vec![Route::new(
            "10.200.0.0/16".parse().unwrap(),
            Some("192.0.2.1".parse().unwrap()),
        )],
        false,
    );
    node.kernel.add_device(NODE, "uplink0");
    let conf = node.conf(json!({"type": "macvlan", "master": "uplink0"}));
    let e = Macvlan::with_kernel(node.kernel.clone())
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("Network is unreachable"), "{e}");
    nothing_left(&node);
    assert_eq!(node.kernel.link_names(NODE), ["lo", "uplink0"]);
    // The lease went while the link still existed, the link after it.
    let del = node
        .ipam_calls()
        .into_iter()
        .find(|c| c.command == "DEL")
        .unwrap();
    assert_eq!(del.pod_links.len(), 2, "{:?}", del.pod_links);
}

#[test]
fn macvlan_failed_rename_deletes_the_link_and_asks_no_address() {
    let node = FakeNode::new();
    node.kernel.add_device(NODE, "uplink0");
    node.kernel.fail_next(KernelOp::Rename, POD, Errno::EBUSY);
    let conf = node.conf(json!({"type": "macvlan", "master": "uplink0"}));
    let e = Macvlan::with_kernel(node.kernel.clone())
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e}").contains("busy"), "{e}");
    nothing_left(&node);
    assert!(node.ipam_calls().is_empty());
    let ops: Vec<_> = node.kernel.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, [KernelOp::AddLink, KernelOp::DeleteLink]);
}

#[test]
fn macvlan_missing_master_fails_before_anything() {
    let node = FakeNode::new();
    let conf = node.conf(json!({"type": "macvlan", "master": "nosuch0"}));
    let e = Macvlan::with_kernel(node.kernel.clone())
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .unwrap_err();
    assert_eq!(
        cni_error(e).msg,
        "failed to lookup master \"nosuch0\": Link not found"
    );
    assert!(node.kernel.calls().is_empty() && node.ipam_calls().is_empty());
}

#[test]
fn ipvlan_add_and_del_on_the_fake() {
    // The node's kernel lacks ipvlan: the fake is where its ADD runs.
    let node = FakeNode::new();
    node.kernel.add_device(NODE, "uplink0");
    let conf = node.conf(json!({"type": "ipvlan", "master": "uplink0", "mode": "l3"}));
    let ipvlan = Ipvlan::with_kernel(node.kernel.clone());
    let r = ipvlan
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .expect("ADD");
    assert_eq!(r.interfaces[0].name, "eth0");
    let pod = node.kernel.open(POD).unwrap();
    let details = pod.link_details("eth0").unwrap();
    assert_eq!(details.ipvlan_mode, Some(cni_netns::IpvlanMode::L3));
    assert!(details.link.is_up());
    assert_eq!(node.kernel.address_list(POD), ["10.231.0.2/24 on eth0"]);
    ipvlan
        .del(&node.request(Command::Del, &conf, "c1", POD))
        .expect("DEL");
    nothing_left(&node);
}

/// ADD, then CHECK with its result as `prevResult`: the plugin's CHECK
/// finds what its ADD made, in the same fake kernel.
fn check_after_add<P: Plugin>(node: &FakeNode, plugin: &P, mut conf: serde_json::Value)
where
    P::Error: std::fmt::Debug,
{
    let added = plugin
        .add(&node.request(Command::Add, &conf, "c1", POD))
        .expect("ADD");
    conf["prevResult"] = serde_json::to_value(&added).unwrap();
    plugin
        .check(&node.request(Command::Check, &conf, "c1", POD))
        .expect("CHECK");
    // A pod interface gone: CHECK says so, as Go's.
    let pod = node.kernel.open(POD).unwrap();
    pod.delete_link_by_name("eth0").unwrap();
    let e = plugin
        .check(&node.request(Command::Check, &conf, "c1", POD))
        .unwrap_err();
    assert!(format!("{e:?}").contains("eth0"), "{e:?}");
}

#[test]
fn bridge_ptp_macvlan_check_what_their_add_made() {
    let node = FakeNode::new();
    check_after_add(
        &node,
        &bridge(&node),
        node.conf(json!({"type": "bridge", "bridge": "fakebr0",
            "isGateway": true, "ipMasq": true, "macspoofchk": true})),
    );
    assert!(node
        .firewall
        .calls()
        .iter()
        .any(|c| matches!(c, FirewallCall::Check(RuleSpec::MacSpoofCheck(_)))));

    let node = FakeNode::new();
    check_after_add(
        &node,
        &Ptp::with_kernel(node.kernel.clone(), node.firewall.clone()),
        node.conf(json!({"type": "ptp", "ipMasq": true})),
    );
    assert!(node
        .firewall
        .calls()
        .iter()
        .any(|c| matches!(c, FirewallCall::Check(RuleSpec::Masquerade(_)))));

    let node = FakeNode::new();
    node.kernel.add_device(NODE, "uplink0");
    check_after_add(
        &node,
        &Macvlan::with_kernel(node.kernel.clone()),
        node.conf(json!({"type": "macvlan", "master": "uplink0", "mode": "vepa"})),
    );
}
