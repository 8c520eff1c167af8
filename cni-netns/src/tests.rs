//! Unit tests of message building and error mapping; no root needed.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_ACK, NLM_F_REQUEST};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use crate::addr::address_message;
use crate::link::{bridge_port_message, bridge_vlan_message, veth_message};
use crate::netlink::serialize;
use crate::route::route_message;
use crate::*;

/// Walks a run of netlink attributes with the crate's one walker: (type
/// without flags, nested flag, value).
fn nlas(buf: &[u8]) -> Vec<(u16, bool, Vec<u8>)> {
    crate::netlink::attrs_full(buf)
        .map(|(ty, v, _)| (ty & 0x3fff, ty & 0x8000 != 0, v.to_vec()))
        .collect()
}

fn attr(list: &[(u16, bool, Vec<u8>)], kind: u16) -> Vec<u8> {
    list.iter()
        .find(|(k, _, _)| *k == kind)
        .map(|(_, _, v)| v.clone())
        .unwrap_or_else(|| panic!("attribute {kind} missing in {list:?}"))
}

fn has(list: &[(u16, bool, Vec<u8>)], kind: u16) -> bool {
    list.iter().any(|(k, _, _)| *k == kind)
}

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_SETLINK: u16 = 19;
const RTM_NEWROUTE: u16 = 24;
const AF_BRIDGE: u8 = 7;

#[test]
fn veth_request_carries_peer_namespace_fd_and_macs() {
    let ns = Netns::open("/proc/self/ns/net").unwrap();
    let spec = VethSpec {
        name: "vethabcd0123".into(),
        peer_name: "eth0".into(),
        peer_netns: Some(&ns),
        mtu: Some(1400),
        mac: None,
        peer_mac: Some("02:00:00:00:00:2a".parse().unwrap()),
        up: true,
        master: Some(9),
    };
    let buf = serialize(
        RouteNetlinkMessage::NewLink(veth_message(&spec)),
        NLM_F_REQUEST,
        7,
    );
    assert_eq!(u16::from_ne_bytes([buf[4], buf[5]]), RTM_NEWLINK);
    assert_eq!(u32::from_ne_bytes(buf[8..12].try_into().unwrap()), 7);
    // ifinfomsg flags and change mask: IFF_UP.
    assert_eq!(u32::from_ne_bytes(buf[24..28].try_into().unwrap()), 1);
    assert_eq!(u32::from_ne_bytes(buf[28..32].try_into().unwrap()), 1);
    let top = nlas(&buf[32..]);
    assert_eq!(attr(&top, 3), b"vethabcd0123\0"); // IFLA_IFNAME
    assert_eq!(attr(&top, 10), 9u32.to_ne_bytes()); // IFLA_MASTER
    assert_eq!(attr(&top, 4), 1400u32.to_ne_bytes()); // IFLA_MTU
    let info = nlas(&attr(&top, 18)); // IFLA_LINKINFO
    assert_eq!(attr(&info, 1), b"veth\0"); // IFLA_INFO_KIND
    let data = nlas(&attr(&info, 2)); // IFLA_INFO_DATA
    let peer = attr(&data, 1); // VETH_INFO_PEER: ifinfomsg + attributes
    let peer_attrs = nlas(&peer[16..]);
    assert_eq!(attr(&peer_attrs, 3), b"eth0\0");
    assert_eq!(attr(&peer_attrs, 1), [2, 0, 0, 0, 0, 0x2a]); // IFLA_ADDRESS
    assert_eq!(attr(&peer_attrs, 28), ns.as_raw_fd().to_ne_bytes()); // IFLA_NET_NS_FD
    assert!(
        !has(&top, 28),
        "the first end must stay in the handle's namespace"
    );
}

use std::os::fd::AsRawFd;

#[test]
fn bridge_port_flags_go_in_af_bridge_protinfo() {
    let opts = BridgePortOptions {
        hairpin: Some(true),
        isolated: Some(false),
        learning: None,
    };
    let buf = serialize(
        RouteNetlinkMessage::SetLink(bridge_port_message(42, &opts)),
        NLM_F_REQUEST | NLM_F_ACK,
        1,
    );
    assert_eq!(u16::from_ne_bytes([buf[4], buf[5]]), RTM_SETLINK);
    assert_eq!(buf[16], AF_BRIDGE);
    assert_eq!(i32::from_ne_bytes(buf[20..24].try_into().unwrap()), 42);
    let top = nlas(&buf[32..]);
    let (_, nested, protinfo) = top.iter().find(|(k, _, _)| *k == 12).unwrap().clone();
    assert!(nested, "IFLA_PROTINFO must be flagged nested");
    let p = nlas(&protinfo);
    assert_eq!(attr(&p, 4), [1]); // IFLA_BRPORT_MODE (hairpin)
    assert_eq!(attr(&p, 33), [0]); // IFLA_BRPORT_ISOLATED
    assert!(!has(&p, 8));
}

#[test]
fn bridge_vlan_delete_is_af_bridge_so_it_never_deletes_the_link() {
    let vlans = [BridgeVlan::native(10), BridgeVlan::range(20, 30)];
    let buf = serialize(
        RouteNetlinkMessage::DelLink(bridge_vlan_message(5, &vlans, false)),
        NLM_F_REQUEST | NLM_F_ACK,
        1,
    );
    assert_eq!(u16::from_ne_bytes([buf[4], buf[5]]), RTM_DELLINK);
    assert_eq!(buf[16], AF_BRIDGE);
    let top = nlas(&buf[32..]);
    let spec = nlas(&attr(&top, 26)); // IFLA_AF_SPEC
    let infos: Vec<(u16, u16)> = spec
        .iter()
        .filter(|(k, _, _)| *k == 2) // IFLA_BRIDGE_VLAN_INFO
        .map(|(_, _, v)| {
            (
                u16::from_ne_bytes([v[0], v[1]]),
                u16::from_ne_bytes([v[2], v[3]]),
            )
        })
        .collect();
    // PVID|UNTAGGED for 10, RANGE_BEGIN 20 .. RANGE_END 30.
    assert_eq!(infos, vec![(0x2 | 0x4, 10), (0x8, 20), (0x10, 30)]);
    assert!(
        !has(&spec, 0),
        "no BRIDGE_FLAGS unless the bridge itself is targeted"
    );

    let buf = serialize(
        RouteNetlinkMessage::SetLink(bridge_vlan_message(5, &[BridgeVlan::tagged(1)], true)),
        NLM_F_REQUEST,
        1,
    );
    let spec = nlas(&attr(&nlas(&buf[32..]), 26));
    assert_eq!(attr(&spec, 0), 2u16.to_ne_bytes()); // BRIDGE_FLAGS_SELF
}

#[test]
fn ipv4_address_gets_broadcast_and_nodad_flag_is_sent() {
    let addr: IpNetwork = "10.1.0.5/24".parse().unwrap();
    let buf = serialize(
        RouteNetlinkMessage::NewAddress(address_message(3, addr, AddressOptions::default())),
        NLM_F_REQUEST,
        1,
    );
    assert_eq!(buf[16], libc::AF_INET as u8);
    assert_eq!(buf[17], 24);
    assert_eq!(u32::from_ne_bytes(buf[20..24].try_into().unwrap()), 3);
    let a = nlas(&buf[24..]);
    assert_eq!(attr(&a, 2), [10, 1, 0, 5]); // IFA_LOCAL
    assert_eq!(attr(&a, 1), [10, 1, 0, 5]); // IFA_ADDRESS
    assert_eq!(attr(&a, 4), [10, 1, 0, 255]); // IFA_BROADCAST
    assert!(!has(&a, 8));

    let v6: IpNetwork = "fd00::5/64".parse().unwrap();
    let opts = AddressOptions {
        nodad: true,
        ..Default::default()
    };
    let buf = serialize(
        RouteNetlinkMessage::NewAddress(address_message(3, v6, opts)),
        NLM_F_REQUEST,
        1,
    );
    assert_eq!(buf[16], libc::AF_INET6 as u8);
    assert_eq!(buf[18] & 0x02, 0x02, "IFA_F_NODAD in ifa_flags");
    let a = nlas(&buf[24..]);
    assert_eq!(attr(&a, 8), 0x02u32.to_ne_bytes()); // IFA_FLAGS
    assert!(!has(&a, 4));
}

#[test]
fn route_carries_table_metric_and_metrics() {
    let r = KernelRoute {
        gateway: Some("10.1.0.1".parse().unwrap()),
        oif: Some(4),
        table: Some(1000),
        priority: Some(50),
        mtu: Some(1400),
        advmss: Some(1360),
        ..KernelRoute::new("192.168.0.0/16".parse().unwrap())
    };
    let buf = serialize(
        RouteNetlinkMessage::NewRoute(route_message(&r, false)),
        NLM_F_REQUEST,
        1,
    );
    assert_eq!(u16::from_ne_bytes([buf[4], buf[5]]), RTM_NEWROUTE);
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type
    assert_eq!(&buf[16..24], &[libc::AF_INET as u8, 16, 0, 0, 0, 3, 0, 1]);
    let a = nlas(&buf[28..]);
    assert_eq!(attr(&a, 1), [192, 168, 0, 0]); // RTA_DST
    assert_eq!(attr(&a, 5), [10, 1, 0, 1]); // RTA_GATEWAY
    assert_eq!(attr(&a, 4), 4u32.to_ne_bytes()); // RTA_OIF
    assert_eq!(attr(&a, 6), 50u32.to_ne_bytes()); // RTA_PRIORITY
    assert_eq!(attr(&a, 15), 1000u32.to_ne_bytes()); // RTA_TABLE
    let m = nlas(&attr(&a, 8)); // RTA_METRICS
    assert_eq!(attr(&m, 2), 1400u32.to_ne_bytes()); // RTAX_MTU
    assert_eq!(attr(&m, 8), 1360u32.to_ne_bytes()); // RTAX_ADVMSS

    // A default route has no RTA_DST; a delete matches any scope/protocol.
    let d = KernelRoute::default_via("fd00::1".parse().unwrap());
    assert!(d.is_default());
    let buf = serialize(
        RouteNetlinkMessage::DelRoute(route_message(&d, true)),
        NLM_F_REQUEST,
        1,
    );
    assert_eq!(
        &buf[16..24],
        &[libc::AF_INET6 as u8, 0, 0, 0, 254, 0, 255, 0]
    );
    assert!(!has(&nlas(&buf[28..]), 1));
}

#[test]
fn multipath_route_encodes_each_nexthop() {
    let r = KernelRoute {
        multipath: vec![
            NextHop {
                gateway: Some("10.0.0.1".parse().unwrap()),
                oif: 2,
                weight: 1,
            },
            NextHop {
                gateway: Some("10.0.0.2".parse().unwrap()),
                oif: 3,
                weight: 5,
            },
        ],
        ..KernelRoute::new("0.0.0.0/0".parse().unwrap())
    };
    let buf = serialize(
        RouteNetlinkMessage::NewRoute(route_message(&r, false)),
        NLM_F_REQUEST,
        1,
    );
    let mp = attr(&nlas(&buf[28..]), 9); // RTA_MULTIPATH
                                         // rtnexthop: len u16, flags u8, hops u8, ifindex i32, then attributes.
    let first_len = u16::from_ne_bytes([mp[0], mp[1]]) as usize;
    assert_eq!(
        (mp[3], i32::from_ne_bytes(mp[4..8].try_into().unwrap())),
        (0, 2)
    );
    assert_eq!(attr(&nlas(&mp[8..first_len]), 5), [10, 0, 0, 1]);
    let second = &mp[first_len..];
    assert_eq!(
        (
            second[3],
            i32::from_ne_bytes(second[4..8].try_into().unwrap())
        ),
        (4, 3)
    );
}

/// A kernel-internal errno (`ENOTSUPP`, 524, which nix has no name for)
/// keeps its number and gets the kernel's name in the message.
#[test]
fn kernel_internal_errnos_keep_their_number() {
    let e = Error::Netlink {
        op: "add vlan filter to br0".into(),
        netns: "ns".into(),
        errno: 524,
        message: None,
    };
    assert_eq!(
        e.to_string(),
        "add vlan filter to br0 in ns: error 524 (ENOTSUPP: operation is not supported)"
    );
    assert_eq!(e.raw_errno(), Some(524));
    assert_eq!(e.errno(), None, "no C library errno for 524");
    assert!(!e.is_errno(Errno::UnknownErrno));
    // The kernel's "not supported" either way.
    assert!(e.is_unsupported());
    let e = Error::Netlink {
        op: "x".into(),
        netns: "ns".into(),
        errno: 4000,
        message: None,
    };
    assert_eq!(e.to_string(), "x in ns: unknown error 4000");
    assert!(!e.is_unsupported());
}

#[test]
fn netlink_timeouts_name_the_operation() {
    let e = Error::NetlinkTimeout {
        op: "add route 0.0.0.0/0 via 10.1.0.1".into(),
        netns: "/run/netns/x".into(),
        timeout: std::time::Duration::from_secs(10),
    };
    assert_eq!(
        e.to_string(),
        "add route 0.0.0.0/0 via 10.1.0.1 in /run/netns/x: no netlink reply within 10s"
    );
}

#[test]
fn netlink_errors_name_op_object_and_namespace() {
    let e = Error::Netlink {
        op: "add address 10.1.0.5/24 to eth0".into(),
        netns: "/run/netns/x".into(),
        errno: Errno::EEXIST as i32,
        message: None,
    };
    assert_eq!(
        e.to_string(),
        "add address 10.1.0.5/24 to eth0 in /run/netns/x: File exists"
    );
    assert!(e.is_exists() && !e.is_not_found());

    for errno in [
        Errno::ENODEV,
        Errno::ESRCH,
        Errno::ENOENT,
        Errno::EADDRNOTAVAIL,
    ] {
        let e = Error::Netlink {
            op: "delete route".into(),
            netns: "ns".into(),
            errno: errno as i32,
            message: Some("No such route".into()),
        };
        assert!(e.is_not_found(), "{errno} should read as not found");
        assert_eq!(e.errno(), Some(errno));
    }
    let e = Error::Netlink {
        op: "add bridge br0".into(),
        netns: "ns".into(),
        errno: Errno::EOPNOTSUPP as i32,
        message: Some("VLAN filtering is not supported".into()),
    };
    assert!(e.is_unsupported());
    assert!(
        e.to_string().ends_with("(VLAN filtering is not supported)"),
        "{e}"
    );
    assert!(e.is_errno(Errno::EOPNOTSUPP) && !e.is_errno(Errno::EEXIST));
    assert!(Error::LinkNotFound {
        op: "get link eth9".into(),
        name: "eth9".into(),
        netns: "ns".into()
    }
    .is_not_found());
}

#[test]
fn netns_open_distinguishes_missing_from_not_a_namespace() {
    let e = Netns::open("/nonexistent/netns/path").unwrap_err();
    assert!(matches!(e, Error::NetnsNotFound { .. }), "{e}");
    assert!(e.is_not_found() && e.is_netns_gone());
    let dir = tempfile::tempdir().unwrap();
    let e = Netns::open(dir.path()).unwrap_err();
    assert!(matches!(e, Error::NotANetns { .. }), "{e}");
    assert!(e.is_netns_gone());
    assert!(e.to_string().ends_with("not a network namespace"));
    let cur = Netns::current().unwrap();
    assert!(cur.is_current().unwrap());
    assert!(cur
        .same_as(&Netns::open("/proc/self/ns/net").unwrap())
        .unwrap());
}

#[test]
fn mac_addresses_parse_and_print() {
    let m: MacAddr = "02:AB:cd:00:01:ff".parse().unwrap();
    assert_eq!(m.to_string(), "02:ab:cd:00:01:ff");
    assert!("02:ab:cd:00:01".parse::<MacAddr>().is_err());
    assert!("02:ab:cd:00:01:ff:00".parse::<MacAddr>().is_err());
    assert!("zz:ab:cd:00:01:ff".parse::<MacAddr>().is_err());
}

#[test]
fn global_unicast_matches_go() {
    let yes = ["10.1.0.5", "fd00::1", "2001:db8::1"];
    let no = [
        "127.0.0.1",
        "169.254.1.1",
        "fe80::1",
        "::1",
        "224.0.0.1",
        "0.0.0.0",
    ];
    for ip in yes {
        assert!(
            crate::addr::is_global_unicast(ip.parse::<IpAddr>().unwrap()),
            "{ip}"
        );
    }
    for ip in no {
        assert!(
            !crate::addr::is_global_unicast(ip.parse::<IpAddr>().unwrap()),
            "{ip}"
        );
    }
}
