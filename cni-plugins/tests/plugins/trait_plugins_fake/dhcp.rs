//! The dhcp daemon's link steps on the fake kernel, without root: ADD's
//! (the pod interface found, brought up when down, put down again by a
//! failed ADD), CHECK's address lookup, and a kernel failure at each step
//! leaving the pod as it was; and the daemon's ADD, DEL and CHECK with the
//! pod's namespace gone. The DHCP exchange itself needs the real kernel:
//! its oracle is `dhcp::` (against Go's daemon and a real server).

use std::net::Ipv4Addr;

use cni_ipam::dhcp::rpc::{DaemonOp, DaemonRequest};
use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
use cni_plugins::dhcp::config::DaemonOptions;
use cni_plugins::dhcp::daemon::{find_link, holds_address, prepare_link, Daemon};
use serde_json::json;

const POD: &str = "/run/netns/fake-dhcp-pod";

/// A fake pod with `eth0` (up or not) holding 10.1.0.2/24.
fn pod(up: bool) -> FakeKernel {
    let kernel = FakeKernel::new();
    kernel.add_netns(POD);
    let h = kernel.open(POD).unwrap();
    let eth0 = h.add_dummy("eth0").unwrap();
    h.add_address(
        eth0.index,
        "10.1.0.2/24".parse().unwrap(),
        Default::default(),
    )
    .unwrap();
    if up {
        h.set_up(eth0.index).unwrap();
    }
    kernel
}

#[test]
fn dhcp_link_step_brings_a_down_link_up_and_its_undo_puts_it_back() {
    let kernel = pod(false);
    let before = kernel.state(POD);
    let h = kernel.open(POD).unwrap();
    let prepared = prepare_link(&h, "eth0").unwrap();
    assert!(prepared.brought_up);
    let eth0 = h.link_by_name("eth0").unwrap();
    assert!(eth0.is_up());
    assert_eq!(prepared.link.ifindex, eth0.index);
    assert_eq!(prepared.link.mac, eth0.mac.unwrap().0);
    assert_eq!(find_link(&h, "eth0").unwrap().ifindex, eth0.index);
    prepared.undo(&h);
    assert_eq!(kernel.state(POD), before);

    // An interface up already is left up by the undo.
    let kernel = pod(true);
    let before = kernel.state(POD);
    let h = kernel.open(POD).unwrap();
    let prepared = prepare_link(&h, "eth0").unwrap();
    assert!(!prepared.brought_up);
    prepared.undo(&h);
    assert_eq!(kernel.state(POD), before);
}

#[test]
fn dhcp_link_step_failing_at_each_kernel_step_leaves_the_pod_as_it_was() {
    let mut failed = 0;
    for op in [KernelOp::GetLink, KernelOp::SetUp] {
        for n in 1..=3 {
            let kernel = pod(false);
            let before = kernel.state(POD);
            kernel.fail_nth(op, POD, n, Errno::ENOBUFS);
            let h = kernel.open(POD).unwrap();
            match prepare_link(&h, "eth0") {
                Ok(prepared) => {
                    prepared.undo(&h);
                    continue;
                }
                Err(e) => {
                    failed += 1;
                    assert!(
                        e.to_string().contains("No buffer space"),
                        "{op:?} #{n}: {e}"
                    );
                }
            }
            assert_eq!(kernel.state(POD), before, "{op:?} #{n}");
        }
    }
    // GetLink: the lookup and the carrier wait; SetUp: the one call.
    assert_eq!(failed, 3);
}

#[test]
fn dhcp_check_finds_the_address_and_a_gone_link_is_an_error() {
    let kernel = pod(true);
    let h = kernel.open(POD).unwrap();
    assert!(holds_address(&h, "eth0", Ipv4Addr::new(10, 1, 0, 2)).unwrap());
    assert!(!holds_address(&h, "eth0", Ipv4Addr::new(10, 1, 0, 3)).unwrap());
    kernel.fail_next(KernelOp::ListAddresses, POD, Errno::EINTR);
    assert!(holds_address(&h, "eth0", Ipv4Addr::new(10, 1, 0, 2)).is_err());
    let eth0 = h.link_by_name("eth0").unwrap();
    h.delete_link(eth0.index).unwrap();
    assert!(holds_address(&h, "eth0", Ipv4Addr::new(10, 1, 0, 2)).is_err());
    assert!(find_link(&h, "eth0")
        .unwrap_err()
        .to_string()
        .contains("eth0"));
    assert!(prepare_link(&h, "eth0").is_err());
}

#[test]
fn dhcp_daemon_add_fails_and_del_passes_with_the_namespace_gone() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let daemon =
        Daemon::start(DaemonOptions::parse(&["-statedir".to_owned(), state]).unwrap()).unwrap();
    let request = |op| DaemonRequest {
        op,
        container_id: "c1".into(),
        netns: dir.path().join("no-such-netns").display().to_string(),
        ifname: "eth0".into(),
        args: String::new(),
        config: json!({"cniVersion": "1.1.0", "name": "dhnet", "type": "dhcp",
            "ipam": {"type": "dhcp"}}),
    };
    let add = daemon.handle(&request(DaemonOp::Add));
    assert!(add.error.is_some(), "{add:?}");
    assert!(daemon.handle(&request(DaemonOp::Check)).error.is_some());
    let del = daemon.handle(&request(DaemonOp::Del));
    assert!(del.error.is_none(), "{del:?}");
    assert!(daemon.handle(&request(DaemonOp::Del)).error.is_none());
    assert_eq!(daemon.tracked(), 0);
}
