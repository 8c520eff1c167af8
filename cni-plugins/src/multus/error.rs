//! The errors of the multus plugin, each mapped to a CNI error code.

use std::path::PathBuf;

use cni_types::{CniError, ErrorCode};

/// Everything multus can fail at. Variants name the operation and the object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    /// A delegate configuration (inline, file or NAD) is unusable (code 7).
    #[error("load delegate {what}: {reason}")]
    Delegate {
        /// Which delegate (index, file or NAD).
        what: String,
        /// Why.
        reason: String,
    },
    /// The pod's network selection annotation is malformed (code 7).
    #[error("parse pod annotation {key} {value:?}: {reason}")]
    Annotation {
        /// The annotation key.
        key: String,
        /// The annotation value.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A network named by the configuration or a pod cannot be found (code 7).
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
    Ecmp,
    /// `CNI_ARGS` lacks what multus needs, or does not parse (code 4).
    #[error("invalid CNI_ARGS: {0}")]
    Args(String),
    /// A kubeconfig or in-cluster config cannot be used (code 7).
    #[error("load Kubernetes client config {source_name}: {reason}")]
    KubeConfig {
        /// The kubeconfig path, or "in-cluster".
        source_name: String,
        /// Why.
        reason: String,
    },
    /// The API server says the object does not exist (code 7).
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
    /// The API server answered with an error status (code 11 for 5xx and
    /// 429, else 999).
    #[error("{op}: API server answered {status}: {message}")]
    ApiStatus {
        /// The operation.
        op: String,
        /// The HTTP status.
        status: u16,
        /// The Status message, or the body.
        message: String,
    },
    /// The API server could not be reached in time (code 11).
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
    NotReady(PathBuf),
    /// The requested interface already exists in the pod (code 7).
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
    /// A file operation failed (code 5).
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A delegate plugin failed; carries its error reply.
    #[error("delegate {network:?} ({ifname}): {error}")]
    DelegateFailed {
        /// The delegate's network name.
        network: String,
        /// The interface it was attaching.
        ifname: String,
        /// The delegate's error.
        error: Box<CniError>,
    },
    /// Several delegates failed on DEL (errors aggregated, none skipped).
    #[error("errors: {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(" / "))]
    Multiple(Vec<Error>),
    /// Spec data (config, result, args) is invalid.
    #[error(transparent)]
    Types(#[from] cni_types::Error),
}

impl Error {
    /// The CNI error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Config(_)
            | Error::Delegate { .. }
            | Error::Annotation { .. }
            | Error::NetworkNotFound { .. }
            | Error::NamespaceIsolation { .. }
            | Error::DuplicateInterface { .. }
            | Error::InterfaceExists { .. }
            | Error::Ecmp
            | Error::KubeConfig { .. }
            | Error::ApiNotFound { .. }
            | Error::PodUidMismatch { .. } => ErrorCode::InvalidNetworkConfig,
            Error::Decode { .. } => ErrorCode::DecodingFailure,
            Error::Args(_) => ErrorCode::InvalidEnvironmentVariables,
            Error::ApiStatus { status, .. } if *status >= 500 || *status == 429 => {
                ErrorCode::TryAgainLater
            }
            Error::ApiStatus { .. } => ErrorCode::Internal,
            Error::ApiUnreachable { .. } | Error::NotReady(_) => ErrorCode::TryAgainLater,
            Error::Io { .. } => ErrorCode::IoFailure,
            Error::PodNetwork { .. } => ErrorCode::Internal,
            Error::DelegateFailed { error, .. } => error.code,
            Error::Multiple(v) => v.first().map_or(ErrorCode::Internal, Error::code),
            Error::Types(e) => e.code(),
        }
    }

    /// True for "the API server says this object does not exist".
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::ApiNotFound { .. })
    }

    /// True for transient API failures worth retrying within the wait budget.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Error::ApiUnreachable { .. } | Error::ApiStatus { status: 500.., .. }
        ) || matches!(self, Error::ApiStatus { status: 429, .. })
    }

    /// The error reply for this error.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Error::DelegateFailed { error, .. } => {
                CniError::new(error.code, self.to_string(), error.details.clone())
            }
            _ => CniError::new(self.code(), self.to_string(), ""),
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        e.to_cni_error()
    }
}

pub(crate) fn config_err(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

/// multus errors keep their own code when they cross into the crate's
/// error type (carried as an error reply).
impl From<Error> for crate::Error {
    fn from(e: Error) -> Self {
        crate::Error::Delegate(e.to_cni_error())
    }
}
