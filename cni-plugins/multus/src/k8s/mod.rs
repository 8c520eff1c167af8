//! The Kubernetes API, as multus needs it: a small client trait, the two
//! object kinds it reads, client configuration (kubeconfig, in-cluster) and
//! a blocking HTTPS client.

pub mod event;
mod http;
mod kubeconfig;
pub mod resource;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

pub use http::HttpKubeClient;
pub use kubeconfig::{ClientConfig, IN_CLUSTER_DIR};

use crate::Error;

/// The annotation kubelet sets on static (file-defined) pods.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The slice of a Pod multus reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` (an event's `involvedObject` names it).
    pub resource_version: String,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `spec.nodeName` (DRA: the node whose ResourceSlices are read).
    pub node_name: String,
    /// `status.resourceClaimStatuses` (DRA).
    pub resource_claims: Vec<resource::PodResourceClaimStatus>,
    /// `status.extendedResourceClaimStatus` (DRA for extended resources).
    pub extended_resource_claim: Option<resource::ExtendedResourceClaimStatus>,
}

impl Pod {
    /// True for static pods, whose API UID (the mirror pod's) differs from
    /// the runtime's (multus-cni `IsStaticPod`).
    pub fn is_static(&self) -> bool {
        self.annotations
            .get(CONFIG_SOURCE_ANNOTATION)
            .is_some_and(|s| s != "api")
    }
}

/// The slice of a NetworkAttachmentDefinition multus reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkAttachmentDefinition {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `spec.config` ("" for an empty spec: the config is then the file in
    /// `confDir` whose `name` is the NAD's).
    pub config: String,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct Object {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: Option<Map<String, Value>>,
    #[serde(default)]
    status: Option<Map<String, Value>>,
}

fn decode_object(what: &str, body: &[u8]) -> Result<Object, Error> {
    serde_json::from_slice(body).map_err(|e| Error::Decode {
        what: what.into(),
        reason: e.to_string(),
    })
}

impl Pod {
    /// Decodes a Pod from API JSON.
    pub fn from_json(body: &[u8]) -> Result<Pod, Error> {
        let o = decode_object("pod", body)?;
        let status = |key: &str| o.status.as_ref().and_then(|s| s.get(key));
        let bad = |e: serde_json::Error| Error::Decode {
            what: "pod status".into(),
            reason: e.to_string(),
        };
        Ok(Pod {
            name: o.metadata.name,
            namespace: o.metadata.namespace,
            uid: o.metadata.uid,
            resource_version: o.metadata.resource_version,
            annotations: o.metadata.annotations.unwrap_or_default(),
            node_name: o
                .spec
                .as_ref()
                .and_then(|s| s.get("nodeName"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            resource_claims: status("resourceClaimStatuses")
                .filter(|v| !v.is_null())
                .map(Vec::deserialize)
                .transpose()
                .map_err(bad)?
                .unwrap_or_default(),
            extended_resource_claim: status("extendedResourceClaimStatus")
                .filter(|v| !v.is_null())
                .map(resource::ExtendedResourceClaimStatus::deserialize)
                .transpose()
                .map_err(bad)?,
        })
    }
}

impl NetworkAttachmentDefinition {
    /// Decodes a NAD from API JSON.
    pub fn from_json(body: &[u8]) -> Result<NetworkAttachmentDefinition, Error> {
        let o = decode_object("network-attachment-definition", body)?;
        let config = match o.spec.as_ref().and_then(|s| s.get("config")) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::Decode {
                    what: "network-attachment-definition".into(),
                    reason: format!("spec.config must be a string, got {other}"),
                })
            }
        };
        Ok(NetworkAttachmentDefinition {
            name: o.metadata.name,
            namespace: o.metadata.namespace,
            annotations: o.metadata.annotations.unwrap_or_default(),
            config,
        })
    }
}

/// What multus asks of the API server. Every call is bounded by the
/// client's timeout; "not found" is [`Error::ApiNotFound`].
pub trait KubeClient {
    /// `GET /api/v1/namespaces/{ns}/pods/{name}`.
    fn get_pod(&self, namespace: &str, name: &str) -> Result<Pod, Error>;
    /// `GET /apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}`.
    fn get_network_attachment_definition(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, Error>;
    /// Sets pod annotations with a JSON merge patch (a `None` value removes
    /// the key).
    fn patch_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), Error>;
    /// `GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}`
    /// (DRA). The default answers that this client cannot.
    fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<resource::ResourceClaim, Error> {
        Err(Error::ApiStatus {
            op: format!("get resourceclaim {namespace}/{name}"),
            status: 501,
            message: "this Kubernetes client does not read ResourceClaims".into(),
        })
    }
    /// The devices of the ResourceSlices of `driver` on `node_name` (all
    /// nodes when empty): `GET /apis/resource.k8s.io/v1/resourceslices`
    /// with field selectors (DRA). The default answers that this client
    /// cannot.
    fn list_resource_slice_devices(
        &self,
        node_name: &str,
        driver: &str,
    ) -> Result<Vec<resource::SliceDevice>, Error> {
        Err(Error::ApiStatus {
            op: format!("list resourceslices of {driver} on {node_name}"),
            status: 501,
            message: "this Kubernetes client does not read ResourceSlices".into(),
        })
    }
    /// `POST /api/v1/namespaces/{ns}/events`: creates a core/v1 Event
    /// (see [`event::event_object`]), bounded by `timeout` rather than the
    /// client's API timeout (events are best-effort). The default answers
    /// that this client cannot.
    fn create_event(&self, namespace: &str, event: &Value, timeout: Duration) -> Result<(), Error> {
        let _ = (event, timeout);
        Err(Error::ApiStatus {
            op: format!("create event in {namespace}"),
            status: 501,
            message: "this Kubernetes client does not create Events".into(),
        })
    }
}

/// The merge patch that sets `annotations` on an object.
pub fn annotations_patch(annotations: &BTreeMap<String, Option<String>>) -> Value {
    let ann: Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_ref().map_or(Value::Null, |s| Value::String(s.clone())),
            )
        })
        .collect();
    serde_json::json!({ "metadata": { "annotations": ann } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_objects() {
        let p = Pod::from_json(
            br#"{"metadata":{"name":"p","namespace":"ns","uid":"u","annotations":{"a":"b","kubernetes.io/config.source":"file"}}}"#,
        )
        .unwrap();
        assert_eq!((p.name.as_str(), p.uid.as_str()), ("p", "u"));
        assert!(p.is_static());
        let p = Pod::from_json(br#"{"metadata":{"name":"p"}}"#).unwrap();
        assert!(p.annotations.is_empty() && !p.is_static());
        let n = NetworkAttachmentDefinition::from_json(
            br#"{"metadata":{"name":"n","namespace":"ns"},"spec":{"config":"{\"type\":\"bridge\"}"}}"#,
        )
        .unwrap();
        assert_eq!(n.config, r#"{"type":"bridge"}"#);
        let n = NetworkAttachmentDefinition::from_json(br#"{"metadata":{"name":"n"},"spec":{}}"#)
            .unwrap();
        assert_eq!(n.config, "");
        assert!(NetworkAttachmentDefinition::from_json(br#"{"spec":{"config":1}}"#).is_err());
        assert!(Pod::from_json(b"<html>").is_err());
    }

    #[test]
    fn patch_shape() {
        let mut m = BTreeMap::new();
        m.insert("a".to_string(), Some("b".to_string()));
        m.insert("gone".to_string(), None);
        assert_eq!(
            annotations_patch(&m),
            serde_json::json!({"metadata": {"annotations": {"a": "b", "gone": null}}})
        );
    }
}
