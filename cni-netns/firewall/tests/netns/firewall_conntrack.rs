//! Stale UDP conntrack entries (root): a host port moved from one pod to
//! another keeps sending the client's datagrams to the old pod until the
//! entries for that host port are deleted over ctnetlink.

use std::net::UdpSocket;
use std::time::Duration;

use crate::firewall_common::*;
use cni_firewall::conntrack::{Conntrack, ConntrackFamily};
use cni_firewall::{
    AttachmentId, Firewall, HostPortMapping, NftFirewall, PortMappingSpec, Protocol, RuleSpec,
};

fn udp_spec(pod: usize) -> PortMappingSpec {
    let mut s = PortMappingSpec::new(AttachmentId::new("ctnet", format!("pod{pod}"), "eth0"));
    s.container_v4 = Some(format!("{}/24", Topology::pod_ip(pod)).parse().unwrap());
    s.mappings = vec![HostPortMapping {
        host_port: 5000,
        container_port: 5001,
        protocol: Protocol::Udp,
        host_ip: None,
    }];
    s
}

/// Sends one datagram from ext (fixed source port, so every send is the
/// same conntrack entry) and returns the answer, if any.
fn ask(t: &Topology) -> Option<String> {
    ask_at(t, "0.0.0.0:40000", "10.98.0.1:5000")
}

fn ask_at(t: &Topology, local: &'static str, host_port: &'static str) -> Option<String> {
    t.ext
        .run_in(move || {
            let s = UdpSocket::bind(local).expect("bind client");
            s.set_read_timeout(Some(Duration::from_millis(400))).ok();
            // Retries cover neighbour discovery and bridge ports settling.
            for _ in 0..10 {
                s.send_to(b"hi", host_port).expect("send");
                let mut buf = [0u8; 64];
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
                }
            }
            None
        })
        .join()
        .expect("client thread")
}

/// Entries for UDP port 5000 as the `conntrack` tool sees them (an
/// independent oracle); `None` when the tool is not installed.
fn conntrack_udp_5000(t: &Topology) -> Option<usize> {
    if !have("conntrack") {
        return None;
    }
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.node.name,
            "conntrack",
            "-L",
            "-p",
            "udp",
            "--orig-port-dst",
            "5000",
        ])
        .output()
        .expect("conntrack binary");
    Some(String::from_utf8_lossy(&out.stdout).lines().count())
}

#[test]
fn stale_udp_entry_is_flushed_by_host_port() {
    if skip_unless_root() {
        return;
    }
    let t = Topology::new(2);
    let fw = NftFirewall::in_netns(t.node.path());
    let _p0 = UdpServer::start(&t.pods[0], 5001, "pod0");
    let _p1 = UdpServer::start(&t.pods[1], 5001, "pod1");

    fw.add(&RuleSpec::PortMappings(udp_spec(0))).unwrap();
    assert_eq!(ask(&t).as_deref(), Some("pod0"));
    assert!(matches!(conntrack_udp_5000(&t), Some(1) | None));

    // The host port moves to pod1; the client's flow still goes to pod0.
    fw.delete(&RuleSpec::PortMappings(udp_spec(0))).unwrap();
    fw.add(&RuleSpec::PortMappings(udp_spec(1))).unwrap();
    assert_eq!(ask(&t).as_deref(), Some("pod0"));

    let mut ct = Conntrack::open_in(t.node.path()).unwrap();
    // Other ports and the other family are left alone.
    assert_eq!(
        ct.delete_udp_by_dst_port(ConntrackFamily::V4, 5001)
            .unwrap(),
        0
    );
    assert_eq!(
        ct.delete_udp_by_dst_port(ConntrackFamily::V6, 5000)
            .unwrap(),
        0
    );
    let ports = udp_spec(1).udp_host_ports(false);
    assert_eq!(ports, [5000]);
    assert_eq!(
        ct.delete_udp_by_dst_ports(ConntrackFamily::V4, &ports)
            .unwrap(),
        1
    );
    assert!(matches!(conntrack_udp_5000(&t), Some(0) | None));
    assert_eq!(
        ct.delete_udp_by_dst_port(ConntrackFamily::V4, 5000)
            .unwrap(),
        0
    );

    assert_eq!(ask(&t).as_deref(), Some("pod1"));
}

#[test]
fn open_in_missing_namespace_is_a_typed_error() {
    let e = Conntrack::open_in("/run/netns/does-not-exist-ct").unwrap_err();
    assert!(
        matches!(
            e,
            cni_firewall::Error::Netns(cni_netns::Error::NetnsNotFound { .. })
        ),
        "{e}"
    );
}

#[test]
fn stale_udp_entry_is_flushed_ipv6() {
    if skip_unless_root() {
        return;
    }
    let t = Topology::new(2);
    let fw = NftFirewall::in_netns(t.node.path());
    let _p0 = UdpServer::start_on(&t.pods[0], "::", 5001, "pod0");
    let _p1 = UdpServer::start_on(&t.pods[1], "::", 5001, "pod1");
    let spec6 = |pod: usize| {
        let mut s = udp_spec(pod);
        s.container_v4 = None;
        s.container_v6 = Some(format!("fd00:99::{}/64", pod + 2).parse().unwrap());
        s
    };
    let ask6 = || ask_at(&t, "[::]:40001", "[fd00:98::1]:5000");

    fw.add(&RuleSpec::PortMappings(spec6(0))).unwrap();
    assert_eq!(ask6().as_deref(), Some("pod0"));
    fw.delete(&RuleSpec::PortMappings(spec6(0))).unwrap();
    fw.add(&RuleSpec::PortMappings(spec6(1))).unwrap();
    assert_eq!(ask6().as_deref(), Some("pod0"));

    let mut ct = Conntrack::open_in(t.node.path()).unwrap();
    assert_eq!(
        ct.delete_udp_by_dst_port(ConntrackFamily::V4, 5000)
            .unwrap(),
        0
    );
    assert_eq!(
        ct.delete_udp_by_dst_ports(ConntrackFamily::V6, &[4999, 5000])
            .unwrap(),
        1
    );
    assert_eq!(ask6().as_deref(), Some("pod1"));
}
