//! The `k8s.v1.cni.cncf.io/network-status` annotation: one entry per pod
//! interface a delegate made (NAD client `CreateNetworkStatuses`,
//! `SetNetworkStatus`).

use cni_types::{CniResult, Route};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// DNS settings of an attachment, as in results.
pub type StatusDns = cni_types::Dns;

/// One entry of the network-status annotation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkStatus {
    /// The attachment's name (`<ns>/<nad>` or the cluster network's name).
    pub name: String,
    /// Interface in the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface: String,
    /// Addresses (without prefix length).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// Hardware address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// MTU.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    /// True for the cluster network's interface.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// DNS (Go always prints it, `{}` when empty).
    #[serde(default)]
    pub dns: StatusDns,
    /// Device info read from the delegate's `CNIDeviceInfoFile`.
    #[serde(
        rename = "device-info",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub device_info: Option<Value>,
    /// Default-route gateways.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_default_route(r: &Route) -> bool {
    r.dst.prefix() == 0 && r.dst.ip().is_unspecified()
}

/// The status entries for one delegate's result. With one interface the
/// entry gets every IP; with several, one entry per sandbox interface, IPs
/// by interface index (unindexed ones to the last entry) and `default` on
/// the first gateway-bearing interface of the master (or its first one).
pub fn network_statuses(
    result: &CniResult,
    network: &str,
    master: bool,
    device_info: Option<&Value>,
) -> Vec<NetworkStatus> {
    let gateways: Vec<String> = result
        .routes
        .iter()
        .filter(|r| is_default_route(r))
        .filter_map(|r| r.gw.map(|g| g.to_string()))
        .collect();
    let dns = result.dns.clone();
    let base = NetworkStatus {
        name: network.to_string(),
        dns,
        device_info: device_info.cloned(),
        gateway: gateways,
        ..Default::default()
    };
    if result.interfaces.len() <= 1 {
        let mut s = NetworkStatus {
            default: master,
            ..base
        };
        if let Some(i) = result.interfaces.first().filter(|i| !i.sandbox.is_empty()) {
            s.interface = i.name.clone();
            s.mac = i.mac.clone();
            s.mtu = i.mtu.unwrap_or(0);
        }
        s.ips = result
            .ips
            .iter()
            .map(|ip| ip.address.ip().to_string())
            .collect();
        return vec![s];
    }
    let gw_iface = master
        .then(|| {
            result
                .ips
                .iter()
                .find(|ip| ip.gateway.is_some() && ip.interface.is_some())
                .and_then(|ip| ip.interface)
        })
        .flatten();
    let mut out = Vec::new();
    let mut index = Vec::new();
    let mut set_default = false;
    for (i, iface) in result.interfaces.iter().enumerate() {
        if iface.sandbox.is_empty() {
            continue;
        }
        let default = master && !set_default && gw_iface.is_none_or(|g| g as usize == i);
        set_default |= default;
        index.push(i);
        out.push(NetworkStatus {
            interface: iface.name.clone(),
            mac: iface.mac.clone(),
            mtu: iface.mtu.unwrap_or(0),
            default,
            ..base.clone()
        });
    }
    for ip in &result.ips {
        let addr = ip.address.ip().to_string();
        match ip.interface {
            Some(i) => {
                if let Some(pos) = index.iter().position(|&x| x == i as usize) {
                    out[pos].ips.push(addr);
                }
            }
            None => {
                if let Some(last) = out.last_mut() {
                    last.ips.push(addr);
                }
            }
        }
    }
    out
}

/// The annotation value: entries pretty-printed with four spaces and
/// joined in a JSON array, byte for byte as the Go client writes it.
pub fn annotation_value(statuses: &[NetworkStatus]) -> String {
    let parts: Vec<String> = statuses
        .iter()
        .map(|s| {
            let mut buf = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            // Plain data: serializing cannot fail.
            let _ = s.serialize(&mut ser);
            String::from_utf8_lossy(&buf).into_owned()
        })
        .collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::{Interface, IpConfig};
    use serde_json::json;

    fn result(v: Value) -> CniResult {
        CniResult::from_value(&v, cni_types::Version::V1_0_0)
            .unwrap()
            .1
    }

    #[test]
    fn single_interface() {
        let r = result(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0", "mac": "aa:aa:aa:aa:aa:aa"}, {"name": "eth0", "mac": "92:79:27:01:7c:ce", "sandbox": "/run/netns/x"}],
            "ips": [{"address": "10.244.1.2/24", "gateway": "10.244.1.1", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}],
            "dns": {"nameservers": ["10.96.0.10"]}}));
        let s = network_statuses(&r, "cbr0", true, None);
        assert_eq!(s.len(), 1);
        assert_eq!(
            json!(s[0]),
            json!({"name": "cbr0", "interface": "eth0", "ips": ["10.244.1.2"],
            "mac": "92:79:27:01:7c:ce", "default": true, "dns": {"nameservers": ["10.96.0.10"]}, "gateway": ["10.244.1.1"]})
        );
        // An IPAM-only style result: no interface.
        let r = result(json!({"cniVersion": "1.0.0", "ips": [{"address": "1.1.1.2/24"}]}));
        assert_eq!(
            json!(network_statuses(&r, "ns/net1", false, None)[0]),
            json!({"name": "ns/net1", "ips": ["1.1.1.2"], "dns": {}})
        );
    }

    #[test]
    fn several_sandbox_interfaces() {
        let mut r = CniResult::default();
        for (n, sb) in [("host", ""), ("a", "/ns"), ("b", "/ns")] {
            r.interfaces.push(Interface {
                name: n.into(),
                sandbox: sb.into(),
                ..Default::default()
            });
        }
        let mut ip = IpConfig::new("10.0.0.2/24".parse().unwrap());
        ip.interface = Some(2);
        ip.gateway = Some("10.0.0.1".parse().unwrap());
        r.ips.push(ip);
        r.ips.push(IpConfig::new("10.0.1.2/24".parse().unwrap()));
        let s = network_statuses(&r, "n", true, None);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].interface.as_str(), s[0].default), ("a", false));
        assert_eq!((s[1].interface.as_str(), s[1].default), ("b", true));
        assert_eq!(s[1].ips, ["10.0.0.2", "10.0.1.2"]);
    }

    #[test]
    fn annotation_format_matches_go() {
        let s = vec![
            NetworkStatus {
                name: "cbr0".into(),
                interface: "eth0".into(),
                ips: vec!["10.244.1.2".into()],
                mac: "92:79:27:01:7c:ce".into(),
                default: true,
                ..Default::default()
            },
            NetworkStatus {
                name: "ns/net1".into(),
                interface: "net1".into(),
                ips: vec!["1.1.1.1".into()],
                ..Default::default()
            },
        ];
        let a = annotation_value(&s);
        assert!(a.starts_with("[{\n    \"name\": \"cbr0\",\n    \"interface\": \"eth0\",\n    \"ips\": [\n        \"10.244.1.2\"\n    ],"), "{a}");
        assert!(a.contains("},{\n    \"name\": \"ns/net1\""));
        let back: Vec<NetworkStatus> = serde_json::from_str(&a).unwrap();
        assert_eq!(back, s);
    }
}
