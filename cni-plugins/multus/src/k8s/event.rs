//! Kubernetes events about a pod, as client-go's `record.EventRecorder`
//! builds them for multus (`EventSource{Component: "multus"}`): core/v1
//! Event objects, created with `POST /api/v1/namespaces/{ns}/events`.

use std::time::SystemTime;

use serde_json::{json, Value};

use super::Pod;

/// The event source component Go multus's recorder names
/// (`pkg/k8sclient/kubeconfig.go`).
pub const SOURCE_COMPONENT: &str = "multus";

/// An event's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal` (`v1.EventTypeNormal`).
    Normal,
    /// `Warning` (`v1.EventTypeWarning`).
    Warning,
}

impl EventType {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event about a pod: what `Eventf(pod, type, reason, format, ...)`
/// receives, the message already formatted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `type`.
    pub event_type: EventType,
    /// `reason` (`AddedInterface`, `NoNetworkFound`).
    pub reason: String,
    /// `message`.
    pub message: String,
}

/// The core/v1 Event client-go's recorder posts for `event` about `pod` at
/// `now` (`recorderImpl.makeEvent`): named `<pod>.<unix nanoseconds in
/// hex>` in the pod's namespace (`default` when empty), `involvedObject`
/// the pod's reference (kind, apiVersion, namespace, name, uid,
/// resourceVersion), count 1, first and last timestamps `now`, source and
/// reporting controller `multus`.
pub fn event_object(pod: &Pod, event: &Event, now: SystemTime) -> Value {
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let namespace = if pod.namespace.is_empty() {
        "default"
    } else {
        pod.namespace.as_str()
    };
    let mut involved = json!({
        "kind": "Pod",
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "apiVersion": "v1",
    });
    if !pod.resource_version.is_empty() {
        involved["resourceVersion"] = Value::String(pod.resource_version.clone());
    }
    let t = crate::rotate::rfc3339_utc(now);
    json!({
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": format!("{}.{nanos:x}", pod.name),
            "namespace": namespace,
        },
        "involvedObject": involved,
        "reason": event.reason,
        "message": event.message,
        "source": {"component": SOURCE_COMPONENT},
        "firstTimestamp": t,
        "lastTimestamp": t,
        "count": 1,
        "type": event.event_type.as_str(),
        "eventTime": null,
        "reportingComponent": SOURCE_COMPONENT,
        "reportingInstance": "",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn shape_as_client_go() {
        let pod = Pod {
            name: "web".into(),
            namespace: "ns1".into(),
            uid: "uid-1".into(),
            resource_version: "42".into(),
            ..Default::default()
        };
        let ev = Event {
            event_type: EventType::Normal,
            reason: "AddedInterface".into(),
            message: "Add eth0 [10.1.0.2/24] from kube-system/cluster".into(),
        };
        let now = SystemTime::UNIX_EPOCH + Duration::new(1_764_515_045, 5);
        let v = event_object(&pod, &ev, now);
        assert_eq!(v["metadata"]["name"], "web.187cd115aa0eb205");
        assert_eq!(v["metadata"]["namespace"], "ns1");
        assert_eq!(
            v["involvedObject"],
            json!({"kind": "Pod", "namespace": "ns1", "name": "web", "uid": "uid-1",
                   "apiVersion": "v1", "resourceVersion": "42"})
        );
        assert_eq!(v["firstTimestamp"], "2025-11-30T15:04:05Z");
        assert_eq!(v["source"], json!({"component": "multus"}));
        assert_eq!(
            (v["type"].as_str(), v["count"].as_u64()),
            (Some("Normal"), Some(1))
        );
        let bare = Pod::default();
        assert_eq!(
            event_object(&bare, &ev, now)["metadata"]["namespace"],
            "default"
        );
    }
}
