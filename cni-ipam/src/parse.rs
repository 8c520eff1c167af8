//! Small parsers with the Go reference's exact acceptance rules and messages:
//! `CNI_ARGS` (containernetworking/cni `pkg/types/args.go`), CIDRs (`net.ParseCIDR`),
//! IPs-or-CIDRs (plugins `pkg/ip/ip.go`), and the spec-version comparison.
//!
//! This is the one place that would move to `cni-types` (`CniArgs`, `Version`)
//! once that crate provides them.

use std::net::IpAddr;

use cni_types::{CniArgs, Version};
use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::{Error, Result};

/// The `args` key of a config: the `args.cni.ips` convention
/// (CONVENTIONS.md) that host-local and static read.
#[derive(Deserialize)]
pub(crate) struct ArgsConf {
    #[serde(default)]
    pub(crate) cni: Option<CniArgsConf>,
}

/// `args.cni`.
#[derive(Deserialize)]
pub(crate) struct CniArgsConf {
    #[serde(default)]
    pub(crate) ips: Option<Vec<String>>,
}

/// The configuration envelope host-local and static share: `name`,
/// `cniVersion`, the plugin's `ipam` (`I`), its `runtimeConfig` (`R`) and
/// `args` (the `args.cni.ips` convention).
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "I: Deserialize<'de>, R: Deserialize<'de>")
)]
pub(crate) struct NetConf<I, R> {
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) cni_version: String,
    #[serde(default)]
    pub(crate) ipam: Option<I>,
    #[serde(default)]
    pub(crate) runtime_config: Option<R>,
    #[serde(default)]
    pub(crate) args: Option<ArgsConf>,
}

impl<I: DeserializeOwned, R: DeserializeOwned> NetConf<I, R> {
    /// Decodes `value` as Go does, keys matched case-insensitively: the
    /// envelope's, `ipam_keys` in `ipam`, `runtime_keys` in
    /// `runtimeConfig`, `args.cni.ips`; `nested` renames what lies deeper
    /// in `ipam` and `runtimeConfig` (when they are objects).
    pub(crate) fn decode(
        mut value: Value,
        ipam_keys: &[&str],
        runtime_keys: &[&str],
        nested: impl FnOnce(Option<&mut Map<String, Value>>, Option<&mut Map<String, Value>>),
    ) -> Result<Self> {
        if let Some(root) = canonical_object(
            Some(&mut value),
            &["cniVersion", "name", "ipam", "runtimeConfig", "args"],
        ) {
            let (mut ipam, mut runtime) = (None, None);
            for (key, v) in root.iter_mut() {
                match key.as_str() {
                    "ipam" => ipam = canonical_object(Some(v), ipam_keys),
                    "runtimeConfig" => runtime = canonical_object(Some(v), runtime_keys),
                    "args" => {
                        if let Some(args) = canonical_object(Some(v), &["cni"]) {
                            canonical_object(args.get_mut("cni"), &["ips"]);
                        }
                    }
                    _ => {}
                }
            }
            nested(ipam, runtime);
        }
        cni_types::json::from_value_naming_key(value).map_err(Error::KeyType)
    }
}

/// Go's check that a configuration of `cni_version` older than 0.3.0 asks
/// for at most one address (or range set) per family: `ipv4` tells each
/// one's.
pub(crate) fn check_one_per_family(
    cni_version: &str,
    ipv4: impl Iterator<Item = bool>,
) -> Result<()> {
    let (v4, v6) = ipv4.fold(
        (0, 0),
        |(v4, v6), is_v4| {
            if is_v4 {
                (v4 + 1, v6)
            } else {
                (v4, v6 + 1)
            }
        },
    );
    if (v4 > 1 || v6 > 1) && !version_at_least_0_3_0(cni_version) {
        return Err(Error::InvalidConfig(format!(
            "CNI version {cni_version} does not support more than 1 address per family"
        )));
    }
    Ok(())
}

/// Parses `CNI_ARGS` (`K=V;K=V`) like Go's `types.LoadArgs` into a struct with
/// the fields `known` (plus `IgnoreUnknown`), with [`cni_types::CniArgs`].
///
/// Returns the `(key, value)` pairs of known keys, in order.
pub(crate) fn load_args(args: &str, known: &[&str]) -> Result<Vec<(String, String)>> {
    let parsed = CniArgs::parse(args).map_err(|e| Error::InvalidArgs(e.to_string()))?;
    parsed
        .check_known(known)
        .map_err(|e| Error::InvalidArgs(e.to_string()))?;
    Ok(parsed
        .pairs()
        .iter()
        .filter(|(k, _)| known.contains(&k.as_str()))
        .cloned()
        .collect())
}

/// `net.ParseCIDR` (host bits kept), from [`cni_types::json::parse_cidr`].
pub(crate) fn parse_cidr(s: &str) -> Option<IpNetwork> {
    cni_types::json::parse_cidr(s).ok()
}

/// plugins `ip.ParseIP` + `ToIP`: an address, or a CIDR whose address part is
/// taken; IPv4-mapped IPv6 becomes IPv4 as Go's `To4` does.
pub(crate) fn parse_ip_or_cidr(s: &str) -> Option<IpAddr> {
    let ip = if s.contains('/') {
        parse_cidr(s)?.ip()
    } else {
        s.parse().ok()?
    };
    Some(ip.to_canonical())
}

/// Go's `version.GreaterThanOrEqualTo(v, "0.3.0")`; an unparsable version
/// is "not greater", as in Go.
pub(crate) fn version_at_least_0_3_0(version: &str) -> bool {
    Version::parse(version).is_ok_and(Version::supports_chaining)
}

/// Go's `encoding/json` matches keys to fields case-insensitively (an exact
/// match wins); renames the keys of the object at `value`, if it is one, to
/// the spelling in `known`, and returns it.
pub(crate) fn canonical_object<'a>(
    value: Option<&'a mut Value>,
    known: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let map = value?.as_object_mut()?;
    cni_types::json::canonicalize_keys(map, known);
    Some(map)
}

/// [`canonical_object`] for every element of an array at `value`.
pub(crate) fn canonical_array(value: Option<&mut Value>, known: &[&str]) {
    if let Some(items) = value.and_then(Value::as_array_mut) {
        for item in items {
            canonical_object(Some(item), known);
        }
    }
}

/// Route keys (`types.Route`).
pub(crate) const ROUTE_KEYS: &[&str] =
    &["dst", "gw", "mtu", "advmss", "priority", "table", "scope"];

/// The family and numeric value of an address, for range arithmetic.
pub(crate) fn ip_to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of the same family as `like` with numeric value `value`.
pub(crate) fn u128_to_ip(like: IpAddr, value: u128) -> IpAddr {
    match like {
        // Range arithmetic never leaves the subnet, so the value fits.
        IpAddr::V4(_) => IpAddr::V4((value as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(value.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_known_unknown_and_ignore() {
        assert_eq!(
            load_args("IP=10.0.0.1", &["IP"]).unwrap(),
            vec![("IP".to_string(), "10.0.0.1".to_string())]
        );
        assert_eq!(
            load_args("IgnoreUnknown=1;K8S_POD_NAME=x;IP=1.2.3.4", &["IP"])
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            load_args("K8S_POD_NAME=x;A=b", &["IP"])
                .unwrap_err()
                .to_string(),
            r#"ARGS: unknown args ["K8S_POD_NAME=x" "A=b"]"#
        );
        assert_eq!(
            load_args("IP=1=2", &["IP"]).unwrap_err().to_string(),
            r#"ARGS: invalid pair "IP=1=2""#
        );
        assert_eq!(
            load_args("ip=1.2.3.4", &["IP"]).unwrap_err().to_string(),
            r#"ARGS: unknown args ["ip=1.2.3.4"]"#
        );
        assert!(load_args("IP=1;", &["IP"]).is_err());
    }

    #[test]
    fn cidr_requires_prefix_and_keeps_host_bits() {
        assert_eq!(
            parse_cidr("10.1.0.5/16").unwrap().to_string(),
            "10.1.0.5/16"
        );
        assert!(parse_cidr("10.1.0.5").is_none());
        assert!(parse_cidr("10.1.0.5/33").is_none());
        assert!(parse_cidr("10.1.0.5/").is_none());
        assert!(parse_cidr("10.1.0.5/+1").is_none());
        assert_eq!(parse_cidr("2001:db8::1/64").unwrap().prefix(), 64);
    }

    #[test]
    fn versions() {
        assert!(version_at_least_0_3_0("0.3.0"));
        assert!(version_at_least_0_3_0("1.1.0"));
        assert!(!version_at_least_0_3_0("0.2.0"));
        assert!(!version_at_least_0_3_0(""));
        assert!(!version_at_least_0_3_0("banana"));
    }

    #[test]
    fn mapped_becomes_v4() {
        assert_eq!(
            parse_ip_or_cidr("::ffff:10.0.0.1").unwrap().to_string(),
            "10.0.0.1"
        );
        assert_eq!(
            parse_ip_or_cidr("10.0.0.1/24").unwrap().to_string(),
            "10.0.0.1"
        );
    }
}
