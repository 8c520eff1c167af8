//! A client of the Kubernetes Container Runtime Interface (feature `cri`):
//! what a node agent asks containerd or CRI-O about pod sandboxes.
//!
//! The messages are the CRI's `runtime.v1` protobuf messages, written by
//! hand with prost: field numbers and names as in
//! `k8s.io/cri-api/pkg/apis/runtime/v1/api.proto` (kubernetes/cri-api),
//! each struct naming its message. Only the fields a sandbox's network
//! needs are declared; the decoder skips every other field, so answers of
//! newer runtimes decode. [`RuntimeClient`] makes the calls over the
//! runtime's unix socket through a blocking [`Channel`]
//! (`/run/containerd/containerd.sock`, `/var/run/crio/crio.sock`).
//!
//! Calls: `RuntimeService/Version`, `Status`, `RunPodSandbox`,
//! `PodSandboxStatus`, `StopPodSandbox`, `RemovePodSandbox`,
//! `ListPodSandbox`, and `ImageService/ImageStatus`.
//!
//! ```
//! use cni_exec::cri::*;
//!
//! let config = PodSandboxConfig {
//!     metadata: Some(PodSandboxMetadata {
//!         name: "web".into(),
//!         uid: "uid-1".into(),
//!         namespace: "default".into(),
//!         attempt: 0,
//!     }),
//!     port_mappings: vec![PortMapping {
//!         protocol: Protocol::Tcp as i32,
//!         container_port: 80,
//!         host_port: 8080,
//!         host_ip: "127.0.0.1".into(),
//!     }],
//!     ..Default::default()
//! };
//! let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
//! let frame = cni_exec::grpc::encode_frame(&request);
//! let back: RunPodSandboxRequest =
//!     cni_exec::grpc::decode_frame(&frame, cni_exec::grpc::MAX_ANSWER).unwrap();
//! assert_eq!(back, request);
//!
//! // Against a runtime: the sandboxes it runs and whether its network is ready.
//! fn show(socket: &std::path::Path) -> Result<(), cni_exec::Error> {
//!     let mut cri = RuntimeClient::new(socket)?;
//!     let ready = cri.status(false)?.network_ready();
//!     for sandbox in cri.list_pod_sandbox(None)? {
//!         eprintln!("{} {:?} network ready: {ready:?}", sandbox.id, sandbox.metadata);
//!     }
//!     Ok(())
//! }
//! ```

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::collector::{RuntimeSandbox, SandboxLister};
use crate::grpc::Channel;
use crate::Error;

/// The CRI version this client speaks (`VersionRequest.version`).
pub const API_VERSION: &str = "v1";
/// How long a call may take by default: kubelet's
/// `--runtime-request-timeout` default (2 minutes). `RunPodSandbox` runs
/// the CNI ADD, which may wait on IPv6 duplicate address detection.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The runtime condition saying the runtime is up.
pub const RUNTIME_READY: &str = "RuntimeReady";
/// The runtime condition saying the pod network (CNI) is ready.
pub const NETWORK_READY: &str = "NetworkReady";

const RUNTIME_SERVICE: &str = "/runtime.v1.RuntimeService/";
const IMAGE_SERVICE: &str = "/runtime.v1.ImageService/";

/// `VersionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionRequest {
    /// The kubelet's runtime API version.
    #[prost(string, tag = "1")]
    pub version: String,
}

/// `VersionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionResponse {
    /// The runtime API version of the kubelet side (`0.1.0`).
    #[prost(string, tag = "1")]
    pub version: String,
    /// The runtime's name (`containerd`).
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    /// The runtime's version.
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// The CRI version the runtime serves (`v1`).
    #[prost(string, tag = "4")]
    pub runtime_api_version: String,
}

/// `StatusRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {
    /// Ask for the runtime's extra information in `info`.
    #[prost(bool, tag = "1")]
    pub verbose: bool,
}

/// `StatusResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    /// The runtime's conditions.
    #[prost(message, optional, tag = "1")]
    pub status: Option<RuntimeStatus>,
    /// Runtime-specific information (verbose only).
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

impl StatusResponse {
    /// The condition named `kind` ([`RUNTIME_READY`], [`NETWORK_READY`]).
    pub fn condition(&self, kind: &str) -> Option<&RuntimeCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.r#type == kind)
    }

    /// The `NetworkReady` condition's status (`None` when not reported).
    pub fn network_ready(&self) -> Option<bool> {
        self.condition(NETWORK_READY).map(|c| c.status)
    }
}

/// `RuntimeStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeStatus {
    /// The conditions.
    #[prost(message, repeated, tag = "1")]
    pub conditions: Vec<RuntimeCondition>,
}

/// `RuntimeCondition`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeCondition {
    /// The condition's name (`RuntimeReady`, `NetworkReady`).
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// Whether it holds.
    #[prost(bool, tag = "2")]
    pub status: bool,
    /// A machine-readable reason when it does not.
    #[prost(string, tag = "3")]
    pub reason: String,
    /// A human-readable message when it does not.
    #[prost(string, tag = "4")]
    pub message: String,
}

/// `PodSandboxMetadata`: the pod a sandbox belongs to.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Pod UID.
    #[prost(string, tag = "2")]
    pub uid: String,
    /// Pod namespace.
    #[prost(string, tag = "3")]
    pub namespace: String,
    /// Attempt number of creating the sandbox.
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `DNSConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DnsConfig {
    /// DNS servers.
    #[prost(string, repeated, tag = "1")]
    pub servers: Vec<String>,
    /// Search domains.
    #[prost(string, repeated, tag = "2")]
    pub searches: Vec<String>,
    /// resolv.conf options.
    #[prost(string, repeated, tag = "3")]
    pub options: Vec<String>,
}

/// `Protocol` of a port mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Protocol {
    /// TCP.
    Tcp = 0,
    /// UDP.
    Udp = 1,
    /// SCTP.
    Sctp = 2,
}

/// `PortMapping`: a host port forwarded to the sandbox (what the CNI
/// `portMappings` capability receives).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PortMapping {
    /// [`Protocol`] as its number.
    #[prost(enumeration = "Protocol", tag = "1")]
    pub protocol: i32,
    /// The port inside the sandbox.
    #[prost(int32, tag = "2")]
    pub container_port: i32,
    /// The port on the host (0: none).
    #[prost(int32, tag = "3")]
    pub host_port: i32,
    /// The host address (empty: every address).
    #[prost(string, tag = "4")]
    pub host_ip: String,
}

/// `NamespaceMode`: whose namespace a sandbox's containers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum NamespaceMode {
    /// `POD`: the sandbox's own (a pod network: CNI attaches it).
    Pod = 0,
    /// `CONTAINER`: each container's own.
    Container = 1,
    /// `NODE`: the node's (Kubernetes `hostNetwork`: no CNI attachment).
    Node = 2,
    /// `TARGET`: another container's.
    Target = 3,
}

/// `NamespaceOption` (the user namespace options are not declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    /// The network namespace's [`NamespaceMode`] as its number.
    #[prost(enumeration = "NamespaceMode", tag = "1")]
    pub network: i32,
    /// The PID namespace's mode.
    #[prost(enumeration = "NamespaceMode", tag = "2")]
    pub pid: i32,
    /// The IPC namespace's mode.
    #[prost(enumeration = "NamespaceMode", tag = "3")]
    pub ipc: i32,
    /// The container whose namespace `TARGET` means.
    #[prost(string, tag = "4")]
    pub target_id: String,
}

/// `LinuxSandboxSecurityContext` (only its namespace options are
/// declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    /// The sandbox's namespaces.
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
}

/// `LinuxPodSandboxConfig` (overhead and resources are not declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    /// The cgroup the sandbox's cgroups go under.
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    /// The security context: here, which namespaces are the node's.
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
    /// Sysctls set in the sandbox.
    #[prost(map = "string, string", tag = "3")]
    pub sysctls: HashMap<String, String>,
}

/// `PodSandboxConfig`: what `RunPodSandbox` creates (Windows settings are
/// not declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    /// The pod.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    /// The sandbox's hostname.
    #[prost(string, tag = "2")]
    pub hostname: String,
    /// Where the containers' logs go (absolute path).
    #[prost(string, tag = "3")]
    pub log_directory: String,
    /// DNS settings.
    #[prost(message, optional, tag = "4")]
    pub dns_config: Option<DnsConfig>,
    /// Host ports.
    #[prost(message, repeated, tag = "5")]
    pub port_mappings: Vec<PortMapping>,
    /// Labels (what `ListPodSandbox` filters select on).
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    /// Annotations.
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    /// Linux settings.
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

/// `RunPodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    /// The sandbox.
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
    /// The runtime handler (empty: the runtime's default).
    #[prost(string, tag = "2")]
    pub runtime_handler: String,
}

/// `RunPodSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    /// The new sandbox's id.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// `StopPodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopPodSandboxRequest {
    /// The sandbox's id.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// `StopPodSandboxResponse` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopPodSandboxResponse {}

/// `RemovePodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemovePodSandboxRequest {
    /// The sandbox's id.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// `RemovePodSandboxResponse` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemovePodSandboxResponse {}

/// `PodSandboxStatusRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusRequest {
    /// The sandbox's id.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    /// Ask for the runtime's extra information in `info`.
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

/// `PodSandboxState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum PodSandboxState {
    /// `SANDBOX_READY`.
    SandboxReady = 0,
    /// `SANDBOX_NOTREADY`.
    SandboxNotready = 1,
}

/// `PodIP`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodIp {
    /// The address.
    #[prost(string, tag = "1")]
    pub ip: String,
}

/// `PodSandboxNetworkStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxNetworkStatus {
    /// The primary address.
    #[prost(string, tag = "1")]
    pub ip: String,
    /// The other addresses (the second family of a dual-stack pod).
    #[prost(message, repeated, tag = "2")]
    pub additional_ips: Vec<PodIp>,
}

impl PodSandboxNetworkStatus {
    /// Every address, primary first; strings that are not addresses are
    /// left out.
    pub fn ips(&self) -> Vec<IpAddr> {
        std::iter::once(self.ip.as_str())
            .chain(self.additional_ips.iter().map(|p| p.ip.as_str()))
            .filter_map(|s| s.parse().ok())
            .collect()
    }
}

/// `Namespace` of a sandbox's status (its path field, unused by
/// runtimes, is not declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Namespace {
    /// The namespaces' modes.
    #[prost(message, optional, tag = "2")]
    pub options: Option<NamespaceOption>,
}

/// `LinuxPodSandboxStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxStatus {
    /// The sandbox's namespaces.
    #[prost(message, optional, tag = "1")]
    pub namespaces: Option<Namespace>,
}

/// `PodSandboxStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatus {
    /// The id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The pod.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    /// [`PodSandboxState`] as its number.
    #[prost(enumeration = "PodSandboxState", tag = "3")]
    pub state: i32,
    /// Creation time (ns since the epoch).
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    /// The addresses.
    #[prost(message, optional, tag = "5")]
    pub network: Option<PodSandboxNetworkStatus>,
    /// Linux status: the namespaces' modes.
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxPodSandboxStatus>,
    /// Labels.
    #[prost(map = "string, string", tag = "7")]
    pub labels: HashMap<String, String>,
    /// Annotations.
    #[prost(map = "string, string", tag = "8")]
    pub annotations: HashMap<String, String>,
    /// The runtime handler.
    #[prost(string, tag = "9")]
    pub runtime_handler: String,
}

impl PodSandboxStatus {
    /// Its network namespace is the node's (`NamespaceMode::Node`:
    /// Kubernetes `hostNetwork`).
    pub fn uses_node_network(&self) -> bool {
        self.linux
            .as_ref()
            .and_then(|l| l.namespaces.as_ref())
            .and_then(|n| n.options.as_ref())
            .is_some_and(|o| o.network == NamespaceMode::Node as i32)
    }
}

/// `PodSandboxStatusResponse` (container statuses are not declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusResponse {
    /// The status.
    #[prost(message, optional, tag = "1")]
    pub status: Option<PodSandboxStatus>,
    /// Runtime-specific information (verbose only; containerd puts a JSON
    /// document under `info` holding the OCI spec, hence the netns path).
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

impl PodSandboxStatusResponse {
    /// The sandbox's addresses, primary first (empty when it has none).
    pub fn ips(&self) -> Vec<IpAddr> {
        self.status
            .as_ref()
            .and_then(|s| s.network.as_ref())
            .map(PodSandboxNetworkStatus::ips)
            .unwrap_or_default()
    }
}

/// `PodSandboxStateValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStateValue {
    /// [`PodSandboxState`] as its number.
    #[prost(enumeration = "PodSandboxState", tag = "1")]
    pub state: i32,
}

/// `PodSandboxFilter`: every set field must match.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxFilter {
    /// The id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The state.
    #[prost(message, optional, tag = "2")]
    pub state: Option<PodSandboxStateValue>,
    /// Labels the sandbox must carry.
    #[prost(map = "string, string", tag = "3")]
    pub label_selector: HashMap<String, String>,
}

/// `ListPodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxRequest {
    /// The filter (none: every sandbox).
    #[prost(message, optional, tag = "1")]
    pub filter: Option<PodSandboxFilter>,
}

/// `PodSandbox`: one entry of `ListPodSandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    /// The id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The pod.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    /// [`PodSandboxState`] as its number.
    #[prost(enumeration = "PodSandboxState", tag = "3")]
    pub state: i32,
    /// Creation time (ns since the epoch).
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    /// Labels.
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    /// Annotations.
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    /// The runtime handler.
    #[prost(string, tag = "7")]
    pub runtime_handler: String,
}

/// `ListPodSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxResponse {
    /// The sandboxes.
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

/// `ImageSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    /// The image reference (`registry/name:tag`, or an id).
    #[prost(string, tag = "1")]
    pub image: String,
    /// Annotations.
    #[prost(map = "string, string", tag = "2")]
    pub annotations: HashMap<String, String>,
}

/// `ImageStatusRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageStatusRequest {
    /// The image.
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
    /// Ask for extra information.
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

/// `Image` (user, pinning and spec are not declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    /// The image id (`sha256:...` of its config).
    #[prost(string, tag = "1")]
    pub id: String,
    /// Its names.
    #[prost(string, repeated, tag = "2")]
    pub repo_tags: Vec<String>,
    /// Its digests.
    #[prost(string, repeated, tag = "3")]
    pub repo_digests: Vec<String>,
    /// Its size in bytes.
    #[prost(uint64, tag = "4")]
    pub size: u64,
}

/// `ImageStatusResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageStatusResponse {
    /// The image (none: the runtime does not have it).
    #[prost(message, optional, tag = "1")]
    pub image: Option<Image>,
    /// Extra information (verbose only).
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

/// A blocking CRI client on a runtime's socket (see the [module](self)
/// documentation). One client serves one thread at a time: make one per
/// thread for calls in parallel.
#[derive(Debug)]
pub struct RuntimeClient {
    channel: Channel,
}

impl RuntimeClient {
    /// A client of the runtime at `socket`, with [`DEFAULT_TIMEOUT`] per
    /// call; it connects on the first call.
    pub fn new(socket: impl Into<PathBuf>) -> Result<RuntimeClient, Error> {
        Ok(RuntimeClient {
            channel: Channel::new(socket)?.with_timeout(DEFAULT_TIMEOUT),
        })
    }

    /// Sets the time each call may take.
    pub fn with_timeout(mut self, timeout: Duration) -> RuntimeClient {
        self.channel = self.channel.with_timeout(timeout);
        self
    }

    /// The underlying channel.
    pub fn channel(&mut self) -> &mut Channel {
        &mut self.channel
    }

    fn runtime<Req, Resp>(&mut self, method: &str, request: &Req) -> Result<Resp, Error>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.channel
            .call(&format!("{RUNTIME_SERVICE}{method}"), request)
    }

    /// `Version`: the runtime's name and versions.
    pub fn version(&mut self) -> Result<VersionResponse, Error> {
        self.runtime(
            "Version",
            &VersionRequest {
                version: API_VERSION.into(),
            },
        )
    }

    /// `Status`: the runtime's conditions ([`StatusResponse::network_ready`]).
    pub fn status(&mut self, verbose: bool) -> Result<StatusResponse, Error> {
        self.runtime("Status", &StatusRequest { verbose })
    }

    /// `RunPodSandbox` with the default runtime handler: creates and starts
    /// the sandbox (its network set up by CNI ADD); returns its id.
    pub fn run_pod_sandbox(&mut self, config: PodSandboxConfig) -> Result<String, Error> {
        let answer: RunPodSandboxResponse = self.runtime(
            "RunPodSandbox",
            &RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            },
        )?;
        Ok(answer.pod_sandbox_id)
    }

    /// `PodSandboxStatus`; `verbose` adds the runtime's information
    /// (`info`).
    pub fn pod_sandbox_status(
        &mut self,
        id: &str,
        verbose: bool,
    ) -> Result<PodSandboxStatusResponse, Error> {
        self.runtime(
            "PodSandboxStatus",
            &PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose,
            },
        )
    }

    /// `StopPodSandbox`: stops the sandbox and tears its network down (CNI
    /// DEL). Idempotent.
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), Error> {
        let _: StopPodSandboxResponse = self.runtime(
            "StopPodSandbox",
            &StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    /// `RemovePodSandbox`: removes a stopped sandbox. Idempotent.
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), Error> {
        let _: RemovePodSandboxResponse = self.runtime(
            "RemovePodSandbox",
            &RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    /// `ListPodSandbox`: the sandboxes matching `filter` (all without one).
    pub fn list_pod_sandbox(
        &mut self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, Error> {
        let answer: ListPodSandboxResponse =
            self.runtime("ListPodSandbox", &ListPodSandboxRequest { filter })?;
        Ok(answer.items)
    }

    /// `ImageService/ImageStatus`: the image named `image`, `None` when the
    /// runtime does not have it.
    pub fn image_status(&mut self, image: &str) -> Result<Option<Image>, Error> {
        let answer: ImageStatusResponse = self.channel.call(
            &format!("{IMAGE_SERVICE}ImageStatus"),
            &ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    annotations: HashMap::new(),
                }),
                verbose: false,
            },
        )?;
        Ok(answer.image)
    }
}

/// The collector's view of a CRI runtime (`cni-gc`'s, and a runtime
/// embedding [`crate::collector`]'s): `ListPodSandbox` without a filter,
/// each sandbox ready when its state is `SANDBOX_READY`. A call that fails
/// (no socket, no answer within the client's timeout, a gRPC error) is the
/// reason the collector gives for doing nothing.
///
/// ```no_run
/// use std::time::Duration;
/// use cni_exec::collector::SandboxLister;
/// use cni_exec::cri::{CriSandboxes, RuntimeClient};
///
/// let client = RuntimeClient::new("/run/containerd/containerd.sock")?
///     .with_timeout(Duration::from_secs(10));
/// let runtime = CriSandboxes::new(client);
/// match runtime.list_sandboxes() {
///     Ok(sandboxes) => sandboxes.iter().for_each(|s| eprintln!("{} ready: {}", s.id, s.ready)),
///     Err(why) => eprintln!("{}: {why}", runtime.describe()),
/// }
/// # Ok::<(), cni_exec::Error>(())
/// ```
#[derive(Debug)]
pub struct CriSandboxes {
    socket: PathBuf,
    // `SandboxLister` takes `&self`; a client makes one call at a time.
    client: Mutex<RuntimeClient>,
}

impl CriSandboxes {
    /// Lists sandboxes through `client`.
    pub fn new(mut client: RuntimeClient) -> CriSandboxes {
        CriSandboxes {
            socket: client.channel().socket().to_path_buf(),
            client: Mutex::new(client),
        }
    }
}

impl SandboxLister for CriSandboxes {
    fn list_sandboxes(&self) -> Result<Vec<RuntimeSandbox>, String> {
        let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        let items = client.list_pod_sandbox(None).map_err(|e| e.to_string())?;
        Ok(items
            .into_iter()
            .map(|s| RuntimeSandbox {
                ready: s.state == PodSandboxState::SandboxReady as i32,
                id: s.id,
                node_network: false,
            })
            .collect())
    }

    /// `PodSandboxStatus`: its network namespace mode is `NODE`.
    fn uses_node_network(&self, id: &str) -> Result<bool, String> {
        let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        let status = client
            .pod_sandbox_status(id, false)
            .map_err(|e| e.to_string())?;
        Ok(status.status.is_some_and(|s| s.uses_node_network()))
    }

    fn describe(&self) -> String {
        format!("the CRI runtime at {}", self.socket.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::{decode_frame, encode_frame, MAX_ANSWER};

    /// Hand-encoded protobuf: (tag << 3 | wire type), then the value.
    fn field_bytes(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![tag << 3 | 2, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn field_numbers_match_the_proto() {
        // PodSandboxStatusResponse{status{id:"s", state:NOTREADY,
        // network{ip:"10.0.0.2", additional_ips[{ip:"fd00::2"}]}},
        // info{"info":"{}"}} built byte by byte from api.proto's numbers.
        let mut network = field_bytes(1, b"10.0.0.2");
        network.extend(field_bytes(2, &field_bytes(1, b"fd00::2")));
        let mut status = field_bytes(1, b"s");
        status.extend([3 << 3, 1]);
        status.extend(field_bytes(5, &network));
        // linux{namespaces{options{network: NODE, pid: CONTAINER}}}
        status.extend(field_bytes(
            6,
            &field_bytes(1, &field_bytes(2, &[1 << 3, 2, 2 << 3, 1])),
        ));
        let mut info_entry = field_bytes(1, b"info");
        info_entry.extend(field_bytes(2, b"{}"));
        let mut msg = field_bytes(1, &status);
        msg.extend(field_bytes(2, &info_entry));
        // An unknown field (containers_statuses = 3) and timestamp = 4.
        msg.extend(field_bytes(3, b"\x0a\x01x"));
        msg.extend([4 << 3, 42]);
        let mut frame = vec![0, 0, 0, 0, msg.len() as u8];
        frame.extend(&msg);
        let r: PodSandboxStatusResponse = decode_frame(&frame, MAX_ANSWER).unwrap();
        let s = r.status.as_ref().unwrap();
        assert_eq!(s.id, "s");
        assert_eq!(s.state, PodSandboxState::SandboxNotready as i32);
        assert!(s.uses_node_network());
        assert_eq!(
            r.ips(),
            vec![
                "10.0.0.2".parse::<IpAddr>().unwrap(),
                "fd00::2".parse().unwrap()
            ]
        );
        assert_eq!(r.info["info"], "{}");
    }

    #[test]
    fn requests_encode_with_the_proto_numbers() {
        let req = RunPodSandboxRequest {
            config: Some(PodSandboxConfig {
                hostname: "h".into(),
                linux: Some(LinuxPodSandboxConfig {
                    cgroup_parent: "/p".into(),
                    security_context: Some(LinuxSandboxSecurityContext {
                        namespace_options: Some(NamespaceOption {
                            network: NamespaceMode::Node as i32,
                            ..Default::default()
                        }),
                    }),
                    sysctls: HashMap::new(),
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        };
        let f = encode_frame(&req);
        let mut config = field_bytes(2, b"h");
        // linux{cgroup_parent, security_context{namespace_options{network: NODE}}}
        let mut linux = field_bytes(1, b"/p");
        linux.extend(field_bytes(2, &field_bytes(1, &[1 << 3, 2])));
        config.extend(field_bytes(8, &linux));
        assert_eq!(&f[5..], field_bytes(1, &config).as_slice());
    }

    #[test]
    fn status_conditions() {
        let s = StatusResponse {
            status: Some(RuntimeStatus {
                conditions: vec![
                    RuntimeCondition {
                        r#type: RUNTIME_READY.into(),
                        status: true,
                        ..Default::default()
                    },
                    RuntimeCondition {
                        r#type: NETWORK_READY.into(),
                        status: false,
                        reason: "NetworkPluginNotReady".into(),
                        message: "cni config uninitialized".into(),
                    },
                ],
            }),
            info: HashMap::new(),
        };
        assert_eq!(s.network_ready(), Some(false));
        assert!(s.condition(RUNTIME_READY).unwrap().status);
        assert_eq!(StatusResponse::default().network_ready(), None);
    }
}
