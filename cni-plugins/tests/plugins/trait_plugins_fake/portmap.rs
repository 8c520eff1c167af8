//! portmap on the fake kernel and the recording firewall, without root:
//! ADD's mappings and `route_localnet` on the interface the node routes
//! the pod through, DEL's removal, a kernel failure at each of ADD's
//! steps taking the mappings back, DEL with the pod gone. The real-kernel
//! oracle: `portmap_traffic::`. (TCP mappings only: UDP ones flush the
//! conntrack table, which is the node's, not the fake's.)

use std::sync::Arc;

use cni_exec::{Command, Plugin, Request};
use cni_firewall::{FirewallCall, RecordingFirewall};
use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
use cni_plugins::portmap::Portmap;
use cni_types::NetworkConfig;
use serde_json::json;

const NODE: &str = "node";
const ROUTE_LOCALNET: &str = "net/ipv4/conf/cni0/route_localnet";

/// A fake node whose `cni0` (10.231.0.1/24) routes to the pod.
struct Node {
    kernel: FakeKernel,
    firewall: Arc<RecordingFirewall>,
}

fn node() -> Node {
    let kernel = FakeKernel::new();
    let host = kernel.current().unwrap();
    let index = host.add_dummy("cni0").unwrap().index;
    host.set_up(index).unwrap();
    host.add_address(index, "10.231.0.1/24".parse().unwrap(), Default::default())
        .unwrap();
    Node {
        kernel,
        firewall: Arc::new(RecordingFirewall::default()),
    }
}

impl Node {
    fn request(&self, command: Command, snat: bool) -> Request {
        let conf = json!({
            "cniVersion": "1.0.0", "name": "fakenet", "type": "portmap",
            "snat": snat,
            "runtimeConfig": {"portMappings": [
                {"hostPort": 18080, "containerPort": 80, "protocol": "tcp"},
            ]},
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": "/run/netns/fake-pod"}],
                "ips": [{"address": "10.231.0.2/24", "interface": 0}],
            },
        });
        let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
        Request::builder(command, config)
            .container_id("c1")
            .netns("/run/netns/fake-pod")
            .ifname("eth0")
            .path("/nonexistent-cni-path")
            .build()
            .unwrap()
    }

    fn portmap(&self) -> Portmap<FakeKernel> {
        Portmap::with_kernel(self.kernel.clone()).with_firewall(self.firewall.clone())
    }

    /// Whether the firewall holds mappings: its adds minus its deletes.
    fn mapped(&self) -> bool {
        let calls = self.firewall.calls();
        let count = |f: fn(&FirewallCall) -> bool| calls.iter().filter(|c| f(c)).count();
        count(|c| matches!(c, FirewallCall::Add(_)))
            > count(|c| matches!(c, FirewallCall::Delete(_)))
    }
}

#[test]
fn portmap_add_maps_and_sets_route_localnet_and_del_unmaps() {
    let node = node();
    node.portmap()
        .add(&node.request(Command::Add, true))
        .unwrap();
    assert!(node.mapped());
    assert_eq!(
        node.kernel.sysctl(NODE, ROUTE_LOCALNET).as_deref(),
        Some("1")
    );
    let after_add = node.kernel.state(NODE);
    node.portmap()
        .check(&node.request(Command::Check, true))
        .unwrap();
    node.portmap()
        .del(&node.request(Command::Del, true))
        .unwrap();
    assert!(!node.mapped());
    // `route_localnet` stays, as in Go: the node's other pods on the
    // interface may rely on it.
    assert_eq!(node.kernel.state(NODE), after_add);

    // Without SNAT the kernel is not touched at all.
    let node = self::node();
    let before = node.kernel.state(NODE);
    node.portmap()
        .add(&node.request(Command::Add, false))
        .unwrap();
    node.portmap()
        .del(&node.request(Command::Del, false))
        .unwrap();
    assert_eq!(node.kernel.state(NODE), before);
    assert!(!node.mapped());
}

#[test]
fn portmap_add_failing_at_each_kernel_step_takes_its_mappings_back() {
    let mut failed = 0;
    for op in [
        KernelOp::ListRoutes,
        KernelOp::GetLink,
        KernelOp::WriteSysctl,
    ] {
        let node = node();
        let before = node.kernel.state(NODE);
        node.kernel.fail_next(op, NODE, Errno::ENOBUFS);
        match node.portmap().add(&node.request(Command::Add, true)) {
            // A link that cannot be looked up is skipped, as in Go.
            Ok(_) => {
                assert_eq!(op, KernelOp::GetLink);
                continue;
            }
            Err(e) => {
                failed += 1;
                let e = cni_types::CniError::from(e);
                assert!(
                    e.msg.contains("No buffer space") || e.details.contains("No buffer space"),
                    "{op:?}: {e:?}"
                );
            }
        }
        assert_eq!(node.kernel.state(NODE), before, "{op:?}");
        assert!(!node.mapped(), "{op:?}: {:?}", node.firewall.calls());
        node.portmap()
            .del(&node.request(Command::Del, true))
            .unwrap();
        assert_eq!(node.kernel.state(NODE), before, "{op:?}");
    }
    assert_eq!(failed, 2);
}

#[test]
fn portmap_del_succeeds_without_prev_result_or_interface() {
    let node = node();
    node.portmap()
        .add(&node.request(Command::Add, true))
        .unwrap();
    // The node's interface gone meanwhile.
    let host = node.kernel.current().unwrap();
    assert!(host.delete_link_by_name("cni0").unwrap());
    node.portmap()
        .del(&node.request(Command::Del, true))
        .unwrap();
    assert!(!node.mapped());
    node.portmap()
        .del(&node.request(Command::Del, true))
        .unwrap();
}
