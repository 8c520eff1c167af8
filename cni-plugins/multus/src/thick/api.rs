//! The socket API's wire types (multus-cni `pkg/server/api/api.go`): the
//! shim's request carries the `CNI_*` environment and the config (base64,
//! as Go marshals `[]byte`); the reply to a successful ADD carries the
//! result, every failure a CNI error object.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;

/// The CNI request endpoint.
pub const CNI_ENDPOINT: &str = "/cni";
/// The delegate endpoint (one extra attachment for a running pod).
pub const DELEGATE_ENDPOINT: &str = "/delegate";
/// Liveness.
pub const HEALTHZ_ENDPOINT: &str = "/healthz";
/// Readiness.
pub const READYZ_ENDPOINT: &str = "/readyz";

/// What the shim (or a delegate client) sends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniRequest {
    /// `CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`,
    /// `CNI_ARGS`, `CNI_PATH`.
    pub env: BTreeMap<String, String>,
    /// The network configuration (stdin), base64 on the wire.
    #[serde(with = "b64")]
    pub config: Vec<u8>,
    /// For `/delegate`: the attachment's requested addresses and MAC.
    #[serde(
        rename = "interfaceAttributes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub interface_attributes: Option<InterfaceAttributes>,
}

/// Requests for a `/delegate` attachment (Go `DelegateInterfaceAttributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceAttributes {
    /// `ipRequest`.
    #[serde(rename = "ipRequest", default, skip_serializing_if = "Vec::is_empty")]
    pub ip_request: Vec<String>,
    /// `macRequest`.
    #[serde(
        rename = "macRequest",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub mac_request: String,
}

/// The daemon's successful reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CniResponse {
    /// ADD's result, in the config's `cniVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

mod b64 {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

impl CniRequest {
    /// Decodes a request body.
    pub fn from_slice(body: &[u8]) -> Result<CniRequest, Error> {
        serde_json::from_slice(body).map_err(|e| Error::DaemonProtocol {
            op: "decode CNI request",
            reason: e.to_string(),
        })
    }

    /// The request as JSON.
    pub fn to_vec(&self) -> Vec<u8> {
        // Strings and bytes only: serialization cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// One environment variable ("" when absent).
    pub fn var(&self, key: &str) -> &str {
        self.env.get(key).map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_shape() {
        let mut r = CniRequest::default();
        r.env.insert("CNI_COMMAND".into(), "ADD".into());
        r.config = b"{}".to_vec();
        let v: Value = serde_json::from_slice(&r.to_vec()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"env": {"CNI_COMMAND": "ADD"}, "config": "e30="})
        );
        assert_eq!(CniRequest::from_slice(&r.to_vec()).unwrap(), r);
        assert!(CniRequest::from_slice(br#"{"env":{},"config":"!!"}"#).is_err());
    }
}
