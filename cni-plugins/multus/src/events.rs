//! The Kubernetes events an ADD emits about its pod, as Go multus's
//! `kubeClient.Eventf` calls (`pkg/multus/multus.go`,
//! `pkg/k8sclient/k8sclient.go`):
//!
//! * `Normal` `AddedInterface` `Add <ifname> [<ip/prefix> ...] from
//!   <network>` after each delegate ADD whose result has interfaces or IPs
//!   (`Add <ifname> [...]` for a delegate without a name);
//! * `Warning` `NoNetworkFound` `cannot find a
//!   network-attachment-definition (<name>) in namespace (<ns>): <error>`
//!   whenever reading a NAD fails while the pod is known (also for a
//!   cluster or default network that then resolves to a file, as Go).
//!
//! [`EventRecorder`] wraps the [`KubeClient`] an ADD uses, so the NAD
//! lookups deep in [`crate::lookup`] are seen where Go sees them.
//! Events are kept and posted by [`EventRecorder::post`] once the ADD's
//! outcome is decided, within a short budget; a failure to post is logged
//! and never fails the ADD (client-go's recorder is asynchronous and
//! best-effort).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use cni_types::CniResult;
use serde_json::Value;

use super::k8s::event::{event_object, Event, EventType};
use super::k8s::resource::{ResourceClaim, SliceDevice};
use super::k8s::{KubeClient, NetworkAttachmentDefinition, Pod};
use crate::Error;

/// How long posting all of one ADD's events may take, in total.
pub const POST_BUDGET: Duration = Duration::from_secs(1);

/// A [`KubeClient`] that forwards every call and records the events Go
/// multus emits (see the module docs).
pub struct EventRecorder<'a> {
    client: &'a dyn KubeClient,
    pod: RefCell<Option<Pod>>,
    pending: RefCell<Vec<Event>>,
}

impl std::fmt::Debug for EventRecorder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("pending", &self.pending.borrow())
            .finish_non_exhaustive()
    }
}

/// `Add <ifname> [<ips>] from <network>`, as Go's
/// `"Add %s %v from %s"` with a `[]string` of `ip.Address.String()`.
pub fn added_interface_message(ifname: &str, result: &CniResult, network: &str) -> String {
    let ips: Vec<String> = result.ips.iter().map(|ip| ip.address.to_string()).collect();
    let mut msg = format!("Add {ifname} [{}]", ips.join(" "));
    if !network.is_empty() {
        msg.push_str(" from ");
        msg.push_str(network);
    }
    msg
}

impl<'a> EventRecorder<'a> {
    /// A recorder over `client`; it records nothing until the pod is known.
    pub fn new(client: &'a dyn KubeClient) -> EventRecorder<'a> {
        EventRecorder {
            client,
            pod: RefCell::new(None),
            pending: RefCell::new(Vec::new()),
        }
    }

    /// The pod the events are about (Go records only with a pod).
    pub fn set_pod(&self, pod: &Pod) {
        *self.pod.borrow_mut() = Some(pod.clone());
    }

    /// Records an event about the pod (nothing without one).
    pub fn record(&self, event_type: EventType, reason: &str, message: String) {
        if self.pod.borrow().is_none() {
            return;
        }
        self.pending.borrow_mut().push(Event {
            event_type,
            reason: reason.into(),
            message,
        });
    }

    /// `AddedInterface` for a delegate's result on `ifname`, when the
    /// result has interfaces or IPs (Go skips empty results).
    pub fn added_interface(&self, ifname: &str, network: &str, result: &CniResult) {
        if result.interfaces.is_empty() && result.ips.is_empty() {
            return;
        }
        self.record(
            EventType::Normal,
            "AddedInterface",
            added_interface_message(ifname, result, network),
        );
    }

    /// The events recorded and not yet posted.
    pub fn pending(&self) -> Vec<Event> {
        self.pending.borrow().clone()
    }

    /// Posts the recorded events in order, all within `budget`; failures
    /// are logged and the rest still tried while the budget lasts. Returns
    /// how many were created.
    pub fn post(&self, budget: Duration) -> usize {
        let Some(pod) = self.pod.borrow().clone() else {
            return 0;
        };
        let events = std::mem::take(&mut *self.pending.borrow_mut());
        let deadline = Instant::now() + budget;
        let mut created = 0;
        for (i, ev) in events.iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    "{} event(s) about pod {}/{} not posted: out of time",
                    events.len() - i,
                    pod.namespace,
                    pod.name
                );
                break;
            }
            let obj = event_object(&pod, ev, SystemTime::now());
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
            match self.client.create_event(ns, &obj, left) {
                Ok(()) => created += 1,
                Err(e) => tracing::warn!(
                    "event {} {:?} about pod {}/{} not posted: {e}",
                    ev.reason,
                    ev.message,
                    pod.namespace,
                    pod.name
                ),
            }
        }
        created
    }
}

/// The error text Go's client prints for a NAD read failure: the API
/// server's `Status` message for "not found".
fn nad_error_text(e: &Error, name: &str) -> String {
    match e {
        Error::ApiNotFound { .. } => {
            format!("network-attachment-definitions.k8s.cni.cncf.io \"{name}\" not found")
        }
        other => other.to_string(),
    }
}

impl KubeClient for EventRecorder<'_> {
    fn get_pod(&self, namespace: &str, name: &str) -> Result<Pod, Error> {
        self.client.get_pod(namespace, name)
    }

    fn get_network_attachment_definition(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, Error> {
        let got = self
            .client
            .get_network_attachment_definition(namespace, name);
        if let Err(e) = &got {
            self.record(
                EventType::Warning,
                "NoNetworkFound",
                format!(
                    "cannot find a network-attachment-definition ({name}) in namespace ({namespace}): {}",
                    nad_error_text(e, name)
                ),
            );
        }
        got
    }

    fn patch_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), Error> {
        self.client
            .patch_pod_annotations(namespace, name, annotations)
    }

    fn get_resource_claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, Error> {
        self.client.get_resource_claim(namespace, name)
    }

    fn list_resource_slice_devices(
        &self,
        node_name: &str,
        driver: &str,
    ) -> Result<Vec<SliceDevice>, Error> {
        self.client.list_resource_slice_devices(node_name, driver)
    }

    fn create_event(&self, namespace: &str, event: &Value, timeout: Duration) -> Result<(), Error> {
        self.client.create_event(namespace, event, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::{Interface, IpConfig};

    /// Answers pods and NADs with "not found"; refuses events, noting the
    /// timeout each post was given.
    #[derive(Default)]
    struct Refusing {
        timeouts: RefCell<Vec<Duration>>,
    }

    impl KubeClient for Refusing {
        fn get_pod(&self, namespace: &str, name: &str) -> Result<Pod, Error> {
            Err(Error::ApiNotFound {
                op: "get pod".into(),
                kind: "pod".into(),
                namespace: namespace.into(),
                name: name.into(),
            })
        }
        fn get_network_attachment_definition(
            &self,
            namespace: &str,
            name: &str,
        ) -> Result<NetworkAttachmentDefinition, Error> {
            Err(Error::ApiNotFound {
                op: "get".into(),
                kind: "network-attachment-definition".into(),
                namespace: namespace.into(),
                name: name.into(),
            })
        }
        fn patch_pod_annotations(
            &self,
            _: &str,
            _: &str,
            _: &BTreeMap<String, Option<String>>,
        ) -> Result<(), Error> {
            Ok(())
        }
        fn create_event(&self, _: &str, _: &Value, timeout: Duration) -> Result<(), Error> {
            self.timeouts.borrow_mut().push(timeout);
            Err(Error::ApiStatus {
                op: "create event".into(),
                status: 500,
                message: "no".into(),
            })
        }
    }

    #[test]
    fn records_only_with_a_pod_and_posts_within_the_budget() {
        let client = Refusing::default();
        let r = EventRecorder::new(&client);
        // No pod yet: a failed NAD read records nothing (Go: pod nil).
        assert!(r.get_network_attachment_definition("ns", "a").is_err());
        assert!(r.pending().is_empty());
        r.set_pod(&Pod {
            name: "p".into(),
            namespace: "ns".into(),
            ..Default::default()
        });
        assert!(r.get_network_attachment_definition("ns", "a").is_err());
        assert!(r.get_network_attachment_definition("ns", "b").is_err());
        assert_eq!(r.pending()[1].event_type, EventType::Warning);
        assert_eq!(
            r.pending()[1].message,
            "cannot find a network-attachment-definition (b) in namespace (ns): \
             network-attachment-definitions.k8s.cni.cncf.io \"b\" not found"
        );
        // Refused: nothing created, each post bounded by what is left.
        assert_eq!(r.post(POST_BUDGET), 0);
        let t = client.timeouts.borrow().clone();
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|d| *d <= POST_BUDGET && !d.is_zero()));
        // Posted events are gone; an exhausted budget posts nothing.
        assert!(r.pending().is_empty());
        r.record(EventType::Normal, "AddedInterface", "x".into());
        assert_eq!(r.post(Duration::ZERO), 0);
        assert_eq!(client.timeouts.borrow().len(), 2);
    }

    #[test]
    fn message_as_go() {
        let mut r = CniResult {
            interfaces: vec![Interface {
                name: "net1".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            added_interface_message("net1", &r, "ns1/a"),
            "Add net1 [] from ns1/a"
        );
        for a in ["10.1.0.2/24", "fd00::2/64"] {
            r.ips.push(IpConfig::new(a.parse().unwrap()));
        }
        assert_eq!(
            added_interface_message("net1", &r, "ns1/a"),
            "Add net1 [10.1.0.2/24 fd00::2/64] from ns1/a"
        );
        assert_eq!(
            added_interface_message("eth0", &r, ""),
            "Add eth0 [10.1.0.2/24 fd00::2/64]"
        );
    }
}
