//! Configuration loading: vectors from the Go reference's
//! `allocator/config_test.go` and `static/static_test.go` (facts restated,
//! fixtures written here).

use cni_ipam::host_local::HostLocalConfig;
use cni_ipam::static_ipam::{self, StaticConfig};
use serde_json::json;

fn host_local(conf: serde_json::Value, args: &str) -> Result<HostLocalConfig, String> {
    HostLocalConfig::load(conf.to_string().as_bytes(), args).map_err(|e| e.to_string())
}

fn sets(c: &HostLocalConfig) -> Vec<String> {
    c.range_sets.iter().map(|s| s.to_string()).collect()
}

#[test]
fn runtime_ranges_first_then_legacy_then_ranges() {
    let c = host_local(
        json!({
            "cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
            "runtimeConfig": {"irrelevant": "a", "ipRanges": [[{"subnet": "12.1.3.0/24"}]]},
            "ipam": {
                "type": "host-local", "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9",
                "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30",
                "ranges": [[{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9",
                             "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}]]
            }
        }),
        "",
    )
    .unwrap();
    assert_eq!(
        sets(&c),
        [
            "12.1.3.1-12.1.3.254",
            "10.1.2.9-10.1.2.20",
            "11.1.2.9-11.1.2.20"
        ]
    );
    let gws: Vec<String> = c
        .range_sets
        .iter()
        .map(|s| s.ranges()[0].gateway().to_string())
        .collect();
    assert_eq!(gws, ["12.1.3.1", "10.1.2.30", "11.1.2.30"]);
    assert_eq!(c.name, "mynet");
    assert_eq!(c.cni_version, "0.3.1");
    assert_eq!(c.data_dir.to_str(), Some("/var/lib/cni/networks"));
}

#[test]
fn go_error_messages() {
    let base = |ipam: serde_json::Value, version: &str| {
        host_local(
            json!({"cniVersion": version, "name": "mynet", "type": "ipvlan", "ipam": ipam}),
            "",
        )
        .unwrap_err()
    };
    assert_eq!(
        base(
            json!({"type": "host-local", "ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.2.0/24"}]]}),
            "0.3.1"
        ),
        "range set 0 overlaps with 1"
    );
    assert_eq!(
        base(
            json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/22"}, {"subnet": "10.1.2.0/24"}]]}),
            "0.3.1"
        ),
        "invalid range set 0: subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap"
    );
    assert_eq!(
        base(
            json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/22"}, {"subnet": "2001:db8:1::/64"}]]}),
            "0.3.1"
        ),
        "invalid range set 0: mixed address families"
    );
    assert_eq!(
        base(
            json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/22"}], [{"subnet": "10.2.0.0/22"}]]}),
            "0.2.0"
        ),
        "CNI version 0.2.0 does not support more than 1 address per family"
    );
    assert_eq!(
        base(json!({"type": "host-local"}), "0.3.1"),
        "no IP ranges specified"
    );
    assert_eq!(
        base(
            json!({"type": "host-local", "subnet": "192.0.2.0/31"}),
            "0.3.1"
        ),
        "invalid range set 0: Network 192.0.2.0/31 too small to allocate from"
    );
    assert_eq!(
        base(json!({"type": "host-local", "subnet": "192.0.2.1/24"}), "0.3.1"),
        "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0"
    );
    assert_eq!(
        host_local(json!({"cniVersion": "0.3.1", "name": "x"}), "").unwrap_err(),
        "IPAM config missing 'ipam' key"
    );
    // One v4 and one v6 set are fine for 0.2.0.
    host_local(
        json!({"cniVersion": "0.2.0", "name": "mynet", "ipam": {"ranges": [
            [{"subnet": "10.1.0.0/22"}], [{"subnet": "2001:db8:1::/64"}]]}}),
        "",
    )
    .unwrap();
}

#[test]
fn requested_ips_from_args_config_and_runtime() {
    let conf = |extra: serde_json::Value| {
        let mut c = json!({"cniVersion": "0.3.1", "name": "mynet",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/64"}]]}});
        if let (Some(obj), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            obj.extend(extra.clone());
        }
        c
    };
    let c = host_local(conf(json!({})), "IP=10.1.2.10").unwrap();
    assert_eq!(
        c.requested_ips,
        ["10.1.2.10".parse::<std::net::IpAddr>().unwrap()]
    );
    let c = host_local(conf(json!({})), "IP=10.1.2.11/24").unwrap();
    assert_eq!(c.requested_ips[0].to_string(), "10.1.2.11");
    let c = host_local(
        conf(json!({
            "args": {"cni": {"ips": ["10.1.2.11", "2001:db8:1::11/64"]}},
            "runtimeConfig": {"ips": ["10.1.2.12"]}
        })),
        "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.2.10",
    )
    .unwrap();
    let got: Vec<String> = c.requested_ips.iter().map(|i| i.to_string()).collect();
    assert_eq!(
        got,
        ["10.1.2.10", "10.1.2.11", "2001:db8:1::11", "10.1.2.12"]
    );
    assert_eq!(
        host_local(conf(json!({})), "K8S_POD_NAME=p").unwrap_err(),
        r#"ARGS: unknown args ["K8S_POD_NAME=p"]"#
    );
    assert_eq!(
        host_local(conf(json!({"runtimeConfig": {"ips": ["nope"]}})), "").unwrap_err(),
        "invalid IP address nope"
    );
}

fn static_conf(ipam: serde_json::Value, version: &str) -> serde_json::Value {
    json!({"cniVersion": version, "name": "mynet", "type": "ipvlan", "master": "foo0", "ipam": ipam})
}

fn static_load(conf: serde_json::Value, args: &str) -> Result<StaticConfig, String> {
    StaticConfig::load(conf.to_string().as_bytes(), args).map_err(|e| e.to_string())
}

#[test]
fn static_cni_args_ip_and_gateway() {
    let c = static_load(
        static_conf(json!({"type": "static"}), "1.0.0"),
        "IP=10.10.0.1/24,11.11.0.1/24;GATEWAY=10.10.0.254",
    )
    .unwrap();
    let r = wire(&static_ipam::add(&c));
    assert_eq!(
        r,
        json!({"ips": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}, {"address": "11.11.0.1/24"}]})
    );
    assert_eq!(
        static_load(
            static_conf(json!({"type": "static"}), "0.2.0"),
            "IP=10.10.0.1/24,11.11.0.1/24;GATEWAY=10.10.0.254"
        )
        .unwrap_err(),
        "CNI version 0.2.0 does not support more than 1 address per family"
    );
}

#[test]
fn static_override_order_and_messages() {
    let conf = json!({
        "cniVersion": "1.0.0", "name": "mynet", "type": "bridge",
        "runtimeConfig": {"ips": ["10.10.0.1/24", "11.11.0.1/24"]},
        "args": {"cni": {"ips": ["10.10.0.2/24"]}},
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.254"}],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.1.0.0/16", "gw": "10.10.0.254"}],
            "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"]}
        }
    });
    let c = static_load(conf, "IP=10.10.0.3/24;GATEWAY=10.10.0.254").unwrap();
    let r = wire(&static_ipam::add(&c));
    assert_eq!(
        r,
        json!({
            "ips": [{"address": "10.10.0.1/24"}, {"address": "11.11.0.1/24"}],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.1.0.0/16", "gw": "10.10.0.254"}],
            "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"]}
        })
    );

    let bad = "10.10.0.1";
    assert_eq!(
        static_load(
            static_conf(json!({"addresses": [{"address": bad}]}), "1.0.0"),
            ""
        )
        .unwrap_err(),
        "the 'address' field is expected to be in CIDR notation, got: '10.10.0.1'"
    );
    assert_eq!(
        static_load(static_conf(json!({}), "1.0.0"), "IP=10.10.0.1").unwrap_err(),
        "the 'ip' field is expected to be in CIDR notation, got: '10.10.0.1'"
    );
    let mut with_args = static_conf(json!({}), "1.0.0");
    with_args["args"] = json!({"cni": {"ips": [bad]}});
    assert_eq!(
        static_load(with_args, "").unwrap_err(),
        "an entry in the 'ips' field is NOT in CIDR notation, got: '10.10.0.1'"
    );
    let mut with_rt = static_conf(json!({}), "1.0.0");
    with_rt["runtimeConfig"] = json!({"ips": [bad]});
    assert_eq!(
        static_load(with_rt, "").unwrap_err(),
        "an entry in the 'ips' field is NOT in CIDR notation, got: '10.10.0.1'"
    );
    assert_eq!(
        static_load(json!({"cniVersion": "1.0.0", "name": "x"}), "").unwrap_err(),
        "IPAM config missing 'ipam' key"
    );
    assert_eq!(
        static_load(static_conf(json!({}), "1.0.0"), "IP=10.10.0.1/24;GATEWAY=x").unwrap_err(),
        "invalid gateway address: x"
    );
}

#[test]
fn static_check_gateways() {
    let c = static_load(
        static_conf(
            json!({"addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}]}),
            "1.0.0",
        ),
        "",
    )
    .unwrap();
    let good = static_ipam::add(&c).ips;
    static_ipam::check(&c, "eth0", &good).unwrap();
    let mut bad = good.clone();
    bad[0].gateway = Some("10.10.0.253".parse().unwrap());
    assert_eq!(
        static_ipam::check(&c, "eth0", &bad)
            .unwrap_err()
            .to_string(),
        "static: Failed to match addr 10.10.0.1 on interface eth0"
    );
    // Like Go, an absent address is not reported.
    static_ipam::check(&c, "eth0", &[]).unwrap();
}

#[test]
fn error_codes() {
    let e = HostLocalConfig::load(b"{", "").unwrap_err();
    assert_eq!(e.code().as_u32(), 6);
    let e = HostLocalConfig::load(br#"{"name":"x","cniVersion":"1.0.0"}"#, "").unwrap_err();
    assert_eq!(e.code().as_u32(), 7);
    let e = HostLocalConfig::load(
        br#"{"name":"x","cniVersion":"1.0.0","ipam":{"subnet":"10.0.0.0/24"}}"#,
        "A=b",
    )
    .unwrap_err();
    assert_eq!(e.code().as_u32(), 4);
}

/// The 1.0.0 wire JSON of a result, without `cniVersion`.
fn wire(r: &cni_types::CniResult) -> serde_json::Value {
    let mut v = r.to_value(cni_types::Version::V1_0_0).unwrap();
    if let Some(m) = v.as_object_mut() {
        m.remove("cniVersion");
    }
    v
}

#[test]
fn from_network_config_and_case_insensitive_keys() {
    // Go's encoding/json matches keys case-insensitively; its own tests use
    // "RuntimeConfig".
    let conf = json!({
        "cniVersion": "1.0.0", "name": "mynet", "type": "bridge",
        "RuntimeConfig": {"IPRanges": [[{"subnet": "12.1.3.0/24"}]], "ips": ["12.1.3.7"]},
        "ipam": {"type": "host-local", "DataDir": "/tmp/x", "Ranges": [[{"subnet": "10.1.2.0/24", "RangeStart": "10.1.2.9"}]]}
    });
    let nc = cni_types::NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
    let c = HostLocalConfig::from_network_config(&nc, "").unwrap();
    assert_eq!(sets(&c), ["12.1.3.1-12.1.3.254", "10.1.2.9-10.1.2.254"]);
    assert_eq!(c.data_dir.to_str(), Some("/tmp/x"));
    assert_eq!(c.requested_ips[0].to_string(), "12.1.3.7");
    assert_eq!(
        c,
        HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap()
    );
}

#[test]
fn static_check_from_network_config() {
    let conf = json!({
        "cniVersion": "1.0.0", "name": "mynet", "type": "bridge",
        "ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}]},
        "prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}]}
    });
    let nc = cni_types::NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
    static_ipam::check_network_config(&nc, "", "eth0").unwrap();
    let mut no_prev = conf.clone();
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let nc = cni_types::NetworkConfig::from_slice(no_prev.to_string().as_bytes()).unwrap();
    assert_eq!(
        static_ipam::check_network_config(&nc, "", "eth0")
            .unwrap_err()
            .to_string(),
        "Required prevResult missing"
    );
}

#[test]
fn range_keys_case_insensitive_from_stdin() {
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "runtimeConfig": {"ipRanges": [[{"Subnet": "12.1.3.0/24"}]]},
        "IPAM": {"SUBNET": "10.1.2.0/24", "rangeend": "10.1.2.20"}});
    let c = host_local(conf, "").unwrap();
    assert_eq!(sets(&c), ["12.1.3.1-12.1.3.254", "10.1.2.1-10.1.2.20"]);
}

#[test]
fn durable_is_opt_in() {
    let conf = |extra: &str| {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"n","type":"host-local","ipam":{{"type":"host-local","subnet":"10.1.2.0/24"{extra}}}}}"#
        )
    };
    let off = cni_ipam::host_local::HostLocalConfig::load(conf("").as_bytes(), "").unwrap();
    assert!(!off.durable);
    let on = cni_ipam::host_local::HostLocalConfig::load(conf(r#","durable":true"#).as_bytes(), "")
        .unwrap();
    assert!(on.durable);
}
