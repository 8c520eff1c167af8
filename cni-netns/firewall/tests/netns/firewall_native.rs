//! The native nf_tables backend against the `nft` process backend (root):
//! the same attachments programmed through both give the same ruleset;
//! concurrent writers of one table never corrupt each other. (The cost of
//! port-mapping ADD/DEL with 50 and 1000 attachments present, in-process and
//! exec'd: `benches/src/bin/firewall-cost.rs`.)

use std::time::{Duration, Instant};

use crate::firewall_common::*;
use cni_firewall::{
    AttachmentId, Firewall, HostPortMapping, MacSpoofCheckSpec, MasqueradeSpec, NativeFirewall,
    NftFirewall, PortMappingSpec, Protocol, RuleKind, RuleSpec,
};
use serde_json::Value;

fn pm(net: &str, i: u32) -> PortMappingSpec {
    let mut s = PortMappingSpec::new(AttachmentId::new(net, format!("{i:064x}"), "eth0"));
    s.container_v4 = Some(
        format!(
            "10.{}.{}.{}/16",
            (i >> 16) & 0xff,
            (i >> 8) & 0xff,
            i & 0xff
        )
        .parse()
        .unwrap(),
    );
    s.mappings = vec![
        HostPortMapping {
            host_port: (10000 + 2 * i) as u16,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        },
        HostPortMapping {
            host_port: (10001 + 2 * i) as u16,
            container_port: 53,
            protocol: Protocol::Udp,
            host_ip: None,
        },
    ];
    s
}

fn masq(net: &str, i: u32) -> MasqueradeSpec {
    MasqueradeSpec {
        attachment: AttachmentId::new(net, format!("{i:064x}"), "eth0"),
        addresses: vec![format!(
            "10.{}.{}.{}/16",
            (i >> 16) & 0xff,
            (i >> 8) & 0xff,
            i & 0xff
        )
        .parse()
        .unwrap()],
    }
}

/// Every shape the layout produces: masquerade v4 and v6, port mappings
/// with host IPs, both families, snat off, masq_all, conditions, and the
/// MAC spoof check.
fn program(fw: &dyn Firewall) {
    fw.add(&RuleSpec::Masquerade(masq("diff", 1))).unwrap();
    fw.add(&RuleSpec::Masquerade(MasqueradeSpec {
        attachment: AttachmentId::new("diff", "v6", "eth0"),
        addresses: vec!["fd00::5/64".parse().unwrap()],
    }))
    .unwrap();
    let mut s = pm("diff", 2);
    s.container_v6 = Some("fd00::2/64".parse().unwrap());
    s.mappings.push(HostPortMapping {
        host_port: 8443,
        container_port: 443,
        protocol: Protocol::Sctp,
        host_ip: Some("192.0.2.1".parse().unwrap()),
    });
    s.mappings.push(HostPortMapping {
        host_port: 8444,
        container_port: 443,
        protocol: Protocol::Tcp,
        host_ip: Some("2001:db8::1".parse().unwrap()),
    });
    s.conditions_v4 = vec!["iifname != \"lo\" ip saddr 10.0.0.0/8".into()];
    fw.add(&RuleSpec::PortMappings(s.clone())).unwrap();
    let mut s = pm("diff", 3);
    s.snat = false;
    fw.add(&RuleSpec::PortMappings(s.clone())).unwrap();
    let mut s = pm("diff", 4);
    s.masq_all = true;
    fw.add(&RuleSpec::PortMappings(s.clone())).unwrap();
    fw.add(&RuleSpec::MacSpoofCheck(MacSpoofCheckSpec {
        attachment: AttachmentId::new("diff", "sc", "eth0"),
        host_ifname: "veth1234".into(),
        mac: cni_netns::MacAddr([2, 0, 0, 0, 0, 9]),
    }))
    .unwrap();
}

/// `nft -j list ruleset` without what differs between any two programmings
/// of the same state (handles, the metainfo header).
fn normalized(ns: &TestNs) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(o) => {
                o.remove("handle");
                // Time left before the (ten-year) element timeout.
                o.remove("expires");
                o.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut r = ns.ruleset();
    if let Some(items) = r.get_mut("nftables").and_then(Value::as_array_mut) {
        items.retain(|i| i.get("metainfo").is_none());
    }
    strip(&mut r);
    r
}

#[test]
fn native_and_nft_program_the_same_ruleset() {
    if skip_unless_root() {
        return;
    }
    let a = TestNs::new("fwdiffn");
    let b = TestNs::new("fwdiffp");
    program(&NativeFirewall::in_netns(a.path()));
    program(&NftFirewall::in_netns(b.path()));
    let (ra, rb) = (normalized(&a), normalized(&b));
    assert!(objects(&ra, "rule").len() > 10);
    assert_eq!(ra, rb, "native and nft rulesets differ");

    // And each backend reads and removes what the other wrote.
    let native_on_b = NativeFirewall::in_netns(b.path());
    native_on_b
        .check(&RuleSpec::Masquerade(masq("diff", 1)))
        .unwrap();
    assert_eq!(native_on_b.list(RuleKind::PortMapping).unwrap().len(), 3);
    native_on_b
        .delete(&RuleSpec::PortMappings(pm("diff", 3)))
        .unwrap();
    NftFirewall::in_netns(a.path())
        .delete(&RuleSpec::PortMappings(pm("diff", 3)))
        .unwrap();
    assert_eq!(normalized(&a), normalized(&b));
}

#[test]
fn each_shape_created_listed_found_by_tag_and_deleted() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwnshape");
    let fw = NativeFirewall::in_netns(ns.path());
    program(&fw);
    let rs = ns.ruleset();
    for (kind, n) in [
        (RuleKind::Masquerade, 2),
        (RuleKind::PortMapping, 3),
        (RuleKind::MacSpoofCheck, 1),
    ] {
        let owned = fw.list(kind).unwrap();
        assert_eq!(owned.len(), n, "{kind}");
        for o in &owned {
            assert!(o.complete);
            // The oracle finds the elements by the tag the kernel stored.
            let tagged = ["cni_rs_masq", "cni_rs_hostport", "cni_rs_macspoofchk"]
                .iter()
                .flat_map(|t| elements_tagged(&rs, t, &o.attachment.tag()))
                .count();
            assert!(tagged > 0, "{kind}");
            fw.delete_owned(kind, &o.attachment).unwrap();
        }
        assert!(fw.list(kind).unwrap().is_empty());
    }
    let rs = ns.ruleset();
    assert!(objects(&rs, "rule")
        .iter()
        .all(|r| r.get("comment").is_none()));
    // Deletes are idempotent.
    fw.delete(&RuleSpec::Masquerade(masq("diff", 1))).unwrap();
    fw.delete(&RuleSpec::PortMappings(pm("diff", 2))).unwrap();
}

#[test]
fn conditions_the_encoder_does_not_know_go_through_nft() {
    if skip_unless_root() || !have("nft") {
        return;
    }
    let a = TestNs::new("fwnfba");
    let b = TestNs::new("fwnfbb");
    let mut s = pm("fallback", 7);
    // An anonymous set: not encoded natively.
    s.conditions_v4 = vec!["ip saddr { 10.0.0.0/8, 192.168.0.0/16 }".into()];
    let native = NativeFirewall::in_netns(a.path());
    native.add(&RuleSpec::PortMappings(s.clone())).unwrap();
    NftFirewall::in_netns(b.path())
        .add(&RuleSpec::PortMappings(s.clone()))
        .unwrap();
    assert_eq!(normalized(&a), normalized(&b));
    native.check(&RuleSpec::PortMappings(s.clone())).unwrap();
    native.delete(&RuleSpec::PortMappings(s.clone())).unwrap();
    assert!(native.list(RuleKind::PortMapping).unwrap().is_empty());
}

/// Drops CAP_NET_ADMIN from the calling thread's effective set
/// (capabilities are per thread, so the rest of the test process keeps it).
fn drop_net_admin_in_this_thread() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget/capset read and write the header and two data structs
    // of the v3 ABI they are given.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
        d[0].effective &= !(1 << 12);
        assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
    }
}

#[test]
fn a_refused_batch_is_reported_not_waited_for() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwneperm");
    let path = ns.path();
    let res = std::thread::spawn(move || {
        drop_net_admin_in_this_thread();
        let t = Instant::now();
        let e = NativeFirewall::in_netns(path)
            .add(&RuleSpec::Masquerade(masq("eperm", 1)))
            .unwrap_err();
        (e.to_string(), t.elapsed())
    })
    .join()
    .unwrap();
    assert!(res.0.contains("Operation not permitted"), "{}", res.0);
    assert!(res.0.contains("nf_tables batch"), "{}", res.0);
    assert!(res.1 < Duration::from_secs(2), "{:?}", res.1);
}

#[test]
fn kernel_errors_name_the_object() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwnerr");
    let fw = NativeFirewall::in_netns(ns.path());
    fw.add(&RuleSpec::PortMappings(pm("errnet", 1))).unwrap();
    let mut other = pm("errnet", 2);
    other.mappings = pm("errnet", 1).mappings;
    let e = fw.add(&RuleSpec::PortMappings(other.clone())).unwrap_err();
    assert!(
        matches!(e, cni_firewall::Error::FirewallConflict { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("hp_owner :: . tcp . 10002"), "{e}");
    let missing = NativeFirewall::in_netns("/run/netns/does-not-exist-native");
    let e = missing
        .add(&RuleSpec::Masquerade(masq("errnet", 1)))
        .unwrap_err();
    assert!(e.to_string().contains("does-not-exist-native"), "{e}");
}

#[test]
fn concurrent_writers_of_one_table_do_not_corrupt_each_other() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwnconc");
    let path = ns.path();
    let threads: Vec<_> = (0..2u32)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                // Each writer has its own socket, as two plugin processes.
                let fw = NativeFirewall::in_netns(path);
                for i in 0..40 {
                    let id = t * 1000 + i;
                    fw.add(&RuleSpec::PortMappings(pm("conc", id))).unwrap();
                    fw.add(&RuleSpec::Masquerade(masq("conc", id))).unwrap();
                    if i % 2 == 0 {
                        fw.delete(&RuleSpec::PortMappings(pm("conc", id))).unwrap();
                        fw.delete(&RuleSpec::Masquerade(masq("conc", id))).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let fw = NativeFirewall::in_netns(ns.path());
    for t in 0..2u32 {
        for i in 0..40 {
            let id = t * 1000 + i;
            if i % 2 == 1 {
                fw.check(&RuleSpec::PortMappings(pm("conc", id))).unwrap();
                fw.check(&RuleSpec::Masquerade(masq("conc", id))).unwrap();
            }
        }
    }
    assert_eq!(fw.list(RuleKind::PortMapping).unwrap().len(), 40);
    let rs = ns.ruleset();
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hp_dnat4").len(), 80);
    assert_eq!(map_elements(&rs, "cni_rs_hostport", "hp_owner").len(), 80);
}
