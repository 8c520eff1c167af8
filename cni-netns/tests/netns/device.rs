//! ipvlan creation (or its clean refusal), link details, aliases, lookups
//! by MAC and by the default route, the macvlan broadcast queue: each
//! checked against `ip -j`.

use crate::common::*;
use cni_netns::{
    Error, Handle, IpvlanMode, IpvlanSpec, MacAddr, MacvlanMode, MacvlanSpec, VethSpec,
};

fn local_veth(h: &Handle, a: &str, b: &str) -> u32 {
    h.add_veth(&VethSpec {
        name: a.into(),
        peer_name: b.into(),
        ..Default::default()
    })
    .unwrap()
    .index
}

#[test]
fn ipvlan_is_created_in_the_target_netns_or_refused_cleanly() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (host_ns, host) = netns();
    let (pod_ns, pod) = netns();
    let parent = local_veth(&host, "up0", "up0p");
    let spec: IpvlanSpec<'_> = IpvlanSpec {
        name: "ipv0".into(),
        parent,
        mode: IpvlanMode::L3,
        mtu: Some(1400),
        netns: Some(&pod_ns),
    };
    match host.add_ipvlan(&spec) {
        Ok(()) => {
            let j = link(&pod_ns, "ipv0");
            assert_eq!(j["linkinfo"]["info_kind"], "ipvlan", "{j}");
            assert_eq!(j["linkinfo"]["info_data"]["mode"], "l3", "{j}");
            assert_eq!(j["mtu"], 1400);
            let d = pod.link_details("ipv0").unwrap();
            assert_eq!(d.ipvlan_mode, Some(IpvlanMode::L3));
        }
        Err(e) => {
            assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
            assert!(e.is_unsupported());
            let msg = e.to_string();
            assert!(msg.starts_with("add ipvlan ipv0 in "), "{msg}");
            assert!(
                msg.contains("ipvlan is not supported by this kernel"),
                "{msg}"
            );
            assert_eq!(link_names(&pod_ns), ["lo"]);
            assert_eq!(link_names(&host_ns).len(), 3);
        }
    }
    assert_eq!("".parse::<IpvlanMode>().unwrap(), IpvlanMode::L2);
    assert_eq!("l3s".parse::<IpvlanMode>().unwrap().to_string(), "l3s");
    assert!("l4".parse::<IpvlanMode>().is_err());
}

#[test]
fn link_details_alias_and_lookups() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let parent = local_veth(&h, "up0", "up0p");
    let mac: MacAddr = "02:00:00:00:bb:07".parse().unwrap();
    h.set_mac(parent, mac).unwrap();
    assert_eq!(h.link_by_mac(mac).unwrap().unwrap().name, "up0");
    assert!(h
        .link_by_mac("02:00:00:00:bb:08".parse().unwrap())
        .unwrap()
        .is_none());

    h.set_alias(parent, "orig-name").unwrap();
    assert_eq!(link(&ns, "up0")["ifalias"], "orig-name");
    assert_eq!(
        h.link_details("up0").unwrap().alias.as_deref(),
        Some("orig-name")
    );
    h.set_alias(parent, "").unwrap();
    assert_eq!(h.link_details("up0").unwrap().alias, None);
    assert!(h.link_details("nope0").unwrap_err().is_not_found());

    h.add_macvlan(&MacvlanSpec {
        name: "mv0".into(),
        parent,
        mode: MacvlanMode::Vepa,
        ..Default::default()
    })
    .unwrap();
    let mv = h.link_by_name("mv0").unwrap();
    h.set_macvlan_bc_queue_len(mv.index, 3000).unwrap();
    let j = link(&ns, "mv0");
    assert_eq!(j["linkinfo"]["info_data"]["bcqueuelen"], 3000, "{j}");
    let d = h.link_details("mv0").unwrap();
    assert_eq!(d.macvlan_mode, Some(MacvlanMode::Vepa));
    assert_eq!(d.bc_queue_len, Some(3000));
    assert_eq!(MacvlanMode::Passthru.to_string(), "passthru");

    assert!(h.default_route_link().unwrap().is_none());
    ip_cmd(&ns, &["link", "set", "up0", "up"]);
    ip_cmd(&ns, &["link", "set", "up0p", "up"]);
    ip_cmd(&ns, &["addr", "add", "192.0.2.2/24", "dev", "up0"]);
    ip_cmd(&ns, &["route", "add", "default", "via", "192.0.2.1"]);
    assert_eq!(h.default_route_link().unwrap().unwrap().name, "up0");
}
