//! The daemon: the unix-socket HTTP server (`/cni`, `/delegate`,
//! `/healthz`, `/readyz`), the metrics port, and the background work
//! (auto-configuration). One thread per connection, std only.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use cni_exec::{Command, Env, Exec, OwnNetnsGuard, ProcessExec};
use cni_types::{CniError, ErrorCode};
use serde_json::Value;

use super::api::{self, CniRequest, CniResponse};
use super::certs::{node_name, CertManager};
use super::config::{DaemonConfig, PerNodeCertificate};
use super::http::{self, ReadError};
use super::limit::RequestLimit;
use super::metrics::Metrics;
use super::plugin::{conf_for_cached_del, DaemonPlugin, SharedKube};
use super::watch::WatchCache;
use crate::k8s::ClientConfig;
use crate::kube_client;

/// The trace context variables a shim forwards with a request
/// (`cni_trace::context`): the request's `cni <COMMAND>` span is their child.
const TRACE_VARS: [&str; 3] = [
    cni_trace::context::TRACEPARENT,
    cni_trace::context::TRACESTATE,
    cni_trace::context::BAGGAGE,
];
use crate::Error;

/// How long a connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the daemon waits at start for its certificate to be issued.
const CERT_WAIT: Duration = Duration::from_secs(300);
/// Connections served at once; more are answered "try again" (code 11).
const MAX_CONNECTIONS: usize = cni_files::daemon::DEFAULT_MAX_CONNECTIONS;

struct Shared {
    plugin: DaemonPlugin,
    metrics: Arc<Metrics>,
    exec: Arc<dyn Exec>,
    config: DaemonConfig,
    /// False until the node's multus configuration is in place (auto mode).
    configured: Arc<AtomicBool>,
    stop: AtomicBool,
    /// `connectionLimit`: CNI requests served at once.
    limit: RequestLimit,
}

impl Shared {
    fn ready(&self) -> bool {
        self.configured.load(Ordering::SeqCst)
            && self
                .config
                .readiness_indicator_file
                .as_ref()
                .is_none_or(|f| f.exists())
    }
}

/// A running daemon; stopping (or dropping) it closes the socket.
pub struct DaemonHandle {
    shared: Arc<Shared>,
    socket: PathBuf,
    metrics_addr: Option<SocketAddr>,
    threads: Vec<(Role, JoinHandle<()>)>,
}

#[derive(Clone, Copy, Debug)]
enum Role {
    Socket,
    Metrics,
    Background,
}

impl std::fmt::Debug for DaemonHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonHandle")
            .field("socket", &self.socket)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

/// Starts the daemon with the API client its configuration asks for (the
/// `kubeconfig` key; none: the in-cluster account, else each request's),
/// behind a list+watch cache of pods and NADs.
pub fn start(config: DaemonConfig) -> Result<DaemonHandle, Error> {
    let base = conf_for_cached_del(b"{}", &config.netconf_overrides)?;
    let kube = match config.per_node_certificate.as_ref().filter(|p| p.enabled) {
        Some(p) => Some(per_node_client(p, base.api_request_timeout)? as SharedKube),
        None => kube_client(&base)?.map(|k| WatchCache::start(k) as SharedKube),
    };
    let exec: Arc<dyn Exec> = match &config.chroot_dir {
        Some(root) => Arc::new(super::chroot::ChrootExec::new(root)),
        None => Arc::new(ProcessExec::new()),
    };
    start_with(config, kube, exec)
}

/// The watch cache on a client with this node's own certificate, renewed
/// before it expires for as long as the cache lives.
fn per_node_client(p: &PerNodeCertificate, timeout: Duration) -> Result<Arc<WatchCache>, Error> {
    let boot_path = p.bootstrap_kubeconfig.clone().unwrap_or_default();
    let boot = ClientConfig::from_kubeconfig(&boot_path, timeout)?;
    let mgr = CertManager::new(boot, &p.cert_dir, p.cert_duration, &node_name(), CERT_WAIT);
    let issued = SystemTime::now();
    let cache = WatchCache::start(mgr.client()?);
    let weak = Arc::downgrade(&cache);
    mgr.spawn_rotation(issued, move |c| match weak.upgrade() {
        Some(cache) => {
            cache.set_client(c);
            true
        }
        None => false,
    });
    Ok(cache)
}

/// Starts the daemon with a given API client and delegate executor.
pub fn start_with(
    config: DaemonConfig,
    kube: Option<SharedKube>,
    exec: Arc<dyn Exec>,
) -> Result<DaemonHandle, Error> {
    let socket = config.socket_path();
    // Checked before anything starts: a bad key fails the daemon cleanly.
    let auto = if config.auto_config() {
        Some(super::autoconf::AutoConfig::try_from_daemon(&config)?)
    } else {
        None
    };
    let listener = bind_socket(&socket)?;
    let configured = Arc::new(AtomicBool::new(!config.auto_config()));
    let limit = RequestLimit::new(config.request_limit);
    let metrics = Arc::new(Metrics::default());
    let shared = Arc::new(Shared {
        plugin: DaemonPlugin::new(config.netconf_overrides.clone(), kube)
            .with_metrics(metrics.clone()),
        metrics,
        exec,
        config,
        configured,
        stop: AtomicBool::new(false),
        limit,
    });
    let mut threads = Vec::new();
    let mut metrics_addr = None;
    if let Some(port) = shared.config.metrics_port {
        let addr = format!("{}:{port}", shared.config.metrics_bind_address);
        let l = TcpListener::bind(&addr).map_err(|e| Error::io("bind metrics", addr.clone(), e))?;
        metrics_addr = l.local_addr().ok();
        let s = shared.clone();
        threads.push((
            Role::Metrics,
            spawn("multus-metrics", move || serve_metrics(l, s))?,
        ));
    }
    if let Some(cfg) = auto {
        let s = shared.clone();
        threads.push((
            Role::Background,
            spawn("multus-autoconf", move || {
                cfg.run(&s.configured, &|| s.stop.load(Ordering::SeqCst))
            })?,
        ));
    }
    let s = shared.clone();
    threads.push((
        Role::Socket,
        spawn("multus-accept", move || serve_socket(listener, s))?,
    ));
    tracing::info!(socket = %socket.display(), "multus daemon serving");
    Ok(DaemonHandle {
        shared,
        socket,
        metrics_addr,
        threads,
    })
}

/// A named thread of the daemon, or the error that stops its start.
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, Error> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| Error::io("start thread", name, e))
}

/// The daemons' one socket rule ([`cni_files::daemon::listen`]): the
/// directory made owner-only when missing, a dead socket replaced,
/// anything else refused, the socket mode 0600 whatever the umask.
fn bind_socket(socket: &Path) -> Result<UnixListener, Error> {
    cni_files::daemon::listen(socket).map_err(|e| match e {
        cni_files::Error::Io { op, path, source } => Error::io(op, path, source),
        e => Error::io("bind socket", socket, std::io::Error::other(e.to_string())),
    })
}

impl DaemonHandle {
    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Where the metrics server listens, if configured.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The daemon's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// True when `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.shared.ready()
    }

    /// Blocks until the daemon is stopped from another thread (never, for
    /// the binary: it runs until killed).
    pub fn wait(mut self) {
        for (_, t) in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Stops serving: new connections are refused, the socket is removed;
    /// requests in flight finish on their threads.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the blocking accept calls. When the socket file is already
        // gone (its directory removed under us) nothing can reach the
        // listener: its thread is left blocked rather than waited for.
        let socket_woken = UnixStream::connect(&self.socket).is_ok();
        let metrics_woken = self
            .metrics_addr
            .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok());
        for (role, t) in self.threads.drain(..) {
            let woken = match role {
                Role::Socket => socket_woken,
                Role::Metrics => metrics_woken,
                Role::Background => true,
            };
            if woken {
                let _ = t.join();
            }
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for DaemonHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve_socket(listener: UnixListener, shared: Arc<Shared>) {
    let s = Arc::clone(&shared);
    let o = Arc::clone(&shared);
    let served = cni_files::daemon::serve(
        listener,
        &cni_files::daemon::ServeOptions::new("multus").max_connections(MAX_CONNECTIONS),
        &shared.stop,
        move |stream| handle(stream, &s),
        move |sent, last| busy(&o, sent, last),
    );
    if let Err(e) = served {
        tracing::error!("multus daemon stopped serving: {e}");
    }
}

/// The answer to a connection over the cap (or whose thread the system
/// refused), from what it has `sent` so far ([`cni_files::daemon::serve`],
/// which never waits on one connection for another): health and
/// readiness probes are answered as usual once their head is in, anything
/// else gets 503 "try again" (code 11) as soon as its first bytes show it
/// is no probe, or when it sent nothing in time (`last`).
fn busy(shared: &Shared, sent: &[u8], last: bool) -> Option<Vec<u8>> {
    let may_be_probe = [api::HEALTHZ_ENDPOINT, api::READYZ_ENDPOINT]
        .iter()
        .any(|path| {
            let line = format!("GET {path} ");
            let n = sent.len().min(line.len());
            sent[..n] == line.as_bytes()[..n]
        });
    let head_in = sent.windows(4).any(|w| w == b"\r\n\r\n");
    if may_be_probe && !head_in && !last {
        return None;
    }
    let mut out = Vec::new();
    let probe = http::read_request(sent).ok().filter(|r| {
        r.method == "GET"
            && matches!(
                r.path.as_str(),
                api::HEALTHZ_ENDPOINT | api::READYZ_ENDPOINT
            )
    });
    let _ = match probe {
        Some(req) => {
            let (status, content_type, body) = route(shared, &req);
            shared
                .metrics
                .count_request(handler_name(&req.path), &req.method, status);
            http::write_response(&mut out, status, content_type, &body)
        }
        None => reply_error(
            &mut out,
            503,
            CniError::new(ErrorCode::TryAgainLater, "multus daemon busy", ""),
        ),
    };
    Some(out)
}

fn reply_error(stream: impl std::io::Write, status: u16, e: CniError) -> std::io::Result<()> {
    http::write_response(stream, status, "application/json", &e.to_json())
}

/// The `handler` label: the endpoint's path, as the reference's, or
/// `NotFound`.
fn handler_name(path: &str) -> &'static str {
    match path {
        api::CNI_ENDPOINT => api::CNI_ENDPOINT,
        api::DELEGATE_ENDPOINT => api::DELEGATE_ENDPOINT,
        api::HEALTHZ_ENDPOINT => api::HEALTHZ_ENDPOINT,
        api::READYZ_ENDPOINT => api::READYZ_ENDPOINT,
        _ => "NotFound",
    }
}

fn handle(stream: UnixStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let req = match http::read_request(&stream) {
        Ok(r) => r,
        Err(ReadError::Closed) => return,
        Err(e) => {
            let status = e.status().unwrap_or(400);
            shared.metrics.count_request("invalid", "unknown", status);
            let _ = reply_error(
                &stream,
                status,
                CniError::new(ErrorCode::DecodingFailure, e.message(), ""),
            );
            return;
        }
    };
    let handler = handler_name(&req.path);
    let (status, content_type, body) = route(shared, &req);
    shared.metrics.count_request(handler, &req.method, status);
    if let Err(e) = http::write_response(&stream, status, content_type, &body) {
        tracing::warn!("reply to {handler}: {e}");
    }
    // The request's spans go out after its reply (within the export's
    // budget, on this connection's thread): the shim never waits for them.
    drop(stream);
    if let Some(exporter) = cni_exec::logging::registered_exporter() {
        if let Err(e) = exporter.flush() {
            tracing::debug!("span export failed: {e}");
        }
    }
}

fn json_error(status: u16, e: CniError) -> (u16, &'static str, Vec<u8>) {
    (status, "application/json", e.to_json())
}

fn route(shared: &Shared, req: &http::Request) -> (u16, &'static str, Vec<u8>) {
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", api::HEALTHZ_ENDPOINT) => (200, "text/plain", b"ok".to_vec()),
        ("GET", api::READYZ_ENDPOINT) if shared.ready() => (200, "text/plain", b"ok".to_vec()),
        ("GET", api::READYZ_ENDPOINT) => (503, "text/plain", b"not ready".to_vec()),
        ("POST", api::CNI_ENDPOINT) => serve_cni(shared, &req.body, false),
        ("POST", api::DELEGATE_ENDPOINT) => serve_cni(shared, &req.body, true),
        (
            _,
            api::HEALTHZ_ENDPOINT
            | api::READYZ_ENDPOINT
            | api::CNI_ENDPOINT
            | api::DELEGATE_ENDPOINT,
        ) => json_error(
            405,
            CniError::new(
                ErrorCode::InvalidEnvironmentVariables,
                format!("method {} not allowed on {}", req.method, req.path),
                "",
            ),
        ),
        _ => json_error(
            404,
            CniError::new(ErrorCode::Internal, format!("no endpoint {}", req.path), ""),
        ),
    }
}

fn serve_cni(shared: &Shared, body: &[u8], delegate: bool) -> (u16, &'static str, Vec<u8>) {
    let req = match CniRequest::from_slice(body) {
        Ok(r) => r,
        Err(e) => return json_error(400, e.to_cni_error()),
    };
    let cmd_name = req.var("CNI_COMMAND").to_string();
    let Some(command) = Command::parse(&cmd_name) else {
        return json_error(
            400,
            CniError::new(
                ErrorCode::InvalidEnvironmentVariables,
                format!("unknown CNI_COMMAND {cmd_name:?}"),
                "",
            ),
        );
    };
    let env = Env::new(
        req.env
            .iter()
            .filter(|(k, _)| k.starts_with("CNI_") || TRACE_VARS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone())),
    )
    .with_netns_guard(Arc::new(OwnNetnsGuard))
    .with_exec(shared.exec.clone());
    let _in_flight = shared.metrics.in_flight();
    let started = Instant::now();
    // Held until the reply is built: the delegates of at most
    // `connectionLimit` requests run at once.
    let _permit = match shared.limit.acquire() {
        Ok(p) => p,
        Err(e) => {
            let code = e.code.as_u32();
            shared
                .metrics
                .observe(command.as_str(), code, started.elapsed());
            return json_error(503, e);
        }
    };
    let out = if delegate {
        let attrs = req.interface_attributes.clone();
        let plugin = DelegateEndpoint {
            plugin: &shared.plugin,
            attrs,
        };
        match wrap_delegate(&req.config) {
            Ok(stdin) => cni_exec::dispatch(&plugin, &env, &stdin),
            Err(e) => return json_error(400, e),
        }
    } else {
        cni_exec::dispatch(&shared.plugin, &env, &req.config)
    };
    if out.exit_code != 0 {
        let e = out
            .error()
            .unwrap_or_else(|| CniError::internal("plugin failed"));
        shared
            .metrics
            .observe(command.as_str(), e.code.as_u32(), started.elapsed());
        return json_error(500, e);
    }
    shared
        .metrics
        .observe(command.as_str(), 0, started.elapsed());
    let result = if out.stdout.is_empty() {
        None
    } else {
        serde_json::from_slice::<Value>(&out.stdout).ok()
    };
    let resp = CniResponse { result };
    (
        200,
        "application/json",
        serde_json::to_vec(&resp).unwrap_or_default(),
    )
}

/// A delegate's configuration may be a conflist, which the skel's
/// config parser refuses: it travels inside a one-plugin envelope.
fn wrap_delegate(config: &[u8]) -> Result<Vec<u8>, CniError> {
    let v: Value = serde_json::from_slice(config).map_err(|e| {
        CniError::new(
            ErrorCode::DecodingFailure,
            format!("decode delegate configuration: {e}"),
            "",
        )
    })?;
    let version = v
        .get("cniVersion")
        .cloned()
        .unwrap_or_else(|| Value::String("1.0.0".into()));
    let name = v
        .get("name")
        .cloned()
        .unwrap_or_else(|| Value::String("delegate".into()));
    let env = serde_json::json!({"cniVersion": version, "name": name, "type": "multus-delegate", "delegate": v});
    Ok(env.to_string().into_bytes())
}

/// `/delegate` through the same skel protocol (env checks, version
/// encoding) as `/cni`.
struct DelegateEndpoint<'a> {
    plugin: &'a DaemonPlugin,
    attrs: Option<api::InterfaceAttributes>,
}

impl cni_exec::Plugin for DelegateEndpoint<'_> {
    type Error = crate::Error;

    fn name(&self) -> &str {
        "multus-delegate"
    }

    fn add(&self, req: &cni_exec::Request) -> crate::Result<cni_types::CniResult> {
        Ok(self
            .plugin
            .delegate(req, self.attrs.as_ref())?
            .unwrap_or_default())
    }

    fn del(&self, req: &cni_exec::Request) -> crate::Result<()> {
        self.plugin.delegate(req, self.attrs.as_ref())?;
        Ok(())
    }

    /// None: the endpoint is only reached through the daemon's socket, so
    /// a request without `CNI_COMMAND` fails instead of printing one.
    fn about(&self) -> String {
        String::new()
    }
}

fn serve_metrics(listener: TcpListener, shared: Arc<Shared>) {
    cni_files::metrics::serve(&listener, &shared.stop, &|| shared.metrics.render());
}
