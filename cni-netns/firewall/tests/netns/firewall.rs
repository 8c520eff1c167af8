//! Firewall state tests (root): rules created in a fresh namespace, found by
//! tag, checked, deleted (twice), garbage collected, with `nft -j list
//! ruleset` as the oracle.

use crate::firewall_common::*;
use cni_firewall::Error;
use cni_firewall::{
    AttachmentId, Firewall, HostPortMapping, MacSpoofCheckSpec, MasqueradeSpec, NftFirewall,
    PortMappingSpec, Protocol, RuleKind, RuleSpec,
};
use serde_json::{json, Value};

fn masq(net: &str, cid: &str, addr: &str) -> MasqueradeSpec {
    MasqueradeSpec {
        attachment: AttachmentId::new(net, cid, "eth0"),
        addresses: vec![addr.parse().unwrap()],
    }
}

fn ports(cid: &str, v4: &str, host_ports: &[(u16, Protocol)]) -> PortMappingSpec {
    let mut spec = PortMappingSpec::new(AttachmentId::new("net1", cid, "eth0"));
    spec.container_v4 = Some(v4.parse().unwrap());
    spec.mappings = host_ports
        .iter()
        .map(|&(p, protocol)| HostPortMapping {
            host_port: p,
            container_port: 80,
            protocol,
            host_ip: None,
        })
        .collect();
    spec
}

#[test]
fn masquerade_lifecycle() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwmasq");
    let fw = firewall_for(&ns.path());
    let a = masq("net1", "aaaa", "10.1.0.5/24");
    let b = masq("net1", "bbbb", "fd00::6/64");

    // DEL before anything exists is fine.
    fw.delete(&RuleSpec::Masquerade(a.clone())).unwrap();
    fw.add(&RuleSpec::Masquerade(a.clone())).unwrap();
    fw.add(&RuleSpec::Masquerade(b.clone())).unwrap();

    let rs = ns.ruleset();
    assert!(has_table(&rs, "inet", "cni_rs_masq"));
    let owner_a = owner_data(&a.attachment);
    assert_eq!(
        map_elements(&rs, "cni_rs_masq", "masq_src4"),
        vec![(json!("10.1.0.5"), owner_a.clone())]
    );
    // Masqueraded only outside the subnet: one shared key per subnet, in
    // no attachment's name.
    let subnet = json!({"prefix": {"addr": "10.1.0.0", "len": 24}});
    assert_eq!(
        map_elements(&rs, "cni_rs_masq", "masq_nets4"),
        vec![(json!({"concat": [subnet, subnet]}), json!(0))]
    );
    assert_eq!(map_elements(&rs, "cni_rs_masq", "masq_src6").len(), 1);
    assert_eq!(map_elements(&rs, "cni_rs_masq", "masq_nets6").len(), 1);
    // Source and the attachment's anchor in `owners`.
    assert_eq!(
        elements_tagged(&rs, "cni_rs_masq", &a.attachment.tag()).len(),
        2
    );
    // A second pod of the subnet shares the subnet key.
    let a2 = masq("net1", "a2a2", "10.1.0.9/24");
    fw.add(&RuleSpec::Masquerade(a2.clone())).unwrap();
    assert_eq!(
        map_elements(&ns.ruleset(), "cni_rs_masq", "masq_nets4").len(),
        1
    );
    fw.delete(&RuleSpec::Masquerade(a2.clone())).unwrap();
    let _ = owner_a;
    // No per-attachment rule: the shared rule masquerades.
    assert!(rules_tagged(&rs, &a.attachment.tag()).is_empty());
    let shared = objects(&rs, "rule")
        .into_iter()
        .find(|r| r["expr"].to_string().contains("@masq_nets4"))
        .unwrap()["expr"]
        .to_string();
    assert!(
        shared.contains(r#""op":"!=""#) && shared.contains("masquerade"),
        "{shared}"
    );

    fw.check(&RuleSpec::Masquerade(a.clone())).unwrap();
    fw.check(&RuleSpec::Masquerade(b.clone())).unwrap();

    // Idempotent ADD: same rules and elements.
    let before = (
        objects(&rs, "rule").len(),
        elements_tagged(&rs, "cni_rs_masq", &a.attachment.tag()),
    );
    fw.add(&RuleSpec::Masquerade(a.clone())).unwrap();
    let rs2 = ns.ruleset();
    assert_eq!(
        (
            objects(&rs2, "rule").len(),
            elements_tagged(&rs2, "cni_rs_masq", &a.attachment.tag())
        ),
        before
    );
    // Another attachment cannot masquerade the same address.
    assert!(matches!(
        fw.add(&RuleSpec::Masquerade(masq("net1", "cccc", "10.1.0.5/24"))),
        Err(Error::FirewallConflict { .. })
    ));

    let mut owners: Vec<String> = fw
        .list(RuleKind::Masquerade)
        .unwrap()
        .into_iter()
        .map(|o| {
            assert!(o.complete);
            o.attachment.container_id
        })
        .collect();
    owners.sort();
    assert_eq!(owners, ["aaaa", "bbbb"]);

    fw.delete(&RuleSpec::Masquerade(a.clone())).unwrap();
    fw.delete(&RuleSpec::Masquerade(a.clone())).unwrap();
    let rs = ns.ruleset();
    assert!(map_elements(&rs, "cni_rs_masq", "masq_src4").is_empty());
    assert!(elements_tagged(&rs, "cni_rs_masq", &a.attachment.tag()).is_empty());
    // The last DEL of a subnet takes its key (no GC needed); the other
    // family's subnet still has its pod.
    assert!(map_elements(&rs, "cni_rs_masq", "masq_nets4").is_empty());
    assert_eq!(map_elements(&rs, "cni_rs_masq", "masq_nets6").len(), 1);
    assert!(matches!(
        fw.check(&RuleSpec::Masquerade(a.clone())),
        Err(Error::FirewallCheck { .. })
    ));
    fw.check(&RuleSpec::Masquerade(b.clone())).unwrap();
    // A DEL that no longer knows the addresses (the pod is gone) too.
    fw.delete_owned(RuleKind::Masquerade, &b.attachment)
        .unwrap();
    let rs = ns.ruleset();
    for map in [
        "masq_src4",
        "masq_src6",
        "masq_nets4",
        "masq_nets6",
        "owners",
    ] {
        assert!(map_elements(&rs, "cni_rs_masq", map).is_empty(), "{map}");
    }
}

/// Pods come and go in one subnet from several threads, so one's DEL (the
/// subnet's last, as it reads) races another's ADD: while a pod is
/// attached, its subnet key must be there (a DEL that removed it after the
/// ADD committed would masquerade traffic between pods of the subnet).
#[test]
fn last_del_of_a_subnet_never_takes_a_new_pods_key() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwrace");
    let subnet = json!({"prefix": {"addr": "10.7.0.0", "len": 24}});
    let key = json!({"concat": [subnet, subnet]});
    let missing = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let (ns, key, missing) = (&ns, &key, &missing);
            s.spawn(move || {
                let fw = firewall_for(&ns.path());
                for i in 0..40u8 {
                    let spec = RuleSpec::Masquerade(masq(
                        "net1",
                        &format!("t{t}-{i}"),
                        &format!("10.7.0.{}/24", 10 + t),
                    ));
                    fw.add(&spec).unwrap();
                    let rs = ns.ruleset();
                    if !map_elements(&rs, "cni_rs_masq", "masq_nets4")
                        .iter()
                        .any(|(k, _)| k == key)
                    {
                        missing.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    fw.delete(&spec).unwrap();
                }
            });
        }
    });
    assert_eq!(
        missing.into_inner(),
        0,
        "subnet key missing under a live pod"
    );
    // And the last DEL took it.
    assert!(map_elements(&ns.ruleset(), "cni_rs_masq", "masq_nets4").is_empty());
}

#[test]
fn gc_removes_only_dead_attachments_of_the_network() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwgc");
    let fw = firewall_for(&ns.path());
    let live = masq("net1", "live", "10.1.0.2/24");
    let dead = masq("net1", "dead", "10.1.0.3/24");
    let other = masq("net2", "other", "10.2.0.3/24");
    for s in [&live, &dead, &other] {
        fw.add(&RuleSpec::Masquerade(s.clone())).unwrap();
    }
    let pm_live = ports("live", "10.1.0.2/24", &[(8080, Protocol::Tcp)]);
    let pm_dead = ports(
        "dead",
        "10.1.0.3/24",
        &[(8081, Protocol::Udp), (8082, Protocol::Sctp)],
    );
    fw.add(&RuleSpec::PortMappings(pm_live.clone())).unwrap();
    fw.add(&RuleSpec::PortMappings(pm_dead.clone())).unwrap();

    let removed = fw
        .gc(
            RuleKind::Masquerade,
            "net1",
            std::slice::from_ref(&live.attachment),
        )
        .unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].attachment, dead.attachment);
    let removed = fw
        .gc(
            RuleKind::PortMapping,
            "net1",
            std::slice::from_ref(&live.attachment),
        )
        .unwrap();
    assert_eq!(removed.len(), 1);

    let rs = ns.ruleset();
    let masq4: Vec<_> = map_elements(&rs, "cni_rs_masq", "masq_src4")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(masq4.len(), 2);
    assert!(masq4.contains(&json!("10.1.0.2")) && masq4.contains(&json!("10.2.0.3")));
    // Both subnets are still in use.
    assert_eq!(map_elements(&rs, "cni_rs_masq", "masq_nets4").len(), 2);
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hp_dnat4").len(), 1);
    assert!(elements_tagged(&rs, "cni_rs_masq", &dead.attachment.tag()).is_empty());
    assert!(elements_tagged(&rs, "cni_rs_hostport", &pm_dead.attachment.tag()).is_empty());
    fw.check(&RuleSpec::Masquerade(live.clone())).unwrap();
    fw.check(&RuleSpec::Masquerade(other.clone())).unwrap();
    fw.check(&RuleSpec::PortMappings(pm_live.clone())).unwrap();

    // GC with nothing dead is a no-op; GC of an empty namespace too.
    assert!(fw
        .gc(
            RuleKind::Masquerade,
            "net1",
            std::slice::from_ref(&live.attachment)
        )
        .unwrap()
        .is_empty());
    assert!(fw
        .gc(RuleKind::MacSpoofCheck, "net1", &[])
        .unwrap()
        .is_empty());
    // The network's last attachment collected: its subnet key goes too,
    // the other network's stays.
    assert_eq!(fw.gc(RuleKind::Masquerade, "net1", &[]).unwrap().len(), 1);
    let nets: Vec<Value> = map_elements(&ns.ruleset(), "cni_rs_masq", "masq_nets4")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let subnet = json!({"prefix": {"addr": "10.2.0.0", "len": 24}});
    assert_eq!(nets, vec![json!({"concat": [subnet, subnet]})]);
}

/// Nested subnets of two networks starting at the same address: the
/// interval map refuses the second subnet key, the ADD goes in without it
/// (the larger subnet's key exempts the traffic within the smaller).
#[test]
fn masquerade_of_nested_subnets() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwmasqnest");
    let fw = firewall_for(&ns.path());
    let outer = masq("net1", "outer", "10.1.0.5/16");
    let inner = masq("net2", "inner", "10.1.0.6/24");
    fw.add(&RuleSpec::Masquerade(outer.clone())).unwrap();
    fw.add(&RuleSpec::Masquerade(inner.clone())).unwrap();
    let rs = ns.ruleset();
    assert_eq!(map_elements(&rs, "cni_rs_masq", "masq_src4").len(), 2);
    assert_eq!(map_elements(&rs, "cni_rs_masq", "masq_nets4").len(), 1);
    fw.check(&RuleSpec::Masquerade(inner.clone())).unwrap();
    fw.delete(&RuleSpec::Masquerade(inner)).unwrap();
    fw.check(&RuleSpec::Masquerade(outer)).unwrap();
}

#[test]
fn port_mappings_lifecycle_conflicts_and_double_delete() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwpm");
    let fw = firewall_for(&ns.path());
    let mut a = ports(
        "aaaa",
        "10.1.0.5/24",
        &[(8080, Protocol::Tcp), (53, Protocol::Udp)],
    );
    a.container_v6 = Some("fd00::5/64".parse().unwrap());
    a.mappings.push(HostPortMapping {
        host_port: 9090,
        container_port: 90,
        protocol: Protocol::Tcp,
        host_ip: Some("10.20.0.1".parse().unwrap()),
    });
    a.conditions_v4 = vec![
        "ip".into(),
        "saddr".into(),
        "!=".into(),
        "10.66.0.0/16".into(),
    ];

    // No mappings: no work at all, not even a table.
    let empty = ports("none", "10.1.0.9/24", &[]);
    fw.add(&RuleSpec::PortMappings(empty.clone())).unwrap();
    fw.delete(&RuleSpec::PortMappings(empty.clone())).unwrap();
    assert!(!has_table(&ns.ruleset(), "inet", "cni_rs_hostport"));

    fw.add(&RuleSpec::PortMappings(a.clone())).unwrap();
    fw.check(&RuleSpec::PortMappings(a.clone())).unwrap();
    let rs = ns.ruleset();
    let mut wild = map_elements(&rs, "cni_rs_hostport", "hp_dnat4");
    wild.sort_by_key(|(k, _)| k.to_string());
    assert_eq!(
        wild,
        vec![
            (
                json!({"concat": ["tcp", 8080]}),
                json!({"concat": ["10.1.0.5", 80]})
            ),
            (
                json!({"concat": ["udp", 53]}),
                json!({"concat": ["10.1.0.5", 80]})
            ),
        ]
    );
    assert_eq!(
        map_elements(&rs, "cni_rs_hostport", "hip_dnat4"),
        vec![(
            json!({"concat": ["10.20.0.1", "tcp", 9090]}),
            json!({"concat": ["10.1.0.5", 90]})
        )]
    );
    assert_eq!(
        map_elements(&rs, "cni_rs_hostport", "hp_dnat6").len(),
        2,
        "8080 and 53 for v6 too"
    );
    assert!(map_elements(&rs, "cni_rs_hostport", "hp_dnat6")
        .iter()
        .any(|(_, d)| *d == json!({"concat": ["fd00::5", 80]})));
    // snat: hairpin (subnet intervals) for both families, localhost for v4.
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hp_masq4").len(), 2);
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hp_lo4").len(), 2);
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hp_masq6").len(), 2);
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hip_masq4").len(), 1);
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hip_lo4").len(), 1);
    // conditionsV4: a pass and a stop rule per v4 mapping (8080, 53, 9090),
    // in the conditions chain.
    let tagged = rules_tagged(&rs, &a.attachment.tag());
    assert_eq!(tagged.len(), 3 * 2);
    assert!(tagged.iter().all(|r| r["chain"] == "conditions"));
    assert!(tagged[0]["expr"].to_string().contains("10.66.0.0"));

    // Another attachment cannot take a host port in use.
    let b = ports("bbbb", "10.1.0.6/24", &[(8080, Protocol::Tcp)]);
    match fw.add(&RuleSpec::PortMappings(b.clone())) {
        Err(Error::FirewallConflict { key, .. }) => assert!(key.contains("8080"), "{key}"),
        other => panic!("expected conflict, got {other:?}"),
    }
    fw.check(&RuleSpec::PortMappings(a.clone())).unwrap();
    // A DEL of b naming a's key must not remove it.
    fw.delete(&RuleSpec::PortMappings(b.clone())).unwrap();
    fw.check(&RuleSpec::PortMappings(a.clone())).unwrap();

    // ADD a, DEL a, ADD b (same port), DEL a again: b survives.
    fw.delete(&RuleSpec::PortMappings(a.clone())).unwrap();
    let rs = ns.ruleset();
    assert!(map_elements(&rs, "cni_rs_hostport", "hp_dnat4").is_empty());
    assert!(rules_tagged(&rs, &a.attachment.tag()).is_empty());
    fw.add(&RuleSpec::PortMappings(b.clone())).unwrap();
    fw.delete(&RuleSpec::PortMappings(a.clone())).unwrap();
    fw.check(&RuleSpec::PortMappings(b.clone())).unwrap();

    // A re-ADD of b with different ports replaces its elements; a DEL with
    // the new spec then removes all.
    let b2 = ports("bbbb", "10.1.0.6/24", &[(7070, Protocol::Tcp)]);
    fw.add(&RuleSpec::PortMappings(b2.clone())).unwrap();
    assert_eq!(
        map_elements(&ns.ruleset(), "cni_rs_hostport", "hp_dnat4"),
        vec![(
            json!({"concat": ["tcp", 7070]}),
            json!({"concat": ["10.1.0.6", 80]})
        )]
    );
    fw.delete(&RuleSpec::PortMappings(b2.clone())).unwrap();
    let rs = ns.ruleset();
    assert!(elements_tagged(&rs, "cni_rs_hostport", &b2.attachment.tag()).is_empty());
    assert!(map_elements(&rs, "cni_rs_hostport", "hp_owner").is_empty());
    assert!(fw.list(RuleKind::PortMapping).unwrap().is_empty());
}

#[test]
fn delete_attachment_without_spec() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwdelid");
    let fw = firewall_for(&ns.path());
    let a = ports("aaaa", "10.1.0.5/24", &[(8080, Protocol::Tcp)]);
    fw.add(&RuleSpec::PortMappings(a.clone())).unwrap();
    fw.delete_owned(RuleKind::PortMapping, &a.attachment)
        .unwrap();
    fw.delete_owned(RuleKind::PortMapping, &a.attachment)
        .unwrap();
    assert!(elements_tagged(&ns.ruleset(), "cni_rs_hostport", &a.attachment.tag()).is_empty());
    assert!(map_elements(&ns.ruleset(), "cni_rs_hostport", "hp_dnat4").is_empty());
}

#[test]
fn mac_spoof_check_lifecycle() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwmac");
    let fw = firewall_for(&ns.path());
    let spec = MacSpoofCheckSpec {
        attachment: AttachmentId::new("net1", "aaaa", "eth0"),
        host_ifname: "veth1234".into(),
        mac: "0a:58:0a:01:00:05".parse().unwrap(),
    };
    fw.add(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    fw.add(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    fw.check(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    let rs = ns.ruleset();
    assert!(has_table(&rs, "bridge", "cni_rs_macspoofchk"));
    let owner = owner_data(&spec.attachment);
    assert_eq!(
        map_elements(&rs, "cni_rs_macspoofchk", "sc_ports"),
        vec![(json!("veth1234"), owner.clone())]
    );
    assert_eq!(
        map_elements(&rs, "cni_rs_macspoofchk", "sc_allowed"),
        vec![(json!({"concat": ["veth1234", "0a:58:0a:01:00:05"]}), owner)]
    );
    assert_eq!(
        elements_tagged(&rs, "cni_rs_macspoofchk", &spec.attachment.tag()).len(),
        3
    );
    let drop = objects(&rs, "rule")
        .into_iter()
        .find(|r| r["table"] == "cni_rs_macspoofchk")
        .unwrap()["expr"]
        .to_string();
    assert!(
        drop.contains("@sc_allowed") && drop.contains("drop"),
        "{drop}"
    );

    fw.delete(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    fw.delete(&RuleSpec::MacSpoofCheck(spec.clone())).unwrap();
    assert!(
        elements_tagged(&ns.ruleset(), "cni_rs_macspoofchk", &spec.attachment.tag()).is_empty()
    );
    assert!(fw.check(&RuleSpec::MacSpoofCheck(spec.clone())).is_err());
}

#[test]
fn errors_name_the_operation() {
    if skip_unless_root() {
        return;
    }
    let fw = NftFirewall::in_netns("/run/netns/does-not-exist-fw");
    let e = fw
        .add(&RuleSpec::Masquerade(masq("n", "c", "10.0.0.2/24")))
        .unwrap_err();
    assert!(
        matches!(
            e,
            cni_firewall::Error::Netns(cni_netns::Error::NetnsNotFound { .. })
        ),
        "{e}"
    );

    let ns = TestNs::new("fwerr");
    let fw = NftFirewall::in_netns(ns.path()).with_program("/nonexistent/nft");
    let e = fw
        .add(&RuleSpec::Masquerade(masq("n", "c", "10.0.0.2/24")))
        .unwrap_err();
    assert!(matches!(e, Error::NftSpawn { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("add masquerade for network \"n\""),
        "{e}"
    );

    let fw = firewall_for(&ns.path());
    let mut bad = ports("c", "10.0.0.2/24", &[(80, Protocol::Tcp)]);
    bad.conditions_v4 = vec!["jump".into(), "somewhere".into()];
    assert!(matches!(
        fw.add(&RuleSpec::PortMappings(bad.clone())),
        Err(Error::InvalidCondition { .. })
    ));
    // An nft-level failure (condition nft rejects) is a typed nft error.
    bad.conditions_v4 = vec!["tcp".into(), "sport".into(), "70000".into()];
    let e = fw.add(&RuleSpec::PortMappings(bad.clone())).unwrap_err();
    assert!(matches!(e, Error::Nft { .. }), "{e}");
    assert!(e.to_string().contains("nft: Error: "), "{e}");
}

#[test]
fn concurrent_first_adds_are_safe() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwconc");
    let handles: Vec<_> = (0..8u16)
        .map(|i| {
            let path = ns.path();
            std::thread::spawn(move || {
                let fw = NftFirewall::in_netns(path);
                let cid = format!("c{i}");
                let addr = format!("10.1.0.{}/24", i + 2);
                fw.add(&RuleSpec::Masquerade(masq("net1", &cid, &addr)))
                    .unwrap();
                fw.add(&RuleSpec::PortMappings(ports(
                    &cid,
                    &addr,
                    &[(8000 + i, Protocol::Tcp)],
                )))
                .unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let rs = ns.ruleset();
    assert_eq!(map_elements(&rs, "cni_rs_masq", "masq_src4").len(), 8);
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hp_dnat4").len(), 8);
    // The shared chains were written once, whoever came first.
    let count = |table: &str, chain: &str| {
        objects(&rs, "rule")
            .iter()
            .filter(|r| r["table"] == table && r["chain"] == chain)
            .count()
    };
    assert_eq!(count("cni_rs_masq", "postrouting"), 4);
    assert_eq!(count("cni_rs_hostport", "dispatch"), 15);
    assert_eq!(count("cni_rs_hostport", "prerouting"), 1);
    let fw = firewall_for(&ns.path());
    assert_eq!(fw.list(RuleKind::PortMapping).unwrap().len(), 8);
}

#[test]
fn firewall_is_an_object_safe_shared_trait() {
    fn shared<T: Send + Sync + 'static>(_: &T) {}
    let fw: Box<dyn Firewall> = Box::new(NftFirewall::new());
    shared(&fw);
    let arc: std::sync::Arc<dyn Firewall> = std::sync::Arc::new(NftFirewall::in_netns("/x"));
    shared(&arc);
}
