//! Wire-shape checks of what a plugin prints: results per spec version,
//! error objects, the VERSION reply.
//!
//! These read the raw JSON (a lenient parser would hide exactly the
//! mistakes the kit is for) and then decode it with `cni-types` as a
//! runtime would.

use std::net::IpAddr;

use cni_types::{CniResult, ResultFamily, Version};
use serde_json::{Map, Value};

use super::kind::Role;

/// Parses stdout as one JSON object.
pub(crate) fn object(stdout: &[u8]) -> Result<Map<String, Value>, String> {
    let text = String::from_utf8_lossy(stdout);
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!("stdout is JSON but not an object: {other}")),
        Err(e) => Err(format!("stdout is not JSON ({e}): {:?}", text.trim())),
    }
}

/// Checks an error reply: a JSON object with a numeric `code` and a string
/// `msg` (`details`, `cniVersion` optional strings). Returns the code.
pub(crate) fn error_reply(stdout: &[u8]) -> Result<u64, String> {
    let m = object(stdout)?;
    let code = match m.get("code") {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("error `code` is not an unsigned integer: {n}"))?,
        Some(other) => return Err(format!("error `code` is not a number: {other}")),
        None => return Err("error object has no `code`".into()),
    };
    match m.get("msg") {
        Some(Value::String(_)) => {}
        Some(other) => return Err(format!("error `msg` is not a string: {other}")),
        None => return Err("error object has no `msg`".into()),
    }
    for key in ["details", "cniVersion"] {
        if let Some(v) = m.get(key) {
            if !v.is_string() {
                return Err(format!("error `{key}` is not a string: {v}"));
            }
        }
    }
    Ok(code)
}

/// Checks a VERSION reply; returns the claimed versions as strings.
pub(crate) fn version_reply(stdout: &[u8]) -> Result<Vec<String>, String> {
    let m = object(stdout)?;
    match m.get("cniVersion") {
        Some(Value::String(s)) => {
            Version::parse(s).map_err(|e| format!("VERSION `cniVersion` {s:?}: {e}"))?;
        }
        Some(other) => return Err(format!("VERSION `cniVersion` is not a string: {other}")),
        None => return Err("VERSION reply has no `cniVersion`".into()),
    }
    let list = match m.get("supportedVersions") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(other) => {
            return Err(format!(
                "VERSION `supportedVersions` is not a non-empty array: {other}"
            ))
        }
        None => return Err("VERSION reply has no `supportedVersions`".into()),
    };
    let mut out = Vec::new();
    for v in list {
        let s = v
            .as_str()
            .ok_or_else(|| format!("supportedVersions entry is not a string: {v}"))?;
        Version::parse(s).map_err(|e| format!("supportedVersions entry {s:?}: {e}"))?;
        out.push(s.to_owned());
    }
    Ok(out)
}

/// What the result check knows about the call.
pub(crate) struct Expect<'a> {
    pub(crate) version: Version,
    pub(crate) role: Role,
    pub(crate) ifname: &'a str,
}

/// Checks an ADD result against the shape of `expect.version`; returns it
/// decoded.
pub(crate) fn add_result(stdout: &[u8], expect: &Expect<'_>) -> Result<CniResult, String> {
    let m = object(stdout)?;
    let want = expect.version.to_string();
    match m.get("cniVersion") {
        Some(Value::String(s)) if *s == want => {}
        Some(other) => {
            return Err(format!(
                "result cniVersion is {other}, the config's is \"{want}\""
            ))
        }
        None => return Err(format!("result has no cniVersion (config's is \"{want}\")")),
    }
    let family = expect
        .version
        .result_family()
        .ok_or_else(|| format!("no result shape for version {want}"))?;
    match family {
        ResultFamily::V020 => legacy_shape(&m)?,
        ResultFamily::V040 | ResultFamily::V100 => current_shape(&m, family, expect)?,
    }
    CniResult::from_value_as(&Value::Object(m), expect.version)
        .map_err(|e| format!("result does not decode as {want}: {e}"))
}

fn cidr(v: &Value, what: &str) -> Result<cni_netns::IpNetwork, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("{what} is not a string: {v}"))?;
    s.parse()
        .map_err(|e| format!("{what} {s:?} is not a CIDR: {e}"))
}

fn ip(v: &Value, what: &str) -> Result<IpAddr, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("{what} is not a string: {v}"))?;
    s.parse()
        .map_err(|e| format!("{what} {s:?} is not an IP address: {e}"))
}

fn routes(v: Option<&Value>, what: &str) -> Result<(), String> {
    let Some(v) = v else { return Ok(()) };
    let list = v
        .as_array()
        .ok_or_else(|| format!("{what} is not an array"))?;
    for (i, r) in list.iter().enumerate() {
        let dst = r
            .get("dst")
            .ok_or_else(|| format!("{what}[{i}] has no dst"))?;
        cidr(dst, &format!("{what}[{i}].dst"))?;
        if let Some(gw) = r.get("gw") {
            ip(gw, &format!("{what}[{i}].gw"))?;
        }
    }
    Ok(())
}

/// 0.1.0 / 0.2.0: `ip4` / `ip6` blocks, no `interfaces` or `ips`.
fn legacy_shape(m: &Map<String, Value>) -> Result<(), String> {
    for key in ["interfaces", "ips"] {
        if m.contains_key(key) {
            return Err(format!("a 0.1.0/0.2.0 result has `{key}` (a 0.3.0+ key)"));
        }
    }
    for (key, v4) in [("ip4", true), ("ip6", false)] {
        let Some(block) = m.get(key) else { continue };
        let ipn = block
            .get("ip")
            .ok_or_else(|| format!("`{key}` has no `ip`"))?;
        let ipn = cidr(ipn, &format!("{key}.ip"))?;
        if ipn.is_ipv4() != v4 {
            return Err(format!("`{key}.ip` {ipn} is of the wrong family"));
        }
        if let Some(gw) = block.get("gateway") {
            ip(gw, &format!("{key}.gateway"))?;
        }
        routes(block.get("routes"), &format!("{key}.routes"))?;
    }
    Ok(())
}

/// 0.3.x / 0.4.0 / 1.x: `interfaces`, `ips` whose `interface` points into
/// `interfaces`, `routes`.
fn current_shape(
    m: &Map<String, Value>,
    family: ResultFamily,
    expect: &Expect<'_>,
) -> Result<(), String> {
    for key in ["ip4", "ip6"] {
        if m.contains_key(key) {
            return Err(format!("a 0.3.0+ result has `{key}` (a 0.2.0 key)"));
        }
    }
    let interfaces: &[Value] = match m.get("interfaces") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(list)) => list,
        Some(other) => return Err(format!("`interfaces` is not an array: {other}")),
    };
    for (i, iface) in interfaces.iter().enumerate() {
        match iface.get("name") {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => return Err(format!("interfaces[{i}] has no name")),
        }
        for key in ["mac", "sandbox"] {
            if let Some(v) = iface.get(key) {
                if !v.is_string() {
                    return Err(format!("interfaces[{i}].{key} is not a string: {v}"));
                }
            }
        }
    }
    let ips: &[Value] = match m.get("ips") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(list)) => list,
        Some(other) => return Err(format!("`ips` is not an array: {other}")),
    };
    for (i, entry) in ips.iter().enumerate() {
        let addr = entry
            .get("address")
            .ok_or_else(|| format!("ips[{i}] has no address"))?;
        let addr = cidr(addr, &format!("ips[{i}].address"))?;
        if family == ResultFamily::V040 {
            let want = if addr.is_ipv4() { "4" } else { "6" };
            match entry.get("version") {
                Some(Value::String(v)) if v == want => {}
                other => {
                    return Err(format!(
                        "ips[{i}].version is {other:?}, a 0.3.x/0.4.0 result needs \"{want}\" for {addr}"
                    ))
                }
            }
        }
        if let Some(gw) = entry.get("gateway") {
            ip(gw, &format!("ips[{i}].gateway"))?;
        }
        if let Some(idx) = entry.get("interface") {
            let n = idx
                .as_u64()
                .ok_or_else(|| format!("ips[{i}].interface is not an index: {idx}"))?;
            if n as usize >= interfaces.len() {
                return Err(format!(
                    "ips[{i}].interface is {n} but there are {} interfaces",
                    interfaces.len()
                ));
            }
        }
    }
    routes(m.get("routes"), "routes")?;
    if expect.role != Role::Ipam {
        let has_pod_iface = interfaces.iter().any(|i| {
            i.get("name").and_then(Value::as_str) == Some(expect.ifname)
                && i.get("sandbox")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
        });
        if !has_pod_iface {
            return Err(format!(
                "no interface {:?} with a sandbox in the result's interfaces",
                expect.ifname
            ));
        }
    } else {
        // SPEC.md: "Delegated IPAM plugins must return an abbreviated
        // Success object. Specifically, it is missing the interfaces array,
        // as well as the interface entry in ips."
        if !interfaces.is_empty() {
            return Err("an IPAM result has `interfaces`".into());
        }
        if ips.iter().any(|ip| ip.get("interface").is_some()) {
            return Err("an IPAM result has an `interface` entry in `ips`".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(version: Version, role: Role) -> Expect<'static> {
        Expect {
            version,
            role,
            ifname: "eth0",
        }
    }

    fn check(v: Version, role: Role, json: &str) -> Result<CniResult, String> {
        add_result(json.as_bytes(), &expect(v, role))
    }

    const IFACES: &str =
        r#""interfaces":[{"name":"veth1"},{"name":"eth0","sandbox":"/run/netns/x"}]"#;

    #[test]
    fn current_results_need_indexes_into_interfaces() {
        let ok = format!(
            r#"{{"cniVersion":"1.0.0",{IFACES},"ips":[{{"address":"10.0.0.2/24","interface":1}}]}}"#
        );
        assert!(check(Version::V1_0_0, Role::Interface, &ok).is_ok());
        let bad = ok.replace(r#""interface":1"#, r#""interface":2"#);
        let e = check(Version::V1_0_0, Role::Interface, &bad).unwrap_err();
        assert!(e.contains("ips[0].interface is 2"), "{e}");
    }

    #[test]
    fn the_result_version_must_be_the_configs() {
        let r = format!(r#"{{"cniVersion":"1.0.0",{IFACES}}}"#);
        let e = check(Version::V1_1_0, Role::Interface, &r).unwrap_err();
        assert!(e.contains("the config's is \"1.1.0\""), "{e}");
    }

    #[test]
    fn v04_ips_carry_their_version() {
        let r = format!(
            r#"{{"cniVersion":"0.4.0",{IFACES},"ips":[{{"address":"10.0.0.2/24","interface":1}}]}}"#
        );
        let e = check(Version::V0_4_0, Role::Interface, &r).unwrap_err();
        assert!(e.contains("ips[0].version"), "{e}");
        let ok = r.replace(r#""interface":1"#, r#""interface":1,"version":"4""#);
        assert!(check(Version::V0_4_0, Role::Interface, &ok).is_ok());
        let wrong = r.replace(r#""interface":1"#, r#""interface":1,"version":"6""#);
        assert!(check(Version::V0_4_0, Role::Interface, &wrong).is_err());
    }

    #[test]
    fn legacy_results_have_no_interfaces() {
        let ok = r#"{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24","gateway":"10.0.0.1","routes":[{"dst":"0.0.0.0/0"}]}}"#;
        assert!(check(Version::V0_2_0, Role::Interface, ok).is_ok());
        // Go's loopback 1.1.1 prints the 1.0.0 shape labelled 0.2.0.
        let go = format!(
            r#"{{"cniVersion":"0.2.0",{IFACES},"ips":[{{"address":"127.0.0.1/8","interface":1}}]}}"#
        );
        let e = check(Version::V0_2_0, Role::Interface, &go).unwrap_err();
        assert!(e.contains("`interfaces`"), "{e}");
        let v6_in_ip4 = r#"{"cniVersion":"0.2.0","ip4":{"ip":"fd00::2/64"}}"#;
        assert!(check(Version::V0_2_0, Role::Interface, v6_in_ip4).is_err());
    }

    #[test]
    fn interface_plugins_report_the_container_interface() {
        let r = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}]}"#;
        let e = check(Version::V1_0_0, Role::Interface, r).unwrap_err();
        assert!(e.contains("sandbox"), "{e}");
    }

    #[test]
    fn ipam_results_are_abbreviated() {
        let ok = r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}"#;
        assert!(check(Version::V1_0_0, Role::Ipam, ok).is_ok());
        let indexed = r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","interface":0}]}"#;
        assert!(check(Version::V1_0_0, Role::Ipam, indexed).is_err());
    }

    #[test]
    fn error_replies_need_code_and_msg() {
        assert_eq!(error_reply(br#"{"code":4,"msg":"m"}"#), Ok(4));
        assert!(error_reply(br#"{"code":"4","msg":"m"}"#).is_err());
        assert!(error_reply(br#"{"code":4}"#).is_err());
        assert!(error_reply(b"failed").is_err());
        assert!(error_reply(b"").is_err());
    }

    #[test]
    fn version_replies_list_versions() {
        let r = version_reply(br#"{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}"#);
        assert_eq!(r, Ok(vec!["0.4.0".to_owned(), "1.0.0".to_owned()]));
        assert!(version_reply(br#"{"cniVersion":"0.2.0"}"#).is_err());
        assert!(version_reply(br#"{"supportedVersions":["1.0.0"]}"#).is_err());
    }
}
