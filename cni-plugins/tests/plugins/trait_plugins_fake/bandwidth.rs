//! bandwidth on the fake kernel, without root: ADD's TBF, ingress qdisc,
//! redirect and IFB on the node, DEL taking them all off, a kernel
//! failure at each of ADD's steps leaving the node as it was, and DEL on
//! half-built or vanished state. The real-kernel oracle: `bandwidth::`
//! (and its differential tests against Go).

use cni_exec::{Command, Plugin, Request};
use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
use cni_netns::VethSpec;
use cni_plugins::bandwidth::{ifb_name, Bandwidth};
use cni_types::NetworkConfig;
use serde_json::json;

const POD: &str = "/run/netns/fake-bandwidth-pod";
const NODE: &str = "node";

/// A fake node with a veth whose peer is the pod's `eth0`.
struct Node {
    kernel: FakeKernel,
    veth: String,
}

fn node() -> Node {
    let kernel = FakeKernel::new();
    kernel.add_netns(POD);
    let host = kernel.current().unwrap();
    let pod = kernel.open(POD).unwrap();
    let veth = host
        .setup_veth_with(&VethSpec {
            peer_name: "eth0".into(),
            peer_netns: Some(pod.netns()),
            up: true,
            ..Default::default()
        })
        .unwrap();
    Node {
        kernel,
        veth: veth.name,
    }
}

impl Node {
    fn request(&self, command: Command) -> Request {
        let conf = json!({
            "cniVersion": "1.0.0", "name": "fakenet", "type": "bandwidth",
            "ingressRate": 8_000_000, "ingressBurst": 80_000,
            "egressRate": 4_000_000, "egressBurst": 40_000,
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [{"name": self.veth}, {"name": "eth0", "sandbox": POD}],
                "ips": [{"address": "10.1.0.2/24", "interface": 1}],
            },
        });
        let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
        Request::builder(command, config)
            .container_id("c1")
            .netns(POD)
            .ifname("eth0")
            .path("/nonexistent-cni-path")
            .build()
            .unwrap()
    }

    fn bandwidth(&self) -> Bandwidth<FakeKernel> {
        Bandwidth::with_kernel(self.kernel.clone())
    }

    /// Both namespaces.
    fn state(&self) -> (Option<String>, Option<String>) {
        (self.kernel.state(NODE), self.kernel.state(POD))
    }
}

#[test]
fn bandwidth_add_shapes_both_directions_and_del_removes_it_all() {
    let node = node();
    let before = node.state();
    let result = node.bandwidth().add(&node.request(Command::Add)).unwrap();
    let ifb = ifb_name("fakenet", "c1");
    assert_eq!(result.interfaces.last().unwrap().name, ifb);
    let qdiscs = node.kernel.qdisc_list(NODE);
    let veth = &node.veth;
    for want in [
        format!("{veth} tbf 1:"),
        format!("{veth} ingress ffff:"),
        format!("{ifb} tbf 1:"),
    ] {
        assert!(qdiscs.contains(&want), "{want} in {qdiscs:?}");
    }
    assert!(
        qdiscs
            .iter()
            .any(|q| q.starts_with(&format!("{veth} filter")) && q.ends_with(&ifb)),
        "{qdiscs:?}"
    );
    assert!(node
        .kernel
        .link_list(NODE)
        .contains(&format!("{ifb}@ifb alias cni-bandwidth/fakenet/c1 up")));
    node.bandwidth()
        .check(&node.request(Command::Check))
        .unwrap();

    node.bandwidth().del(&node.request(Command::Del)).unwrap();
    assert_eq!(node.state(), before);
    node.bandwidth().del(&node.request(Command::Del)).unwrap();
    assert_eq!(node.state(), before);
}

#[test]
fn bandwidth_add_failing_at_each_kernel_step_leaves_the_node_as_it_was() {
    let mut failed = 0;
    for (op, netns) in [
        (KernelOp::GetLink, POD),
        (KernelOp::GetLink, NODE),
        (KernelOp::AddQdisc, NODE),
        (KernelOp::AddLink, NODE),
        (KernelOp::AddFilter, NODE),
    ] {
        for n in 1..=3 {
            let node = node();
            let before = node.state();
            node.kernel.fail_nth(op, netns, n, Errno::ENOBUFS);
            match node.bandwidth().add(&node.request(Command::Add)) {
                Ok(_) => continue,
                // (Some of Go's messages leave the cause out.)
                Err(_) => failed += 1,
            }
            assert_eq!(node.state(), before, "{op:?} in {netns} #{n}");
            node.bandwidth().del(&node.request(Command::Del)).unwrap();
            assert_eq!(node.state(), before, "{op:?} in {netns} #{n}");
        }
    }
    assert!(failed >= 7, "only {failed} ADDs met a fault");
}

#[test]
fn bandwidth_del_succeeds_on_half_built_or_vanished_state() {
    // The IFB gone already: DEL still takes the qdiscs off the veth.
    let node = node();
    let before = node.state();
    node.bandwidth().add(&node.request(Command::Add)).unwrap();
    let host = node.kernel.current().unwrap();
    assert!(host
        .delete_link_by_name(&ifb_name("fakenet", "c1"))
        .unwrap());
    node.bandwidth().del(&node.request(Command::Del)).unwrap();
    assert_eq!(node.state(), before);

    // The pod's namespace gone (the veth with it): the IFB still goes.
    let node = self::node();
    node.bandwidth().add(&node.request(Command::Add)).unwrap();
    node.kernel.remove_netns(POD);
    node.bandwidth().del(&node.request(Command::Del)).unwrap();
    assert!(
        !node
            .kernel
            .link_names(NODE)
            .iter()
            .any(|l| l.starts_with("bwp")),
        "{:?}",
        node.kernel.link_names(NODE)
    );
    node.bandwidth().del(&node.request(Command::Del)).unwrap();
    // ADD on it fails.
    assert!(node.bandwidth().add(&node.request(Command::Add)).is_err());
}

#[test]
fn bandwidth_gc_deletes_only_the_dead_ifbs_of_its_own_network() {
    let node = node();
    node.bandwidth().add(&node.request(Command::Add)).unwrap();
    let host = node.kernel.current().unwrap();
    let others = ["bwp000000000001", "bwp000000000002"];
    host.add_ifb(others[0], 1500, Some("cni-bandwidth/othernet/c1"))
        .unwrap();
    host.add_ifb(others[1], 1500, Some("cni-bandwidth/fakenet/alive"))
        .unwrap();
    let conf = json!({
        "cniVersion": "1.1.0", "name": "fakenet", "type": "bandwidth",
        "cni.dev/valid-attachments": [{"containerID": "alive", "ifname": "eth0"}],
    });
    let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
    let gc = Request::builder(Command::Gc, config)
        .path("/nonexistent-cni-path")
        .build()
        .unwrap();
    node.bandwidth().gc(&gc).unwrap();
    let names = node.kernel.link_names(NODE);
    assert!(!names.contains(&ifb_name("fakenet", "c1")), "{names:?}");
    for other in others {
        assert!(names.contains(&other.to_owned()), "{names:?}");
    }
}
