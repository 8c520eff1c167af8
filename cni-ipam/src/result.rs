//! The IPAM result (SPEC "IPAM plugin result": ips, routes, dns, no
//! interfaces) and the route/DNS shapes shared with the configuration.
//!
//! These mirror the result model of `cni-types`; [`IpamResult`] serialises as
//! the 1.x wire JSON so a plugin can print it directly.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::parse::parse_cidr;

/// An abbreviated IPAM result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamResult {
    /// Allocated addresses, one per range set (host-local) or per configured
    /// address (static).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    /// Routes from the configuration, verbatim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// DNS settings (host-local: from `resolvConf`; static: from `dns`).
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    pub dns: Dns,
}

/// One allocated address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Address with the subnet's prefix length (host bits kept).
    #[serde(with = "cidr_text")]
    pub address: IpNetwork,
    /// The range's gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

/// A route (SPEC `routes[]`), kept as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Destination; host bits are kept as written, like Go's `types.IPNet`.
    #[serde(with = "cidr_text")]
    pub dst: IpNetwork,
    /// Next hop; `None` lets the plugin pick (the gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    /// Route MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Advertised MSS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    /// Route priority (metric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Routing table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Route scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u32>,
}

/// DNS settings (SPEC `dns`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    /// Name servers, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Local domain.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    /// Resolver options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    /// Whether nothing is set (then the result omits `dns`).
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// CIDR text with Go's `ParseCIDR` rules (prefix required, host bits kept).
mod cidr_text {
    use super::*;

    pub(super) fn serialize<S: serde::Serializer>(n: &IpNetwork, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(n)
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<IpNetwork, D::Error> {
        let text = String::deserialize(d)?;
        parse_cidr(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid CIDR address: {text}")))
    }
}
