//! Real traffic through the port mappings (root): a "node" namespace with a
//! bridge, pods on veths, an "ext" namespace routed through the node; std
//! TCP servers on threads entered into the pods.

use crate::firewall_common::*;
use cni_firewall::{
    AttachmentId, HostPortMapping, MacSpoofCheckSpec, MasqueradeSpec, PortMappingSpec, Protocol,
    RuleSpec,
};

fn spec(pod: usize, mappings: Vec<HostPortMapping>) -> PortMappingSpec {
    let mut s = PortMappingSpec::new(AttachmentId::new("trafficnet", format!("pod{pod}"), "eth0"));
    s.container_v4 = Some(format!("{}/24", Topology::pod_ip(pod)).parse().unwrap());
    s.mappings = mappings;
    s
}

fn tcp(host_port: u16, container_port: u16, host_ip: Option<&str>) -> HostPortMapping {
    HostPortMapping {
        host_port,
        container_port,
        protocol: Protocol::Tcp,
        host_ip: host_ip.map(|h| h.parse().unwrap()),
    }
}

#[test]
fn port_mapping_traffic() {
    if skip_unless_root() {
        return;
    }
    let t = Topology::new(2);
    let fw = firewall_for(&t.node.path());
    let _s0 = TcpServer::start(&t.pods[0], 80, "pod0");
    let _s1 = TcpServer::start(&t.pods[1], 81, "pod1");

    // Before any mapping the node answers nothing on the host port.
    assert!(tcp_ask(&t.ext, "10.98.0.1:8080").is_err());

    fw.add(&RuleSpec::PortMappings(spec(0, vec![tcp(8080, 80, None)])))
        .unwrap();
    fw.add(&RuleSpec::PortMappings(spec(
        1,
        vec![tcp(9090, 81, Some("10.98.0.1"))],
    )))
    .unwrap();

    // From another host: DNAT in prerouting, the pod sees the real client.
    assert_eq!(tcp_ask(&t.ext, "10.98.0.1:8080").unwrap(), "pod0 10.98.0.2");
    // From the node itself, to any local address.
    assert_eq!(
        tcp_ask(&t.node, "10.99.0.1:8080").unwrap(),
        "pod0 10.99.0.1"
    );
    assert_eq!(
        tcp_ask(&t.node, "10.98.0.1:8080").unwrap(),
        "pod0 10.98.0.1"
    );
    // From localhost: masqueraded (needs route_localnet on br0).
    assert_eq!(
        tcp_ask(&t.node, "127.0.0.1:8080").unwrap(),
        "pod0 10.99.0.1"
    );
    // Hairpin: the pod reaches its own host port, masqueraded to the node.
    assert_eq!(
        tcp_ask(&t.pods[0], "10.99.0.1:8080").unwrap(),
        "pod0 10.99.0.1"
    );
    // A neighbour pod too (same subnet: masqueraded).
    assert_eq!(
        tcp_ask(&t.pods[1], "10.98.0.1:8080").unwrap(),
        "pod0 10.99.0.1"
    );

    // hostIP limits the mapping to that address.
    assert_eq!(tcp_ask(&t.ext, "10.98.0.1:9090").unwrap(), "pod1 10.98.0.2");
    assert!(tcp_ask(&t.node, "10.99.0.1:9090").is_err());

    // DEL stops the forwarding; the other mapping is untouched.
    fw.delete(&RuleSpec::PortMappings(spec(0, vec![tcp(8080, 80, None)])))
        .unwrap();
    assert!(tcp_ask(&t.ext, "10.98.0.1:8080").is_err());
    assert_eq!(tcp_ask(&t.ext, "10.98.0.1:9090").unwrap(), "pod1 10.98.0.2");
}

#[test]
fn snat_off_and_masq_all() {
    if skip_unless_root() {
        return;
    }
    let t = Topology::new(1);
    let fw = firewall_for(&t.node.path());
    let _s0 = TcpServer::start(&t.pods[0], 80, "pod0");

    let mut s = spec(0, vec![tcp(8080, 80, None)]);
    s.masq_all = true;
    fw.add(&RuleSpec::PortMappings(s.clone())).unwrap();
    // masqAll: even other hosts' traffic arrives from the node.
    assert_eq!(tcp_ask(&t.ext, "10.98.0.1:8080").unwrap(), "pod0 10.99.0.1");

    s.masq_all = false;
    s.snat = false;
    fw.add(&RuleSpec::PortMappings(s.clone())).unwrap();
    fw.check(&RuleSpec::PortMappings(s.clone())).unwrap();
    assert_eq!(tcp_ask(&t.ext, "10.98.0.1:8080").unwrap(), "pod0 10.98.0.2");
    // Without snat, hairpin replies go straight back and never match: the
    // connection fails (the Go reference behaves the same).
    assert!(tcp_ask(&t.pods[0], "10.99.0.1:8080").is_err());
}

#[test]
fn masquerade_traffic() {
    if skip_unless_root() {
        return;
    }
    let t = Topology::new(1);
    let fw = firewall_for(&t.node.path());
    // A server on the "other host"; the pod reaches it through the node.
    let _srv = TcpServer::start(&t.ext, 7000, "ext");
    assert_eq!(
        tcp_ask(&t.pods[0], "10.98.0.2:7000").unwrap(),
        "ext 10.99.0.2"
    );

    let m = MasqueradeSpec {
        attachment: AttachmentId::new("trafficnet", "pod0", "eth0"),
        addresses: vec!["10.99.0.2/24".parse().unwrap()],
    };
    fw.add(&RuleSpec::Masquerade(m.clone())).unwrap();
    assert_eq!(
        tcp_ask(&t.pods[0], "10.98.0.2:7000").unwrap(),
        "ext 10.98.0.1"
    );
    // Inside the subnet nothing is masqueraded.
    let _local = TcpServer::start(&t.node, 7001, "node");
    assert_eq!(
        tcp_ask(&t.pods[0], "10.99.0.1:7001").unwrap(),
        "node 10.99.0.2"
    );

    fw.delete(&RuleSpec::Masquerade(m.clone())).unwrap();
    assert_eq!(
        tcp_ask(&t.pods[0], "10.98.0.2:7000").unwrap(),
        "ext 10.99.0.2"
    );
}

#[test]
fn mac_spoof_check_traffic() {
    if skip_unless_root() {
        return;
    }
    let t = Topology::new(1);
    let fw = firewall_for(&t.node.path());
    let _srv = TcpServer::start(&t.node, 7002, "node");
    let mac = t.pods[0].exec(&["cat", "/sys/class/net/eth0/address"]);
    let mut spec = MacSpoofCheckSpec {
        attachment: AttachmentId::new("trafficnet", "pod0", "eth0"),
        host_ifname: "v0".into(),
        mac: mac.trim().parse().unwrap(),
    };
    fw.add(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    assert_eq!(
        tcp_ask(&t.pods[0], "10.99.0.1:7002").unwrap(),
        "node 10.99.0.2"
    );

    // Spoofing: the pod changes its MAC; its frames are dropped.
    spec.mac = cni_netns::MacAddr([0x02, 0, 0, 0, 0, 0x42]);
    fw.delete(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    fw.add(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    t.node.exec(&["ip", "neigh", "flush", "all"]);
    assert!(tcp_ask(&t.pods[0], "10.99.0.1:7002").is_err());
    fw.delete(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    assert_eq!(
        tcp_ask(&t.pods[0], "10.99.0.1:7002").unwrap(),
        "node 10.99.0.2"
    );
}

#[test]
fn port_mapping_traffic_ipv6() {
    if skip_unless_root() {
        return;
    }
    let t = Topology::new(1);
    let fw = firewall_for(&t.node.path());
    let _s0 = TcpServer::start_v6(&t.pods[0], 88, "pod0");
    let mut s = spec(
        0,
        vec![tcp(8080, 88, None), tcp(9090, 88, Some("fd00:98::1"))],
    );
    s.container_v6 = Some("fd00:99::2/64".parse().unwrap());
    fw.add(&RuleSpec::PortMappings(s.clone())).unwrap();
    fw.check(&RuleSpec::PortMappings(s.clone())).unwrap();

    assert_eq!(
        tcp_ask(&t.ext, "[fd00:98::1]:8080").unwrap(),
        "pod0 fd00:98::2"
    );
    assert_eq!(
        tcp_ask(&t.node, "[fd00:99::1]:8080").unwrap(),
        "pod0 fd00:99::1"
    );
    // Hairpin, masqueraded to the node's bridge address.
    assert_eq!(
        tcp_ask(&t.pods[0], "[fd00:99::1]:8080").unwrap(),
        "pod0 fd00:99::1"
    );
    // The IPv6 host IP mapping; IPv4 still works for the same pod.
    assert_eq!(
        tcp_ask(&t.ext, "[fd00:98::1]:9090").unwrap(),
        "pod0 fd00:98::2"
    );
    assert!(tcp_ask(&t.ext, "10.98.0.1:9090").is_err());
    assert_eq!(
        tcp_ask(&t.ext, "10.98.0.1:8080").unwrap(),
        "pod0 ::ffff:10.98.0.2"
    );

    fw.delete(&RuleSpec::PortMappings(s.clone())).unwrap();
    assert!(tcp_ask(&t.ext, "[fd00:98::1]:8080").is_err());
}
