//! Vectors written from the spec's own examples (SPEC.md appendix: the
//! `dbnet` list of bridge + tuning + portmap, the host-local abbreviated
//! result, the error example).

use cni_types::{CniError, CniResult, ErrorCode, NetworkConfig, NetworkConfigList, Version};
use pretty_assertions::assert_eq;
use serde_json::json;

fn dbnet() -> serde_json::Value {
    json!({
        "cniVersion": "1.1.0",
        "cniVersions": ["0.3.1", "0.4.0", "1.0.0", "1.1.0"],
        "name": "dbnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "keyA": ["some more", "plugin specific", "configuration"],
             "ipam": {"type": "host-local", "subnet": "10.1.0.0/16", "gateway": "10.1.0.1",
                      "routes": [{"dst": "0.0.0.0/0"}]},
             "dns": {"nameservers": ["10.1.0.1"]}},
            {"type": "tuning", "capabilities": {"mac": true}, "sysctl": {"net.core.somaxconn": "500"}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

fn bridge_result() -> serde_json::Value {
    json!({
        "cniVersion": "1.1.0",
        "interfaces": [
            {"name": "cni0", "mac": "00:11:22:33:44:55"},
            {"name": "veth3243", "mac": "55:44:33:22:11:11"},
            {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
        ],
        "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.1.0.1"]}
    })
}

#[test]
fn dbnet_list_parses() {
    let l = NetworkConfigList::from_slice(&serde_json::to_vec(&dbnet()).unwrap()).unwrap();
    assert_eq!(l.name, "dbnet");
    assert_eq!(l.cni_version, "1.1.0");
    assert_eq!(l.plugins.len(), 3);
    assert_eq!(l.plugins[1]["capabilities"]["mac"], true);
}

#[test]
fn bridge_result_interface_index_2_in_every_version() {
    let (_, r) = CniResult::from_value(&bridge_result(), Version::V1_1_0).unwrap();
    assert_eq!(r.ips[0].interface, Some(2));
    // 1.1.0 prints keys in the spec's order, interface index included
    let v = r.to_value(Version::V1_1_0).unwrap();
    assert_eq!(
        v["ips"][0],
        json!({"interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"})
    );
    assert_eq!(v["interfaces"], bridge_result()["interfaces"]);
    // 0.4.0 adds version
    let v = r.to_value(Version::V0_4_0).unwrap();
    assert_eq!(
        v["ips"][0],
        json!({"version": "4", "interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"})
    );
}

#[test]
fn tuning_request_with_prev_result() {
    // The request the runtime sends to tuning on ADD (0.4.0 appendix).
    let req = json!({
        "cniVersion": "0.4.0", "name": "dbnet", "type": "tuning",
        "sysctl": {"net.core.somaxconn": "500"},
        "runtimeConfig": {"mac": "00:11:22:33:44:66"},
        "prevResult": {
            "ips": [{"version": "4", "address": "10.0.0.5/32", "interface": 2}],
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "veth3243", "mac": "55:44:33:22:11:11"},
                {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
            ],
            "dns": {"nameservers": ["10.1.0.1"]}
        }
    });
    let c = NetworkConfig::from_slice(&serde_json::to_vec(&req).unwrap()).unwrap();
    assert_eq!(
        c.runtime_config.as_ref().unwrap().mac.as_deref(),
        Some("00:11:22:33:44:66")
    );
    let prev = c.prev_result().unwrap().unwrap();
    assert_eq!(prev.interfaces[2].sandbox, "/var/run/netns/blue");
    assert_eq!(prev.ips[0].interface, Some(2));
    assert_eq!(c.specific()["sysctl"]["net.core.somaxconn"], "500");
}

#[test]
fn ipam_abbreviated_result() {
    let v = json!({
        "cniVersion": "1.1.0",
        "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.1.0.1"]}
    });
    let (_, r) = CniResult::from_value(&v, Version::V1_1_0).unwrap();
    assert!(r.interfaces.is_empty());
    assert_eq!(r.ips[0].interface, None);
    assert_eq!(r.to_value(Version::V1_1_0).unwrap(), v);
}

#[test]
fn spec_error_example() {
    let e: CniError = serde_json::from_value(json!({
        "cniVersion": "1.1.0", "code": 7, "msg": "Invalid Configuration",
        "details": "Network 192.168.0.0/31 too small to allocate from."
    }))
    .unwrap();
    assert_eq!(e.code, ErrorCode::InvalidNetworkConfig);
    assert_eq!(
        serde_json::to_value(&e).unwrap()["details"],
        "Network 192.168.0.0/31 too small to allocate from."
    );
}

#[test]
fn bad_input_codes() {
    // unknown version -> 1, malformed JSON -> 6, missing or invalid name -> 7
    assert_eq!(
        Version::parse("1.x").unwrap_err().code(),
        ErrorCode::IncompatibleCniVersion
    );
    assert_eq!(
        CniResult::from_slice(br#"{"cniVersion":"7.0.0"}"#, Version::V1_0_0)
            .unwrap_err()
            .code(),
        ErrorCode::IncompatibleCniVersion
    );
    assert_eq!(
        NetworkConfig::from_slice(b"{\"name\":").unwrap_err().code(),
        ErrorCode::DecodingFailure
    );
    let unnamed = NetworkConfig::from_slice(br#"{"cniVersion":"1.0.0","type":"x"}"#).unwrap();
    assert_eq!(
        unnamed.validate_name().unwrap_err().code(),
        ErrorCode::InvalidNetworkConfig
    );
    let bad =
        NetworkConfig::from_slice(br#"{"cniVersion":"1.0.0","name":"a b","type":"x"}"#).unwrap();
    let reply = bad.validate_name().unwrap_err().to_cni_error();
    assert_eq!(
        (reply.code, reply.msg.as_str(), reply.details.as_str()),
        (
            ErrorCode::InvalidNetworkConfig,
            "invalid characters found in network name",
            "a b"
        )
    );
}
