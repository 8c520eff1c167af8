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
