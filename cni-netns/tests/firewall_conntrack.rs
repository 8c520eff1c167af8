//! Stale UDP conntrack entries (root): a host port moved from one pod to
//! another keeps sending the client's datagrams to the old pod until the
//! entries for that host port are deleted over ctnetlink.

mod firewall_common;

use std::net::UdpSocket;
use std::time::Duration;

use cni_netns::conntrack::{Conntrack, IpFamily};
use cni_netns::firewall::{
    AttachmentId, Firewall, NftFirewall, PortMapping, PortMappingSpec, Protocol,
};
use firewall_common::*;

fn udp_spec(pod: usize) -> PortMappingSpec {
    let mut s = PortMappingSpec::new(AttachmentId::new("ctnet", format!("pod{pod}"), "eth0"));
    s.container_v4 = Some(format!("{}/24", Topology::pod_ip(pod)).parse().unwrap());
    s.mappings = vec![PortMapping {
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
    t.ext
        .run_in(|| {
            let s = UdpSocket::bind("0.0.0.0:40000").expect("bind client");
            s.set_read_timeout(Some(Duration::from_millis(400))).ok();
            for _ in 0..3 {
                s.send_to(b"hi", "10.98.0.1:5000").expect("send");
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

fn conntrack_udp_5000(t: &Topology) -> usize {
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
    String::from_utf8_lossy(&out.stdout).lines().count()
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

    fw.add_port_mappings(&udp_spec(0)).unwrap();
    assert_eq!(ask(&t).as_deref(), Some("pod0"));
    assert_eq!(conntrack_udp_5000(&t), 1);

    // The host port moves to pod1; the client's flow still goes to pod0.
    fw.del_port_mappings(&udp_spec(0)).unwrap();
    fw.add_port_mappings(&udp_spec(1)).unwrap();
    assert_eq!(ask(&t).as_deref(), Some("pod0"));

    let mut ct = Conntrack::open_in(t.node.path()).unwrap();
    // Other ports and the other family are left alone.
    assert_eq!(ct.delete_udp_by_dst_port(IpFamily::V4, 5001).unwrap(), 0);
    assert_eq!(ct.delete_udp_by_dst_port(IpFamily::V6, 5000).unwrap(), 0);
    assert_eq!(ct.delete_udp_by_dst_port(IpFamily::V4, 5000).unwrap(), 1);
    assert_eq!(conntrack_udp_5000(&t), 0);
    assert_eq!(ct.delete_udp_by_dst_port(IpFamily::V4, 5000).unwrap(), 0);

    assert_eq!(ask(&t).as_deref(), Some("pod1"));
}

#[test]
fn open_in_missing_namespace_is_a_typed_error() {
    let e = Conntrack::open_in("/run/netns/does-not-exist-ct").unwrap_err();
    assert!(matches!(e, cni_netns::Error::FirewallNetns { .. }), "{e}");
}
