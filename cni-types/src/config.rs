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

/// One entry of a GC request's list of valid attachments
/// (`cni.dev/valid-attachments`): container id and interface name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GcAttachment {
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

/// The spec-defined keys of a plugin config that [`NetworkConfig`] decodes
/// into typed fields, in the order a config built in code prints them.
const TYPED_CONFIG_KEYS: [&str; 9] = [
    "cniVersion",
    "name",
    "type",
    "args",
    "ipMasq",
    "ipam",
    "dns",
    "runtimeConfig",
    "prevResult",
];

/// Keys matched case-insensitively as Go's `NetConf` does (the typed keys
/// and `capabilities`, which stays a plugin-specific key here).
const NETWORK_CONFIG_KEYS: [&str; 10] = {
    let mut keys = ["capabilities"; 10];
    let mut i = 0;
    while i < TYPED_CONFIG_KEYS.len() {
        keys[i] = TYPED_CONFIG_KEYS[i];
        i += 1;
    }
    keys
};

/// What a parsed config or conflist remembers of its input, so that keys the
/// user did not touch print in their original order with their original
/// values (a `"disableCheck": "TRUE"` stays a string, `"dns": null` stays).
#[derive(Clone, Debug, Default)]
struct Origin {
    /// Every key as read (spec keys in their canonical spelling), in order.
    order: Vec<String>,
    /// The raw value of each typed key that was present.
    raw: Map<String, Value>,
    /// Each typed key's value as decoded, re-encoded (absent when `None`).
    parsed: Map<String, Value>,
}

impl Origin {
    /// Assembles an object: keys in their original order, then new typed
    /// keys (in `typed_keys` order), then new specific keys. A typed key
    /// whose value is what was parsed prints its original raw value.
    fn emit(
        origin: Option<&Origin>,
        typed_keys: &[&str],
        typed: impl Fn(&str) -> Option<Value>,
        specific: &Map<String, Value>,
    ) -> Map<String, Value> {
        let mut out = Map::new();
        let put_typed = |key: &str, out: &mut Map<String, Value>| {
            let now = typed(key);
            match origin {
                Some(o) if o.parsed.get(key) == now.as_ref() => {
                    if let Some(raw) = o.raw.get(key) {
                        out.insert(key.to_string(), raw.clone());
                    }
                }
                _ => {
                    if let Some(v) = now {
                        out.insert(key.to_string(), v);
                    }
                }
            }
        };
        if let Some(o) = origin {
            for key in &o.order {
                if typed_keys.contains(&key.as_str()) {
                    put_typed(key, &mut out);
                } else if let Some(v) = specific.get(key) {
                    out.insert(key.clone(), v.clone());
                }
            }
        }
        for key in typed_keys {
            let seen = origin.is_some_and(|o| o.order.iter().any(|k| k == key));
            if !seen {
                put_typed(key, &mut out);
            }
        }
        for (k, v) in specific {
            if !out.contains_key(k) && !typed_keys.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            }
        }
        out
    }
}

fn to_value_or_null<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A plugin's network configuration, as it arrives on stdin; also what a
/// runtime builds to send.
///
/// The spec-defined keys are typed fields; every other key (the plugin's
/// own, `capabilities`, GC's `cni.dev/valid-attachments`) is a
/// *plugin-specific* key, read with [`NetworkConfig::specific`] and set
/// with [`NetworkConfig::set_specific`]. What you change is exactly what
/// [`NetworkConfig::to_bytes`] and `Serialize` print; keys you did not
/// touch keep their order and values.
///
/// ```
/// use cni_types::NetworkConfig;
/// use serde_json::json;
///
/// let mut conf = NetworkConfig::from_slice(
///     br#"{"cniVersion":"1.0.0","name":"pods","type":"bridge","bridge":"cni0"}"#,
/// )?;
/// conf.set_name("renamed")?;
/// conf.ip_masq = true;
/// conf.set_specific("bridge", json!("br1"))?;
/// let back: serde_json::Value = serde_json::from_slice(&conf.to_bytes())?;
/// assert_eq!(back, json!({"cniVersion":"1.0.0","name":"renamed","type":"bridge",
///                         "bridge":"br1","ipMasq":true}));
///
/// // Built in code, no JSON text:
/// let conf = NetworkConfig::builder("pods", "bridge")
///     .cni_version("1.1.0")
///     .specific("bridge", json!("cni0"))
///     .ipam(json!({"type": "host-local", "subnet": "10.22.0.0/16"}))
///     .build()?;
/// assert_eq!(conf.ipam_type(), "host-local");
/// assert!(NetworkConfig::builder("bad/name", "bridge").build().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
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
    /// `prevResult`, verbatim (decode with [`NetworkConfig::prev_result`],
    /// set from a result with [`NetworkConfig::set_prev_result`]).
    pub prev_result: Option<Value>,
    specific: Map<String, Value>,
    origin: Option<Box<Origin>>,
}

/// Two configs are equal when they print the same keys with the same values
/// (key order aside).
impl PartialEq for NetworkConfig {
    fn eq(&self, other: &Self) -> bool {
        self.to_map() == other.to_map()
    }
}

fn decode(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Decode {
        what: what.into(),
        reason: e.to_string(),
    }
}

/// The versions that share `version`'s result shape (Go's result types:
/// `types020`, `types040`, `types100`).
fn result_shape_versions(version: Version) -> &'static [Version] {
    const V020: [Version; 2] = [Version::V0_1_0, Version::V0_2_0];
    const V040: [Version; 3] = [Version::V0_3_0, Version::V0_3_1, Version::V0_4_0];
    const V100: [Version; 2] = [Version::V1_0_0, Version::V1_1_0];
    if version < Version::V0_3_0 {
        &V020
    } else if version < Version::V1_0_0 {
        &V040
    } else {
        &V100
    }
}

/// A spec key of the wrong JSON type (code 7, the key named).
fn key_type(key: &str, reason: impl std::fmt::Display) -> Error {
    Error::KeyType {
        key: key.into(),
        reason: reason.to_string(),
    }
}

fn take_string(map: &mut Map<String, Value>, key: &str) -> Result<String, Error> {
    match map.shift_remove(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(key_type(key, format!("must be a string, got {other}"))),
    }
}

fn reserved_key(key: &str, typed: &[&str]) -> Result<(), Error> {
    if typed.iter().any(|t| t.eq_ignore_ascii_case(key)) {
        return Err(Error::SpecKey {
            key: key.to_string(),
        });
    }
    Ok(())
}

impl NetworkConfig {
    /// Decodes a plugin config. Fails on malformed JSON (code 6) or a
    /// spec-defined key of the wrong type (code 7, the key named). Does not validate the name: see
    /// [`NetworkConfig::validate_name`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        match crate::limits::config_value_from_slice(bytes)? {
            Value::Object(raw) => NetworkConfig::from_map(raw),
            other => Err(decode(
                "network configuration",
                format!("expected an object, got {other}"),
            )),
        }
    }

    /// Decodes a plugin config from a JSON object.
    pub fn from_map(mut map: Map<String, Value>) -> Result<Self, Error> {
        canonicalize_keys(&mut map, &NETWORK_CONFIG_KEYS);
        let order: Vec<String> = map.keys().cloned().collect();
        let mut raw = Map::new();
        for key in TYPED_CONFIG_KEYS {
            if let Some(v) = map.get(key) {
                raw.insert(key.to_string(), v.clone());
            }
        }
        let non_null = |map: &mut Map<String, Value>, key: &str| {
            map.shift_remove(key).filter(|v| !v.is_null())
        };
        let ipam = match non_null(&mut map, "ipam") {
            None => None,
            Some(Value::Object(m)) => {
                // `ipam.type` names the IPAM plugin: a number there must not
                // read as "no IPAM" (an attachment without an address).
                match m.get("type") {
                    None | Some(Value::Null | Value::String(_)) => {}
                    Some(other) => {
                        return Err(key_type(
                            "ipam.type",
                            format!("must be a string, got {other}"),
                        ))
                    }
                }
                Some(m)
            }
            Some(other) => return Err(key_type("ipam", format!("must be an object, got {other}"))),
        };
        let ip_masq = match non_null(&mut map, "ipMasq") {
            None => false,
            Some(Value::Bool(b)) => b,
            Some(other) => {
                return Err(key_type(
                    "ipMasq",
                    format!("must be a boolean, got {other}"),
                ))
            }
        };
        let dns = non_null(&mut map, "dns")
            .map(|v| crate::json::from_value_naming_key::<Dns>(v).map_err(|e| key_type("dns", e)))
            .transpose()?;
        let runtime_config = match non_null(&mut map, "runtimeConfig") {
            None => None,
            Some(Value::Object(mut m)) => {
                canonicalize_runtime_config(&mut m);
                Some(
                    crate::json::from_value_naming_key::<RuntimeConfig>(Value::Object(m))
                        .map_err(|e| key_type("runtimeConfig", e))?,
                )
            }
            Some(other) => {
                return Err(key_type(
                    "runtimeConfig",
                    format!("must be an object, got {other}"),
                ))
            }
        };
        let object = |map: &mut Map<String, Value>, key: &str| match non_null(map, key) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(v)),
            Some(other) => Err(key_type(key, format!("must be an object, got {other}"))),
        };
        let args = object(&mut map, "args")?;
        let prev_result = object(&mut map, "prevResult")?;
        let mut conf = NetworkConfig {
            cni_version: take_string(&mut map, "cniVersion")?,
            name: take_string(&mut map, "name")?,
            plugin_type: take_string(&mut map, "type")?,
            args,
            ip_masq,
            ipam,
            dns,
            runtime_config,
            prev_result,
            specific: map,
            origin: None,
        };
        let mut parsed = Map::new();
        for key in TYPED_CONFIG_KEYS {
            if let Some(v) = conf.typed_value(key) {
                parsed.insert(key.to_string(), v);
            }
        }
        conf.origin = Some(Box::new(Origin { order, raw, parsed }));
        Ok(conf)
    }

    /// Starts a config built in code. [`NetworkConfigBuilder::build`]
    /// validates the name and the version.
    pub fn builder(
        name: impl Into<String>,
        plugin_type: impl Into<String>,
    ) -> NetworkConfigBuilder {
        NetworkConfigBuilder {
            conf: NetworkConfig {
                cni_version: Version::CURRENT.to_string(),
                name: name.into(),
                plugin_type: plugin_type.into(),
                args: None,
                ip_masq: false,
                ipam: None,
                dns: None,
                runtime_config: None,
                prev_result: None,
                specific: Map::new(),
                origin: None,
            },
            error: None,
        }
    }

    /// The current value of a typed key as JSON; `None` (an empty string,
    /// `false`, an absent object) prints nothing unless it is what was read.
    fn typed_value(&self, key: &str) -> Option<Value> {
        let text = |s: &str| (!s.is_empty()).then(|| Value::String(s.to_string()));
        match key {
            "cniVersion" => text(&self.cni_version),
            "name" => text(&self.name),
            "type" => text(&self.plugin_type),
            "args" => self.args.clone(),
            "ipMasq" => self.ip_masq.then_some(Value::Bool(true)),
            "ipam" => self.ipam.clone().map(Value::Object),
            "dns" => self.dns.as_ref().map(to_value_or_null),
            "runtimeConfig" => self.runtime_config.as_ref().map(to_value_or_null),
            "prevResult" => self.prev_result.clone(),
            _ => None,
        }
    }

    /// The parsed `cniVersion` ("" is 0.1.0).
    pub fn version(&self) -> Result<Version, Error> {
        Version::parse(&self.cni_version)
    }

    /// Sets `cniVersion`, refusing a string that is not a version.
    pub fn set_cni_version(&mut self, version: impl Into<String>) -> Result<(), Error> {
        let version = version.into();
        Version::parse(&version)?;
        self.cni_version = version;
        Ok(())
    }

    /// Sets `name`, refusing a name the spec does not allow (code 7).
    pub fn set_name(&mut self, name: impl Into<String>) -> Result<(), Error> {
        let name = name.into();
        crate::validate::network_name(&name)?;
        self.name = name;
        Ok(())
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

    /// The plugin-specific keys: every key that is not a typed field, in
    /// the order read (new keys last).
    pub fn specific(&self) -> &Map<String, Value> {
        &self.specific
    }

    /// Sets a plugin-specific key. A spec-defined key (any spelling of
    /// `name`, `cniVersion`, `ipam`...) is refused: set its field instead.
    pub fn set_specific(&mut self, key: impl Into<String>, value: Value) -> Result<(), Error> {
        let key = key.into();
        reserved_key(&key, &TYPED_CONFIG_KEYS)?;
        self.specific.insert(key, value);
        Ok(())
    }

    /// Removes a plugin-specific key, returning its value.
    pub fn remove_specific(&mut self, key: &str) -> Option<Value> {
        self.specific.shift_remove(key)
    }

    /// Sets `prevResult` from a result, in the shape of the config's
    /// `cniVersion` (what a runtime passes to the next plugin of a chain).
    pub fn set_prev_result(&mut self, result: &CniResult) -> Result<(), Error> {
        let mut value = result.to_value(self.version()?)?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("cniVersion".into(), Value::String(self.cni_version.clone()));
        }
        self.prev_result = Some(value);
        Ok(())
    }

    /// The whole config as a JSON object: what [`NetworkConfig::to_bytes`]
    /// prints.
    pub fn to_map(&self) -> Map<String, Value> {
        Origin::emit(
            self.origin.as_deref(),
            &TYPED_CONFIG_KEYS,
            |k| self.typed_value(k),
            &self.specific,
        )
    }

    /// The config as compact JSON bytes: untouched keys as read, in their
    /// order; changed and new keys as set.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_map()).unwrap_or_default()
    }

    /// Decodes the whole config into a plugin's own config struct `T`, which
    /// may include the spec keys it needs next to its own.
    pub fn parse_as<T: DeserializeOwned>(&self) -> Result<T, Error> {
        crate::json::from_value_naming_key(Value::Object(self.to_map()))
            .map_err(|e| Error::InvalidConfig(format!("failed to load netconf: {e}")))
    }

    /// Decodes the plugin-specific keys into `T`, matching them to `keys`
    /// case-insensitively (an exact match winning) as Go's `encoding/json`
    /// matches a plugin's `NetConf` fields: what a plugin that mirrors a Go
    /// struct calls instead of [`NetworkConfig::parse_as`].
    pub fn parse_specific_as_go<T: DeserializeOwned>(&self, keys: &[&str]) -> Result<T, Error> {
        let mut raw = self.specific.clone();
        canonicalize_keys(&mut raw, keys);
        crate::json::from_value_naming_key(Value::Object(raw))
            .map_err(|e| Error::InvalidConfig(format!("failed to load netconf: {e}")))
    }

    /// Decodes `prevResult` in the shape of the config's `cniVersion`, as the
    /// Go reference's `version.ParsePrevResult` does whatever the
    /// prevResult's own `cniVersion` says.
    ///
    /// The prevResult's own `cniVersion`, when set, must be one of the
    /// versions of that shape (`1.0.0`/`1.1.0`, `0.3.0`/`0.3.1`/`0.4.0`,
    /// `0.1.0`/`0.2.0`), as Go's result types check after decoding: an
    /// unknown version ("99.0.0") is refused with code 1.
    pub fn prev_result(&self) -> Result<Option<CniResult>, Error> {
        match &self.prev_result {
            None => Ok(None),
            Some(v) => {
                let version = self.version()?;
                let own = v.get("cniVersion").and_then(Value::as_str);
                if let Some(own) = own.filter(|s| !s.is_empty()) {
                    let shape = result_shape_versions(version);
                    if !shape.iter().any(|s| s.to_string() == own) {
                        return Err(Error::PrevResultVersion {
                            found: own.to_string(),
                            supported: shape.iter().map(Version::to_string).collect(),
                        });
                    }
                }
                Ok(Some(CniResult::from_value_as(v, version)?))
            }
        }
    }

    /// The GC request's valid attachments (`cni.dev/valid-attachments`, or the
    /// legacy `cni.dev/attachments`); `None` when neither key is present.
    pub fn valid_attachments(&self) -> Result<Option<Vec<GcAttachment>>, Error> {
        let v = self
            .specific
            .get(VALID_ATTACHMENTS_KEY)
            .or_else(|| self.specific.get(LEGACY_ATTACHMENTS_KEY));
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v) => Vec::<GcAttachment>::deserialize(v)
                .map(Some)
                .map_err(|e| decode(VALID_ATTACHMENTS_KEY, e)),
        }
    }

    /// The `args.cni` object of the config, if any (CONVENTIONS.md).
    pub fn args_cni(&self) -> Option<&Map<String, Value>> {
        self.args.as_ref()?.get("cni")?.as_object()
    }
}

impl Serialize for NetworkConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(s)
    }
}

impl<'de> Deserialize<'de> for NetworkConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        NetworkConfig::from_map(map).map_err(serde::de::Error::custom)
    }
}

/// Builds a [`NetworkConfig`] in code (see [`NetworkConfig::builder`]).
#[derive(Clone, Debug)]
#[must_use]
pub struct NetworkConfigBuilder {
    conf: NetworkConfig,
    error: Option<Error>,
}

impl NetworkConfigBuilder {
    /// `cniVersion` (default: the newest, 1.1.0).
    pub fn cni_version(mut self, version: impl Into<String>) -> Self {
        if let Err(e) = self.conf.set_cni_version(version) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// `args`.
    pub fn args(mut self, args: Value) -> Self {
        self.conf.args = Some(args);
        self
    }

    /// `ipMasq`.
    pub fn ip_masq(mut self, on: bool) -> Self {
        self.conf.ip_masq = on;
        self
    }

    /// `ipam`: a JSON object (anything else is an error at `build`).
    pub fn ipam(mut self, ipam: Value) -> Self {
        match ipam {
            Value::Object(m) => self.conf.ipam = Some(m),
            other => {
                self.error.get_or_insert(Error::InvalidConfig(format!(
                    "ipam must be an object, got {other}"
                )));
            }
        }
        self
    }

    /// `dns`.
    pub fn dns(mut self, dns: Dns) -> Self {
        self.conf.dns = Some(dns);
        self
    }

    /// `runtimeConfig`.
    pub fn runtime_config(mut self, rc: RuntimeConfig) -> Self {
        self.conf.runtime_config = Some(rc);
        self
    }

    /// `prevResult`, printed in the config's version.
    pub fn prev_result(mut self, result: &CniResult) -> Self {
        if let Err(e) = self.conf.set_prev_result(result) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// A plugin-specific key.
    pub fn specific(mut self, key: impl Into<String>, value: Value) -> Self {
        if let Err(e) = self.conf.set_specific(key, value) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// The config; fails on an invalid name, version, `ipam` or key.
    pub fn build(self) -> Result<NetworkConfig, Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.conf.validate_name()?;
        Ok(self.conf)
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
///
/// Like [`NetworkConfig`], what you change through the fields is what
/// [`NetworkConfigList::to_bytes`] and `Serialize` print; untouched keys
/// (including keys this type does not know) keep their order and values,
/// and an unchanged list prints the very bytes it was read from.
///
/// ```
/// use cni_types::NetworkConfigList;
/// use serde_json::json;
///
/// let text = br#"{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}"#;
/// let mut list = NetworkConfigList::from_slice(text)?;
/// assert_eq!(list.to_bytes(), text);
/// list.disable_check = true;
/// list.plugins.push(json!({"type": "portmap"}).as_object().unwrap().clone());
/// let again = NetworkConfigList::from_slice(&list.to_bytes())?;
/// assert!(again.disable_check);
/// assert_eq!(again.plugins.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct NetworkConfigList {
    /// The version to use: `cniVersion`, or the highest usable entry of
    /// `cniVersions` if that is higher (libcni's selection). Left
    /// unchanged, the list prints its `cniVersion` as written.
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
    other: Map<String, Value>,
    origin: Option<Box<ListOrigin>>,
}

#[derive(Clone, Debug)]
struct ListOrigin {
    keys: Origin,
    /// The object as printed right after parsing, and the bytes read.
    map: Map<String, Value>,
    bytes: Vec<u8>,
}

/// Two lists are equal when they print the same keys with the same values.
impl PartialEq for NetworkConfigList {
    fn eq(&self, other: &Self) -> bool {
        self.to_map() == other.to_map()
    }
}

impl NetworkConfigList {
    /// Parses a conflist with libcni's rules (`ConfListFromBytes`).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        let mut raw: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| decode("network configuration list", e))?;
        canonicalize_keys(&mut raw, CONFLIST_KEYS);
        let order: Vec<String> = raw.keys().cloned().collect();
        let mut typed_raw = Map::new();
        for key in CONFLIST_KEYS {
            if let Some(v) = raw.get(*key) {
                typed_raw.insert(key.to_string(), v.clone());
            }
        }
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
        for key in CONFLIST_KEYS {
            raw.shift_remove(*key);
        }
        let mut list = NetworkConfigList {
            cni_version,
            cni_versions,
            name,
            disable_check,
            disable_gc,
            load_only_inlined_plugins,
            plugins,
            has_plugins_key,
            other: raw,
            origin: None,
        };
        let mut parsed = Map::new();
        for key in CONFLIST_KEYS {
            if let Some(v) = list.typed_value(key) {
                parsed.insert(key.to_string(), v);
            }
        }
        let keys = Origin {
            order,
            raw: typed_raw,
            parsed,
        };
        let map = Origin::emit(
            Some(&keys),
            CONFLIST_KEYS,
            |k| list.typed_value(k),
            &list.other,
        );
        list.origin = Some(Box::new(ListOrigin {
            keys,
            map,
            bytes: bytes.to_vec(),
        }));
        Ok(list)
    }

    /// A list built in code: `name`, version 1.1.0, these plugins. The name
    /// is validated; each plugin needs a `type`.
    pub fn new(
        name: impl Into<String>,
        plugins: impl IntoIterator<Item = NetworkConfig>,
    ) -> Result<Self, Error> {
        let name = name.into();
        crate::validate::network_name(&name)?;
        let mut list = NetworkConfigList {
            cni_version: Version::CURRENT.to_string(),
            cni_versions: Vec::new(),
            name,
            disable_check: false,
            disable_gc: false,
            load_only_inlined_plugins: false,
            plugins: Vec::new(),
            has_plugins_key: true,
            other: Map::new(),
            origin: None,
        };
        for p in plugins {
            list.push_plugin(&p)?;
        }
        Ok(list)
    }

    /// Appends a plugin config built in code. Its `name` and `cniVersion`
    /// are left out: a list's plugins inherit the list's (libcni injects
    /// them when it runs the plugin).
    pub fn push_plugin(&mut self, plugin: &NetworkConfig) -> Result<(), Error> {
        let mut m = plugin.to_map();
        m.shift_remove("name");
        m.shift_remove("cniVersion");
        check_plugin_type(&m, self.plugins.len())?;
        self.plugins.push(m);
        Ok(())
    }

    fn typed_value(&self, key: &str) -> Option<Value> {
        let flag = |b: bool| b.then_some(Value::Bool(true));
        match key {
            "cniVersion" => {
                (!self.cni_version.is_empty()).then(|| Value::String(self.cni_version.clone()))
            }
            "cniVersions" => (!self.cni_versions.is_empty()).then(|| {
                Value::Array(
                    self.cni_versions
                        .iter()
                        .cloned()
                        .map(Value::String)
                        .collect(),
                )
            }),
            "name" => Some(Value::String(self.name.clone())),
            "disableCheck" => flag(self.disable_check),
            "disableGC" => flag(self.disable_gc),
            "loadOnlyInlinedPlugins" => flag(self.load_only_inlined_plugins),
            "plugins" => (self.has_plugins_key || !self.plugins.is_empty())
                .then(|| Value::Array(self.plugins.iter().cloned().map(Value::Object).collect())),
            _ => None,
        }
    }

    /// Keys of the list this type does not decode, verbatim.
    pub fn other_keys(&self) -> &Map<String, Value> {
        &self.other
    }

    /// The list as a JSON object: what [`NetworkConfigList::to_bytes`] prints.
    pub fn to_map(&self) -> Map<String, Value> {
        Origin::emit(
            self.origin.as_deref().map(|o| &o.keys),
            CONFLIST_KEYS,
            |k| self.typed_value(k),
            &self.other,
        )
    }

    /// The list as JSON bytes: the bytes it was read from when nothing was
    /// changed (libcni caches those), else the edited list, compact.
    pub fn to_bytes(&self) -> Vec<u8> {
        let map = self.to_map();
        match &self.origin {
            Some(o) if o.map == map => o.bytes.clone(),
            _ => serde_json::to_vec(&map).unwrap_or_default(),
        }
    }

    /// Upgrades a single-plugin `.conf` to a one-plugin list, as libcni's
    /// `ConfListFromConf`: `{cniVersion, name, plugins: [conf]}`.
    pub fn from_single_conf(bytes: &[u8]) -> Result<Self, Error> {
        let mut conf: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| decode("network configuration", e))?;
        canonicalize_keys(&mut conf, &NETWORK_CONFIG_KEYS);
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

impl Serialize for NetworkConfigList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(s)
    }
}

impl<'de> Deserialize<'de> for NetworkConfigList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        let bytes = serde_json::to_vec(&map).map_err(serde::de::Error::custom)?;
        NetworkConfigList::from_slice(&bytes).map_err(serde::de::Error::custom)
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
        let keys: Vec<_> = c.to_map().keys().cloned().collect();
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
        // A spec key of the wrong type: code 7, the key named.
        for (bad, key) in [
            (r#"{"name":5}"#, "invalid name:"),
            (r#"{"type":true}"#, "invalid type:"),
            (r#"{"ipam":[]}"#, "invalid ipam:"),
            (r#"{"ipam":{"type":7}}"#, "invalid ipam.type:"),
            (r#"{"ipMasq":"yes"}"#, "invalid ipMasq:"),
            (
                r#"{"dns":{"nameservers":"x"}}"#,
                "invalid dns: nameservers:",
            ),
            (
                r#"{"runtimeConfig":{"portMappings":[{"hostPort":"x"}]}}"#,
                "invalid runtimeConfig: portMappings[0].hostPort:",
            ),
            (r#"{"args":"x"}"#, "invalid args:"),
            (r#"{"prevResult":5}"#, "invalid prevResult:"),
        ] {
            let e = NetworkConfig::from_slice(bad.as_bytes()).unwrap_err();
            assert_eq!(e.code(), crate::ErrorCode::InvalidNetworkConfig, "{bad}");
            assert!(e.to_string().starts_with(key), "{bad}: {e}");
        }
        let c = NetworkConfig::from_slice(br#"{"cniVersion":"1.0.0"}"#).unwrap();
        assert_eq!(
            c.validate_name().unwrap_err().code(),
            crate::ErrorCode::InvalidNetworkConfig
        );
    }

    #[test]
    fn prev_result_uses_config_version() {
        // Read in the config version's shape; its own version, when set,
        // must be one of that shape's (Go's result types check it).
        for own in ["", "1.0.0", "1.1.0"] {
            let c = NetworkConfig::from_slice(
                format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"x","prevResult":{{"cniVersion":"{own}","ips":[{{"address":"10.0.0.2/24"}}]}}}}"#).as_bytes(),
            )
            .unwrap();
            let r = c.prev_result().unwrap().unwrap();
            assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
        }
        for own in ["0.4.0", "99.0.0", "x"] {
            let c = NetworkConfig::from_slice(
                format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"x","prevResult":{{"cniVersion":"{own}","ips":[]}}}}"#).as_bytes(),
            )
            .unwrap();
            let e = c.prev_result().unwrap_err();
            assert_eq!(e.code(), crate::ErrorCode::IncompatibleCniVersion, "{own}");
            assert!(e.to_string().contains(own), "{e}");
        }
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

    #[test]
    fn plugin_keys_matched_as_go() {
        #[derive(Deserialize)]
        struct Tap {
            #[serde(rename = "selinuxContext")]
            selinux: String,
            mtu: u32,
        }
        let c = NetworkConfig::from_slice(
            br#"{"cniVersion":"1.0.0","name":"n","type":"tap","selinuxcontext":"ctx","MTU":1400}"#,
        )
        .unwrap();
        let t: Tap = c.parse_specific_as_go(&["selinuxContext", "mtu"]).unwrap();
        assert_eq!((t.selinux.as_str(), t.mtu), ("ctx", 1400));
        assert!(c.parse_as::<Tap>().is_err(), "serde alone matches exactly");
    }
}
