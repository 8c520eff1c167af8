//! JSON helpers shared by the spec types: the Go-compatible pretty printer,
//! serde adapters for CIDRs and IPs, and case-insensitive key matching.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Deserializer, Serializer};
use serde_json::{Map, Value};

/// Serializes `value` the way the Go reference prints results and errors
/// (`json.MarshalIndent(v, "", "    ")`): four-space indentation.
pub fn to_vec_pretty<T: serde::Serialize + ?Sized>(
    value: &T,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(256);
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    value.serialize(&mut ser)?;
    Ok(out)
}

/// Decodes `value` as a `T`; an error names the key it is at, as a path
/// (`vlanTrunk[0].minID: invalid type: string "x", expected u16`), so that
/// a wrong type in a configuration says which key is wrong.
pub fn from_value_naming_key<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })
}

/// Parses a CIDR as Go's `types.ParseCIDR` does: the prefix is required and
/// host bits are kept (`10.1.0.5/16` stays `10.1.0.5/16`).
pub fn parse_cidr(s: &str) -> Result<IpNetwork, String> {
    let bad = || format!("invalid CIDR address: {s}");
    let (addr, len) = s.split_once('/').ok_or_else(bad)?;
    // Go accepts only decimal digits here (no sign, no spaces).
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    IpNetwork::new(addr, len).map_err(|_| bad())
}

/// Serde adapter for an [`IpNetwork`] written as a CIDR string with host bits.
pub mod cidr {
    use super::*;

    /// Serializes as `"ip/prefix"`.
    pub fn serialize<S: Serializer>(n: &IpNetwork, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(n)
    }

    /// Deserializes from `"ip/prefix"` (prefix required).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpNetwork, D::Error> {
        let s = String::deserialize(d)?;
        parse_cidr(&s).map_err(serde::de::Error::custom)
    }
}

/// Serde adapter for an optional IP address; `""` and `null` read as absent,
/// like Go's `net.IP` text decoding.
pub(crate) mod opt_ip {
    use super::*;

    /// Serializes `Some(ip)` as its string (callers skip `None`).
    pub(crate) fn serialize<S: Serializer>(ip: &Option<IpAddr>, s: S) -> Result<S::Ok, S::Error> {
        match ip {
            Some(ip) => s.collect_str(ip),
            None => s.serialize_none(),
        }
    }

    /// Deserializes an IP string; empty or null is `None`.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        match s.as_deref() {
            None | Some("") => Ok(None),
            Some(s) => s
                .parse::<IpAddr>()
                .map(Some)
                .map_err(|_| serde::de::Error::custom(format!("invalid IP address: {s}"))),
        }
    }
}

/// Renames keys of `map` that match one of `known` case-insensitively but not
/// exactly, to the exact spelling.
///
/// Go's `encoding/json` matches object keys to struct fields without regard
/// to case (an exact match wins). Configs written for the Go reference, such
/// as `"RuntimeConfig"` in its own tests, rely on that. We apply this to the
/// spec-defined objects (network config, conflist, runtimeConfig); a
/// plugin's own fields are matched exactly unless the plugin calls this too.
pub fn canonicalize_keys(map: &mut Map<String, Value>, known: &[&str]) {
    let needs = map.keys().any(|k| {
        !known.contains(&k.as_str()) && known.iter().any(|want| want.eq_ignore_ascii_case(k))
    });
    if !needs {
        return;
    }
    // Rebuild in order so that a renamed key keeps its position.
    let old = std::mem::take(map);
    let exact: Vec<bool> = known.iter().map(|want| old.contains_key(*want)).collect();
    for (k, v) in old {
        let rename = if known.contains(&k.as_str()) {
            None
        } else {
            known
                .iter()
                .zip(&exact)
                .find(|(want, has_exact)| !**has_exact && want.eq_ignore_ascii_case(&k))
                .map(|(want, _)| *want)
        };
        match rename {
            Some(want) => map.insert(want.to_string(), v),
            None => map.insert(k, v),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_uses_four_spaces() {
        let v = serde_json::json!({"a": [1]});
        assert_eq!(
            String::from_utf8(to_vec_pretty(&v).unwrap()).unwrap(),
            "{\n    \"a\": [\n        1\n    ]\n}"
        );
    }

    #[test]
    fn cidr_keeps_host_bits() {
        assert_eq!(
            parse_cidr("10.1.0.5/16").unwrap().to_string(),
            "10.1.0.5/16"
        );
        assert!(parse_cidr("10.1.0.5").is_err());
        assert!(parse_cidr("10.1.0.5/33").is_err());
        assert!(parse_cidr("10.1.0.5/+8").is_err());
        assert!(parse_cidr("10.1.0.5/ 8").is_err());
        assert_eq!(
            parse_cidr("2001:db8::5/64").unwrap().to_string(),
            "2001:db8::5/64"
        );
    }

    #[test]
    fn case_insensitive_keys() {
        let mut m: Map<String, Value> =
            serde_json::from_str(r#"{"RuntimeConfig":{"a":1},"CNIVERSION":"x","cniVersion":"y"}"#)
                .unwrap();
        canonicalize_keys(&mut m, &["runtimeConfig", "cniVersion"]);
        assert!(m.contains_key("runtimeConfig"));
        // position kept, exact match wins, the other spelling stays as is
        assert_eq!(m.keys().next().unwrap(), "runtimeConfig");
        assert!(m.contains_key("CNIVERSION"));
        assert_eq!(m["cniVersion"], "y");
    }
}
