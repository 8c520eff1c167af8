//! Every version pair: a result written in each version converts to every
//! other version following the Go reference's rules (section 2 of the
//! feature inventory), checked field by field.

use cni_types::{CniResult, ResultFamily, Version};
use serde_json::{json, Value};

/// The same attachment written in each wire family.
fn fixture(v: Version) -> Value {
    match v.result_family().unwrap() {
        ResultFamily::V020 => json!({
            "cniVersion": v.to_string(),
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
            "ip6": {"ip": "2001:db8::5/64", "gateway": "2001:db8::1",
                    "routes": [{"dst": "::/0"}]},
            "dns": {"nameservers": ["10.1.0.1"]}
        }),
        ResultFamily::V040 => json!({
            "cniVersion": v.to_string(),
            "interfaces": [{"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": "/var/run/netns/p"}],
            "ips": [{"version": "4", "interface": 0, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                    {"version": "6", "interface": 0, "address": "2001:db8::5/64", "gateway": "2001:db8::1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "::/0"}],
            "dns": {"nameservers": ["10.1.0.1"]}
        }),
        ResultFamily::V100 => json!({
            "cniVersion": v.to_string(),
            "interfaces": [{"name": "eth0", "mac": "0a:58:0a:01:00:05", "mtu": 1450, "sandbox": "/var/run/netns/p"}],
            "ips": [{"interface": 0, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                    {"interface": 0, "address": "2001:db8::5/64", "gateway": "2001:db8::1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1", "priority": 100}, {"dst": "::/0"}],
            "dns": {"nameservers": ["10.1.0.1"]}
        }),
    }
}

#[test]
fn every_pair() {
    for from in Version::ALL {
        for to in Version::ALL {
            let src = fixture(from);
            let out = CniResult::convert_value(&src, Version::V1_0_0, to)
                .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
            let ctx = format!("{from} -> {to}: {out}");
            assert_eq!(out["cniVersion"], to.to_string(), "{ctx}");
            let src_fam = from.result_family().unwrap();
            match to.result_family().unwrap() {
                ResultFamily::V020 => {
                    assert_eq!(out["ip4"]["ip"], "10.1.0.5/16", "{ctx}");
                    assert_eq!(out["ip4"]["gateway"], "10.1.0.1", "{ctx}");
                    assert_eq!(out["ip6"]["ip"], "2001:db8::5/64", "{ctx}");
                    // routes split per family, only dst and gw
                    assert_eq!(
                        out["ip4"]["routes"],
                        json!([{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]),
                        "{ctx}"
                    );
                    assert_eq!(out["ip6"]["routes"], json!([{"dst": "::/0"}]), "{ctx}");
                    assert!(
                        out.get("interfaces").is_none() && out.get("ips").is_none(),
                        "{ctx}"
                    );
                    assert_eq!(out["dns"]["nameservers"], json!(["10.1.0.1"]), "{ctx}");
                }
                fam => {
                    let ips = out["ips"].as_array().unwrap();
                    assert_eq!(ips.len(), 2, "{ctx}");
                    assert_eq!(ips[0]["address"], "10.1.0.5/16", "{ctx}");
                    assert_eq!(ips[1]["gateway"], "2001:db8::1", "{ctx}");
                    let versioned = fam == ResultFamily::V040;
                    assert_eq!(ips[0].get("version").is_some(), versioned, "{ctx}");
                    if versioned {
                        assert_eq!(
                            (ips[0]["version"].as_str(), ips[1]["version"].as_str()),
                            (Some("4"), Some("6")),
                            "{ctx}"
                        );
                    }
                    // 0.2.0 has no interface index and no interfaces
                    if src_fam == ResultFamily::V020 {
                        assert!(ips[0].get("interface").is_none(), "{ctx}");
                        assert!(out.get("interfaces").is_none(), "{ctx}");
                    } else {
                        assert_eq!(ips[0]["interface"], 0, "{ctx}");
                        assert_eq!(out["interfaces"][0]["name"], "eth0", "{ctx}");
                        // mtu exists only in 1.x, on both sides
                        let mtu = src_fam == ResultFamily::V100 && fam == ResultFamily::V100;
                        assert_eq!(out["interfaces"][0].get("mtu").is_some(), mtu, "{ctx}");
                    }
                    assert_eq!(out["routes"][0]["dst"], "0.0.0.0/0", "{ctx}");
                    // route priority survives any trip that does not pass through 0.2.0
                    let prio = src_fam == ResultFamily::V100;
                    assert_eq!(out["routes"][0].get("priority").is_some(), prio, "{ctx}");
                    // dns: 0.x always prints it, 1.x only when set (it is set here)
                    assert_eq!(out["dns"]["nameservers"], json!(["10.1.0.1"]), "{ctx}");
                }
            }
        }
    }
}

#[test]
fn dns_omitted_only_in_1x_when_empty() {
    for to in Version::ALL {
        let mut src = fixture(Version::V1_0_0);
        src.as_object_mut().unwrap().remove("dns");
        let out = CniResult::convert_value(&src, Version::V1_0_0, to).unwrap();
        let want_dns = to < Version::V1_0_0;
        assert_eq!(out.get("dns").is_some(), want_dns, "{to}: {out}");
        if want_dns {
            assert_eq!(out["dns"], json!({}), "{to}");
        }
    }
}
