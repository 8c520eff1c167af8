//! Traffic control in a real namespace, checked with `tc -j` and `ip -j`:
//! TBF, ingress qdisc, redirect filters (u32 and matchall), IFB creation,
//! listing, deletion; link txqlen and allmulti.

use std::process::Command;

use crate::common::{ip, ip_cmd, netns};
use cni_netns::tc::{self, PschedClock, RedirectFilterKind, Tbf};
use cni_netns::OwnedNetns;
use serde_json::Value;

fn tc_json(ns: &OwnedNetns, args: &[&str]) -> Value {
    let mut a = vec!["netns", "exec", ns.name(), "tc", "-j"];
    a.extend_from_slice(args);
    let out = Command::new("ip").args(&a).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Value::Array(vec![]);
    }
    serde_json::from_str(&text).unwrap()
}

fn veth(ns: &OwnedNetns) -> u32 {
    ip_cmd(
        ns,
        &["link", "add", "tca", "type", "veth", "peer", "name", "tcb"],
    );
    ip_cmd(ns, &["link", "set", "tca", "up"]);
    ip_cmd(ns, &["link", "set", "tcb", "up"]);
    ip(ns, &["link", "show", "tca"])[0]["ifindex"]
        .as_u64()
        .unwrap() as u32
}

#[test]
fn tbf_ingress_filter_and_ifb_round_trip() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let index = veth(&ns);

    let ifb = h.add_ifb("tcifb0", 1400, Some("test/alias")).unwrap();
    let l = &ip(&ns, &["-d", "link", "show", "tcifb0"])[0];
    assert_eq!(l["linkinfo"]["info_kind"], "ifb");
    assert_eq!(l["mtu"], 1400);
    assert_eq!(l["ifalias"], "test/alias");
    assert!(l["flags"].as_array().unwrap().contains(&"UP".into()));
    assert_eq!(
        h.link_alias(ifb.index).unwrap().as_deref(),
        Some("test/alias")
    );
    assert_eq!(h.link_txqlen(ifb.index).unwrap(), 0);

    let tbf = Tbf::from_rate_and_burst(8_000_000, 80_000, PschedClock::read());
    h.add_tbf(index, &tbf).unwrap();
    h.add_ingress_qdisc(index).unwrap();
    h.add_redirect_filter(index, ifb.index, RedirectFilterKind::U32)
        .unwrap();

    let q = tc_json(&ns, &["qdisc", "show", "dev", "tca"]);
    let kinds: Vec<&str> = q
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tbf", "ingress"]);
    assert_eq!(q[0]["options"]["rate"], 1_000_000);
    assert_eq!(q[0]["options"]["burst"], 10_000);
    assert_eq!(q[0]["options"]["lat"], 25_000);
    let f = tc_json(&ns, &["filter", "show", "dev", "tca", "parent", "ffff:"]);
    let acts = &f[2]["options"]["actions"];
    assert_eq!(acts[0]["to_dev"], "tcifb0");
    assert_eq!(acts[0]["mirred_action"], "redirect");

    // Our own listings agree with the oracle.
    let ours = h.qdiscs(index).unwrap();
    assert_eq!(ours.len(), 2);
    assert_eq!(ours[0].kind, "tbf");
    assert_eq!(ours[0].handle, tc::TBF_HANDLE);
    assert_eq!(ours[0].parent, tc::HANDLE_ROOT);
    assert_eq!(ours[0].tbf, Some(tbf));
    assert_eq!(ours[1].kind, "ingress");
    assert_eq!(ours[1].parent, tc::HANDLE_INGRESS);
    let filters = h.filters(index, tc::INGRESS_QDISC_HANDLE).unwrap();
    assert!(filters
        .iter()
        .any(|f| f.kind == "u32" && f.redirects == [ifb.index] && f.protocol == tc::ETH_P_ALL));

    // Deletion, idempotent.
    assert!(h.delete_qdisc(index, tc::HANDLE_INGRESS).unwrap());
    assert!(!h.delete_qdisc(index, tc::HANDLE_INGRESS).unwrap());
    assert!(h.delete_qdisc(index, tc::HANDLE_ROOT).unwrap());
    assert!(!h.delete_qdisc(index, tc::HANDLE_ROOT).unwrap());
    let q = tc_json(&ns, &["qdisc", "show", "dev", "tca"]);
    assert_eq!(q[0]["kind"], "noqueue");
    assert_eq!(q.as_array().unwrap().len(), 1);
}

#[test]
fn matchall_redirect_and_rate64() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let index = veth(&ns);
    let ifb = h.add_ifb("tcifb1", 1500, None).unwrap();
    h.add_ingress_qdisc(index).unwrap();
    match h.add_redirect_filter(index, ifb.index, RedirectFilterKind::MatchAll) {
        Ok(()) => {
            let f = h.filters(index, tc::INGRESS_QDISC_HANDLE).unwrap();
            assert_eq!(f.len(), 1);
            assert_eq!(f[0].kind, "matchall");
            assert_eq!(f[0].redirects, [ifb.index]);
        }
        // A kernel without cls_matchall: the error says so, nothing is left.
        Err(e) if e.is_not_found() && e.to_string().contains("classifier not found") => {
            eprintln!("no matchall classifier here: {e}");
            assert!(h
                .filters(index, tc::INGRESS_QDISC_HANDLE)
                .unwrap()
                .is_empty());
        }
        Err(e) => panic!("{e}"),
    }
    // 40 Gbit/s does not fit 32 bits of bytes per second.
    let tbf = Tbf::from_rate_and_burst(40_000_000_000, 4_000_000, PschedClock::read());
    h.add_tbf(ifb.index, &tbf).unwrap();
    let q = tc_json(&ns, &["qdisc", "show", "dev", "tcifb1"]);
    assert_eq!(q[0]["options"]["rate"], 5_000_000_000u64);
    assert_eq!(h.qdiscs(ifb.index).unwrap()[0].tbf, Some(tbf));
    // A second root qdisc is refused.
    assert!(h.add_tbf(ifb.index, &tbf).unwrap_err().is_exists());
}

#[test]
fn txqlen_and_allmulti() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let (ns, h) = netns();
    let index = veth(&ns);
    h.set_txqlen(index, 77).unwrap();
    h.set_allmulti(index, true).unwrap();
    let l = &ip(&ns, &["-d", "link", "show", "tca"])[0];
    assert_eq!(l["txqlen"], 77);
    assert!(l["flags"].as_array().unwrap().contains(&"ALLMULTI".into()));
    assert!(h.link_by_index(index).unwrap().is_allmulti());
    assert_eq!(h.link_txqlen(index).unwrap(), 77);
    h.set_allmulti(index, false).unwrap();
    assert!(!h.link_by_index(index).unwrap().is_allmulti());
}
