//! The daemon's Kubernetes cache: pods and NetworkAttachmentDefinitions
//! listed once and kept current by watches, so a pod start reads memory
//! instead of asking the API server (multus-cni's thick plugin uses
//! informers the same way). A miss falls back to a GET.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use serde_json::Value;

use crate::k8s::{HttpKubeClient, KubeClient, NetworkAttachmentDefinition, Pod};
use crate::Error;

/// How long one watch request lasts before it is renewed.
const WATCH_SECONDS: u64 = 60;
/// Pause before relisting after a failure.
const RETRY: Duration = Duration::from_secs(1);

type Key = (String, String);

/// A [`KubeClient`] answering reads from watched caches.
pub struct WatchCache {
    http: RwLock<Arc<HttpKubeClient>>,
    pods: RwLock<HashMap<Key, Pod>>,
    nads: RwLock<HashMap<Key, NetworkAttachmentDefinition>>,
    pods_synced: AtomicBool,
    nads_synced: AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache")
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Pods,
    Nads,
}

impl Kind {
    fn path(self) -> &'static str {
        match self {
            Kind::Pods => "/api/v1/pods",
            Kind::Nads => "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Pods => "pods",
            Kind::Nads => "network-attachment-definitions",
        }
    }
}

fn key_of(v: &Value) -> Key {
    let m = &v["metadata"];
    (
        m["namespace"].as_str().unwrap_or("").to_string(),
        m["name"].as_str().unwrap_or("").to_string(),
    )
}

impl WatchCache {
    /// Starts the list+watch threads. They end when the cache is dropped
    /// (at the latest when their current watch request ends).
    pub fn start(http: HttpKubeClient) -> Arc<WatchCache> {
        let cache = Arc::new(WatchCache {
            http: RwLock::new(Arc::new(http)),
            pods: RwLock::default(),
            nads: RwLock::default(),
            pods_synced: AtomicBool::new(false),
            nads_synced: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        });
        for kind in [Kind::Pods, Kind::Nads] {
            let weak = Arc::downgrade(&cache);
            std::thread::spawn(move || watch_loop(&weak, kind));
        }
        cache
    }

    /// Replaces the API client (a rotated certificate); watches switch
    /// when their current request ends.
    pub fn set_client(&self, http: HttpKubeClient) {
        if let Ok(mut h) = self.http.write() {
            *h = Arc::new(http);
        }
    }

    fn client(&self) -> Arc<HttpKubeClient> {
        match self.http.read() {
            Ok(h) => h.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// True once both lists have been loaded.
    pub fn is_synced(&self) -> bool {
        self.pods_synced.load(Ordering::SeqCst) && self.nads_synced.load(Ordering::SeqCst)
    }

    /// (cache hits, misses that went to the API).
    pub fn stats(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::SeqCst),
            self.misses.load(Ordering::SeqCst),
        )
    }

    /// The cached pod, if any (no API call).
    pub fn cached_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.pods
            .read()
            .ok()?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn apply(&self, kind: Kind, event: &str, obj: &Value) {
        let key = key_of(obj);
        let bytes = serde_json::to_vec(obj).unwrap_or_default();
        match kind {
            Kind::Pods => {
                let Ok(mut m) = self.pods.write() else { return };
                match (event, Pod::from_json(&bytes)) {
                    ("DELETED", _) => {
                        m.remove(&key);
                    }
                    (_, Ok(p)) => {
                        m.insert(key, p);
                    }
                    (_, Err(e)) => tracing::warn!("watch pods: {e}"),
                }
            }
            Kind::Nads => {
                let Ok(mut m) = self.nads.write() else { return };
                match (event, NetworkAttachmentDefinition::from_json(&bytes)) {
                    ("DELETED", _) => {
                        m.remove(&key);
                    }
                    (_, Ok(n)) => {
                        m.insert(key, n);
                    }
                    (_, Err(e)) => tracing::warn!("watch network-attachment-definitions: {e}"),
                }
            }
        }
    }

    fn replace(&self, kind: Kind, items: &[Value]) {
        match kind {
            Kind::Pods => {
                if let Ok(mut m) = self.pods.write() {
                    m.clear();
                }
                self.pods_synced.store(true, Ordering::SeqCst);
            }
            Kind::Nads => {
                if let Ok(mut m) = self.nads.write() {
                    m.clear();
                }
                self.nads_synced.store(true, Ordering::SeqCst);
            }
        }
        for i in items {
            self.apply(kind, "ADDED", i);
        }
    }
}

/// One list, then watches from its version until an error or a gone
/// version (410) asks for a relist.
fn list_and_watch(cache: &WatchCache, kind: Kind) -> Result<(), Error> {
    let body = cache
        .client()
        .get_path(&format!("list {}", kind.name()), kind.path())?;
    let list: Value = serde_json::from_slice(&body).map_err(|e| Error::Decode {
        what: format!("{} list", kind.name()),
        reason: e.to_string(),
    })?;
    let mut rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    cache.replace(
        kind,
        list["items"].as_array().map_or(&[][..], Vec::as_slice),
    );
    loop {
        let path = format!(
            "{}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}",
            kind.path()
        );
        let stream = cache.client().stream(
            &format!("watch {}", kind.name()),
            &path,
            Duration::from_secs(WATCH_SECONDS + 10),
        )?;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let Ok(ev) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let t = ev["type"].as_str().unwrap_or("");
            if t == "ERROR" {
                // Usually 410 Gone: the version is too old. Relist.
                return Ok(());
            }
            if let Some(v) = ev["object"]["metadata"]["resourceVersion"].as_str() {
                rv = v.to_string();
            }
            if t != "BOOKMARK" {
                cache.apply(kind, t, &ev["object"]);
            }
        }
    }
}

fn watch_loop(weak: &Weak<WatchCache>, kind: Kind) {
    while let Some(cache) = weak.upgrade() {
        if let Err(e) = list_and_watch(&cache, kind) {
            tracing::warn!("{} cache: {e}; relisting", kind.name());
            drop(cache);
            std::thread::sleep(RETRY);
        }
    }
}

impl KubeClient for WatchCache {
    fn create_event(&self, namespace: &str, event: &Value, timeout: Duration) -> Result<(), Error> {
        self.client().create_event(namespace, event, timeout)
    }

    fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<crate::k8s::resource::ResourceClaim, Error> {
        self.client().get_resource_claim(namespace, name)
    }

    fn list_resource_slice_devices(
        &self,
        node_name: &str,
        driver: &str,
    ) -> Result<Vec<crate::k8s::resource::SliceDevice>, Error> {
        self.client().list_resource_slice_devices(node_name, driver)
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Result<Pod, Error> {
        if let Some(p) = self.cached_pod(namespace, name) {
            self.hits.fetch_add(1, Ordering::SeqCst);
            return Ok(p);
        }
        self.misses.fetch_add(1, Ordering::SeqCst);
        self.client().get_pod(namespace, name)
    }

    fn get_network_attachment_definition(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, Error> {
        let cached = self
            .nads
            .read()
            .ok()
            .and_then(|m| m.get(&(namespace.to_string(), name.to_string())).cloned());
        if let Some(n) = cached {
            self.hits.fetch_add(1, Ordering::SeqCst);
            return Ok(n);
        }
        self.misses.fetch_add(1, Ordering::SeqCst);
        self.client()
            .get_network_attachment_definition(namespace, name)
    }

    fn patch_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), Error> {
        self.client()
            .patch_pod_annotations(namespace, name, annotations)
    }
}
