//! Small parsers with the Go reference's exact acceptance rules and messages:
//! `CNI_ARGS` (containernetworking/cni `pkg/types/args.go`), CIDRs (`net.ParseCIDR`),
//! IPs-or-CIDRs (plugins `pkg/ip/ip.go`), and the spec-version comparison.
//!
//! This is the one place that would move to `cni-types` (`CniArgs`, `Version`)
//! once that crate provides them.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::error::{Error, Result};

/// Parses `CNI_ARGS` (`K=V;K=V`) like Go's `types.LoadArgs` into a struct with
/// the fields `known` (plus `IgnoreUnknown`): keys are matched case-sensitively,
/// unknown keys are an error unless `IgnoreUnknown` is true.
///
/// Returns the `(key, value)` pairs of known keys, in order.
pub(crate) fn load_args(args: &str, known: &[&str]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    if args.is_empty() {
        return Ok(out);
    }
    let mut unknown = Vec::new();
    let mut ignore_unknown = false;
    for pair in args.split(';') {
        let kv: Vec<&str> = pair.split('=').collect();
        let [key, value] = kv[..] else {
            return Err(Error::InvalidArgs(format!("ARGS: invalid pair {pair:?}")));
        };
        if key == "IgnoreUnknown" {
            ignore_unknown = match value.to_lowercase().as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                other => {
                    return Err(Error::InvalidArgs(format!(
                        "ARGS: error parsing value of pair {pair:?}: boolean unmarshal error: invalid input {other})"
                    )))
                }
            };
        } else if known.contains(&key) {
            out.push((key.to_string(), value.to_string()));
        } else {
            unknown.push(pair);
        }
    }
    if !unknown.is_empty() && !ignore_unknown {
        let quoted: Vec<String> = unknown.iter().map(|p| format!("{p:?}")).collect();
        return Err(Error::InvalidArgs(format!(
            "ARGS: unknown args [{}]",
            quoted.join(" ")
        )));
    }
    Ok(out)
}

/// `net.ParseCIDR`: an address and a decimal prefix length, both required.
/// Host bits are kept (`10.1.0.5/16` stays as written).
pub(crate) fn parse_cidr(s: &str) -> Option<IpNetwork> {
    let (addr, len) = s.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    IpNetwork::new(addr, len).ok()
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
/// (including the empty one) is "not greater", as in Go.
pub(crate) fn version_at_least_0_3_0(version: &str) -> bool {
    let mut parts = version.split('.');
    let (Some(major), Some(minor), Some(patch), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            None
        } else {
            s.parse().ok()
        }
    };
    match (num(major), num(minor), num(patch)) {
        (Some(major), Some(minor), Some(_)) => (major, minor) >= (0, 3),
        _ => false,
    }
}

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
