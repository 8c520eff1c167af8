//! multus's error enum (thin plugin, daemon and shim), and its mapping to
//! CNI error codes. Its variants keep the codes and the Go-compatible
//! messages of multus-cni (`pkg/multus/multus.go`,
//! `pkg/k8sclient/k8sclient.go`); what multus shares with the other
//! plugins (spec data, kernel state, `cni-exec` mechanisms, finished error
//! replies) is wrapped as the lower crate's error and keeps its code and
//! message, as `cni_plugins::Error` does.

use std::path::PathBuf;

use cni_types::{CniError, ErrorCode};

/// Why a multus command (plugin, daemon or shim) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Spec data (config, result, args) did not parse or convert; its
    /// code and message are [`cni_types::Error`]'s.
    #[error(transparent)]
    Types(#[from] cni_types::Error),
    /// A kernel operation failed (code 999); the error names the
    /// operation and the object.
    #[error(transparent)]
    Kernel(#[from] cni_netns::Error),
    /// A mechanism of `cni-exec` (file writer, file lock) failed other
    /// than on a file (code 999); its error names the operation.
    #[error(transparent)]
    Exec(cni_exec::Error),
    /// A finished error reply (the daemon's, or a fallback's), passed on
    /// unchanged: its code, message and details.
    #[error("{0}")]
    Reply(CniError),
    /// The multus configuration is invalid (code 7).
    #[error("invalid multus configuration: {0}")]
    Config(String),
    /// JSON that does not decode (code 6).
    #[error("decode {what}: {reason}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The decoder's message.
        reason: String,
    },
    /// A delegate configuration (inline, file, NAD or cache entry) is
    /// unusable (code 7).
    #[error("load delegate {what}: {reason}")]
    DelegateConfig {
        /// Which delegate (index, file or NAD).
        what: String,
        /// Why.
        reason: String,
    },
    /// The pod's network selection annotation is malformed (code 7).
    #[error("parse pod annotation {key} {value:?}: {reason}")]
    PodAnnotation {
        /// The annotation key.
        key: String,
        /// The annotation value.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A network named by the multus configuration or a pod cannot be
    /// found (code 7).
    #[error("find network {name:?}: {reason}")]
    NetworkNotFound {
        /// The network (NAD name, config name or path).
        name: String,
        /// Where it was looked for and what failed.
        reason: String,
    },
    /// Namespace isolation forbids the reference (code 7).
    #[error("namespace isolation enabled, annotation violates permission, pod is in namespace {pod_namespace} but refers to target namespace {target_namespace}")]
    NamespaceIsolation {
        /// The pod's namespace.
        pod_namespace: String,
        /// The namespace the annotation refers to.
        target_namespace: String,
    },
    /// Two attachments of the pod would get the same interface name (code 7).
    #[error("interface name {ifname:?} is used by both {first:?} and {second:?}")]
    DuplicateInterface {
        /// The interface name.
        ifname: String,
        /// The first network using it.
        first: String,
        /// The second network using it.
        second: String,
    },
    /// More than one default route per family was requested (code 7).
    #[error("multus does not support ECMP for default-route")]
    DefaultRouteEcmp,
    /// `CNI_ARGS` lacks what multus needs, or does not parse (code 4).
    #[error("invalid CNI_ARGS: {0}")]
    CniArgs(String),
    /// A kubeconfig or in-cluster config cannot be used (code 7).
    #[error("load Kubernetes client config {source_name}: {reason}")]
    KubeConfig {
        /// The kubeconfig path, or "in-cluster".
        source_name: String,
        /// Why.
        reason: String,
    },
    /// The Kubernetes API server says the object does not exist (code 7).
    #[error("{op}: {kind} {namespace}/{name} not found")]
    ApiNotFound {
        /// The operation ("get pod", ...).
        op: String,
        /// The resource kind.
        kind: String,
        /// The namespace.
        namespace: String,
        /// The object name.
        name: String,
    },
    /// The Kubernetes API server answered with an error status (code 11
    /// for 5xx and 429, else 999).
    #[error("{op}: API server answered {status}: {message}")]
    ApiStatus {
        /// The operation.
        op: String,
        /// The HTTP status.
        status: u16,
        /// The Status message, or the body.
        message: String,
    },
    /// The Kubernetes API server could not be reached in time (code 11).
    #[error("{op}: {reason}")]
    ApiUnreachable {
        /// The operation.
        op: String,
        /// Transport error (refused, TLS, timeout).
        reason: String,
    },
    /// The pod's UID differs from `K8S_POD_UID` (code 7).
    #[error("expected pod {namespace}/{name} UID {expected:?} but got {actual:?} from Kube API")]
    PodUidMismatch {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// From `K8S_POD_UID`.
        expected: String,
        /// From the API.
        actual: String,
    },
    /// The readiness indicator file did not appear in time (code 11).
    #[error("have you checked that your default network is ready? still waiting for readinessindicatorfile @ {}", .0.display())]
    DefaultNetworkNotReady(PathBuf),
    /// The interface multus was asked for already exists in the pod (code 7).
    #[error("interface name {ifname} already exists in {netns}")]
    InterfaceExists {
        /// The interface name.
        ifname: String,
        /// The pod's namespace path.
        netns: String,
    },
    /// A change in the pod's network namespace failed (code 999).
    #[error("{op} {netns}: {reason}")]
    PodNetwork {
        /// The operation.
        op: String,
        /// The pod's namespace path.
        netns: String,
        /// The kernel's answer.
        reason: String,
    },
    /// A file or socket operation failed (code 5, where the other
    /// plugins' `cni_plugins::Error::Io` is 999, as in multus-cni).
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The file, socket or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A delegate plugin failed; carries its error reply (whose code and
    /// details the reply keeps).
    #[error("delegate {network:?} ({ifname}): {error}")]
    DelegateFailed {
        /// The delegate's network name.
        network: String,
        /// The interface it was attaching.
        ifname: String,
        /// The delegate's error.
        error: Box<CniError>,
    },
    /// Several failures, none skipped (DEL of every delegate); the code is
    /// the first one's.
    #[error("errors: {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(" / "))]
    Multiple(Vec<Error>),
    /// The daemon configuration is invalid (code 7).
    #[error("invalid daemon configuration {}: {reason}", path.display())]
    DaemonConfig {
        /// The configuration file ("" when given inline).
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The daemon's socket could not be reached (code 11; the shim then
    /// falls back on DEL).
    #[error("connect to multus daemon at {}: {source}", path.display())]
    DaemonUnreachable {
        /// The socket.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An HTTP exchange over the daemon's socket was malformed (code 6).
    #[error("{op}: {reason}")]
    DaemonProtocol {
        /// The operation ("read request", "read daemon reply"...).
        op: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The device IDs kubelet (pod-resources API or device-plugin
    /// checkpoint) or DRA allocated for a NAD's `resourceName` could not
    /// be read (code 11: kubelet or the API may answer on a retry).
    #[error("get device IDs{} from {source_name}: {reason}", if resource.is_empty() { String::new() } else { format!(" of resource {resource:?}") })]
    DeviceLookup {
        /// The NAD's `k8s.v1.cni.cncf.io/resourceName` ("" when not known yet).
        resource: String,
        /// The socket, file or API object read.
        source_name: String,
        /// Why.
        reason: String,
    },
    /// The Kubernetes API refused or failed a node certificate operation
    /// (code 999).
    #[error("{op}: {reason}")]
    Certificate {
        /// The operation.
        op: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// An I/O error on `path` (code 5).
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A finished error reply (the daemon's, or a fallback's), passed on
    /// unchanged.
    pub fn reply(reply: CniError) -> Self {
        Error::Reply(reply)
    }

    /// The CNI error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Types(e) => e.code(),
            Error::Reply(reply) => reply.code,
            Error::Config(_)
            | Error::DelegateConfig { .. }
            | Error::PodAnnotation { .. }
            | Error::NetworkNotFound { .. }
            | Error::NamespaceIsolation { .. }
            | Error::DuplicateInterface { .. }
            | Error::InterfaceExists { .. }
            | Error::DefaultRouteEcmp
            | Error::KubeConfig { .. }
            | Error::ApiNotFound { .. }
            | Error::PodUidMismatch { .. }
            | Error::DaemonConfig { .. } => ErrorCode::InvalidNetworkConfig,
            Error::Decode { .. } | Error::DaemonProtocol { .. } => ErrorCode::DecodingFailure,
            Error::CniArgs(_) => ErrorCode::InvalidEnvironmentVariables,
            Error::ApiStatus { status, .. } if *status >= 500 || *status == 429 => {
                ErrorCode::TryAgainLater
            }
            Error::ApiUnreachable { .. }
            | Error::DefaultNetworkNotReady(_)
            | Error::DaemonUnreachable { .. }
            | Error::DeviceLookup { .. } => ErrorCode::TryAgainLater,
            Error::Io { .. } => ErrorCode::IoFailure,
            Error::DelegateFailed { error, .. } => error.code,
            Error::Multiple(v) => v.first().map_or(ErrorCode::Internal, Error::code),
            Error::ApiStatus { .. }
            | Error::PodNetwork { .. }
            | Error::Certificate { .. }
            | Error::Kernel(_)
            | Error::Exec(_) => ErrorCode::Internal,
        }
    }

    /// True for "the Kubernetes API server says this object does not exist".
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::ApiNotFound { .. })
    }

    /// True for transient Kubernetes API failures worth retrying within the
    /// wait budget.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Error::ApiUnreachable { .. } | Error::ApiStatus { status: 500.., .. }
        ) || matches!(self, Error::ApiStatus { status: 429, .. })
    }

    /// The error reply for this error.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Error::Types(e) => e.to_cni_error(),
            Error::Reply(reply) => reply.clone(),
            Error::DelegateFailed { error, .. } => {
                CniError::new(error.code, self.to_string(), error.details.clone())
            }
            _ => CniError::new(self.code(), self.to_string(), ""),
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        match e {
            Error::Reply(reply) => reply,
            e => e.to_cni_error(),
        }
    }
}

/// `Result` with multus's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(e: impl Into<CniError>) -> (u32, String) {
        let c = e.into();
        (c.code.as_u32(), c.msg)
    }

    fn not_found() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory")
    }

    // multus-cni's texts (pkg/k8sclient/k8sclient.go, pkg/multus/multus.go)
    // are matched byte for byte by users' tooling.
    #[test]
    fn multus_texts_and_codes() {
        let e = Error::NamespaceIsolation {
            pod_namespace: "a".into(),
            target_namespace: "b".into(),
        };
        assert_eq!(
            reply(e),
            (7, "namespace isolation enabled, annotation violates permission, pod is in namespace a but refers to target namespace b".into())
        );
        let e = Error::DefaultNetworkNotReady("/run/ready".into());
        assert_eq!(
            reply(e),
            (11, "have you checked that your default network is ready? still waiting for readinessindicatorfile @ /run/ready".into())
        );
        assert_eq!(
            reply(Error::Config("x".into())).1,
            "invalid multus configuration: x"
        );
        let shared = Error::reply(CniError::new(ErrorCode::InvalidNetworkConfig, "x", ""));
        assert_eq!(reply(shared), (7, "x".into()));
        assert_eq!(reply(Error::CniArgs("x".into())).0, 4);
        assert_eq!(
            reply(Error::DaemonProtocol {
                op: "read request",
                reason: "r".into()
            })
            .0,
            6
        );
    }

    // multus answers code 5 for file errors, the other plugins 999.
    #[test]
    fn io_codes_differ_by_plugin_family() {
        let multus = reply(Error::io("read", "/etc/x", not_found()));
        assert_eq!(multus, (5, "read /etc/x: No such file or directory".into()));
        // A kernel failure multus shares with the other plugins keeps their
        // code (999) and message.
        let kernel = cni_netns::Error::InvalidArgument {
            op: "set x".into(),
            reason: "y".into(),
        };
        let text = kernel.to_string();
        assert_eq!(reply(Error::from(kernel)), (999, text));
        let e = Error::DaemonUnreachable {
            path: "/run/m.sock".into(),
            source: not_found(),
        };
        assert_eq!(reply(e).0, 11);
    }

    #[test]
    fn delegate_replies_keep_code_and_details() {
        let plugin = CniError::new(ErrorCode::Other(100), "boom", "detail");
        let e = Error::DelegateFailed {
            network: "net".into(),
            ifname: "net1".into(),
            error: Box::new(plugin.clone()),
        };
        let c = e.to_cni_error();
        assert_eq!(
            (c.code, c.details.as_str()),
            (ErrorCode::Other(100), "detail")
        );
        assert_eq!(c.msg, "delegate \"net\" (net1): boom; detail");
        assert_eq!(CniError::from(Error::reply(plugin.clone())), plugin);
        let many = Error::Multiple(vec![Error::reply(plugin), Error::DefaultRouteEcmp]);
        assert_eq!(many.code(), ErrorCode::Other(100));
        assert_eq!(
            many.to_string(),
            "errors: boom; detail / multus does not support ECMP for default-route"
        );
    }

    #[test]
    fn api_status_retry_and_codes() {
        let status = |status| Error::ApiStatus {
            op: "get pod".into(),
            status,
            message: "m".into(),
        };
        assert!(status(503).is_retriable() && status(429).is_retriable());
        assert!(!status(403).is_retriable());
        assert_eq!(
            (status(503).code(), status(403).code()),
            (ErrorCode::TryAgainLater, ErrorCode::Internal)
        );
        let nf = Error::ApiNotFound {
            op: "get pod".into(),
            kind: "pod".into(),
            namespace: "ns".into(),
            name: "p".into(),
        };
        assert!(nf.is_not_found() && !nf.is_retriable());
    }
}
