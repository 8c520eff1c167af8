//! The sbr configuration: Go's keys (`table`, and the unreleased
//! `gateways` and `addSourceHints`) plus `vrfname`, matched without regard
//! to case as Go's decoder does.

use std::net::IpAddr;

use cni_exec::Request;
use cni_netns::kernel::NetnsHandle;
use cni_types::json::canonicalize_keys;
use cni_types::{CniResult, IpConfig};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::{Error, Result};

/// The first table number sbr considers (Go's `firstTableID`).
pub const FIRST_TABLE: u32 = 100;

const KEYS: &[&str] = &["table", "vrfname", "gateways", "addSourceHints"];

/// The sbr settings of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct SbrConf {
    /// Table-ID mode: the rules look up this table and no route is moved.
    #[serde(default)]
    pub table: Option<u32>,
    /// Like `table`, with the table of this VRF device in the pod (ours).
    #[serde(default)]
    pub vrfname: Option<String>,
    /// Static gateways, at most one per family, used instead of the
    /// `prevResult` gateway for the default route of each table.
    #[serde(default)]
    pub gateways: Vec<IpAddr>,
    /// Keep the interface's link routes in the main table with a source
    /// hint instead of removing them.
    #[serde(rename = "addSourceHints", default)]
    pub add_source_hints: bool,
}

impl SbrConf {
    /// Reads and validates the configuration of `req`.
    pub fn parse(req: &Request) -> Result<SbrConf> {
        SbrConf::from_slice(&req.stdin)
    }

    /// Reads and validates a configuration document.
    pub fn from_slice(stdin: &[u8]) -> Result<SbrConf> {
        let mut raw: Map<String, Value> =
            serde_json::from_slice(stdin).map_err(|e| Error::ConfigParse {
                reason: e.to_string(),
            })?;
        canonicalize_keys(&mut raw, KEYS);
        let mut conf = SbrConf::default();
        if let Some(v) = raw.get("table").filter(|v| !v.is_null()) {
            let t = v
                .as_u64()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(|| Error::TableInvalid {
                    value: v.to_string(),
                })?;
            if t == 0 || t == 253 || t == 254 || t == 255 {
                return Err(Error::TableReserved { table: t });
            }
            conf.table = Some(t);
        }
        if let Some(v) = raw.get("vrfname").filter(|v| !v.is_null()) {
            let name = v
                .as_str()
                .ok_or_else(|| type_error("vrfname", "a string", v))?;
            if !name.is_empty() {
                conf.vrfname = Some(name.to_owned());
            }
        }
        if conf.vrfname.is_some() && conf.table.is_some() {
            return Err(Error::VrfWithTable);
        }
        if let Some(v) = raw.get("gateways").filter(|v| !v.is_null()) {
            let list = v
                .as_array()
                .ok_or_else(|| type_error("gateways", "a list", v))?;
            if list.len() > 2 {
                return Err(Error::GatewaysTooMany);
            }
            for g in list {
                let ip = g
                    .as_str()
                    .and_then(|s| s.parse::<IpAddr>().ok())
                    .ok_or_else(|| Error::GatewayInvalid {
                        value: g.to_string(),
                    })?;
                if let Some(other) = conf.gateways.iter().find(|o| o.is_ipv4() == ip.is_ipv4()) {
                    let fam = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
                    return Err(Error::GatewaysSameFamily {
                        family: fam,
                        first: *other,
                        second: ip,
                    });
                }
                conf.gateways.push(ip);
            }
        }
        if let Some(v) = raw.get("addSourceHints").filter(|v| !v.is_null()) {
            conf.add_source_hints = v
                .as_bool()
                .ok_or_else(|| type_error("addSourceHints", "a boolean", v))?;
        }
        Ok(conf)
    }

    /// The parsed `prevResult`, required (Go: "must be called as chained
    /// plugin").
    pub fn prev_result(&self, req: &Request) -> Result<CniResult> {
        self.prev_result_opt(req)?.ok_or(Error::PrevResultMissing)
    }

    /// The parsed `prevResult`, if any.
    pub fn prev_result_opt(&self, req: &Request) -> Result<Option<CniResult>> {
        Ok(req.config.prev_result()?)
    }

    /// The gateway of the default route in `ip`'s table: the static gateway
    /// of its family, else the address's own.
    pub fn gateway_for(&self, ip: &IpConfig) -> Option<IpAddr> {
        let v4 = ip.address.is_ipv4();
        self.gateways
            .iter()
            .copied()
            .find(|g| g.is_ipv4() == v4)
            .or(ip.gateway)
    }

    /// The table of the VRF `name` in the pod.
    pub(crate) fn vrf_table(&self, h: &impl NetnsHandle, name: &str) -> Result<u32> {
        h.vrf_table(name).map_err(|source| Error::VrfTable {
            vrf: name.to_owned(),
            source: source.into(),
        })
    }
}

/// A key of the config with the wrong JSON type.
fn type_error(key: &'static str, expected: &'static str, found: &Value) -> Error {
    Error::KeyType {
        key,
        expected,
        found: found.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<SbrConf> {
        SbrConf::from_slice(json.as_bytes())
    }

    #[test]
    fn keys_and_errors() {
        let c = parse(r#"{"cniVersion":"1.0.0","name":"n","type":"sbr","Table":5000,"GATEWAYS":["192.168.1.254","fd00::1"],"addsourcehints":true}"#).unwrap();
        assert_eq!(c.table, Some(5000));
        assert_eq!(c.gateways.len(), 2);
        assert!(c.add_source_hints);
        let err = |j: &str| parse(j).unwrap_err().to_string();
        assert!(
            err(r#"{"cniVersion":"1.0.0","name":"n","type":"sbr","table":"x"}"#)
                .starts_with("table:")
        );
        assert!(
            err(r#"{"cniVersion":"1.0.0","name":"n","type":"sbr","table":254}"#)
                .starts_with("table:")
        );
        assert_eq!(
            err(
                r#"{"cniVersion":"1.0.0","name":"n","type":"sbr","gateways":["1.1.1.1","2.2.2.2"]}"#
            ),
            "gateways list contains multiple IPv4 addresses: 1.1.1.1 and 2.2.2.2"
        );
        assert_eq!(
            err(
                r#"{"cniVersion":"1.0.0","name":"n","type":"sbr","gateways":["1.1.1.1","::1","2.2.2.2"]}"#
            ),
            "gateways list cannot contain more than 2 entries (one IPv4, one IPv6)"
        );
        assert!(
            err(r#"{"cniVersion":"1.0.0","name":"n","type":"sbr","gateways":["nope"]}"#)
                .starts_with("invalid static gateway IP address")
        );
        assert!(
            err(r#"{"cniVersion":"1.0.0","name":"n","type":"sbr","table":7,"vrfname":"v"}"#)
                .contains("vrfname")
        );
    }
}
