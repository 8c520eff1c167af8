//! static IPAM: addresses, routes and DNS from the configuration, `CNI_ARGS`,
//! `args.cni.ips` or `runtimeConfig.ips` (containernetworking/plugins
//! `plugins/ipam/static/main.go`). Nothing is stored, so DEL is a no-op.

use std::net::IpAddr;

use cni_types::NetworkConfig;
use ipnetwork::IpNetwork;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::parse::{self, canonical_array, canonical_object, load_args, parse_cidr, ROUTE_KEYS};
use crate::result::{CniResult, Dns, IpConfig, Route};

/// A validated static configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticConfig {
    /// Network name.
    pub name: String,
    /// `cniVersion` of the configuration.
    pub cni_version: String,
    /// Addresses after the overrides, in order.
    pub addresses: Vec<StaticAddress>,
    /// `ipam.routes`, verbatim.
    pub routes: Vec<Route>,
    /// `ipam.dns`, verbatim.
    pub dns: Dns,
}

/// One static address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticAddress {
    /// Address with prefix length (host bits kept).
    pub address: IpNetwork,
    /// Optional gateway.
    pub gateway: Option<IpAddr>,
}

/// static's configuration as parsed.
type NetConf = parse::NetConf<IpamConf, RuntimeConf>;

#[derive(Deserialize)]
struct IpamConf {
    #[serde(default)]
    routes: Option<Vec<Route>>,
    #[serde(default)]
    addresses: Option<Vec<AddressConf>>,
    #[serde(default)]
    dns: Option<Dns>,
}

#[derive(Deserialize)]
struct AddressConf {
    #[serde(default)]
    address: String,
    #[serde(default)]
    gateway: Option<String>,
}

#[derive(Deserialize)]
struct RuntimeConf {
    #[serde(default)]
    ips: Option<Vec<String>>,
}

/// Every key static's configuration accepts, as dotted paths
/// (`ipam.addresses.address`), read from the serde structs it is parsed
/// with ([`cni_types::keys`]): what the reference page must document.
#[doc(hidden)]
pub fn config_keys() -> Vec<cni_types::keys::KeyShape> {
    cni_types::keys::accepted_key_shapes_at::<NetConf>("")
}

fn ips_entry(text: &str) -> Result<StaticAddress> {
    let address = parse_cidr(text).ok_or_else(|| {
        Error::InvalidConfig(format!(
            "an entry in the 'ips' field is NOT in CIDR notation, got: '{text}'"
        ))
    })?;
    Ok(StaticAddress {
        address: canonical(address),
        gateway: None,
    })
}

fn canonical(n: IpNetwork) -> IpNetwork {
    match n {
        IpNetwork::V6(v6) => match v6.ip().to_ipv4_mapped() {
            // Go's canonicalizeIP turns a mapped address into IPv4; the
            // prefix keeps its IPv4 meaning when it can.
            Some(v4) => IpNetwork::new(IpAddr::V4(v4), v6.prefix().saturating_sub(96)).unwrap_or(n),
            None => n,
        },
        IpNetwork::V4(_) => n,
    }
}

impl StaticConfig {
    /// Loads the configuration with the Go reference's override order:
    /// config `addresses`, plus `CNI_ARGS` `IP` (comma separated CIDRs,
    /// appended) with `GATEWAY` set on every address whose subnet holds it;
    /// then `args.cni.ips` replaces them all; then `runtimeConfig.ips`
    /// replaces them all again.
    pub fn load(stdin: &[u8], cni_args: &str) -> Result<StaticConfig> {
        let value: Value = serde_json::from_slice(stdin).map_err(Error::DecodeConfig)?;
        Self::load_value(value, cni_args)
    }

    /// [`StaticConfig::load`] from a config `cni-types` already decoded.
    pub fn from_network_config(config: &NetworkConfig, cni_args: &str) -> Result<StaticConfig> {
        Self::load_value(Value::Object(config.to_map()), cni_args)
    }

    fn load_value(value: Value, cni_args: &str) -> Result<StaticConfig> {
        let net = NetConf::decode(
            value,
            &["type", "routes", "addresses", "dns"],
            &["ips"],
            |ipam, _| {
                if let Some(ipam) = ipam {
                    canonical_array(ipam.get_mut("addresses"), &["address", "gateway"]);
                    canonical_array(ipam.get_mut("routes"), ROUTE_KEYS);
                    canonical_object(
                        ipam.get_mut("dns"),
                        &["nameservers", "domain", "search", "options"],
                    );
                }
            },
        )?;
        let ipam = net
            .ipam
            .ok_or_else(|| Error::InvalidConfig("IPAM config missing 'ipam' key".to_string()))?;

        // Parse configured addresses lazily like Go: only those that survive
        // the overrides are parsed, so a bad one replaced by args is no error.
        let mut addresses: Vec<(String, Option<StaticAddress>, Option<IpAddr>)> = Vec::new();
        for a in ipam.addresses.unwrap_or_default() {
            let gateway = match a.gateway.as_deref() {
                None | Some("") => None,
                Some(text) => Some(
                    text.parse::<IpAddr>()
                        .map_err(|_| Error::InvalidConfig(format!("invalid IP address: {text}")))?,
                ),
            };
            addresses.push((a.address, None, gateway));
        }

        let args = load_args(cni_args, &["IP", "GATEWAY"])?;
        let last = |key: &str| {
            args.iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        if let Some(ips) = last("IP") {
            for item in ips.split(',') {
                let text = item.trim();
                let parsed = parse_cidr(text).ok_or_else(|| {
                    Error::InvalidConfig(format!(
                        "the 'ip' field is expected to be in CIDR notation, got: '{text}'"
                    ))
                })?;
                addresses.push((
                    text.to_string(),
                    Some(StaticAddress {
                        address: parsed,
                        gateway: None,
                    }),
                    None,
                ));
            }
        }
        if let Some(gateways) = last("GATEWAY") {
            for item in gateways.split(',') {
                let gw: IpAddr = item.trim().parse().map_err(|_| {
                    Error::InvalidConfig(format!("invalid gateway address: {item}"))
                })?;
                for (_, parsed, gateway) in &mut addresses {
                    // Go tests containment on the parsed network, which the
                    // config entries do not have yet (they parse later).
                    if parsed.as_ref().is_some_and(|p| p.address.contains(gw)) {
                        *gateway = Some(gw);
                    }
                }
            }
        }

        let arg_ips = net
            .args
            .and_then(|a| a.cni)
            .and_then(|c| c.ips)
            .unwrap_or_default();
        if !arg_ips.is_empty() {
            addresses = arg_ips
                .iter()
                .map(|s| ips_entry(s).map(|a| (s.clone(), Some(a), None)))
                .collect::<Result<_>>()?;
        }
        let runtime_ips = net.runtime_config.and_then(|r| r.ips).unwrap_or_default();
        if !runtime_ips.is_empty() {
            addresses = runtime_ips
                .iter()
                .map(|s| ips_entry(s).map(|a| (s.clone(), Some(a), None)))
                .collect::<Result<_>>()?;
        }

        let mut out = Vec::with_capacity(addresses.len());
        for (text, parsed, gateway) in addresses {
            let address = match parsed {
                Some(p) => p.address,
                None => parse_cidr(&text).ok_or_else(|| {
                    Error::InvalidConfig(format!(
                        "the 'address' field is expected to be in CIDR notation, got: '{text}'"
                    ))
                })?,
            };
            out.push(StaticAddress {
                address: canonical(address),
                gateway: gateway.map(|g| g.to_canonical()),
            });
        }

        parse::check_one_per_family(&net.cni_version, out.iter().map(|a| a.address.is_ipv4()))?;

        Ok(StaticConfig {
            name: net.name,
            cni_version: net.cni_version,
            addresses: out,
            routes: ipam.routes.unwrap_or_default(),
            dns: ipam.dns.unwrap_or_default(),
        })
    }
}

/// ADD: the configured addresses, routes and DNS.
pub fn add(config: &StaticConfig) -> CniResult {
    CniResult {
        interfaces: Vec::new(),
        ips: config
            .addresses
            .iter()
            .map(|a| IpConfig {
                interface: None,
                address: a.address,
                gateway: a.gateway,
            })
            .collect(),
        routes: config.routes.clone(),
        dns: config.dns.clone(),
    }
}

/// CHECK of a decoded request: the configuration (with `CNI_ARGS`) against
/// its `prevResult`, as Go's `cmdCheck` does.
pub fn check_network_config(config: &NetworkConfig, cni_args: &str, ifname: &str) -> Result<()> {
    let static_config = StaticConfig::from_network_config(config, cni_args)?;
    let prev = config
        .prev_result()
        .map_err(|e| Error::InvalidConfig(e.to_string()))?
        .ok_or(Error::MissingPrevResult)?;
    check(&static_config, ifname, &prev.ips)
}

/// CHECK against the previous result's addresses: an address present there
/// must carry the configured gateway, if one is configured. Like Go, an
/// address missing from `prev_ips` is not an error.
pub fn check(config: &StaticConfig, ifname: &str, prev_ips: &[IpConfig]) -> Result<()> {
    for want in &config.addresses {
        if let Some(have) = prev_ips
            .iter()
            .find(|p| p.address.ip() == want.address.ip())
        {
            if want.gateway.is_some() && want.gateway != have.gateway {
                return Err(Error::StaticMismatch {
                    ip: have.address.ip(),
                    ifname: ifname.to_string(),
                });
            }
        }
    }
    Ok(())
}
