//! portmap's configuration: parsing and validation with the Go reference's
//! messages (containernetworking/plugins `plugins/meta/portmap/main.go`,
//! parseConfig and ensureBackend), and the choice of the container
//! addresses from `prevResult`.

use std::net::IpAddr;

use cni_firewall::{HostPortMapping, Protocol};
use cni_types::{CniResult, NetworkConfig};
use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use serde::Deserialize;

use super::error::{Error, Result};

/// The default `markMasqBit` (Kubernetes uses 14 and 15, Calico 20-31).
pub const DEFAULT_MARK_BIT: u32 = 13;

/// The portmap keys of the config, as the reference reads them.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawConf {
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    snat: Option<bool>,
    #[serde(rename = "conditionsV4", default)]
    conditions_v4: Option<Vec<String>>,
    #[serde(rename = "conditionsV6", default)]
    conditions_v6: Option<Vec<String>>,
    #[serde(rename = "masqAll", default)]
    masq_all: Option<bool>,
    #[serde(rename = "markMasqBit", default)]
    mark_masq_bit: Option<i64>,
    #[serde(rename = "externalSetMarkChain", default)]
    external_set_mark_chain: Option<String>,
}

/// portmap's validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortmapConf {
    /// The network name (owner of the rules, with the container id and
    /// interface).
    pub network: String,
    /// `runtimeConfig.portMappings`, validated.
    pub mappings: Vec<HostPortMapping>,
    /// `snat` (default true).
    pub snat: bool,
    /// `masqAll`.
    pub masq_all: bool,
    /// `markMasqBit` (default 13).
    pub mark_masq_bit: u32,
    /// `conditionsV4` (nft syntax).
    pub conditions_v4: Vec<String>,
    /// `conditionsV6` (nft syntax).
    pub conditions_v6: Vec<String>,
}

impl PortmapConf {
    /// The packet mark asking for masquerade (`1 << markMasqBit`).
    pub fn masq_mark(&self) -> u32 {
        1u32 << self.mark_masq_bit
    }

    /// The UDP host ports of the mappings (deduplicated), whose conntrack
    /// entries are flushed on ADD and DEL.
    pub fn udp_host_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .mappings
            .iter()
            .filter(|m| m.protocol == Protocol::Udp)
            .map(|m| m.host_port)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

/// Go's `detectBackendOfConditions`: iptables conditions start with `-` or
/// `!`, anything else is nft syntax; none (or a first token that is empty)
/// says nothing.
fn backend_of_conditions(conditions: &Option<Vec<String>>) -> Option<&'static str> {
    let first = conditions.as_ref()?.first()?;
    match first.as_bytes().first()? {
        b'-' | b'!' => Some("iptables"),
        _ => Some("nftables"),
    }
}

/// Parses and validates portmap's config: the reference's checks in its
/// order, then ours (protocols, host IPs). Messages are the reference's
/// where it has one.
pub fn parse(config: &NetworkConfig) -> Result<PortmapConf> {
    let raw: RawConf = cni_types::json::from_value_naming_key(serde_json::Value::Object(
        config.specific().clone(),
    ))
    .map_err(|e| Error::ConfigDecode {
        reason: e.to_string(),
    })?;
    if raw.mark_masq_bit.is_some() && raw.external_set_mark_chain.is_some() {
        return Err(Error::MarkChainWithMarkBit);
    }
    let bit = raw.mark_masq_bit.unwrap_or(i64::from(DEFAULT_MARK_BIT));
    if !(0..=31).contains(&bit) {
        return Err(Error::MarkBitInvalid { bit });
    }
    check_backend(&raw)?;

    let mut mappings = Vec::new();
    if let Some(rc) = &config.runtime_config {
        for pm in &rc.port_mappings {
            mappings.push(mapping(pm)?);
        }
    }
    Ok(PortmapConf {
        network: config.name.clone(),
        mappings,
        snat: raw.snat.unwrap_or(true),
        masq_all: raw.masq_all.unwrap_or(false),
        mark_masq_bit: u32::try_from(bit).unwrap_or(DEFAULT_MARK_BIT),
        conditions_v4: raw.conditions_v4.unwrap_or_default(),
        conditions_v6: raw.conditions_v6.unwrap_or_default(),
    })
}

/// Go's `ensureBackend`, with nftables the only backend built: the Go
/// default (iptables unless unusable) becomes nftables, and an explicit
/// `iptables` is refused with a clear message after the reference's own
/// option-conflict check.
fn check_backend(raw: &RawConf) -> Result<()> {
    let mut iptables_opts = Vec::new();
    let mut nft_opts = Vec::new();
    if raw.external_set_mark_chain.is_some() {
        iptables_opts.push("externalSetMarkChain");
    }
    for (name, conds) in [
        ("conditionsV4", &raw.conditions_v4),
        ("conditionsV6", &raw.conditions_v6),
    ] {
        match backend_of_conditions(conds) {
            Some("iptables") => iptables_opts.push(name),
            Some(_) => nft_opts.push(name),
            None => {}
        }
    }
    match raw.backend.as_deref() {
        Some("iptables") => {
            if !nft_opts.is_empty() {
                return Err(Error::BackendOptionsConflict {
                    backend: "iptables",
                    other: "nftables",
                    options: nft_opts,
                });
            }
            Err(Error::IptablesUnsupported)
        }
        Some("nftables") if !iptables_opts.is_empty() => Err(Error::BackendOptionsConflict {
            backend: "nftables",
            other: "iptables",
            options: iptables_opts,
        }),
        None if !iptables_opts.is_empty() => Err(Error::IptablesOptionsUnsupported {
            options: iptables_opts,
        }),
        Some("nftables") | None => Ok(()),
        Some(other) => Err(Error::BackendUnknown {
            backend: other.to_owned(),
        }),
    }
}

fn mapping(pm: &cni_types::config::PortMapping) -> Result<HostPortMapping> {
    // The reference checks the container port first.
    let container_port = u16::try_from(pm.container_port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(Error::ContainerPortInvalid {
            port: pm.container_port,
        })?;
    let host_port = u16::try_from(pm.host_port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(Error::HostPortInvalid { port: pm.host_port })?;
    // Kubernetes always sends a protocol; an empty one is TCP as in
    // CONVENTIONS.md examples.
    let protocol = if pm.protocol.is_empty() {
        Protocol::Tcp
    } else {
        pm.protocol
            .parse::<Protocol>()
            .map_err(|_| Error::ProtocolInvalid {
                protocol: pm.protocol.clone(),
                host_port: pm.host_port,
                container_port: pm.container_port,
            })?
    };
    let host_ip = if pm.host_ip.is_empty() {
        None
    } else {
        Some(
            pm.host_ip
                .parse::<IpAddr>()
                .map_err(|_| Error::HostIpInvalid {
                    host_ip: pm.host_ip.clone(),
                    host_port: pm.host_port,
                    container_port: pm.container_port,
                })?,
        )
    };
    Ok(HostPortMapping {
        host_port,
        container_port,
        protocol,
        host_ip,
    })
}

/// The container addresses the mappings forward to: the first IPv4 and the
/// first IPv6 address of `prev` that belong to `ifname` in a sandbox. An
/// address without interface index, or with an index outside the
/// interface list, qualifies (as in the reference's parseConfig).
pub fn container_ips(prev: &CniResult, ifname: &str) -> (Option<Ipv4Network>, Option<Ipv6Network>) {
    let mut v4 = None;
    let mut v6 = None;
    for ip in &prev.ips {
        let is_v4 = ip.address.is_ipv4();
        if (is_v4 && v4.is_some()) || (!is_v4 && v6.is_some()) {
            continue;
        }
        if let Some(iface) = ip
            .interface
            .and_then(|i| prev.interfaces.get(usize::try_from(i).ok()?))
        {
            if iface.name != ifname || iface.sandbox.is_empty() {
                continue;
            }
        }
        match ip.address {
            IpNetwork::V4(n) => v4 = Some(n),
            IpNetwork::V6(n) => v6 = Some(n),
        }
    }
    (v4, v6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::{Interface, IpConfig};

    fn conf(extra: &str, mappings: &str) -> Result<PortmapConf> {
        let json = format!(
            r#"{{"cniVersion":"1.0.0","name":"test","type":"portmap"{extra},
                "runtimeConfig":{{"portMappings":{mappings}}}}}"#
        );
        parse(&NetworkConfig::from_slice(json.as_bytes()).unwrap())
    }

    const ONE: &str = r#"[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]"#;

    fn err(extra: &str, mappings: &str) -> String {
        conf(extra, mappings).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let c = conf("", ONE).unwrap();
        assert!(c.snat && !c.masq_all);
        assert_eq!(c.mark_masq_bit, 13);
        assert_eq!(c.masq_mark(), 0x2000);
        assert_eq!(
            c.mappings,
            vec![HostPortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: Protocol::Tcp,
                host_ip: None
            }]
        );
        let c = conf(r#","snat":false,"masqAll":true,"markMasqBit":0"#, "[]").unwrap();
        assert!(!c.snat && c.masq_all && c.mappings.is_empty());
        assert_eq!(c.masq_mark(), 1);
    }

    #[test]
    fn reference_port_messages() {
        for (host, container, want) in [
            (0, 80, "Invalid host port number: 0"),
            (8080, 0, "Invalid container port number: 0"),
            (-1, 80, "Invalid host port number: -1"),
            (70000, 80, "Invalid host port number: 70000"),
        ] {
            let m =
                format!(r#"[{{"hostPort":{host},"containerPort":{container},"protocol":"tcp"}}]"#);
            assert_eq!(err("", &m), want);
        }
        // The text goes on to name the mapping.
        for (mapping, want) in [
            (
                r#"{"hostPort":1,"containerPort":80,"protocol":"icmp"}"#,
                "Invalid protocol \"icmp\"",
            ),
            (
                r#"{"hostPort":1,"containerPort":80,"protocol":"udp","hostIP":"x"}"#,
                "Invalid hostIP \"x\"",
            ),
        ] {
            let e = err("", &format!("[{mapping}]"));
            assert!(e.starts_with(want), "{e}");
        }
    }

    #[test]
    fn protocols_and_host_ips() {
        let c = conf(
            "",
            r#"[{"hostPort":53,"containerPort":53,"protocol":"UDP","hostIP":"::1"},
                {"hostPort":9,"containerPort":9,"protocol":"sctp","hostIP":"0.0.0.0"},
                {"hostPort":53,"containerPort":53,"protocol":"udp"},
                {"hostPort":7,"containerPort":7,"protocol":""}]"#,
        )
        .unwrap();
        assert_eq!(c.mappings[0].protocol, Protocol::Udp);
        assert_eq!(c.mappings[0].host_ip, Some("::1".parse().unwrap()));
        assert_eq!(c.mappings[1].protocol, Protocol::Sctp);
        assert_eq!(c.mappings[3].protocol, Protocol::Tcp);
        assert_eq!(c.udp_host_ports(), vec![53]);
    }

    #[test]
    fn reference_mark_messages() {
        assert_eq!(
            err(r#","markMasqBit":32"#, ONE),
            "MasqMarkBit must be between 0 and 31"
        );
        assert_eq!(
            err(r#","markMasqBit":-1"#, ONE),
            "MasqMarkBit must be between 0 and 31"
        );
        assert_eq!(
            err(
                r#","markMasqBit":5,"externalSetMarkChain":"KUBE-MARK-MASQ""#,
                ONE
            ),
            "Cannot specify externalSetMarkChain and markMasqBit"
        );
        assert_eq!(
            conf(r#","markMasqBit":31"#, ONE).unwrap().masq_mark(),
            1 << 31
        );
    }

    #[test]
    fn backend_conflicts() {
        assert_eq!(
            err(
                r#","backend":"iptables","conditionsV4":["ip","saddr","1.2.3.4"]"#,
                ONE
            ),
            "iptables backend was requested but configuration contains nftables-specific options [conditionsV4]"
        );
        assert_eq!(
            err(
                r#","backend":"nftables","conditionsV4":["-s","1.2.3.4"],"conditionsV6":["!","-s","::1"]"#,
                ONE
            ),
            "nftables backend was requested but configuration contains iptables-specific options [conditionsV4 conditionsV6]"
        );
        assert_eq!(
            err(r#","backend":"nftables","externalSetMarkChain":"X""#, ONE),
            "nftables backend was requested but configuration contains iptables-specific options [externalSetMarkChain]"
        );
        assert!(
            err(r#","backend":"iptables""#, ONE).contains("implements only the nftables backend")
        );
        assert!(err(r#","externalSetMarkChain":"X""#, ONE)
            .contains("iptables-specific options [externalSetMarkChain]"));
        assert_eq!(
            err(r#","backend":"ebpf""#, ONE),
            "unrecognized backend \"ebpf\""
        );
        // nft conditions with the default backend, and empty conditions.
        let c = conf(
            r#","conditionsV4":["ip","saddr","10.0.0.0/8"],"conditionsV6":[""]"#,
            ONE,
        )
        .unwrap();
        assert_eq!(c.conditions_v4, vec!["ip", "saddr", "10.0.0.0/8"]);
        assert!(conf(r#","backend":"nftables","conditionsV4":[]"#, ONE).is_ok());
    }

    fn result(ips: &[(&str, Option<u32>)], ifaces: &[(&str, &str)]) -> CniResult {
        let mut r = CniResult::default();
        for (name, sandbox) in ifaces {
            r.interfaces.push(Interface {
                name: (*name).into(),
                sandbox: (*sandbox).into(),
                ..Default::default()
            });
        }
        for (addr, idx) in ips {
            let mut ip = IpConfig::new(addr.parse().unwrap());
            ip.interface = *idx;
            r.ips.push(ip);
        }
        r
    }

    #[test]
    fn container_ip_selection() {
        // bridge-like result: host bridge, host veth, container eth0.
        let ifaces = [("cni0", ""), ("veth1", ""), ("eth0", "/run/netns/p")];
        let r = result(
            &[
                ("10.0.0.9/24", Some(0)),
                ("10.1.0.5/24", Some(2)),
                ("10.1.0.6/24", Some(2)),
                ("fd00::5/64", Some(2)),
                ("fd00::6/64", None),
            ],
            &ifaces,
        );
        let (v4, v6) = container_ips(&r, "eth0");
        assert_eq!(v4.unwrap().to_string(), "10.1.0.5/24");
        assert_eq!(v6.unwrap().to_string(), "fd00::5/64");
        // another ifname: only the index-less address qualifies.
        let (v4, v6) = container_ips(&r, "net1");
        assert!(v4.is_none());
        assert_eq!(v6.unwrap().to_string(), "fd00::6/64");
        // an interface outside the sandbox never qualifies; an index beyond
        // the list does (as the reference).
        let r = result(
            &[("10.1.0.7/24", Some(1)), ("10.1.0.8/24", Some(9))],
            &ifaces,
        );
        assert_eq!(
            container_ips(&r, "veth1").0.unwrap().to_string(),
            "10.1.0.8/24"
        );
        assert_eq!(container_ips(&CniResult::default(), "eth0"), (None, None));
    }
}
