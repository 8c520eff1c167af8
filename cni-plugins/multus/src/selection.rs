//! Pod network selection: the `k8s.v1.cni.cncf.io/networks` annotation in
//! its comma form (`[ns/]name[@ifname]`) and JSON form, with the reference's
//! validation (multus-cni `pkg/k8sclient/k8sclient.go`
//! `parsePodNetworkAnnotation`, NAD spec section 4.1.2).

use std::net::IpAddr;

use cni_types::json::canonicalize_keys;
use cni_types::{Bandwidth, PortMapping};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Error;

/// The network selection annotation.
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// The annotation that replaces the cluster network for one pod.
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";
/// The annotation multus writes after ADD.
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// One element of the selection annotation (JSON form), every key of the
/// NetworkSelectionElement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkSelectionElement {
    /// `name`: the NetworkAttachmentDefinition.
    pub name: String,
    /// `namespace` (defaults to the pod's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `ips`: requested addresses (IP or CIDR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ips: Option<Vec<String>>,
    /// `mac`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// `infiniband-guid`.
    #[serde(
        rename = "infiniband-guid",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub infiniband_guid: String,
    /// `interface`: the requested interface name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface: String,
    /// `interfaceRequest`: the pre-3.2 spelling of `interface`.
    #[serde(
        rename = "interfaceRequest",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub interface_request: String,
    /// `portMappings`.
    #[serde(
        rename = "portMappings",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub port_mappings: Option<Vec<PortMapping>>,
    /// `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// `deviceID`.
    #[serde(rename = "deviceID", default, skip_serializing_if = "String::is_empty")]
    pub device_id: String,
    /// `cni-args`: merged into each plugin's `args.cni`.
    #[serde(rename = "cni-args", default, skip_serializing_if = "Option::is_none")]
    pub cni_args: Option<Map<String, Value>>,
    /// `default-route`: gateways for the pod's default route(s).
    #[serde(
        rename = "default-route",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub default_route: Option<Vec<IpAddr>>,
}

const ELEMENT_KEYS: &[&str] = &[
    "name",
    "namespace",
    "ips",
    "mac",
    "infiniband-guid",
    "interface",
    "interfaceRequest",
    "portMappings",
    "bandwidth",
    "deviceID",
    "cni-args",
    "default-route",
];

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Dot-separated DNS-1123 labels, at most 253 characters (object names).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Parses a hardware address as Go's `net.ParseMAC`: 6, 8 or 20 octets,
/// `:` or `-` separated pairs, or `.` separated groups of four hex digits.
pub fn parse_hw_addr(s: &str) -> Option<Vec<u8>> {
    let hex = |t: &str| -> Option<Vec<u8>> {
        if t.len() % 2 != 0 || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        (0..t.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&t[i..i + 2], 16).ok())
            .collect()
    };
    let bytes = if s.contains('.') {
        let groups: Vec<&str> = s.split('.').collect();
        if groups.iter().any(|g| g.len() != 4) {
            return None;
        }
        hex(&groups.concat())?
    } else {
        let sep = if s.contains('-') { '-' } else { ':' };
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.iter().any(|p| p.len() != 2) {
            return None;
        }
        hex(&parts.concat())?
    };
    matches!(bytes.len(), 6 | 8 | 20).then_some(bytes)
}

fn parse_ip_or_cidr(s: &str) -> bool {
    match s.split_once('/') {
        Some(_) => cni_types::json::parse_cidr(s).is_ok(),
        None => s.parse::<IpAddr>().is_ok(),
    }
}

fn bad(key: &str, value: &str, reason: impl Into<String>) -> Error {
    Error::PodAnnotation {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// Parses one comma-form item `[namespace/]name[@ifname]`.
fn parse_item(key: &str, annotation: &str, item: &str) -> Result<NetworkSelectionElement, Error> {
    let slash: Vec<&str> = item.split('/').collect();
    let (namespace, rest) = match slash.as_slice() {
        [name] => ("", *name),
        [ns, name] => (ns.trim(), *name),
        _ => {
            return Err(bad(
                key,
                annotation,
                format!("invalid network object {item:?} (failed at '/')"),
            ))
        }
    };
    let at: Vec<&str> = rest.split('@').collect();
    let (name, ifname) = match at.as_slice() {
        [name] => (name.trim(), ""),
        [name, ifname] => (name.trim(), ifname.trim()),
        _ => {
            return Err(bad(
                key,
                annotation,
                format!("invalid network object {item:?} (failed at '@')"),
            ))
        }
    };
    for part in [namespace, name] {
        if !part.is_empty() && !is_dns1123_label(part) {
            return Err(bad(
                key,
                annotation,
                format!("{part:?} is not a DNS-1123 label (lower case alphanumeric characters or '-', starting and ending with an alphanumeric character)"),
            ));
        }
    }
    if name.is_empty() {
        return Err(bad(
            key,
            annotation,
            format!("empty network name in {item:?}"),
        ));
    }
    // The reference's own rule here: at most 15 bytes, no '/' nor whitespace.
    if ifname.len() > 15 || ifname.contains(|c: char| c == '/' || c.is_whitespace()) {
        return Err(bad(
            key,
            annotation,
            format!("interface name {ifname:?} must be less than 16 characters and not contain '/' or spaces"),
        ));
    }
    Ok(NetworkSelectionElement {
        name: name.into(),
        namespace: namespace.into(),
        interface: ifname.into(),
        ..Default::default()
    })
}

/// Parses a selection annotation (`key` is only used in messages). The
/// JSON form is used when the value contains `[`, `{` or `"`, as in the
/// reference. Namespaces default to `default_namespace`; every element is
/// validated (names, interface, MAC, GUID, IPs).
pub fn parse_networks(
    key: &str,
    annotation: &str,
    default_namespace: &str,
) -> Result<Vec<NetworkSelectionElement>, Error> {
    if annotation.trim().is_empty() {
        return Err(bad(key, annotation, "empty annotation"));
    }
    let mut networks = if annotation.contains(['[', '{', '"']) {
        let raw: Vec<Map<String, Value>> = serde_json::from_str(annotation)
            .map_err(|e| bad(key, annotation, format!("failed to parse JSON format: {e}")))?;
        raw.into_iter()
            .enumerate()
            .map(|(i, mut m)| {
                canonicalize_keys(&mut m, ELEMENT_KEYS);
                NetworkSelectionElement::deserialize(Value::Object(m))
                    .map_err(|e| bad(key, annotation, format!("element {i}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        annotation
            .split(',')
            .map(|item| parse_item(key, annotation, item.trim()))
            .collect::<Result<Vec<_>, _>>()?
    };
    for (i, n) in networks.iter_mut().enumerate() {
        if n.namespace.is_empty() {
            n.namespace = default_namespace.to_string();
        }
        // Names go into API paths: only valid object names may pass.
        if !is_dns1123_subdomain(&n.name) {
            return Err(bad(
                key,
                annotation,
                format!(
                    "element {i}: network name {:?} is not a valid object name",
                    n.name
                ),
            ));
        }
        if !is_dns1123_label(&n.namespace) {
            return Err(bad(
                key,
                annotation,
                format!(
                    "element {i}: namespace {:?} is not a valid namespace name",
                    n.namespace
                ),
            ));
        }
        if n.interface.is_empty() && !n.interface_request.is_empty() {
            n.interface = std::mem::take(&mut n.interface_request);
        }
        if !n.interface.is_empty() {
            cni_types::validate::interface_name(&n.interface).map_err(|e| {
                bad(
                    key,
                    annotation,
                    format!("element {i}: interface {:?}: {e}", n.interface),
                )
            })?;
        }
        if !n.mac.is_empty() && parse_hw_addr(&n.mac).is_none() {
            return Err(bad(
                key,
                annotation,
                format!("element {i}: invalid MAC address {:?}", n.mac),
            ));
        }
        if !n.infiniband_guid.is_empty() && parse_hw_addr(&n.infiniband_guid).is_none() {
            return Err(bad(
                key,
                annotation,
                format!(
                    "element {i}: invalid infiniband GUID {:?}",
                    n.infiniband_guid
                ),
            ));
        }
        for ip in n.ips.iter().flatten() {
            if !parse_ip_or_cidr(ip) {
                return Err(bad(
                    key,
                    annotation,
                    format!("element {i}: invalid IP address {ip:?}"),
                ));
            }
        }
    }
    Ok(networks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::ErrorCode;

    fn parse(s: &str) -> Result<Vec<NetworkSelectionElement>, Error> {
        parse_networks(NETWORKS_ANNOTATION, s, "test")
    }

    #[test]
    fn comma_form_good_table() {
        for (a, ns, name, ifname) in [
            ("net1", "test", "net1", ""),
            ("default/net1", "default", "net1", ""),
            ("net1@my_interface", "test", "net1", "my_interface"),
            (
                "default/net1@my_interface",
                "default",
                "net1",
                "my_interface",
            ),
            (" other / net-2 @ eth9 ", "other", "net-2", "eth9"),
        ] {
            let n = parse(a).unwrap_or_else(|e| panic!("{a}: {e}"));
            assert_eq!(
                (
                    n[0].namespace.as_str(),
                    n[0].name.as_str(),
                    n[0].interface.as_str()
                ),
                (ns, name, ifname),
                "{a}"
            );
        }
        let n = parse("net1,kube-system/net2@x, net3").unwrap();
        assert_eq!(n.len(), 3);
        assert_eq!(n[1].namespace, "kube-system");
    }

    #[test]
    fn comma_form_bad_table() {
        for a in [
            "root@someIP/root@someOtherIP/root@thirdIP",
            "root@someIP/root@someOtherIP@garbagevalue",
            "root@someIP/root@someOtherIP",
            "default/net1@myIfc Name",
            "default/net1@very_long_interface_name",
            "a/b/c",
            "Net1",
            "net_1",
            "-net",
            "net1,",
            "",
            "ns/net@a/b",
        ] {
            let e = parse(a).expect_err(a);
            assert_eq!(e.code(), ErrorCode::InvalidNetworkConfig, "{a}");
        }
    }

    #[test]
    fn json_form_every_key() {
        let a = r#"[{"name":"net1","namespace":"other","ips":["10.1.1.5/24","fd00::5"],
            "mac":"c2:11:22:33:44:55","infiniband-guid":"24:8a:07:03:00:8d:ae:2e",
            "interface":"data0","portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],
            "bandwidth":{"ingressRate":100,"ingressBurst":200,"egressRate":300,"egressBurst":400},
            "deviceID":"0000:00:00.1","cni-args":{"a":"b","n":1},"default-route":["10.1.1.1"],
            "ipam-claim-reference":"ignored"},
            {"name":"net2","interfaceRequest":"legacy0"}]"#;
        let n = parse(a).unwrap();
        assert_eq!(n[0].namespace, "other");
        assert_eq!(n[0].ips.as_ref().unwrap().len(), 2);
        assert_eq!(n[0].interface, "data0");
        assert_eq!(n[0].port_mappings.as_ref().unwrap()[0].host_port, 8080);
        assert_eq!(n[0].bandwidth.as_ref().unwrap().egress_burst, 400);
        assert_eq!(n[0].device_id, "0000:00:00.1");
        assert_eq!(n[0].cni_args.as_ref().unwrap()["n"], 1);
        assert_eq!(
            n[0].default_route.as_ref().unwrap()[0].to_string(),
            "10.1.1.1"
        );
        assert_eq!(n[1].namespace, "test");
        assert_eq!(n[1].interface, "legacy0");
        // Go's decoder matches keys case-insensitively.
        assert_eq!(
            parse(r#"[{"Name":"x","Interface":"e1"}]"#).unwrap()[0].interface,
            "e1"
        );
    }

    #[test]
    fn json_form_bad_table() {
        for a in [
            r#"[{"name":"net1","mac":"not-a-mac"}]"#,
            r#"[{"name":"net1","infiniband-guid":"zz"}]"#,
            r#"[{"name":"net1","ips":["10.1.1.300"]}]"#,
            r#"[{"name":"net1","ips":["10.1.1.3/33"]}]"#,
            r#"[{"name":"net1","interface":"a/b"}]"#,
            r#"[{"name":"net1","interface":"0123456789abcdef"}]"#,
            r#"[{"name":"net1","default-route":["nope"]}]"#,
            r#"[{"name":"../../secrets"}]"#,
            r#"[{"name":"net1","namespace":"a/b"}]"#,
            r#"[{"name":""}]"#,
            r#"[{"name":"net1"}"#,
            r#"{"name":"net1"}"#,
            r#"[asdf]"#,
        ] {
            let e = parse(a).expect_err(a);
            assert_eq!(e.code(), ErrorCode::InvalidNetworkConfig, "{a}");
        }
    }

    #[test]
    fn hw_addr_forms() {
        assert_eq!(parse_hw_addr("c2:11:22:33:44:55").unwrap().len(), 6);
        assert_eq!(parse_hw_addr("C2-11-22-33-44-55").unwrap().len(), 6);
        assert_eq!(parse_hw_addr("0000.5e00.5301").unwrap().len(), 6);
        assert_eq!(parse_hw_addr("24:8a:07:03:00:8d:ae:2e").unwrap().len(), 8);
        assert!(parse_hw_addr("c2:11:22:33:44").is_none());
        assert!(parse_hw_addr("c2:11:22:33:44:5").is_none());
        assert!(parse_hw_addr("").is_none());
    }

    #[test]
    fn labels() {
        assert!(is_dns1123_label("a") && is_dns1123_label("kube-system") && is_dns1123_label("0a"));
        assert!(
            !is_dns1123_label("A") && !is_dns1123_label("a-") && !is_dns1123_label(&"a".repeat(64))
        );
        assert!(is_dns1123_subdomain("net.v1") && !is_dns1123_subdomain("net..v1"));
    }
}
