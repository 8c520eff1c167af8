//! Multus's `runtimeConfig`: the capabilities a runtime hands multus and
//! multus forwards to its delegates (multus-cni `types.RuntimeConfig`).
//! Below the config ([`conf`](super::conf)), the delegates and the
//! per-delegate runtime, which all read it.

use cni_types::{Bandwidth, PortMapping};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Multus's `runtimeConfig`: the capabilities it forwards to delegates
/// (multus-cni `types.RuntimeConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeConfig {
    /// `portMappings`.
    #[serde(
        rename = "portMappings",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub port_mappings: Vec<PortMapping>,
    /// `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// `ips`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// `mac`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// `infinibandGUID`.
    #[serde(
        rename = "infinibandGUID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub infiniband_guid: String,
    /// `deviceID`.
    #[serde(rename = "deviceID", default, skip_serializing_if = "String::is_empty")]
    pub device_id: String,
    /// `CNIDeviceInfoFile`.
    #[serde(
        rename = "CNIDeviceInfoFile",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cni_device_info_file: String,
}

impl RuntimeConfig {
    /// The capability arguments libcni injects, in Go's key order, only the
    /// keys that are set (multus-cni `newCNIRuntimeConf`).
    pub fn capability_args(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if !self.port_mappings.is_empty() {
            m.insert("portMappings".into(), to_value(&self.port_mappings));
        }
        if let Some(b) = &self.bandwidth {
            m.insert("bandwidth".into(), to_value(b));
        }
        if !self.ips.is_empty() {
            m.insert("ips".into(), to_value(&self.ips));
        }
        for (k, v) in [
            ("mac", &self.mac),
            ("infinibandGUID", &self.infiniband_guid),
            ("deviceID", &self.device_id),
            ("CNIDeviceInfoFile", &self.cni_device_info_file),
        ] {
            if !v.is_empty() {
                m.insert(k.into(), Value::String(v.clone()));
            }
        }
        m
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // Only plain data types: serialization cannot fail.
    serde_json::to_value(v).unwrap_or(Value::Null)
}
