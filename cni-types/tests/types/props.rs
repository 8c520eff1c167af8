//! Property tests: results round-trip through their own wire version, 1.x
//! survives a trip through 0.4.0 with every field 0.4.0 can carry, and no
//! parser panics on arbitrary input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni_types::{
    CniArgs, CniResult, Dns, Interface, IpConfig, NetworkConfig, NetworkConfigList, Route, Version,
    VersionReply,
};
use ipnetwork::IpNetwork;
use proptest::prelude::*;
use serde_json::Value;

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|n| IpAddr::V4(Ipv4Addr::from(n))),
        any::<u128>().prop_map(|n| IpAddr::V6(Ipv6Addr::from(n))),
    ]
}

fn net() -> impl Strategy<Value = IpNetwork> {
    ip().prop_flat_map(|ip| {
        let max: u8 = if ip.is_ipv4() { 32 } else { 128 };
        (Just(ip), 0..=max).prop_map(|(ip, p)| IpNetwork::new(ip, p).expect("valid prefix"))
    })
}

fn word() -> impl Strategy<Value = String> {
    "[a-z0-9:./_-]{0,12}"
}

fn interface() -> impl Strategy<Value = Interface> {
    (
        "[a-z0-9]{1,15}",
        word(),
        proptest::option::of(0u32..100_000),
        word(),
        word(),
        word(),
    )
        .prop_map(|(name, mac, mtu, sandbox, socket_path, pci_id)| Interface {
            name,
            mac,
            mtu,
            sandbox,
            socket_path,
            pci_id,
        })
}

fn ipconfig() -> impl Strategy<Value = IpConfig> {
    (
        proptest::option::of(0u32..8),
        net(),
        proptest::option::of(ip()),
    )
        .prop_map(|(interface, address, gateway)| IpConfig {
            interface,
            address,
            gateway,
        })
}

fn opt_u32() -> impl Strategy<Value = Option<u32>> {
    proptest::option::of(any::<u32>())
}

fn route() -> impl Strategy<Value = Route> {
    (
        net(),
        proptest::option::of(ip()),
        opt_u32(),
        opt_u32(),
        opt_u32(),
        opt_u32(),
        proptest::option::of(0u32..256),
    )
        .prop_map(|(dst, gw, mtu, advmss, priority, table, scope)| Route {
            dst,
            gw,
            mtu,
            advmss,
            priority,
            table,
            scope,
        })
}

fn dns() -> impl Strategy<Value = Dns> {
    (
        proptest::collection::vec(word(), 0..3),
        word(),
        proptest::collection::vec(word(), 0..3),
        proptest::collection::vec(word(), 0..3),
    )
        .prop_map(|(nameservers, domain, search, options)| Dns {
            nameservers,
            domain,
            search,
            options,
        })
}

fn result() -> impl Strategy<Value = CniResult> {
    (
        proptest::collection::vec(interface(), 0..4),
        proptest::collection::vec(ipconfig(), 0..5),
        proptest::collection::vec(route(), 0..5),
        dns(),
    )
        .prop_map(|(interfaces, ips, routes, dns)| CniResult {
            interfaces,
            ips,
            routes,
            dns,
        })
}

fn version() -> impl Strategy<Value = Version> {
    proptest::sample::select(Version::ALL.to_vec())
}

/// Arbitrary JSON, nested a few levels.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,20}".prop_map(Value::String),
        // strings shaped like the fields we parse
        net().prop_map(|n| Value::String(n.to_string())),
        proptest::sample::select(vec![
            "0.1.0", "0.2.0", "0.4.0", "1.0.0", "1.1.0", "", "9.9.9"
        ])
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        let keys = proptest::sample::select(vec![
            "cniVersion",
            "name",
            "type",
            "ips",
            "ip4",
            "ip6",
            "interfaces",
            "routes",
            "dns",
            "address",
            "gateway",
            "dst",
            "gw",
            "interface",
            "plugins",
            "cniVersions",
            "disableCheck",
            "runtimeConfig",
            "portMappings",
            "ipam",
            "prevResult",
            "ipMasq",
            "args",
            "supportedVersions",
            "ip",
            "version",
            "mtu",
            "scope",
            "x",
        ]);
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((keys, inner), 0..6).prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Encoding in a version, decoding, and encoding again gives the same
    /// JSON: a result written in version V reads back as itself.
    #[test]
    fn round_trip_own_version(r in result(), v in version()) {
        if let Ok(wire) = r.to_value(v) {
            let (read_v, back) = CniResult::from_value(&wire, Version::V1_0_0).unwrap();
            prop_assert_eq!(read_v, v);
            prop_assert_eq!(back.to_value(v).unwrap(), wire);
        } else {
            // only 0.1.0/0.2.0 may refuse, and only without any address
            prop_assert!(v < Version::V0_3_0 && r.ips.is_empty());
        }
    }

    /// The 1.x model round-trips exactly.
    #[test]
    fn v1_is_lossless(r in result()) {
        let wire = r.to_value(Version::V1_1_0).unwrap();
        let (_, back) = CniResult::from_value(&wire, Version::V1_1_0).unwrap();
        prop_assert_eq!(back, r);
    }

    /// 1.x -> 0.4.0 -> 1.x keeps everything 0.4.0 can carry.
    #[test]
    fn via_040_keeps_what_040_carries(r in result()) {
        let wire = r.to_value(Version::V0_4_0).unwrap();
        let (_, back) = CniResult::from_value(&wire, Version::V1_0_0).unwrap();
        let mut expect = r.clone();
        for i in &mut expect.interfaces {
            i.mtu = None;
            i.socket_path.clear();
            i.pci_id.clear();
        }
        prop_assert_eq!(back, expect);
    }

    /// Arbitrary JSON never panics any parser.
    #[test]
    fn parsers_never_panic_on_json(v in json(), ver in version()) {
        let bytes = serde_json::to_vec(&v).unwrap();
        let _ = CniResult::from_value(&v, ver);
        let _ = CniResult::from_value_as(&v, ver);
        let _ = CniResult::from_slice(&bytes, ver);
        if let Ok(c) = NetworkConfig::from_slice(&bytes) {
            let _ = c.prev_result();
            let _ = c.valid_attachments();
            let _ = c.version();
        }
        let _ = NetworkConfigList::from_slice(&bytes);
        let _ = NetworkConfigList::from_single_conf(&bytes);
        let _ = VersionReply::from_slice(&bytes);
    }

    /// Arbitrary bytes and strings never panic either.
    #[test]
    fn parsers_never_panic_on_bytes(b in proptest::collection::vec(any::<u8>(), 0..256), s in ".{0,64}") {
        let _ = CniResult::from_slice(&b, Version::V1_0_0);
        let _ = NetworkConfig::from_slice(&b);
        let _ = NetworkConfigList::from_slice(&b);
        let _ = VersionReply::from_slice(&b);
        let _ = CniArgs::parse(&s);
        let _ = Version::parse(&s);
        let _ = cni_types::validate::interface_name(&s);
        let _ = cni_types::validate::network_name(&s);
        let _ = cni_types::validate::container_id(&s);
    }
}

// ---- configs round-trip through edits ---------------------------------

/// JSON floats do not survive a text round trip bit for bit (serde_json
/// without `float_roundtrip`); that is not what these tests are about.
fn no_floats(v: Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => Value::Null,
        Value::Array(a) => Value::Array(a.into_iter().map(no_floats).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, no_floats(v))).collect()),
        other => other,
    }
}

fn exact_json() -> impl Strategy<Value = Value> {
    json().prop_map(no_floats)
}

/// A config object as JSON: spec keys (some in other spellings, as Go
/// accepts) and plugin keys, in random order.
fn config_json() -> impl Strategy<Value = serde_json::Map<String, Value>> {
    let spec = (
        proptest::option::of(proptest::sample::select(vec!["cniVersion", "CNIVersion"])),
        proptest::option::of(proptest::sample::select(vec![
            "", "0.1.0", "0.4.0", "1.0.0", "1.1.0",
        ])),
        proptest::option::of("[a-z][a-z0-9_.-]{0,10}"),
        proptest::option::of(any::<bool>()),
        proptest::option::of(dns()),
    );
    let plugin = proptest::collection::vec(("[a-z]{1,6}", exact_json()), 0..5);
    (spec, plugin, any::<u64>()).prop_map(|((vkey, ver, name, masq, dns), plugin, seed)| {
        let mut items: Vec<(String, Value)> = vec![("type".into(), Value::from("bridge"))];
        if let (Some(k), Some(v)) = (vkey, ver) {
            items.push((k.into(), Value::from(v)));
        }
        if let Some(n) = name {
            items.push(("name".into(), Value::from(n)));
        }
        if let Some(m) = masq {
            items.push(("ipMasq".into(), Value::Bool(m)));
        }
        if let Some(d) = dns {
            items.push(("dns".into(), serde_json::to_value(d).unwrap()));
        }
        for (k, v) in plugin {
            // plugin keys never collide with spec keys here
            items.push((format!("p_{k}"), v));
        }
        // a deterministic shuffle
        let n = items.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
        items.into_iter().collect()
    })
}

#[derive(Debug, Clone)]
enum Edit {
    Name(String),
    Version(&'static str),
    IpMasq(bool),
    Dns(Option<Dns>),
    Set(String, Value),
    Remove(usize),
    Nothing,
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        "[a-z][a-z0-9]{0,8}".prop_map(Edit::Name),
        proptest::sample::select(vec!["0.3.1", "1.0.0", "1.1.0"]).prop_map(Edit::Version),
        any::<bool>().prop_map(Edit::IpMasq),
        proptest::option::of(dns()).prop_map(Edit::Dns),
        ("[a-z]{1,6}", exact_json()).prop_map(|(k, v)| Edit::Set(format!("p_{k}"), v)),
        (0usize..8).prop_map(Edit::Remove),
        Just(Edit::Nothing),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// parse -> edit any field -> serialize -> parse gives the edited
    /// config, and untouched keys keep their order and values.
    #[test]
    fn config_edits_round_trip(obj in config_json(), edits in proptest::collection::vec(edit(), 0..4)) {
        let bytes = serde_json::to_vec(&obj).unwrap();
        let mut conf = NetworkConfig::from_slice(&bytes).unwrap();
        // Unedited, every key prints as read (spec keys in canonical spelling).
        let printed: serde_json::Map<String, Value> = serde_json::from_slice(&conf.to_bytes()).unwrap();
        let canon = |k: &str| if k.eq_ignore_ascii_case("cniVersion") { "cniVersion".to_string() } else { k.to_string() };
        let want: Vec<String> = obj.keys().map(|k| canon(k)).collect();
        let got: Vec<String> = printed.keys().cloned().collect();
        prop_assert_eq!(&got, &want);
        for (k, v) in &obj {
            prop_assert_eq!(&printed[&canon(k)], v);
        }
        let mut touched = std::collections::HashSet::new();
        for e in &edits {
            match e {
                Edit::Name(n) => { conf.set_name(n.clone()).unwrap(); touched.insert("name".to_string()); }
                Edit::Version(v) => { conf.set_cni_version(*v).unwrap(); touched.insert("cniVersion".to_string()); }
                Edit::IpMasq(b) => { conf.ip_masq = *b; touched.insert("ipMasq".to_string()); }
                Edit::Dns(d) => { conf.dns = d.clone(); touched.insert("dns".to_string()); }
                Edit::Set(k, v) => { conf.set_specific(k.clone(), v.clone()).unwrap(); touched.insert(k.clone()); }
                Edit::Remove(i) => {
                    let key = conf.specific().keys().nth(*i).cloned();
                    if let Some(k) = key { conf.remove_specific(&k); touched.insert(k); }
                }
                Edit::Nothing => {}
            }
        }
        let again = NetworkConfig::from_slice(&conf.to_bytes()).unwrap();
        prop_assert_eq!(&again, &conf);
        prop_assert_eq!(&again.name, &conf.name);
        prop_assert_eq!(&again.cni_version, &conf.cni_version);
        prop_assert_eq!(again.ip_masq, conf.ip_masq);
        prop_assert_eq!(&again.dns, &conf.dns);
        prop_assert_eq!(again.specific(), conf.specific());
        // serde gives the same as to_bytes
        let via_serde: NetworkConfig = serde_json::from_value(serde_json::to_value(&conf).unwrap()).unwrap();
        prop_assert_eq!(&via_serde, &conf);
        // untouched keys keep their relative order
        let printed: serde_json::Map<String, Value> = serde_json::from_slice(&conf.to_bytes()).unwrap();
        let kept: Vec<&String> = printed.keys().filter(|k| !touched.contains(*k)).collect();
        let orig: Vec<String> = want.iter().filter(|k| !touched.contains(*k) && printed.contains_key(*k)).cloned().collect();
        prop_assert_eq!(kept.into_iter().cloned().collect::<Vec<_>>(), orig);
        // Go's rule: "" (or no cniVersion) is 0.1.0
        if again.cni_version.is_empty() {
            prop_assert_eq!(again.version().unwrap(), Version::V0_1_0);
        }
    }

    /// A conflist edited through its fields prints its edits; unedited it
    /// prints the bytes it was read from.
    #[test]
    fn conflist_edits_round_trip(name in "[a-z][a-z0-9]{0,8}", check in any::<bool>(), extra in exact_json(), n in 1usize..4) {
        let text = serde_json::to_vec(&serde_json::json!({
            "cniVersion": "1.0.0", "name": "net", "zz": extra,
            "plugins": (0..n).map(|i| serde_json::json!({"type": format!("p{i}")})).collect::<Vec<_>>(),
        })).unwrap();
        let mut list = NetworkConfigList::from_slice(&text).unwrap();
        prop_assert_eq!(list.to_bytes(), text.clone());
        list.name = name.clone();
        list.disable_check = check;
        list.plugins.pop();
        let back = NetworkConfigList::from_slice(&list.to_bytes());
        if n == 1 {
            // an empty plugins list is refused by libcni's rules
            prop_assert!(back.is_err());
        } else {
            let back = back.unwrap();
            prop_assert_eq!(&back, &list);
            prop_assert_eq!(&back.name, &name);
            prop_assert_eq!(back.disable_check, check);
            prop_assert_eq!(back.plugins.len(), n - 1);
            prop_assert_eq!(&back.other_keys()["zz"], &extra);
        }
    }

    /// Results serialize with serde in the newest shape, and a
    /// `VersionedResult` in its own.
    #[test]
    fn result_serde(r in result(), v in version()) {
        let back: CniResult = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        prop_assert_eq!(&back, &r);
        let vr = cni_types::VersionedResult { version: v, result: r.clone() };
        if let Ok(wire) = serde_json::to_value(&vr) {
            let back: cni_types::VersionedResult = serde_json::from_value(wire.clone()).unwrap();
            prop_assert_eq!(back.version, v);
            prop_assert_eq!(back.to_value().unwrap(), wire);
        }
    }
}

#[test]
fn issue_example_edits_are_kept() {
    let mut conf = NetworkConfig::from_slice(
        br#"{"cniVersion":"1.0.0","name":"net","type":"bridge","bridge":"cni0"}"#,
    )
    .unwrap();
    conf.name = "renamed".into();
    conf.ip_masq = true;
    let v: Value = serde_json::from_slice(&conf.to_bytes()).unwrap();
    assert_eq!(v["name"], "renamed");
    assert_eq!(v["ipMasq"], true);
    assert_eq!(v["bridge"], "cni0");
    // spec keys cannot be set as plugin keys; bad names and versions are refused
    assert!(conf.set_specific("NAME", Value::from("x")).is_err());
    assert!(conf.set_name("bad/name").is_err());
    assert!(conf.set_cni_version("1.x").is_err());
}

#[test]
fn one_version_rule() {
    use cni_types::config_version;
    // the cases where skel and invoke used to disagree
    assert_eq!(
        config_version(br#"{"CNIVERSION":"0.4.0"}"#).unwrap(),
        "0.4.0"
    );
    assert!(config_version(br#"{"cniVersion":5}"#).is_err());
    assert_eq!(config_version(br#"{"cniVersion":null}"#).unwrap(), "0.1.0");
    assert_eq!(config_version(br#"{}"#).unwrap(), "0.1.0");
    assert_eq!(
        config_version(br#"{"cniVersion":"1.0.0","CNIVERSION":"0.4.0"}"#).unwrap(),
        "1.0.0"
    );
    assert!(config_version(b"[1]").is_err());
}
