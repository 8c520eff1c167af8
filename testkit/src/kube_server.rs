//! A small Kubernetes API server for tests (feature `kube-server`).
//!
//! [`KubeApiServer`] is a small Kubernetes API server for tests: a real
//! HTTPS server on `127.0.0.1` with an ephemeral port, a CA and a server
//! certificate generated at start, bearer-token (or client-certificate)
//! authentication, and the real REST paths multus uses:
//!
//! - `GET /api/v1/namespaces/{ns}/pods/{name}`
//! - `PATCH /api/v1/namespaces/{ns}/pods/{name}[/status]` with
//!   `application/merge-patch+json` (RFC 7386 applied to the stored object)
//! - `GET /apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}`
//! - lists across namespaces, `GET /api/v1/pods` and
//!   `GET /apis/k8s.cni.cncf.io/v1/network-attachment-definitions`, and
//!   their watches (`?watch=1&resourceVersion=N`: newline-delimited
//!   `{"type","object"}` events after N, streamed until `timeoutSeconds`
//!   or the server stops)
//! - `resource.k8s.io/v1` (DRA): `GET …/namespaces/{ns}/resourceclaims/{name}`
//!   and `GET /apis/resource.k8s.io/v1/resourceslices` with the
//!   `fieldSelector` `spec.nodeName` / `spec.driver` terms applied (see
//!   [`KubeApiServer::add_resource_claim`], [`KubeApiServer::add_resource_slice`])
//! - `POST /api/v1/namespaces/{ns}/events` (core/v1 Events, validated as
//!   the API server does: namespace, name, involvedObject's namespace),
//!   kept in order for [`KubeApiServer::posted_events`]; refused with a
//!   chosen status after [`KubeApiServer::refuse_events`]
//! - `certificates.k8s.io/v1` CertificateSigningRequests: create, get,
//!   `PUT …/{name}/approval`; an approved request is issued at once,
//!   signed by the test CA (see [`KubeApiServer::approve_csr`] and
//!   [`KubeApiServer::set_csr_auto_approve`])
//!
//! Objects live in memory; the test seeds them. The server writes a
//! kubeconfig for the test and stops when asked (or dropped).
//!
//! ```
//! use cni_testkit::KubeApiServer;
//!
//! let server = KubeApiServer::start()?;
//! server.add_pod("default", "web", "uid-1", &[("k8s.v1.cni.cncf.io/networks", "net-a")]);
//! assert!(server.kubeconfig_path().exists());
//! assert_eq!(server.pod("default", "web").unwrap()["metadata"]["uid"], "uid-1");
//! # Ok::<(), cni_testkit::Error>(())
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Map, Value};

use crate::error::{io_err, Error};

/// How the kubeconfig written by [`KubeApiServer::write_kubeconfig`]
/// authenticates and trusts the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeconfigAuth {
    /// `token:` inline.
    Token,
    /// `tokenFile:` pointing at a file holding the token.
    TokenFile,
    /// `client-certificate-data` / `client-key-data` signed by the test CA.
    ClientCert,
    /// `token:` with a wrong value (the server answers 401).
    WrongToken,
}

/// Where the kubeconfig written by [`KubeApiServer::write_kubeconfig`]
/// takes the CA from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeconfigCa {
    /// `certificate-authority:` a PEM file path.
    File,
    /// `certificate-authority-data:` base64 PEM inline.
    Data,
}

/// One request the server received (for assertions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path, without the query string.
    pub path: String,
    /// `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// Response status code.
    pub status: u16,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<(String, String, String), Value>,
    requests: Vec<RecordedRequest>,
    delay: Duration,
    /// (kind, resourceVersion, event type, object) in order.
    events: Vec<(String, u64, &'static str, Value)>,
    /// core/v1 Event objects created, in order.
    posted_events: Vec<Value>,
    /// The status every event POST answers with, when set.
    refuse_events: Option<u16>,
}

struct Shared {
    state: Mutex<State>,
    token: String,
    resource_version: AtomicU64,
    issuer: Issuer<'static, KeyPair>,
    csr_auto_approve: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking handler thread must not wedge the test: take the data anyway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A Kubernetes API server for tests (see the crate docs).
pub struct KubeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    dir: tempfile::TempDir,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    kubeconfig: PathBuf,
}

const POD_KIND: &str = "pods";
const NAD_KIND: &str = "network-attachment-definitions";
const CLAIM_KIND: &str = "resourceclaims";
const SLICE_KIND: &str = "resourceslices";
const CSR_KIND: &str = "certificatesigningrequests";

/// A bearer token that differs between test servers (a test fixture, not a
/// secret).
fn random_token() -> String {
    use cni_types::random::random_u64;
    format!("test-token-{:016x}{:016x}", random_u64(), random_u64())
}

fn cert_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> Error {
    move |e| Error::Cert {
        what,
        reason: e.to_string(),
    }
}

impl KubeApiServer {
    /// Starts a server with a random bearer token and writes a kubeconfig
    /// (token inline, CA as a file) in the server's own temporary directory.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(None)
    }

    /// Starts a server listening on `127.0.0.1` of the network namespace at
    /// `netns` (a file such as `/run/netns/x`, whose loopback must be up):
    /// for tests whose clients run inside that namespace. The listening
    /// socket is made on a short-lived thread that entered the namespace;
    /// a socket stays in the namespace it was created in.
    pub fn start_in_netns(netns: &Path) -> Result<Self, Error> {
        Self::start_with(Some(netns))
    }

    fn start_with(netns: Option<&Path>) -> Result<Self, Error> {
        // CA, server certificate (127.0.0.1 and localhost), client certificate.
        let ca_key = KeyPair::generate().map_err(cert_err("CA key"))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err("CA"))?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "cni-testkit CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(cert_err("CA"))?;
        let issuer = Issuer::new(ca_params, ca_key);
        let ca_pem = ca_cert.pem();

        let server_key = KeyPair::generate().map_err(cert_err("server key"))?;
        let server_params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .map_err(cert_err("server"))?;
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .map_err(cert_err("server"))?;

        let client_key = KeyPair::generate().map_err(cert_err("client key"))?;
        let mut client_params =
            CertificateParams::new(Vec::<String>::new()).map_err(cert_err("client"))?;
        client_params
            .distinguished_name
            .push(DnType::CommonName, "system:multus");
        let client_cert = client_params
            .signed_by(&client_key, &issuer)
            .map_err(cert_err("client"))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots
            .add(ca_cert.der().clone())
            .map_err(|e| Error::Tls(e.to_string()))?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| Error::Tls(e.to_string()))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> =
            vec![server_cert.der().clone(), ca_cert.der().clone()];
        let tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| Error::Tls(e.to_string()))?;
        let tls = Arc::new(tls);

        let listener = match netns {
            None => TcpListener::bind("127.0.0.1:0").map_err(io_err("bind 127.0.0.1:0"))?,
            Some(ns) => bind_in_netns(ns)?,
        };
        let addr = listener.local_addr().map_err(io_err("local_addr"))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            token: random_token(),
            resource_version: AtomicU64::new(1),
            issuer,
            csr_auto_approve: AtomicBool::new(false),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("kube-api-test".into())
                .spawn(move || accept_loop(listener, tls, shared, stop))
                .map_err(io_err("spawn the accept thread"))?
        };
        let dir = tempfile::Builder::new()
            .prefix("kube-api-test")
            .tempdir()
            .map_err(io_err("create a temporary directory"))?;
        let mut server = KubeApiServer {
            addr,
            shared,
            stop,
            thread: Some(thread),
            dir,
            ca_pem,
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
            kubeconfig: PathBuf::new(),
        };
        let path = server.dir.path().join("kubeconfig");
        server.write_kubeconfig(&path, KubeconfigAuth::Token, KubeconfigCa::File)?;
        server.kubeconfig = path;
        Ok(server)
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bearer token the server accepts.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The CA certificate (PEM) that signed the server and client certificates.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client certificate (PEM) the server accepts instead of a token.
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client certificate's key (PKCS#8 PEM).
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// The server's own temporary directory (kubeconfig, CA file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kubeconfig written at start (token inline, CA file).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes a kubeconfig at `path` with the given authentication and CA
    /// style; auxiliary files (CA, token, client key) go next to it.
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        auth: KubeconfigAuth,
        ca: KubeconfigCa,
    ) -> Result<(), Error> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let stem = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "kubeconfig".into());
        let write = |name: String, data: &str| -> Result<PathBuf, Error> {
            let p = dir.join(name);
            std::fs::write(&p, data).map_err(io_err(format!("write {}", p.display())))?;
            Ok(p)
        };
        let ca_line = match ca {
            KubeconfigCa::File => {
                let p = write(format!("{stem}.ca.crt"), &self.ca_pem)?;
                format!("certificate-authority: {}", p.display())
            }
            KubeconfigCa::Data => format!("certificate-authority-data: {}", b64(&self.ca_pem)),
        };
        let user = match auth {
            KubeconfigAuth::Token => format!("token: {}", self.shared.token),
            KubeconfigAuth::WrongToken => "token: not-the-token".to_string(),
            KubeconfigAuth::TokenFile => {
                let p = write(format!("{stem}.token"), &format!("{}\n", self.shared.token))?;
                format!("tokenFile: {}", p.display())
            }
            KubeconfigAuth::ClientCert => format!(
                "client-certificate-data: {}\n    client-key-data: {}",
                b64(&self.client_cert_pem),
                b64(&self.client_key_pem)
            ),
        };
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    {ca_line}\ncontexts:\n- name: other\n  context:\n    cluster: missing\n    user: missing\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\nusers:\n- name: test\n  user:\n    {user}\n",
            url = self.url()
        );
        std::fs::write(path, yaml).map_err(io_err(format!("write {}", path.display())))
    }

    /// Makes every response wait `delay` first (to test client timeouts).
    pub fn set_response_delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }

    /// Stores a pod with a name, namespace, UID and annotations.
    pub fn add_pod(&self, namespace: &str, name: &str, uid: &str, annotations: &[(&str, &str)]) {
        let ann: Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        self.put(
            POD_KIND,
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": ann},
                "spec": {"containers": [{"name": "c", "image": "pause"}]},
            }),
        );
    }

    /// Stores a NetworkAttachmentDefinition whose `spec.config` is `config`
    /// (an empty string makes an empty spec).
    pub fn add_nad(&self, namespace: &str, name: &str, config: &str) {
        self.add_nad_with_annotations(namespace, name, config, &[]);
    }

    /// Stores a NetworkAttachmentDefinition with annotations.
    pub fn add_nad_with_annotations(
        &self,
        namespace: &str,
        name: &str,
        config: &str,
        annotations: &[(&str, &str)],
    ) {
        let ann: Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        let spec = if config.is_empty() {
            json!({})
        } else {
            json!({ "config": config })
        };
        self.put(
            NAD_KIND,
            json!({
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": namespace, "annotations": ann},
                "spec": spec,
            }),
        );
    }

    fn put(&self, kind: &str, mut obj: Value) {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut state = self.shared.lock();
        // Versions are handed out under the lock: events are in version
        // order, so a list's version is exact.
        let rv = self.shared.resource_version.fetch_add(1, Ordering::SeqCst);
        obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let event = if state
            .objects
            .contains_key(&(kind.to_string(), ns.clone(), name.clone()))
        {
            "MODIFIED"
        } else {
            "ADDED"
        };
        state
            .events
            .push((kind.to_string(), rv, event, obj.clone()));
        state.objects.insert((kind.to_string(), ns, name), obj);
    }

    /// Merges `patch` (RFC 7386) into a stored pod, e.g.
    /// `{"spec": {"nodeName": "n1"}, "status": {"resourceClaimStatuses": [...]}}`.
    pub fn patch_pod(&self, namespace: &str, name: &str, patch: &Value) {
        if let Some(mut obj) = self.get(POD_KIND, namespace, name) {
            merge_patch(&mut obj, patch);
            self.put(POD_KIND, obj);
        }
    }

    /// Stores a `resource.k8s.io/v1` ResourceClaim whose
    /// `status.allocation.devices.results` are `results` (`None`: not
    /// allocated).
    pub fn add_resource_claim(&self, namespace: &str, name: &str, results: Option<Value>) {
        let status = match results {
            Some(r) => json!({"allocation": {"devices": {"results": r}}}),
            None => json!({}),
        };
        self.put(
            CLAIM_KIND,
            json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"devices": {"requests": []}},
                "status": status,
            }),
        );
    }

    /// Stores a `resource.k8s.io/v1` ResourceSlice of `driver` on `node`
    /// for `pool`, with `devices` (`[{"name", "attributes": {...}}]`).
    pub fn add_resource_slice(
        &self,
        name: &str,
        node: &str,
        driver: &str,
        pool: &str,
        devices: Value,
    ) {
        self.put(
            SLICE_KIND,
            json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {"driver": driver, "nodeName": node,
                         "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                         "devices": devices},
            }),
        );
    }

    /// The stored pod object.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(POD_KIND, namespace, name)
    }

    /// One annotation of a stored pod.
    pub fn pod_annotation(&self, namespace: &str, name: &str, key: &str) -> Option<String> {
        self.pod(namespace, name)?["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    }

    /// Removes a stored pod.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        let mut state = self.shared.lock();
        let rv = self.shared.resource_version.fetch_add(1, Ordering::SeqCst);
        let removed = state.objects.remove(&(
            POD_KIND.to_string(),
            namespace.to_string(),
            name.to_string(),
        ));
        if let Some(mut obj) = removed {
            obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
            state
                .events
                .push((POD_KIND.to_string(), rv, "DELETED", obj));
        }
    }

    fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared
            .lock()
            .objects
            .get(&(kind.to_string(), namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every CertificateSigningRequest, in name order.
    pub fn csrs(&self) -> Vec<Value> {
        self.shared
            .lock()
            .objects
            .iter()
            .filter(|((k, _, _), _)| k == CSR_KIND)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Approves a CertificateSigningRequest (as an admin or a controller
    /// would) and issues its certificate; false when there is none.
    pub fn approve_csr(&self, name: &str) -> bool {
        let mut state = self.shared.lock();
        let key = (CSR_KIND.to_string(), String::new(), name.to_string());
        let Some(obj) = state.objects.get_mut(&key) else {
            return false;
        };
        approve_and_issue(&self.shared, obj);
        true
    }

    /// Approves and issues every new CertificateSigningRequest at creation.
    pub fn set_csr_auto_approve(&self, on: bool) {
        self.shared.csr_auto_approve.store(on, Ordering::SeqCst);
    }

    /// The core/v1 Events created so far (`POST …/events`), in order.
    pub fn posted_events(&self) -> Vec<Value> {
        self.shared.lock().posted_events.clone()
    }

    /// Makes every event POST answer `status` (e.g. 500) without storing
    /// it; `None` accepts them again.
    pub fn refuse_events(&self, status: Option<u16>) {
        self.shared.lock().refuse_events = status;
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Stops accepting connections and joins the server thread. Connections
    /// refused from then on; calling it twice is harmless.
    pub fn stop(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn bind_in_netns(netns: &Path) -> Result<TcpListener, Error> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(netns).map_err(io_err(format!("open {}", netns.display())))?;
    let what = format!("bind 127.0.0.1:0 in {}", netns.display());
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on a valid namespace fd, on a thread we created
            // and that ends right after binding.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            TcpListener::bind("127.0.0.1:0")
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("bind thread panicked")))
    })
    .map_err(io_err(what))
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = T.iter().position(|t| *t == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Marks a CSR approved and, if its request parses, issues the
/// certificate (signed by the test CA) into `status.certificate`.
fn approve_and_issue(shared: &Shared, obj: &mut Value) {
    obj["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "TestApprove", "message": "approved by the test"}]);
    let pem = obj["spec"]["request"]
        .as_str()
        .and_then(b64_decode)
        .and_then(|b| String::from_utf8(b).ok());
    let cert = pem
        .and_then(|p| rcgen::CertificateSigningRequestParams::from_pem(&p).ok())
        .and_then(|csr| csr.signed_by(&shared.issuer).ok());
    match cert {
        Some(c) => obj["status"]["certificate"] = Value::String(b64(&c.pem())),
        None => {
            obj["status"]["conditions"] = json!([{"type": "Failed", "status": "True",
                "reason": "BadRequest", "message": "spec.request is not a valid PEM CSR"}]);
        }
    }
    let rv = shared.resource_version.fetch_add(1, Ordering::SeqCst);
    obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
}

fn handle_csr(req: &Request, shared: &Shared, segs: &[&str]) -> (u16, Value) {
    match (req.method.as_str(), segs) {
        ("POST", []) => {
            let mut obj: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return status(400, "BadRequest", format!("invalid object: {e}")),
            };
            if obj["spec"]["request"].as_str().is_none() {
                return status(422, "Invalid", "spec.request: Required value".into());
            }
            let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            if name.is_empty() {
                let prefix = obj["metadata"]["generateName"].as_str().unwrap_or("csr-");
                let n = shared.resource_version.load(Ordering::SeqCst);
                name = format!("{prefix}{n:05}");
            }
            obj["metadata"]["name"] = Value::String(name.clone());
            let mut state = shared.lock();
            let key = (CSR_KIND.to_string(), String::new(), name.clone());
            if state.objects.contains_key(&key) {
                return status(
                    409,
                    "AlreadyExists",
                    format!(
                        "certificatesigningrequests.certificates.k8s.io \"{name}\" already exists"
                    ),
                );
            }
            let rv = shared.resource_version.fetch_add(1, Ordering::SeqCst);
            obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
            obj["status"] = json!({});
            if shared.csr_auto_approve.load(Ordering::SeqCst) {
                approve_and_issue(shared, &mut obj);
            }
            state.objects.insert(key, obj.clone());
            (201, obj)
        }
        ("GET", [name]) => {
            let key = (CSR_KIND.to_string(), String::new(), name.to_string());
            match shared.lock().objects.get(&key) {
                Some(o) => (200, o.clone()),
                None => status(
                    404,
                    "NotFound",
                    format!("certificatesigningrequests.certificates.k8s.io \"{name}\" not found"),
                ),
            }
        }
        ("PUT", [name, "approval"]) => {
            let mut state = shared.lock();
            let key = (CSR_KIND.to_string(), String::new(), name.to_string());
            match state.objects.get_mut(&key) {
                Some(o) => {
                    approve_and_issue(shared, o);
                    (200, o.clone())
                }
                None => status(
                    404,
                    "NotFound",
                    format!("certificatesigningrequests.certificates.k8s.io \"{name}\" not found"),
                ),
            }
        }
        (m, _) => status(405, "MethodNotAllowed", format!("method {m} not allowed")),
    }
}

fn b64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn accept_loop(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) {
    // Non-blocking accept polled against the stop flag: stop() need not
    // connect to the listener, which may live in another namespace.
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !stop.load(Ordering::SeqCst) {
        let tcp = match listener.accept() {
            Ok((tcp, _)) => tcp,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let (tls, shared, stop) = (tls.clone(), shared.clone(), stop.clone());
        let _ = std::thread::Builder::new()
            .name("kube-api-conn".into())
            .spawn(move || {
                let _ = tcp.set_nonblocking(false);
                // One response is two small writes: without this, Nagle and
                // the client's delayed ACK add 40 ms per request.
                let _ = tcp.set_nodelay(true);
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = tcp.set_write_timeout(Some(Duration::from_secs(10)));
                if let Ok(conn) = ServerConnection::new(tls) {
                    let stream = StreamOwned::new(conn, tcp);
                    serve(stream, &shared, &stop);
                }
            });
    }
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn read_request(r: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (path, query) = (path.to_string(), query.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
        if headers.len() > 100 {
            return None;
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if len > 1 << 20 {
        return None;
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        query,
        headers,
        body,
    })
}

fn serve(stream: StreamOwned<ServerConnection, TcpStream>, shared: &Shared, stop: &AtomicBool) {
    let mut reader = BufReader::new(stream);
    // Keep-alive, as a real API server: clients reuse one TLS session.
    loop {
        let Some(req) = read_request(&mut reader) else {
            return;
        };
        let delay = shared.lock().delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        // A stopped server answers nothing, even on an open connection.
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let has_client_cert = reader
            .get_ref()
            .conn
            .peer_certificates()
            .is_some_and(|c| !c.is_empty());
        if let Some((kind, from, timeout)) = watch_request(&req) {
            if authorized(&req, shared, has_client_cert) {
                shared.lock().requests.push(RecordedRequest {
                    method: req.method.clone(),
                    path: req.path.clone(),
                    content_type: None,
                    status: 200,
                });
                stream_watch(reader.get_mut(), shared, stop, kind, from, timeout);
                return;
            }
        }
        let (status, body) = handle(&req, shared, has_client_cert);
        shared.lock().requests.push(RecordedRequest {
            method: req.method.clone(),
            path: req.path.clone(),
            content_type: req.header("content-type").map(str::to_string),
            status,
        });
        let close = req
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let reason = match status {
            200 => "OK",
            201 => "Created",
            401 => "Unauthorized",
            404 => "Not Found",
            415 => "Unsupported Media Type",
            _ => "Error",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
            body.len(),
            if close { "close" } else { "keep-alive" }
        );
        let stream = reader.get_mut();
        let mut msg = head.into_bytes();
        msg.extend_from_slice(&body);
        let sent = stream.write_all(&msg).and_then(|_| stream.flush());
        if sent.is_err() || close {
            stream.conn.send_close_notify();
            let _ = stream.flush();
            return;
        }
    }
}

fn status(code: u16, reason: &str, message: String) -> (u16, Value) {
    (
        code,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code,
        }),
    )
}

fn authorized(req: &Request, shared: &Shared, has_client_cert: bool) -> bool {
    let bearer_ok = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t == shared.token);
    bearer_ok || has_client_cert
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The resource kind a cluster-wide list path names.
fn list_kind(path: &str) -> Option<&'static str> {
    match path.trim_matches('/') {
        "api/v1/pods" => Some(POD_KIND),
        "apis/k8s.cni.cncf.io/v1/network-attachment-definitions" => Some(NAD_KIND),
        _ => None,
    }
}

/// (kind, resourceVersion to start after, timeout) of a watch request.
fn watch_request(req: &Request) -> Option<(&'static str, u64, Duration)> {
    let kind = list_kind(&req.path)?;
    let w = query_param(&req.query, "watch")?;
    if req.method != "GET" || !(w == "1" || w == "true") {
        return None;
    }
    let from = query_param(&req.query, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = query_param(&req.query, "timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(300), Duration::from_secs);
    Some((kind, from, timeout))
}

fn stream_watch(
    stream: &mut StreamOwned<ServerConnection, TcpStream>,
    shared: &Shared,
    stop: &AtomicBool,
    kind: &str,
    mut from: u64,
    timeout: Duration,
) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
    if stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.flush())
        .is_err()
    {
        return;
    }
    let deadline = std::time::Instant::now() + timeout;
    while !stop.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        let batch: Vec<(u64, Value)> = shared
            .lock()
            .events
            .iter()
            .filter(|(k, rv, _, _)| k == kind && *rv > from)
            .map(|(_, rv, t, o)| (*rv, json!({"type": t, "object": o})))
            .collect();
        for (rv, ev) in batch {
            let mut line = serde_json::to_vec(&ev).unwrap_or_default();
            line.push(b'\n');
            if stream
                .write_all(&line)
                .and_then(|_| stream.flush())
                .is_err()
            {
                return;
            }
            from = rv;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

fn handle(req: &Request, shared: &Shared, has_client_cert: bool) -> (u16, Value) {
    if !authorized(req, shared, has_client_cert) {
        return status(401, "Unauthorized", "Unauthorized".into());
    }
    if let (Some(kind), "GET") = (list_kind(&req.path), req.method.as_str()) {
        let state = shared.lock();
        let rv = shared
            .resource_version
            .load(Ordering::SeqCst)
            .saturating_sub(1);
        let items: Vec<Value> = state
            .objects
            .iter()
            .filter(|((k, _, _), _)| k == kind)
            .map(|(_, o)| o.clone())
            .collect();
        let list_kind = if kind == POD_KIND {
            "PodList"
        } else {
            "NetworkAttachmentDefinitionList"
        };
        return (
            200,
            json!({"kind": list_kind, "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
        );
    }
    if req.method == "GET" && req.path.trim_matches('/') == "apis/resource.k8s.io/v1/resourceslices"
    {
        return list_slices(req, shared);
    }
    let segs: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    if let ["apis", "certificates.k8s.io", "v1", "certificatesigningrequests", rest @ ..] =
        segs.as_slice()
    {
        return handle_csr(req, shared, rest);
    }
    if let ["api", "v1", "namespaces", ns, "events"] = segs.as_slice() {
        return create_event(req, shared, ns);
    }
    let (kind, ns, name, sub) = match segs.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name] => (POD_KIND, *ns, *name, None),
        ["api", "v1", "namespaces", ns, "pods", name, "status"] => {
            (POD_KIND, *ns, *name, Some("status"))
        }
        ["apis", "k8s.cni.cncf.io", "v1", "namespaces", ns, "network-attachment-definitions", name] => {
            (NAD_KIND, *ns, *name, None)
        }
        ["apis", "resource.k8s.io", "v1", "namespaces", ns, "resourceclaims", name] => {
            (CLAIM_KIND, *ns, *name, None)
        }
        _ => {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource".into(),
            )
        }
    };
    let key = (kind.to_string(), ns.to_string(), name.to_string());
    let not_found = || {
        let group = match kind {
            NAD_KIND => ".k8s.cni.cncf.io",
            CLAIM_KIND => ".resource.k8s.io",
            _ => "",
        };
        status(
            404,
            "NotFound",
            format!("{kind}{group} \"{name}\" not found"),
        )
    };
    match req.method.as_str() {
        "GET" => match shared.lock().objects.get(&key) {
            Some(obj) => (200, obj.clone()),
            None => not_found(),
        },
        "PATCH" if kind == POD_KIND && (sub.is_none() || sub == Some("status")) => {
            let ct = req.header("content-type").unwrap_or("");
            if !ct.starts_with("application/merge-patch+json") {
                return status(
                    415,
                    "UnsupportedMediaType",
                    format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json (got {ct:?})"),
                );
            }
            let patch: Value = match serde_json::from_slice(&req.body) {
                Ok(p) => p,
                Err(e) => return status(400, "BadRequest", format!("invalid patch: {e}")),
            };
            let mut state = shared.lock();
            let Some(obj) = state.objects.get_mut(&key) else {
                drop(state);
                return not_found();
            };
            merge_patch(obj, &patch);
            let rv = shared.resource_version.fetch_add(1, Ordering::SeqCst);
            obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
            let obj = obj.clone();
            state
                .events
                .push((kind.to_string(), rv, "MODIFIED", obj.clone()));
            (200, obj)
        }
        m => status(405, "MethodNotAllowed", format!("method {m} not allowed")),
    }
}

/// `POST /api/v1/namespaces/{ns}/events`: validates and stores a core/v1
/// Event as the API server would.
fn create_event(req: &Request, shared: &Shared, ns: &str) -> (u16, Value) {
    if req.method != "POST" {
        return status(
            405,
            "MethodNotAllowed",
            format!("method {} not allowed", req.method),
        );
    }
    let mut obj: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => return status(400, "BadRequest", format!("invalid object: {e}")),
    };
    let mut state = shared.lock();
    if let Some(code) = state.refuse_events {
        return status(code, "InternalError", "events refused by the test".into());
    }
    match obj["metadata"]["namespace"].as_str() {
        None | Some("") => obj["metadata"]["namespace"] = Value::String(ns.into()),
        Some(n) if n == ns => {}
        Some(_) => return status(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        ),
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if name.is_empty() {
        return status(
            422,
            "Invalid",
            "Event \"\" is invalid: metadata.name: Required value".into(),
        );
    }
    let involved_ns = obj["involvedObject"]["namespace"].as_str().unwrap_or("");
    if involved_ns != ns {
        return status(
            422,
            "Invalid",
            format!("Event \"{name}\" is invalid: involvedObject.namespace: Invalid value: \"{involved_ns}\": does not match event.namespace"),
        );
    }
    if state
        .posted_events
        .iter()
        .any(|e| e["metadata"]["name"] == name.as_str() && e["metadata"]["namespace"] == ns)
    {
        return status(
            409,
            "AlreadyExists",
            format!("events \"{name}\" already exists"),
        );
    }
    let rv = shared.resource_version.fetch_add(1, Ordering::SeqCst);
    obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    state.posted_events.push(obj.clone());
    (201, obj)
}

/// ResourceSlices matching the `fieldSelector` terms `spec.nodeName=` and
/// `spec.driver=` (others are refused, as a real server refuses unknown
/// fields).
fn list_slices(req: &Request, shared: &Shared) -> (u16, Value) {
    let mut terms = Vec::new();
    for t in query_param(&req.query, "fieldSelector")
        .unwrap_or("")
        .split(',')
        .filter(|t| !t.is_empty())
    {
        match t.split_once('=') {
            Some((f @ ("spec.nodeName" | "spec.driver"), v)) => terms.push((f, v.to_string())),
            _ => return status(400, "BadRequest", format!("field label not supported: {t}")),
        }
    }
    let items: Vec<Value> = shared
        .lock()
        .objects
        .iter()
        .filter(|((k, _, _), _)| k == SLICE_KIND)
        .map(|(_, o)| o)
        .filter(|o| {
            terms.iter().all(|(f, v)| {
                let field = if *f == "spec.nodeName" {
                    "nodeName"
                } else {
                    "driver"
                };
                o["spec"][field].as_str() == Some(v.as_str())
            })
        })
        .cloned()
        .collect();
    (
        200,
        json!({"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "metadata": {}, "items": items}),
    )
}

/// Applies an RFC 7386 JSON merge patch to `target`.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_rfc7386_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (mut t, p, want) in cases {
            merge_patch(&mut t, &p);
            assert_eq!(t, want);
        }
    }

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(b64(""), "");
        assert_eq!(b64("f"), "Zg==");
        assert_eq!(b64("fo"), "Zm8=");
        assert_eq!(b64("foo"), "Zm9v");
        assert_eq!(b64("foobar"), "Zm9vYmFy");
    }
}
