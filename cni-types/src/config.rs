//! Network configurations: the admin-facing conflist and the plugin-facing
//! config a plugin reads on stdin.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::json::{canonicalize_keys, cidr, opt_ip};
use crate::result::{CniResult, Dns};
use crate::version::Version;
use crate::Error;

/// The GC key carrying the attachments a runtime still uses.
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// The key the spec-v1.1.0 tag used by mistake for the same list (cni#1101);
/// libcni sends both, and plugins should read either.
pub const LEGACY_ATTACHMENTS_KEY: &str = "cni.dev/attachments";

/// One attachment (container id + interface name), as in GC requests.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Attachment {
    /// The container id.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// The interface name inside the container.
    pub ifname: String,
}

/// A port mapping (`portMappings` capability).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortMapping {
    /// Port on the host.
    #[serde(rename = "hostPort")]
    pub host_port: i32,
    /// Port in the container.
    #[serde(rename = "containerPort")]
    pub container_port: i32,
    /// `tcp`, `udp` or `sctp` (empty means tcp to most plugins).
    #[serde(default)]
    pub protocol: String,
    /// Host address the mapping is limited to; empty means all.
    #[serde(rename = "hostIP", default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// An address range (`ipRanges` capability, and host-local's range syntax).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpRange {
    /// The subnet to allocate from.
    #[serde(with = "cidr")]
    pub subnet: IpNetwork,
    /// First address to hand out.
    #[serde(
        rename = "rangeStart",
        default,
        with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub range_start: Option<IpAddr>,
    /// Last address to hand out.
    #[serde(
        rename = "rangeEnd",
        default,
        with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub range_end: Option<IpAddr>,
    /// Gateway of the subnet.
    #[serde(default, with = "opt_ip", skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

/// Bandwidth limits (`bandwidth` capability), in bits per second and bits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bandwidth {
    /// Ingress rate.
    #[serde(rename = "ingressRate", default)]
    pub ingress_rate: u64,
    /// Ingress burst.
    #[serde(rename = "ingressBurst", default)]
    pub ingress_burst: u64,
    /// Egress rate.
    #[serde(rename = "egressRate", default)]
    pub egress_rate: u64,
    /// Egress burst.
    #[serde(rename = "egressBurst", default)]
    pub egress_burst: u64,
}

/// The `runtimeConfig` a runtime injects from the capabilities a plugin
/// declares. The well-known capabilities (CONVENTIONS.md) are typed; any
/// other key is kept in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeConfig {
    /// `portMappings`.
    #[serde(
        rename = "portMappings",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub port_mappings: Vec<PortMapping>,
    /// `ipRanges`: range sets, each a list of ranges.
    #[serde(rename = "ipRanges", default, skip_serializing_if = "Vec::is_empty")]
    pub ip_ranges: Vec<Vec<IpRange>>,
    /// `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// `dns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// `ips`: requested addresses (CIDR or plain IP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// `mac`: requested hardware address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// `infinibandGUID`.
    #[serde(
        rename = "infinibandGUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub infiniband_guid: Option<String>,
    /// `deviceID` (e.g. a PCI address).
    #[serde(rename = "deviceID", default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// `aliases`: names the container is known by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// `cgroupPath`.
    #[serde(
        rename = "cgroupPath",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroup_path: Option<String>,
    /// Any other capability, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

const RUNTIME_CONFIG_KEYS: &[&str] = &[
    "portMappings",
    "ipRanges",
    "bandwidth",
    "dns",
    "ips",
    "mac",
    "infinibandGUID",
    "deviceID",
    "aliases",
    "cgroupPath",
];

/// Go matches keys case-insensitively at every level of a struct; do the
/// same for the typed capabilities' inner objects.
fn canonicalize_runtime_config(m: &mut Map<String, Value>) {
    canonicalize_keys(m, RUNTIME_CONFIG_KEYS);
    let objects = |v: Option<&mut Value>, keys: &[&str]| {
        for item in v.and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(o) = item.as_object_mut() {
                canonicalize_keys(o, keys);
            }
        }
    };
    objects(
        m.get_mut("portMappings"),
        &["hostPort", "containerPort", "protocol", "hostIP"],
    );
    for set in m
        .get_mut("ipRanges")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        objects(Some(set), &["subnet", "rangeStart", "rangeEnd", "gateway"]);
    }
    if let Some(o) = m.get_mut("bandwidth").and_then(Value::as_object_mut) {
        canonicalize_keys(
            o,
            &["ingressRate", "ingressBurst", "egressRate", "egressBurst"],
        );
    }
    if let Some(o) = m.get_mut("dns").and_then(Value::as_object_mut) {
        canonicalize_keys(o, &["nameservers", "domain", "search", "options"]);
    }
}

const NETWORK_CONFIG_KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "args",
    "ipMasq",
    "ipam",
    "dns",
    "runtimeConfig",
    "prevResult",
    "capabilities",
];

/// A plugin's network configuration, as it arrives on stdin.
///
/// The spec-defined keys are decoded; the whole object is kept verbatim (key
/// order included) so a plugin can decode its own section with
/// [`NetworkConfig::parse_as`].
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkConfig {
    /// `cniVersion` as written ("" means 0.1.0).
    pub cni_version: String,
    /// `name`.
    pub name: String,
    /// `type`.
    pub plugin_type: String,
    /// `args`, verbatim.
    pub args: Option<Value>,
    /// `ipMasq`.
    pub ip_masq: bool,
    /// `ipam`, verbatim (its `type` is [`NetworkConfig::ipam_type`]).
    pub ipam: Option<Map<String, Value>>,
    /// `dns`.
    pub dns: Option<Dns>,
    /// `runtimeConfig`.
    pub runtime_config: Option<RuntimeConfig>,
    /// `prevResult`, verbatim (decode with [`NetworkConfig::prev_result`]).
    pub prev_result: Option<Value>,
    raw: Map<String, Value>,
}

fn decode(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Decode {
        what: what.into(),
        reason: e.to_string(),
    }
}

fn opt_string(map: &Map<String, Value>, key: &str) -> Result<String, Error> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(decode(
            "network configuration",
            format!("{key} must be a string, got {other}"),
        )),
    }
}

impl NetworkConfig {
    /// Decodes a plugin config. Fails (code 6) on malformed JSON or a
    /// spec-defined key of the wrong type. Does not validate the name: see
    /// [`NetworkConfig::validate_name`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        let raw: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| decode("network configuration", e))?;
        NetworkConfig::from_map(raw)
    }

    /// Decodes a plugin config from a JSON object.
    pub fn from_map(mut raw: Map<String, Value>) -> Result<Self, Error> {
        canonicalize_keys(&mut raw, NETWORK_CONFIG_KEYS);
        let field = |key: &str| raw.get(key).filter(|v| !v.is_null());
        let ipam = match field("ipam") {
            None => None,
            Some(Value::Object(m)) => Some(m.clone()),
            Some(other) => {
                return Err(decode(
                    "network configuration",
                    format!("ipam must be an object, got {other}"),
                ))
            }
        };
        let ip_masq = match field("ipMasq") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(decode(
                    "network configuration",
                    format!("ipMasq must be a boolean, got {other}"),
                ))
            }
        };
        let dns = field("dns")
            .map(|v| Dns::deserialize(v).map_err(|e| decode("network configuration dns", e)))
            .transpose()?;
        let runtime_config = match field("runtimeConfig") {
            None => None,
            Some(Value::Object(m)) => {
                let mut m = m.clone();
                canonicalize_runtime_config(&mut m);
                Some(
                    RuntimeConfig::deserialize(Value::Object(m))
                        .map_err(|e| decode("runtimeConfig", e))?,
                )
            }
            Some(other) => {
                return Err(decode(
                    "network configuration",
                    format!("runtimeConfig must be an object, got {other}"),
                ))
            }
        };
        Ok(NetworkConfig {
            cni_version: opt_string(&raw, "cniVersion")?,
            name: opt_string(&raw, "name")?,
            plugin_type: opt_string(&raw, "type")?,
            args: field("args").cloned(),
            ip_masq,
            ipam,
            dns,
            runtime_config,
            prev_result: field("prevResult").cloned(),
            raw,
        })
    }

    /// The parsed `cniVersion` ("" is 0.1.0).
    pub fn version(&self) -> Result<Version, Error> {
        Version::parse(&self.cni_version)
    }

    /// Checks `name` with the spec's rules (code 7 when missing or invalid).
    pub fn validate_name(&self) -> Result<(), Error> {
        crate::validate::network_name(&self.name)
    }

    /// `ipam.type`, or "" when there is no IPAM section or no type.
    pub fn ipam_type(&self) -> &str {
        self.ipam
            .as_ref()
            .and_then(|m| m.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The whole config object, verbatim.
    pub fn raw(&self) -> &Map<String, Value> {
        &self.raw
    }

    /// The config as compact JSON bytes (the same keys and order as read).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.raw).unwrap_or_default()
    }

    /// Decodes the whole config into a plugin's own config struct `T`, which
    /// may include the spec keys it needs next to its own.
    pub fn parse_as<T: DeserializeOwned>(&self) -> Result<T, Error> {
        T::deserialize(Value::Object(self.raw.clone()))
            .map_err(|e| Error::InvalidConfig(format!("failed to load netconf: {e}")))
    }

    /// Decodes `prevResult` in the shape of the config's `cniVersion`, as the
    /// Go reference's `version.ParsePrevResult` does whatever the
    /// prevResult's own `cniVersion` says.
    pub fn prev_result(&self) -> Result<Option<CniResult>, Error> {
        match &self.prev_result {
            None => Ok(None),
            Some(v) => Ok(Some(CniResult::from_value_as(v, self.version()?)?)),
        }
    }

    /// The GC request's valid attachments (`cni.dev/valid-attachments`, or the
    /// legacy `cni.dev/attachments`); `None` when neither key is present.
    pub fn valid_attachments(&self) -> Result<Option<Vec<Attachment>>, Error> {
        let v = self
            .raw
            .get(VALID_ATTACHMENTS_KEY)
            .or_else(|| self.raw.get(LEGACY_ATTACHMENTS_KEY));
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v) => Vec::<Attachment>::deserialize(v)
                .map(Some)
                .map_err(|e| decode(VALID_ATTACHMENTS_KEY, e)),
        }
    }

    /// The `args.cni` object of the config, if any (CONVENTIONS.md).
    pub fn args_cni(&self) -> Option<&Map<String, Value>> {
        self.args.as_ref()?.get("cni")?.as_object()
    }
}

/// Parses a bool that may also be a string `"true"`/`"false"` in any case,
/// as libcni does for `disableCheck` and `disableGC`.
fn lenient_bool(map: &Map<String, Value>, key: &str) -> Result<bool, Error> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(other) => Err(Error::InvalidConfig(format!(
            "error parsing configuration list: invalid {key} value {other}"
        ))),
    }
}

const CONFLIST_KEYS: &[&str] = &[
    "cniVersion",
    "cniVersions",
    "name",
    "disableCheck",
    "disableGC",
    "loadOnlyInlinedPlugins",
    "plugins",
];

/// A network configuration list (a `.conflist`), the admin-facing config.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkConfigList {
    /// The version to use: `cniVersion`, or the highest usable entry of
    /// `cniVersions` if that is higher (libcni's selection).
    pub cni_version: String,
    /// `cniVersions` as written.
    pub cni_versions: Vec<String>,
    /// `name`.
    pub name: String,
    /// `disableCheck`: CHECK succeeds without running any plugin.
    pub disable_check: bool,
    /// `disableGC`: GC runs no plugin.
    pub disable_gc: bool,
    /// `loadOnlyInlinedPlugins`: ignore `<confdir>/<name>/*.conf`.
    pub load_only_inlined_plugins: bool,
    /// The plugin objects, verbatim.
    pub plugins: Vec<Map<String, Value>>,
    /// True when the `plugins` key was present.
    pub has_plugins_key: bool,
    /// The bytes the list was read from (libcni caches these).
    pub bytes: Vec<u8>,
}

impl NetworkConfigList {
    /// Parses a conflist with libcni's rules (`ConfListFromBytes`).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        let mut raw: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| decode("network configuration list", e))?;
        canonicalize_keys(&mut raw, CONFLIST_KEYS);
        let name = match raw.get("name") {
            None => {
                return Err(Error::InvalidConfig(
                    "error parsing configuration list: no name".into(),
                ))
            }
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::InvalidConfig(format!(
                    "error parsing configuration list: invalid name type {other}"
                )))
            }
        };
        let mut cni_version = match raw.get("cniVersion") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::InvalidConfig(format!(
                    "error parsing configuration list: invalid cniVersion type {other}"
                )))
            }
        };
        let mut cni_versions = Vec::new();
        if let Some(vs) = raw.get("cniVersions").filter(|v| !v.is_null()) {
            let arr = vs.as_array().ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "error parsing configuration list: invalid type for cniVersions: {vs}"
                ))
            })?;
            let mut best: Option<Version> = None;
            for (i, v) in arr.iter().enumerate() {
                let s = v.as_str().ok_or_else(|| {
                    Error::InvalidConfig(format!(
                        "error parsing configuration list: invalid type in cniVersions[{i}]: {v}"
                    ))
                })?;
                cni_versions.push(s.to_string());
                let parsed = Version::parse(s).map_err(|e| {
                    Error::InvalidConfig(format!(
                        "error parsing configuration list: failed to parse version {s}: {e}"
                    ))
                })?;
                // Versions newer than we implement are skipped, not clamped.
                if parsed <= Version::CURRENT && best.is_none_or(|b| parsed > b) {
                    best = Some(parsed);
                }
            }
            if let Some(best) = best {
                let current = Version::parse(&cni_version).ok();
                if cni_version.is_empty() || current.is_none_or(|c| best > c) {
                    cni_version = best.to_string();
                }
            }
        }
        let disable_check = lenient_bool(&raw, "disableCheck")?;
        let disable_gc = lenient_bool(&raw, "disableGC")?;
        let load_only_inlined_plugins = lenient_bool(&raw, "loadOnlyInlinedPlugins")?;
        let (plugins, has_plugins_key) = match raw.get("plugins") {
            None | Some(Value::Null) => (Vec::new(), false),
            Some(Value::Array(arr)) => {
                if arr.is_empty() {
                    return Err(Error::InvalidConfig(
                        "error parsing configuration list: no plugins in list".into(),
                    ));
                }
                let mut plugins = Vec::with_capacity(arr.len());
                for (i, p) in arr.iter().enumerate() {
                    let obj = p.as_object().ok_or_else(|| {
                        Error::InvalidConfig(format!(
                            "error parsing configuration list: invalid plugin {i}: not an object"
                        ))
                    })?;
                    check_plugin_type(obj, i)?;
                    plugins.push(obj.clone());
                }
                (plugins, true)
            }
            Some(other) => {
                return Err(Error::InvalidConfig(format!(
                    "error parsing configuration list: invalid plugins type {other}"
                )))
            }
        };
        if load_only_inlined_plugins && !has_plugins_key {
            return Err(Error::InvalidConfig(
                "error parsing configuration list: `loadOnlyInlinedPlugins` is true, and no 'plugins' key".into(),
            ));
        }
        Ok(NetworkConfigList {
            cni_version,
            cni_versions,
            name,
            disable_check,
            disable_gc,
            load_only_inlined_plugins,
            plugins,
            has_plugins_key,
            bytes: bytes.to_vec(),
        })
    }

    /// Upgrades a single-plugin `.conf` to a one-plugin list, as libcni's
    /// `ConfListFromConf`: `{cniVersion, name, plugins: [conf]}`.
    pub fn from_single_conf(bytes: &[u8]) -> Result<Self, Error> {
        let mut conf: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| decode("network configuration", e))?;
        canonicalize_keys(&mut conf, NETWORK_CONFIG_KEYS);
        check_plugin_type(&conf, 0)?;
        let mut list = Map::new();
        if let Some(v) = conf.get("cniVersion") {
            list.insert("cniVersion".into(), v.clone());
        }
        if let Some(v) = conf.get("name") {
            list.insert("name".into(), v.clone());
        }
        list.insert("plugins".into(), Value::Array(vec![Value::Object(conf)]));
        let bytes = serde_json::to_vec(&list).map_err(|e| decode("network configuration", e))?;
        NetworkConfigList::from_slice(&bytes)
    }

    /// The parsed list version.
    pub fn version(&self) -> Result<Version, Error> {
        Version::parse(&self.cni_version)
    }

    /// Appends plugin objects loaded from elsewhere (libcni's
    /// `<confdir>/<name>/*.conf` folder), after the inline ones.
    pub fn append_plugins(
        &mut self,
        plugins: impl IntoIterator<Item = Map<String, Value>>,
    ) -> Result<(), Error> {
        for p in plugins {
            check_plugin_type(&p, self.plugins.len())?;
            self.plugins.push(p);
        }
        Ok(())
    }
}

fn check_plugin_type(obj: &Map<String, Value>, i: usize) -> Result<(), Error> {
    match obj.get("type") {
        Some(Value::String(s)) if !s.is_empty() => Ok(()),
        _ => Err(Error::InvalidConfig(format!(
            "error parsing configuration: plugin {i}: missing 'type'"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(v: Value) -> Result<NetworkConfigList, Error> {
        NetworkConfigList::from_slice(&serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn cni_versions_selection() {
        let p = json!([{"type": "x"}]);
        let pick = |vs: Value, cv: Option<&str>| {
            let mut v = json!({"name": "n", "plugins": p, "cniVersions": vs});
            if let Some(cv) = cv {
                v["cniVersion"] = json!(cv);
            }
            list(v).map(|l| l.cni_version)
        };
        assert_eq!(
            pick(json!(["1.1.0", "0.4.0", "1.0.0"]), None).unwrap(),
            "1.1.0"
        );
        assert_eq!(pick(json!(["99.0.0", "1.1.0"]), None).unwrap(), "1.1.0");
        assert!(pick(json!(["1.0.f"]), None).is_err());
        assert_eq!(
            pick(json!(["0.1.0", "0.4.0"]), Some("1.0.0")).unwrap(),
            "1.0.0"
        );
        assert_eq!(pick(json!([]), None).unwrap(), "");
        // cniVersion without cniVersions is kept verbatim
        assert_eq!(
            list(json!({"name": "n", "cniVersion": "1.2.3", "plugins": p}))
                .unwrap()
                .cni_version,
            "1.2.3"
        );
    }

    #[test]
    fn disable_flags() {
        let p = json!([{"type": "x"}]);
        assert!(
            list(json!({"name": "n", "plugins": p, "disableCheck": "TRUE"}))
                .unwrap()
                .disable_check
        );
        assert!(
            !list(json!({"name": "n", "plugins": p, "disableGC": "false"}))
                .unwrap()
                .disable_gc
        );
        assert!(list(json!({"name": "n", "plugins": p, "disableCheck": "yes"})).is_err());
    }

    #[test]
    fn plugins_rules() {
        assert!(list(json!({"name": "n", "plugins": []}))
            .unwrap_err()
            .to_string()
            .contains("no plugins in list"));
        assert!(list(json!({"name": "n", "loadOnlyInlinedPlugins": true})).is_err());
        let l = list(json!({"name": "n"})).unwrap();
        assert!(!l.has_plugins_key && l.plugins.is_empty());
        assert!(list(json!({"plugins": [{"type": "x"}]})).is_err());
        assert!(list(json!({"name": "n", "plugins": [{"name": "x"}]})).is_err());
    }

    #[test]
    fn single_conf_upgrade() {
        let l = NetworkConfigList::from_single_conf(
            br#"{"cniVersion":"0.3.1","name":"n","type":"bridge","bridge":"b"}"#,
        )
        .unwrap();
        assert_eq!(l.cni_version, "0.3.1");
        assert_eq!(l.name, "n");
        assert_eq!(l.plugins[0]["bridge"], "b");
        assert!(NetworkConfigList::from_single_conf(br#"{"name":"n"}"#).is_err());
    }

    #[test]
    fn network_config_fields_and_passthrough() {
        let c = NetworkConfig::from_slice(
            br#"{"cniVersion":"1.0.0","name":"n","type":"bridge","zeta":1,"ipMasq":true,
                "ipam":{"type":"host-local","subnet":"10.0.0.0/24"},
                "RuntimeConfig":{"portMappings":[{"HostPort":8080,"containerPort":80,"protocol":"tcp"}],"custom":{"a":1},
                                 "ipRanges":[[{"Subnet":"10.0.0.0/24","RangeStart":"10.0.0.10"}]]},
                "alpha":2}"#,
        )
        .unwrap();
        assert_eq!(c.version().unwrap(), Version::V1_0_0);
        assert!(c.ip_masq);
        assert_eq!(c.ipam_type(), "host-local");
        let rc = c.runtime_config.as_ref().unwrap();
        assert_eq!(rc.port_mappings[0].host_port, 8080);
        assert_eq!(rc.extra["custom"], json!({"a": 1}));
        assert_eq!(
            rc.ip_ranges[0][0].range_start.unwrap().to_string(),
            "10.0.0.10"
        );
        let keys: Vec<_> = c.raw().keys().cloned().collect();
        assert_eq!(keys[3], "zeta");
        #[derive(Deserialize)]
        struct Mine {
            zeta: u32,
            alpha: u32,
        }
        let m: Mine = c.parse_as().unwrap();
        assert_eq!((m.zeta, m.alpha), (1, 2));
    }

    #[test]
    fn bad_configs() {
        assert_eq!(
            NetworkConfig::from_slice(b"{").unwrap_err().code(),
            crate::ErrorCode::DecodingFailure
        );
        assert_eq!(
            NetworkConfig::from_slice(br#"{"name":5}"#)
                .unwrap_err()
                .code(),
            crate::ErrorCode::DecodingFailure
        );
        let c = NetworkConfig::from_slice(br#"{"cniVersion":"1.0.0"}"#).unwrap();
        assert_eq!(
            c.validate_name().unwrap_err().code(),
            crate::ErrorCode::InvalidNetworkConfig
        );
    }

    #[test]
    fn prev_result_uses_config_version() {
        let c = NetworkConfig::from_slice(
            br#"{"cniVersion":"1.0.0","name":"n","type":"x","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}}"#,
        )
        .unwrap();
        let r = c.prev_result().unwrap().unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
    }

    #[test]
    fn gc_attachments_either_key() {
        let c = NetworkConfig::from_slice(
            br#"{"cniVersion":"1.1.0","name":"n","type":"x","cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(
            c.valid_attachments().unwrap().unwrap()[0].container_id,
            "c1"
        );
        let none =
            NetworkConfig::from_slice(br#"{"cniVersion":"1.1.0","name":"n","type":"x"}"#).unwrap();
        assert_eq!(none.valid_attachments().unwrap(), None);
    }
}
