//! The daemon's Prometheus metrics (text exposition format 0.0.4, written
//! by [`cni_files::metrics`]):
//!
//! - `multus_server_request_total{handler,code,method}`: as the reference
//!   exposes it (multus-cni `pkg/server/server.go`: `handler` the path,
//!   `/cni`, `/delegate`, `/healthz`, or `NotFound`; `method` lower case).
//!   Ours also counts `/readyz`, and requests whose head could not be read
//!   as `handler="invalid"`, `method="unknown"` (Go's server answers those
//!   before any handler, uncounted).
//! - `multus_server_cni_requests_total{command,code}`: CNI requests by
//!   command and result (`code`: the CNI error code, `0` for success).
//! - `multus_server_cni_request_duration_seconds{command}`: their latency.
//! - `multus_server_requests_in_flight`: CNI requests being served.
//! - `multus_delegate_calls_total{plugin_type,command,code}`: delegate
//!   calls (ADD, DEL, CHECK, STATUS, GC of a delegate network) by its
//!   plugin type and result.
//! - `multus_api_requests_total{operation,code}`: Kubernetes API server
//!   requests by operation and result (`code`: the HTTP status, `200` for
//!   success, `unreachable` when no answer came).
//!
//! The last four have no counterpart in the reference.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cni_files::metrics::{Exposition, Histogram, Kind, DURATION_BUCKETS};
use cni_types::{CniResult, GcAttachment};
use serde_json::Value;

use crate::delegate::Delegate;
use crate::flow::DelegateExec;
use crate::k8s::{resource, KubeClient, NetworkAttachmentDefinition, Pod};
use crate::runtime::DelegateRuntime;
use crate::Error;

/// Histogram bucket bounds in seconds (a CNI ADD takes from a few ms to
/// the readiness wait's tens of seconds).
pub const BUCKETS: &[f64] = DURATION_BUCKETS;

#[derive(Default, Debug)]
struct Inner {
    /// (handler, method, HTTP status).
    requests: BTreeMap<(String, String, u16), u64>,
    /// (command, CNI code).
    cni: BTreeMap<(String, u32), u64>,
    latency: BTreeMap<String, Histogram>,
    /// (plugin type, command, CNI code).
    delegates: BTreeMap<(String, &'static str, u32), u64>,
    /// (operation, code).
    api: BTreeMap<(&'static str, String), u64>,
}

/// The daemon's counters and histograms, shared by its threads.
#[derive(Default, Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
    in_flight: AtomicI64,
}

/// A CNI request being served: counted in
/// `multus_server_requests_in_flight` until dropped.
#[derive(Debug)]
pub struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The CNI code of a result: 0, or the error's.
fn code_of<T>(r: &Result<T, Error>) -> u32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.code().as_u32(),
    }
}

impl Metrics {
    /// Counts one HTTP request of `handler` (its path) with `method`,
    /// answered with `code`.
    pub fn count_request(&self, handler: &str, method: &str, code: u16) {
        if let Ok(mut m) = self.inner.lock() {
            *m.requests
                .entry((handler.to_string(), method.to_ascii_lowercase(), code))
                .or_default() += 1;
        }
    }

    /// Counts one CNI `command` that ended with CNI `code` (0: success)
    /// after `took`.
    pub fn observe(&self, command: &str, code: u32, took: Duration) {
        if let Ok(mut m) = self.inner.lock() {
            *m.cni.entry((command.to_string(), code)).or_default() += 1;
            m.latency
                .entry(command.to_string())
                .or_insert_with(|| Histogram::new(BUCKETS))
                .observe(took.as_secs_f64());
        }
    }

    /// A CNI request starts; it ends when the guard is dropped.
    pub fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self)
    }

    /// Counts one delegate call.
    fn count_delegate<T>(&self, d: &Delegate, command: &'static str, r: &Result<T, Error>) {
        if let Ok(mut m) = self.inner.lock() {
            let key = (d.plugin_type().to_string(), command, code_of(r));
            *m.delegates.entry(key).or_default() += 1;
        }
    }

    /// Counts one API server request.
    fn count_api<T>(&self, operation: &'static str, r: &Result<T, Error>) {
        let code = match r {
            Ok(_) => "200".to_string(),
            Err(Error::ApiNotFound { .. }) => "404".to_string(),
            Err(Error::ApiStatus { status, .. }) => status.to_string(),
            Err(Error::ApiUnreachable { .. }) => "unreachable".to_string(),
            Err(_) => "error".to_string(),
        };
        if let Ok(mut m) = self.inner.lock() {
            *m.api.entry((operation, code)).or_default() += 1;
        }
    }

    /// The `multus_server_request_total` value for `handler` and `code`,
    /// every method (tests).
    pub fn request_count(&self, handler: &str, code: u16) -> u64 {
        self.inner.lock().map_or(0, |m| {
            m.requests
                .iter()
                .filter(|((h, _, c), _)| h == handler && *c == code)
                .map(|(_, n)| n)
                .sum()
        })
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut e = Exposition::new();
        let Ok(m) = self.inner.lock() else {
            return String::new();
        };
        e.family(
            "multus_server_request_total",
            Kind::Counter,
            "Counter of HTTP requests",
        );
        for ((handler, method, code), n) in &m.requests {
            let code = code.to_string();
            e.sample(
                "multus_server_request_total",
                &[("handler", handler), ("code", &code), ("method", method)],
                *n as f64,
            );
        }
        e.family(
            "multus_server_cni_requests_total",
            Kind::Counter,
            "CNI requests served (/cni and /delegate), by command and CNI result code (0: success).",
        );
        for ((command, code), n) in &m.cni {
            let code = code.to_string();
            e.sample(
                "multus_server_cni_requests_total",
                &[("command", command), ("code", &code)],
                *n as f64,
            );
        }
        e.family(
            "multus_server_cni_request_duration_seconds",
            Kind::Histogram,
            "Time to serve a CNI request, by command.",
        );
        for (command, h) in &m.latency {
            e.histogram(
                "multus_server_cni_request_duration_seconds",
                &[("command", command)],
                h,
            );
        }
        e.family(
            "multus_server_requests_in_flight",
            Kind::Gauge,
            "CNI requests being served now.",
        )
        .sample(
            "multus_server_requests_in_flight",
            &[],
            self.in_flight.load(Ordering::SeqCst) as f64,
        );
        e.family(
            "multus_delegate_calls_total",
            Kind::Counter,
            "Delegate plugin calls, by the delegate's plugin type, command and CNI result code (0: success).",
        );
        for ((plugin_type, command, code), n) in &m.delegates {
            let code = code.to_string();
            e.sample(
                "multus_delegate_calls_total",
                &[
                    ("plugin_type", plugin_type),
                    ("command", command),
                    ("code", &code),
                ],
                *n as f64,
            );
        }
        e.family(
            "multus_api_requests_total",
            Kind::Counter,
            "Kubernetes API server requests, by operation and result (HTTP status; unreachable: no answer in time).",
        );
        for ((operation, code), n) in &m.api {
            e.sample(
                "multus_api_requests_total",
                &[("operation", operation), ("code", code)],
                *n as f64,
            );
        }
        drop(m);
        e.finish()
    }
}

/// A [`DelegateExec`] whose calls are counted in
/// `multus_delegate_calls_total`.
pub struct MeteredDelegates<'a> {
    /// What runs the delegates.
    pub inner: &'a dyn DelegateExec,
    /// Where they are counted.
    pub metrics: &'a Metrics,
}

impl DelegateExec for MeteredDelegates<'_> {
    fn add(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<CniResult, Error> {
        let r = self.inner.add(d, rt);
        self.metrics.count_delegate(d, "ADD", &r);
        r
    }

    fn del(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<(), Error> {
        let r = self.inner.del(d, rt);
        self.metrics.count_delegate(d, "DEL", &r);
        r
    }

    fn check(&self, d: &Delegate, rt: &DelegateRuntime) -> Result<(), Error> {
        let r = self.inner.check(d, rt);
        self.metrics.count_delegate(d, "CHECK", &r);
        r
    }

    fn status(&self, d: &Delegate) -> Result<(), Error> {
        let r = self.inner.status(d);
        self.metrics.count_delegate(d, "STATUS", &r);
        r
    }

    fn gc(&self, d: &Delegate, valid: &[GcAttachment]) -> Result<(), Error> {
        let r = self.inner.gc(d, valid);
        self.metrics.count_delegate(d, "GC", &r);
        r
    }

    fn set_default_routes(
        &self,
        d: &Delegate,
        rt: &DelegateRuntime,
        remove_v4: bool,
        remove_v6: bool,
        gateways: &[std::net::IpAddr],
    ) -> Result<(), Error> {
        self.inner
            .set_default_routes(d, rt, remove_v4, remove_v6, gateways)
    }
}

/// A [`KubeClient`] whose requests are counted in
/// `multus_api_requests_total` (a watch cache's answers included: they
/// are what the request got).
pub struct MeteredKube {
    inner: Arc<dyn KubeClient + Send + Sync>,
    metrics: Arc<Metrics>,
}

impl MeteredKube {
    /// `inner`, counted in `metrics`.
    pub fn new(inner: Arc<dyn KubeClient + Send + Sync>, metrics: Arc<Metrics>) -> MeteredKube {
        MeteredKube { inner, metrics }
    }

    fn timed<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let r = f();
        self.metrics.count_api(op, &r);
        r
    }
}

impl KubeClient for MeteredKube {
    fn get_pod(&self, namespace: &str, name: &str) -> Result<Pod, Error> {
        self.timed("get_pod", || self.inner.get_pod(namespace, name))
    }

    fn get_network_attachment_definition(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, Error> {
        self.timed("get_network_attachment_definition", || {
            self.inner
                .get_network_attachment_definition(namespace, name)
        })
    }

    fn patch_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), Error> {
        self.timed("patch_pod_annotations", || {
            self.inner
                .patch_pod_annotations(namespace, name, annotations)
        })
    }

    fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<resource::ResourceClaim, Error> {
        self.timed("get_resource_claim", || {
            self.inner.get_resource_claim(namespace, name)
        })
    }

    fn list_resource_slice_devices(
        &self,
        node_name: &str,
        driver: &str,
    ) -> Result<Vec<resource::SliceDevice>, Error> {
        self.timed("list_resource_slice_devices", || {
            self.inner.list_resource_slice_devices(node_name, driver)
        })
    }

    fn create_event(&self, namespace: &str, event: &Value, timeout: Duration) -> Result<(), Error> {
        self.timed("create_event", || {
            self.inner.create_event(namespace, event, timeout)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition() {
        let m = Metrics::default();
        m.count_request("/cni", "POST", 200);
        m.count_request("/cni", "POST", 200);
        m.count_request("/cni", "POST", 400);
        m.observe("ADD", 0, Duration::from_millis(30));
        m.observe("DEL", 7, Duration::from_millis(1));
        let guard = m.in_flight();
        let t = m.render();
        drop(guard);
        for want in [
            "multus_server_request_total{handler=\"/cni\",code=\"200\",method=\"post\"} 2\n",
            "multus_server_request_total{handler=\"/cni\",code=\"400\",method=\"post\"} 1\n",
            "multus_server_cni_request_duration_seconds_bucket{command=\"ADD\",le=\"0.025\"} 0\n",
            "multus_server_cni_request_duration_seconds_bucket{command=\"ADD\",le=\"0.05\"} 1\n",
            "multus_server_cni_request_duration_seconds_count{command=\"ADD\"} 1\n",
            "multus_server_cni_requests_total{command=\"DEL\",code=\"7\"} 1\n",
            "multus_server_requests_in_flight 1\n",
        ] {
            assert!(t.contains(want), "{want:?} not in\n{t}");
        }
        assert!(m.render().contains("multus_server_requests_in_flight 0\n"));
        assert_eq!(m.request_count("/cni", 200), 2);
    }
}
