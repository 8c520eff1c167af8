//! Root integration tests: every verb applied in fresh namespaces and
//! checked with `ip -j` / `bridge -j`, not by reading back through us.

use std::net::IpAddr;
use std::time::Duration;

use crate::common::*;
use cni_netns::kernel::NetnsHandle as _;
use cni_netns::{
    configure_interface, sysctl, AddressFamilyFilter, AddressOptions, BridgePortOptions,
    BridgeSpec, BridgeVlan, Error, Handle, Ipv4Conf, KernelRoute, MacAddr, MacvlanMode,
    MacvlanSpec, Netns, NextHop, OwnedNetns, VethSpec,
};
use ipnetwork::IpNetwork;

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

fn ipa(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A veth pair with both ends in `ns`, returns (a index, b index).
fn local_veth(h: &Handle, a: &str, b: &str) -> (u32, u32) {
    let first = h
        .add_veth(&VethSpec {
            name: a.into(),
            peer_name: b.into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(first.name, a);
    (first.index, h.link_by_name(b).unwrap().index)
}

#[test]
fn netns_create_is_visible_to_ip_and_delete_removes_it() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap();
    let name = format!("cnitest-create-{}", &uuid[..8]);
    let ns = Netns::create(&name).unwrap();
    let listed = run_ip_netns_list();
    assert!(listed.contains(&name), "{listed:?}");
    assert!(Netns::create(&name).unwrap_err().is_exists());
    // Opened by path, it is the same namespace, and not ours.
    let again = Netns::open(format!("/run/netns/{name}")).unwrap();
    assert!(again.same_as(&ns).unwrap());
    assert!(!ns.is_current().unwrap());
    // run() executes inside: the only link there is lo, and the caller's
    // thread did not move.
    let inside = ns
        .run(|| {
            let h = Handle::current().unwrap();
            h.links()
                .unwrap()
                .into_iter()
                .map(|l| l.name)
                .collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(inside, vec!["lo".to_string()]);
    assert!(Netns::current()
        .unwrap()
        .same_as(&Netns::open("/proc/self/ns/net").unwrap())
        .unwrap());
    ns.delete().unwrap();
    drop(again);
    assert!(!run_ip_netns_list().contains(&name));
    assert!(matches!(
        Netns::open(format!("/run/netns/{name}")).unwrap_err(),
        Error::NetnsNotFound { .. }
    ));
    Netns::remove(format!("/run/netns/{name}")).unwrap();
}

fn run_ip_netns_list() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-j", "netns", "list"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|n| n["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn run_propagates_panics_and_handles_work_from_other_threads() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ns.run(|| panic!("boom")).ok();
    }));
    assert!(r.is_err());
    // The handle was opened in `ns`; using it from other threads still acts there.
    std::thread::scope(|s| {
        for i in 0..4 {
            let h = &h;
            s.spawn(move || {
                let (a, _) = local_veth(h, &format!("ta{i}"), &format!("tb{i}"));
                h.set_up(a).unwrap();
            });
        }
    });
    let names = link_names(&ns);
    for i in 0..4 {
        assert!(names.contains(&format!("ta{i}")), "{names:?}");
    }
}

#[test]
fn setup_veth_creates_peer_directly_in_the_container() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (host_ns, host) = netns();
    let (pod_ns, pod) = netns();
    let mac: MacAddr = "02:42:ac:11:00:07".parse().unwrap();
    let hv = host
        .setup_veth("eth0", &pod_ns, Some(1400), Some(mac))
        .unwrap();
    assert!(
        hv.name.starts_with("veth")
            && hv.name.len() == 12
            && hv.name[4..].chars().all(|c| c.is_ascii_hexdigit()),
        "{}",
        hv.name
    );
    let host_link = link(&host_ns, &hv.name);
    assert_eq!(
        sysctl_in(&host_ns, &format!("net/ipv6/conf/{}/accept_ra", hv.name)),
        "0"
    );
    assert_eq!(host_link["mtu"], 1400);
    assert!(host_link["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP"));
    assert_eq!(host_link["linkinfo"]["info_kind"], "veth");
    let pod_link = link(&pod_ns, "eth0");
    assert_eq!(pod_link["address"], "02:42:ac:11:00:07");
    assert_eq!(pod_link["mtu"], 1400);
    assert!(!link_names(&host_ns).contains(&"eth0".to_string()));
    // Peer index, both ways.
    let peer_index = host.veth_peer_index(hv.index).unwrap();
    assert_eq!(u64::from(peer_index), pod_link["ifindex"].as_u64().unwrap());
    assert_eq!(pod.veth_peer_index(peer_index).unwrap(), hv.index);
    assert!(host
        .veth_peer_index(1)
        .unwrap_err()
        .to_string()
        .contains("not a veth"));
    // A second attachment with the same container name fails cleanly.
    let e = host.setup_veth("eth0", &pod_ns, None, None).unwrap_err();
    assert!(matches!(e, Error::VethPeerExists { .. }), "{e}");
    assert_eq!(
        ip(&host_ns, &["link", "show", "type", "veth"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Deleting the host end takes the peer with it; deleting again is fine.
    assert!(host.delete_link_by_name(&hv.name).unwrap());
    assert!(!host.delete_link_by_name(&hv.name).unwrap());
    assert!(!link_names(&pod_ns).contains(&"eth0".to_string()));
    let e = host.link_by_name(&hv.name).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(
        e.to_string().contains(host_ns.path().to_str().unwrap()),
        "{e}"
    );
}

#[test]
fn setup_veth_with_master_and_up_in_one_request() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (host_ns, host) = netns();
    let (pod_ns, _pod) = netns();
    let br = host
        .ensure_bridge(&BridgeSpec {
            name: "br9".into(),
            ..Default::default()
        })
        .unwrap();
    let hv = host
        .setup_veth_with(&VethSpec {
            peer_name: "net1".into(),
            peer_netns: Some(&pod_ns),
            up: true,
            master: Some(br.index),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(hv.master, Some(br.index));
    let j = link(&host_ns, &hv.name);
    assert_eq!(j["master"], "br9");
    assert!(j["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
    let p = link(&pod_ns, "net1");
    assert_eq!(Some(p["ifindex"].as_u64().unwrap() as u32), hv.parent_index);
}

#[test]
fn ensure_bridge_is_idempotent_and_checks_the_kind() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let spec = BridgeSpec {
        name: "cnibr0".into(),
        mtu: Some(1450),
        promisc: true,
        vlan_filtering: false,
    };
    let br = h.ensure_bridge(&spec).unwrap();
    let again = h.ensure_bridge(&spec).unwrap();
    assert_eq!(br.index, again.index);
    let j = link(&ns, "cnibr0");
    assert_eq!(j["linkinfo"]["info_kind"], "bridge");
    assert_eq!(j["mtu"], 1450);
    assert!(j["promiscuity"].as_u64().unwrap() >= 1);
    assert!(j["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
    // Something else under the name is refused.
    local_veth(&h, "notabr", "notabr-p");
    let e = h
        .ensure_bridge(&BridgeSpec {
            name: "notabr".into(),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, Error::WrongLinkKind { .. }), "{e}");
    assert!(e.to_string().contains("is a veth, not a bridge"), "{e}");
    // VLAN filtering: on, or a clean typed error on kernels without it.
    let r = h.ensure_bridge(&BridgeSpec {
        name: "cnibr1".into(),
        vlan_filtering: true,
        ..Default::default()
    });
    match r {
        Ok(_) => assert_eq!(
            link(&ns, "cnibr1")["linkinfo"]["info_data"]["vlan_filtering"],
            1
        ),
        Err(e) => {
            eprintln!("vlan_filtering unsupported here: {e}");
            assert!(e.is_unsupported(), "{e}");
            assert!(
                e.to_string().contains("vlan_filtering is not supported"),
                "{e}"
            );
        }
    }
    let r = h.set_bridge_vlan_filtering(br.index, true);
    if let Err(e) = r {
        assert!(e.is_unsupported(), "{e}");
    }
}

#[test]
fn master_port_flags_and_vlans() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let br = h
        .ensure_bridge(&BridgeSpec {
            name: "br0".into(),
            ..Default::default()
        })
        .unwrap();
    let (port, _) = local_veth(&h, "port0", "port0-p");
    h.set_master(port, br.index).unwrap();
    assert_eq!(link(&ns, "port0")["master"], "br0");
    assert_eq!(h.link_by_index(port).unwrap().master, Some(br.index));
    h.set_bridge_port(
        port,
        &BridgePortOptions {
            hairpin: Some(true),
            isolated: Some(true),
            learning: Some(false),
        },
    )
    .unwrap();
    let bl = bridge(&ns, &["-d", "link", "show", "dev", "port0"]);
    assert_eq!(bl[0]["hairpin"], true, "{bl}");
    assert_eq!(bl[0]["isolated"], true, "{bl}");
    assert_eq!(bl[0]["learning"], false, "{bl}");
    h.set_bridge_port(
        port,
        &BridgePortOptions {
            hairpin: Some(false),
            ..Default::default()
        },
    )
    .unwrap();
    let bl = bridge(&ns, &["-d", "link", "show", "dev", "port0"]);
    assert_eq!(bl[0]["hairpin"], false);
    assert_eq!(bl[0]["isolated"], true);

    // Port VLANs: native 10, trunk 20-30, no default VLAN 1.
    let add = h.add_bridge_vlans(
        port,
        &[BridgeVlan::native(10), BridgeVlan::range(20, 30)],
        false,
    );
    match add {
        Ok(()) => {
            h.del_bridge_vlans(port, &[BridgeVlan::tagged(1)], false)
                .unwrap();
            let v = bridge(&ns, &["vlan", "show", "dev", "port0"]);
            let vlans = &v[0]["vlans"];
            let text = vlans.to_string();
            assert!(text.contains("\"vlan\":10"), "{text}");
            assert!(
                text.contains("\"vlan\":20") && text.contains("\"vlanEnd\":30"),
                "{text}"
            );
            assert!(!text.contains("\"vlan\":1,"), "{text}");
        }
        Err(e) => {
            eprintln!("bridge VLANs unsupported here: {e}");
            // This kernel has no bridge VLAN support: the error says so.
            assert!(e.is_unsupported(), "{e}");
            assert!(e.to_string().contains("not supported"), "{e}");
            assert!(link_names(&ns).contains(&"port0".to_string()));
        }
    }
    // The VLAN delete request must never delete the port itself.
    let _ = h.del_bridge_vlans(port, &[BridgeVlan::tagged(1)], false);
    assert!(link_names(&ns).contains(&"port0".to_string()));

    h.set_nomaster(port).unwrap();
    assert!(link(&ns, "port0").get("master").is_none());
}

#[test]
fn macvlan_is_created_directly_in_the_pod() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (_host_ns, host) = netns();
    let (pod_ns, _pod) = netns();
    let (parent, _) = local_veth(&host, "uplink0", "uplink0-p");
    host.add_macvlan(&MacvlanSpec {
        name: "mv0".into(),
        parent,
        mode: "bridge".parse().unwrap(),
        mtu: Some(1400),
        mac: Some("02:00:00:00:aa:01".parse().unwrap()),
        netns: Some(&pod_ns),
    })
    .unwrap();
    let j = link(&pod_ns, "mv0");
    assert_eq!(j["linkinfo"]["info_kind"], "macvlan", "{j}");
    assert_eq!(j["linkinfo"]["info_data"]["mode"], "bridge", "{j}");
    assert_eq!(j["mtu"], 1400);
    assert_eq!(j["address"], "02:00:00:00:aa:01");
    assert!(host.link_by_name("mv0").unwrap_err().is_not_found());
    assert!("nonsense".parse::<MacvlanMode>().is_err());
    let e = host
        .add_macvlan(&MacvlanSpec {
            name: "mv1".into(),
            parent: 9999,
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        e.to_string().starts_with("add macvlan mv1 on #9999 in "),
        "{e}"
    );
}

#[test]
fn link_settings() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let (ns2, h2) = netns();
    let (a, _) = local_veth(&h, "la", "lb");
    h.set_promisc(a, true).unwrap();
    assert!(link(&ns, "la")["promiscuity"].as_u64().unwrap() >= 1);
    assert!(h.link_by_index(a).unwrap().is_promisc());
    h.set_promisc(a, false).unwrap();
    assert_eq!(link(&ns, "la")["promiscuity"], 0);
    h.set_mtu(a, 1280).unwrap();
    assert_eq!(link(&ns, "la")["mtu"], 1280);
    h.set_mac(a, "02:00:00:00:be:ef".parse().unwrap()).unwrap();
    assert_eq!(link(&ns, "la")["address"], "02:00:00:00:be:ef");
    h.set_up(a).unwrap();
    assert!(link(&ns, "la")["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP"));
    h.set_down(a).unwrap();
    assert!(!link(&ns, "la")["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP"));
    h.rename(a, "la.renamed").unwrap();
    assert!(link_names(&ns).contains(&"la.renamed".to_string()));
    let l = h.link_by_name("la.renamed").unwrap();
    assert_eq!((l.index, l.mtu, l.kind.as_deref()), (a, 1280, Some("veth")));
    h.move_to_netns(a, &ns2).unwrap();
    assert!(!link_names(&ns).contains(&"la.renamed".to_string()));
    assert!(link_names(&ns2).contains(&"la.renamed".to_string()));
    let moved = h2.link_by_name("la.renamed").unwrap();
    h2.delete_link(moved.index).unwrap();
    assert!(!link_names(&ns2).contains(&"la.renamed".to_string()));
    let e = h2.delete_link(moved.index).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(h.links().unwrap().iter().all(|l| l.name != "lb"));
}

#[test]
fn addresses_add_list_delete() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let (a, _) = local_veth(&h, "aa", "ab");
    h.add_address(a, net("10.9.0.5/24"), AddressOptions::default())
        .unwrap();
    h.add_address(
        a,
        net("fd00:9::5/64"),
        AddressOptions {
            nodad: true,
            ..Default::default()
        },
    )
    .unwrap();
    let got = addrs(&ns, "aa");
    assert!(got.contains(&"10.9.0.5/24".to_string()), "{got:?}");
    assert!(got.contains(&"fd00:9::5/64".to_string()), "{got:?}");
    let brd = &ip(&ns, &["-4", "addr", "show", "dev", "aa"])[0]["addr_info"][0]["broadcast"];
    assert_eq!(brd, "10.9.0.255");
    let ours = h.addresses(Some(a), AddressFamilyFilter::All).unwrap();
    assert!(ours.iter().any(|x| x.address == net("10.9.0.5/24")));
    let v6 = ours
        .iter()
        .find(|x| x.address == net("fd00:9::5/64"))
        .unwrap();
    assert!(!v6.is_tentative(), "nodad address must not be tentative");
    assert_eq!(
        h.addresses(Some(a), AddressFamilyFilter::V4).unwrap().len(),
        1
    );
    let e = h
        .add_address(a, net("10.9.0.5/24"), AddressOptions::default())
        .unwrap_err();
    assert!(e.is_exists());
    // The kernel's extended ack, when it sends one, follows in parentheses.
    assert!(
        e.to_string().starts_with(&format!(
            "add address 10.9.0.5/24 to aa in {}: File exists",
            ns.path().display()
        )),
        "{e}"
    );
    h.del_address(a, net("10.9.0.5/24")).unwrap();
    assert!(!addrs(&ns, "aa").contains(&"10.9.0.5/24".to_string()));
    assert!(h
        .del_address(a, net("10.9.0.5/24"))
        .unwrap_err()
        .is_not_found());
    // DelLinkByNameAddr returns the global unicast addresses.
    let gone = h.delete_link_by_name_addrs("aa").unwrap();
    assert_eq!(gone, vec![net("fd00:9::5/64")]);
    assert!(h
        .delete_link_by_name_addrs("aa")
        .unwrap_err()
        .is_not_found());
}

#[test]
fn dad_failure_is_reported() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns_a, ha) = netns();
    let (ns_b, hb) = netns();
    let b = hb.setup_veth("dad0", &ns_a, None, None).unwrap();
    let a = ha.link_by_name("dad0").unwrap();
    ha.set_up(a.index).unwrap();
    hb.add_address(
        b.index,
        net("fd00:d::1/64"),
        AddressOptions {
            nodad: true,
            ..Default::default()
        },
    )
    .unwrap();
    ha.add_address(a.index, net("fd00:d::1/64"), AddressOptions::default())
        .unwrap();
    let e = ha
        .wait_for_dad(a.index, Duration::from_secs(5))
        .unwrap_err();
    assert!(matches!(e, Error::DadFailed { .. }), "{e}");
    assert!(e.to_string().contains("fd00:d::1/64"), "{e}");
    let flags = ip(&ns_a, &["-6", "addr", "show", "dev", "dad0"]).to_string();
    assert!(flags.contains("dadfailed"), "{flags}");
    drop(ns_b);
}

#[test]
fn settle_addresses_waits_for_the_named_addresses_only() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns_a, ha) = netns();
    let (_ns_b, hb) = netns();
    let b = hb.setup_veth("dad1", &ns_a, None, None).unwrap();
    hb.set_up(b.index).unwrap();
    let a = ha.link_by_name("dad1").unwrap();
    // DAD probes 10 s apart: the link-local address the kernel makes when
    // the link comes up stays tentative far longer than this test runs.
    ha.run(|| sysctl::set("net/ipv6/neigh/dad1/retrans_time_ms", "10000"))
        .unwrap()
        .unwrap();
    ha.add_address(
        a.index,
        net("fd00:e::1/64"),
        AddressOptions {
            nodad: true,
            ..Default::default()
        },
    )
    .unwrap();
    ha.set_up(a.index).unwrap();
    let named = [ipa("fd00:e::1")];
    ha.settle_addresses(a.index, &named, Duration::from_secs(60))
        .unwrap();
    let shown = ip(&ns_a, &["-6", "addr", "show", "dev", "dad1"]);
    let tentative: Vec<String> = shown[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["tentative"] == true)
        .map(|a| a["local"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        tentative.len() == 1 && tentative[0].starts_with("fe80:"),
        "only the link-local address is still tentative: {shown}"
    );
    // All addresses (Go's SettleAddresses): the link-local one times out.
    let e = ha
        .settle_addresses(a.index, &[], Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(e, Error::DadTimeout { .. }), "{e}");
    assert!(e.to_string().contains("dad1"), "{e}");
}

#[test]
fn an_ipv6_address_on_a_link_without_ipv6_is_named_for_it() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (pod_ns, pod) = netns();
    let (_host_ns, host) = netns();
    host.setup_veth("eth0", &pod_ns, Some(1000), None).unwrap();
    let addresses = [
        (net("10.6.0.7/24"), Some(ipa("10.6.0.1"))),
        (net("fd00:6::7/64"), Some(ipa("fd00:6::1"))),
    ];
    let e = configure_interface(&pod, "eth0", &addresses, &[]).unwrap_err();
    assert!(matches!(e, Error::Ipv6Unavailable { .. }), "{e}");
    let text = e.to_string();
    for part in ["fd00:6::7/64", "eth0", "IPv6", "MTU 1000", "1280"] {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
}

#[test]
fn routes_with_every_attribute_ecmp_and_delete() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let (a, _) = local_veth(&h, "ra", "rb");
    let (b, _) = local_veth(&h, "rc", "rd");
    for i in [a, b] {
        h.set_up(i).unwrap();
    }
    for name in ["rb", "rd"] {
        let i = h.link_by_name(name).unwrap().index;
        h.set_up(i).unwrap();
    }
    h.add_address(a, net("10.7.0.2/24"), AddressOptions::default())
        .unwrap();
    h.add_address(b, net("10.8.0.2/24"), AddressOptions::default())
        .unwrap();
    h.add_address(
        a,
        net("fd00:7::2/64"),
        AddressOptions {
            nodad: true,
            ..Default::default()
        },
    )
    .unwrap();

    let r = KernelRoute {
        gateway: Some(ipa("10.7.0.1")),
        oif: Some(a),
        table: Some(100),
        priority: Some(77),
        mtu: Some(1300),
        advmss: Some(1260),
        ..KernelRoute::new(net("192.168.50.0/24"))
    };
    h.add_route(&r).unwrap();
    assert!(h.add_route(&r).unwrap_err().is_exists());
    let j = ip(&ns, &["route", "show", "table", "100"]);
    let route = &j[0];
    assert_eq!(route["dst"], "192.168.50.0/24", "{j}");
    assert_eq!(route["gateway"], "10.7.0.1");
    assert_eq!(route["dev"], "ra");
    assert_eq!(route["metric"], 77);
    assert_eq!(route["metrics"][0]["mtu"], 1300, "{j}");
    assert_eq!(route["metrics"][0]["advmss"], 1260, "{j}");
    let ours = h.routes(AddressFamilyFilter::V4).unwrap();
    let back = ours.iter().find(|x| x.table == Some(100)).unwrap();
    assert_eq!(
        (back.dst, back.gateway, back.priority, back.mtu),
        (r.dst, r.gateway, r.priority, r.mtu)
    );

    // Scope link without gateway.
    h.add_route(&KernelRoute {
        oif: Some(b),
        scope: Some(cni_netns::SCOPE_LINK),
        ..KernelRoute::new(net("172.31.0.0/16"))
    })
    .unwrap();
    let j = ip(&ns, &["route", "show", "172.31.0.0/16"]);
    assert_eq!(j[0]["scope"], "link", "{j}");

    // Default routes, v4 and v6.
    h.add_route(&KernelRoute {
        oif: Some(a),
        ..KernelRoute::default_via(ipa("10.7.0.1"))
    })
    .unwrap();
    h.add_route(&KernelRoute {
        oif: Some(a),
        ..KernelRoute::default_via(ipa("fd00:7::1"))
    })
    .unwrap();
    assert_eq!(
        ip(&ns, &["-4", "route", "show", "default"])[0]["gateway"],
        "10.7.0.1"
    );
    assert_eq!(
        ip(&ns, &["-6", "route", "show", "default"])[0]["gateway"],
        "fd00:7::1"
    );

    // ECMP the Go way: a second gateway for the same destination.
    let e1 = KernelRoute {
        gateway: Some(ipa("10.7.0.1")),
        oif: Some(a),
        ..KernelRoute::new(net("10.100.0.0/16"))
    };
    let e2 = KernelRoute {
        gateway: Some(ipa("10.8.0.1")),
        oif: Some(b),
        ..KernelRoute::new(net("10.100.0.0/16"))
    };
    h.add_route_ecmp(&e1).unwrap();
    h.add_route_ecmp(&e2).unwrap();
    let j = ip(&ns, &["route", "show", "10.100.0.0/16"]);
    let gws: Vec<String> = j
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["gateway"].to_string())
        .collect();
    assert!(
        j.to_string().contains("10.7.0.1") && j.to_string().contains("10.8.0.1"),
        "{gws:?} {j}"
    );

    // Explicit multipath.
    h.add_route(&KernelRoute {
        multipath: vec![
            NextHop {
                gateway: Some(ipa("10.7.0.1")),
                oif: a,
                weight: 1,
            },
            NextHop {
                gateway: Some(ipa("10.8.0.1")),
                oif: b,
                weight: 3,
            },
        ],
        ..KernelRoute::new(net("10.200.0.0/16"))
    })
    .unwrap();
    let j = ip(&ns, &["route", "show", "10.200.0.0/16"]);
    let hops = j[0]["nexthops"].as_array().unwrap_or_else(|| panic!("{j}"));
    assert_eq!(hops.len(), 2);
    assert_eq!(hops[1]["weight"], 3);
    let ours = h.routes(AddressFamilyFilter::V4).unwrap();
    let mp = ours.iter().find(|x| x.dst == net("10.200.0.0/16")).unwrap();
    assert_eq!(mp.multipath.len(), 2);
    assert_eq!(mp.multipath[1].weight, 3);

    // Delete, and deleting again reads as not found.
    h.del_route(&r).unwrap();
    assert_eq!(
        ip(&ns, &["route", "show", "table", "100"])
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert!(h.del_route(&r).unwrap_err().is_not_found());
    h.del_route(&KernelRoute::default_via(ipa("fd00:7::1")))
        .unwrap();
    assert_eq!(
        ip(&ns, &["-6", "route", "show", "default"])
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn neighbours_are_listed() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let (a, _) = local_veth(&h, "na", "nb");
    h.set_up(a).unwrap();
    ip_cmd(
        &ns,
        &[
            "neigh",
            "add",
            "10.6.0.9",
            "lladdr",
            "02:00:00:00:00:09",
            "dev",
            "na",
            "nud",
            "permanent",
        ],
    );
    let n = h.neighbours(Some(a), AddressFamilyFilter::V4).unwrap();
    let e = n
        .iter()
        .find(|x| x.ip == ipa("10.6.0.9"))
        .unwrap_or_else(|| panic!("{n:?}"));
    assert_eq!(e.mac, Some("02:00:00:00:00:09".parse().unwrap()));
    assert_eq!(e.state & 0x80, 0x80, "NUD_PERMANENT");
    assert!(h
        .neighbours(Some(a), AddressFamilyFilter::V6)
        .unwrap()
        .iter()
        .all(|x| x.ip.is_ipv6()));
}

#[test]
fn sysctls_are_written_inside_the_namespace_only_when_different() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let host_forward = sysctl::get(sysctl::IPV4_FORWARD).unwrap();
    let (a, _) = local_veth(&h, "s.0", "s1");
    let _ = a;
    let wrote = h
        .run(|| -> cni_netns::Result<Vec<bool>> {
            Ok(vec![
                sysctl::set(sysctl::IPV4_FORWARD, "1")?,
                sysctl::set(sysctl::IPV4_FORWARD, "1")?,
                sysctl::set(sysctl::IPV6_FORWARD, "1")?,
                sysctl::set(&sysctl::accept_dad("s.0"), "0")?,
                sysctl::set(&sysctl::accept_ra("s.0"), "0")?,
                sysctl::set(&sysctl::route_localnet("s.0"), "1")?,
                sysctl::set(&sysctl::arp_notify("s.0"), "1")?,
                sysctl::set(&sysctl::disable_ipv6("s.0"), "1")?,
            ])
        })
        .unwrap()
        .unwrap();
    assert_eq!(wrote, vec![true, false, true, true, true, true, true, true]);
    assert_eq!(sysctl_in(&ns, "net/ipv4/ip_forward"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/all/forwarding"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/s.0/accept_dad"), "0");
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/s.0/accept_ra"), "0");
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/s.0/route_localnet"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/s.0/arp_notify"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/s.0/disable_ipv6"), "1");
    assert_eq!(
        sysctl::get(sysctl::IPV4_FORWARD).unwrap(),
        host_forward,
        "host untouched"
    );
    let e = h
        .run(|| sysctl::get("net/ipv4/conf/nope0/arp_notify"))
        .unwrap()
        .unwrap_err();
    assert!(e.is_not_found());
}

#[test]
fn sysctls_of_one_directory_are_set_together() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let (a, _) = local_veth(&h, "t.0", "t1");
    let _ = a;
    let first = h
        .run(|| {
            sysctl::set_in(
                "net/ipv4/conf/t.0",
                &[("arp_notify", "1"), ("nope", "1"), ("route_localnet", "1")],
            )
        })
        .unwrap();
    assert!(matches!(first[0], Ok(true)), "{first:?}");
    assert!(
        first[1].as_ref().is_err_and(|e| e.is_not_found()),
        "{first:?}"
    );
    assert!(matches!(first[2], Ok(true)), "{first:?}");
    let again = h
        .run(|| sysctl::set_in("net/ipv4/conf/t.0", &[("arp_notify", "1")]))
        .unwrap();
    assert!(matches!(again[0], Ok(false)), "{again:?}");
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/t.0/arp_notify"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/t.0/route_localnet"), "1");
    let missing = h
        .run(|| sysctl::set_in("net/ipv4/conf/nope0", &[("arp_notify", "1")]))
        .unwrap();
    assert!(
        missing[0].as_ref().is_err_and(|e| e.is_not_found()),
        "{missing:?}"
    );
}

#[test]
fn ipv4_settings_and_forwarding_over_netlink_match_proc_sys() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let host_forward = sysctl::get(sysctl::IPV4_FORWARD).unwrap();
    let (a, _) = local_veth(&h, "n.0", "n1");
    // A fresh namespace forwards nothing; the netlink reading agrees with
    // the files.
    assert_eq!(sysctl_in(&ns, "net/ipv4/ip_forward"), "0");
    assert_eq!(h.forwarding(false).unwrap(), Some(false));
    assert_eq!(h.forwarding(true).unwrap(), Some(false));
    h.enable_forwarding(true, false).unwrap();
    assert_eq!(sysctl_in(&ns, "net/ipv4/ip_forward"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/all/forwarding"), "0");
    assert_eq!(h.forwarding(false).unwrap(), Some(true));
    h.enable_forwarding(true, true).unwrap();
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/all/forwarding"), "1");
    assert_eq!(h.forwarding(true).unwrap(), Some(true));
    assert_eq!(
        sysctl::get(sysctl::IPV4_FORWARD).unwrap(),
        host_forward,
        "host untouched"
    );

    // Per-link IPv4 settings, zero included.
    h.set_ipv4_conf(
        a,
        &[
            (Ipv4Conf::ArpNotify, 1),
            (Ipv4Conf::RouteLocalnet, 1),
            (Ipv4Conf::RpFilter, 2),
        ],
    )
    .unwrap();
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/n.0/arp_notify"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/n.0/route_localnet"), "1");
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/n.0/rp_filter"), "2");
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/n1/route_localnet"), "0");
    h.set_ipv4_conf(a, &[(Ipv4Conf::RouteLocalnet, 0)]).unwrap();
    assert_eq!(sysctl_in(&ns, "net/ipv4/conf/n.0/route_localnet"), "0");
    let e = h
        .set_ipv4_conf(999_999, &[(Ipv4Conf::ArpNotify, 1)])
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains("arp_notify=1"), "{e}");
}

#[test]
fn wait_oper_up_returns_once_the_kernel_reports_the_link_up() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let (a, b) = local_veth(&h, "w0", "w1");
    h.set_up(a).unwrap();
    // The peer is down: no carrier, the wait runs out and says so.
    let t = std::time::Instant::now();
    let link = h.wait_oper_up(a, Duration::from_millis(60)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(60));
    assert_ne!(link.oper_state, cni_netns::OperState::Up);
    let oper = |dev: &str| ip(&ns, &["link", "show", "dev", dev])[0]["operstate"].clone();
    assert_ne!(oper("w0"), "UP");
    // The peer comes up: the wait ends with the link up, as `ip` sees it.
    h.set_up(b).unwrap();
    let link = h.wait_oper_up(a, Duration::from_secs(3)).unwrap();
    assert_eq!(link.oper_state, cni_netns::OperState::Up);
    assert_eq!(oper("w0"), "UP");
}

#[test]
fn handle_sysctls_go_through_its_open_family_directories() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let _ = local_veth(&h, "m.0", "m1");
    // From this thread (not in the namespace): the handle runs them inside.
    assert!(h.sysctl_set("net/ipv6/conf/m.0/accept_ra", "0").unwrap());
    assert!(!h.sysctl_set("net.ipv6.conf.m1.accept_ra", "1").unwrap());
    assert!(h.sysctl_set("net/ipv4/ip_forward", "1").unwrap());
    let r = h
        .sysctl_set_in("net/ipv6/conf/m1", &[("accept_dad", "0"), ("nope", "1")])
        .unwrap();
    assert!(matches!(r[0], Ok(true)), "{r:?}");
    assert!(r[1].as_ref().is_err_and(|e| e.is_not_found()), "{r:?}");
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/m.0/accept_ra"), "0");
    assert_eq!(sysctl_in(&ns, "net/ipv6/conf/m1/accept_dad"), "0");
    assert_eq!(sysctl_in(&ns, "net/ipv4/ip_forward"), "1");
    // Keys outside net/ipv4 and net/ipv6 still work; a missing one is
    // not found, named by its key.
    let e = h.sysctl_set("net/core/nope", "1").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains("net/core/nope"), "{e}");
    let e = h
        .sysctl_set("net/ipv4/conf/nope0/arp_notify", "1")
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[test]
fn configure_interface_matches_go() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (_host_ns, host) = netns();
    let (pod_ns, pod) = netns();
    let hv = host.setup_veth("eth0", &pod_ns, None, None).unwrap();
    assert!(hv.is_up());
    // Go's ConfigureIface enables IPv6 where it was off.
    pod.run(|| sysctl::set(&sysctl::disable_ipv6("eth0"), "1"))
        .unwrap()
        .unwrap();
    let addresses = [
        (net("10.5.0.7/24"), Some(ipa("10.5.0.1"))),
        (net("fd00:5::7/64"), Some(ipa("fd00:5::1"))),
    ];
    let routes = [
        KernelRoute::new(net("0.0.0.0/0")),
        KernelRoute::new(net("::/0")),
        KernelRoute {
            gateway: Some(ipa("10.5.0.254")),
            priority: Some(30),
            table: Some(200),
            ..KernelRoute::new(net("192.168.0.0/16"))
        },
    ];
    configure_interface(&pod, "eth0", &addresses, &routes).unwrap();
    assert_eq!(sysctl_in(&pod_ns, "net/ipv6/conf/eth0/disable_ipv6"), "0");
    assert_eq!(
        sysctl_in(&pod_ns, "net/ipv6/conf/eth0/keep_addr_on_down"),
        "1"
    );
    let got = addrs(&pod_ns, "eth0");
    assert!(
        got.contains(&"10.5.0.7/24".into()) && got.contains(&"fd00:5::7/64".into()),
        "{got:?}"
    );
    assert!(link(&pod_ns, "eth0")["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP"));
    // DAD of the assigned address was waited for (the kernel's link-local
    // one may still be going on, as `settle_addresses` documents).
    let v6 = ip(&pod_ns, &["-6", "addr", "show", "dev", "eth0"]);
    let assigned = v6[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["local"] == "fd00:5::7")
        .cloned()
        .unwrap();
    assert!(assigned.get("tentative").is_none(), "{v6}");
    assert_eq!(
        ip(&pod_ns, &["-4", "route", "show", "default"])[0]["gateway"],
        "10.5.0.1"
    );
    assert_eq!(
        ip(&pod_ns, &["-6", "route", "show", "default"])[0]["gateway"],
        "fd00:5::1"
    );
    let t = ip(&pod_ns, &["route", "show", "table", "200"]);
    assert_eq!(t[0]["gateway"], "10.5.0.254", "{t}");
    assert_eq!(t[0]["metric"], 30);
    // An address for the wrong family gateway still works, and a second run
    // fails on the existing address with the op named.
    let e = configure_interface(&pod, "eth0", &addresses, &[]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("add address 10.5.0.7/24 to eth0 in "),
        "{e}"
    );
    let e = configure_interface(&pod, "eth9", &addresses, &[]).unwrap_err();
    assert!(e.is_not_found());
}

#[test]
fn owned_netns_cleans_up_on_drop() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let name;
    {
        let ns = OwnedNetns::new("cnitest").unwrap();
        name = ns.name().to_owned();
        assert!(run_ip_netns_list().contains(&name));
    }
    assert!(!run_ip_netns_list().contains(&name));
}
