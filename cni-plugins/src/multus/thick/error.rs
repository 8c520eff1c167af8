//! The errors of the multus daemon and shim.

use std::path::PathBuf;

use cni_types::{CniError, ErrorCode};

/// What the daemon, the shim, auto-configuration or the certificate
/// manager can fail at. Variants name the operation and the object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The daemon configuration is invalid.
    #[error("invalid daemon configuration {}: {reason}", path.display())]
    Config {
        /// The configuration file ("" when given inline).
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file or socket operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The file, socket or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The daemon's socket could not be reached (the shim then falls back
    /// on DEL).
    #[error("connect to multus daemon at {}: {source}", path.display())]
    Unreachable {
        /// The socket.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An HTTP exchange over the socket was malformed.
    #[error("{op}: {reason}")]
    Protocol {
        /// The operation ("read request", "read daemon reply"...).
        op: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The Kubernetes API refused or failed a certificate operation.
    #[error("{op}: {reason}")]
    Certificate {
        /// The operation.
        op: String,
        /// Why.
        reason: String,
    },
    /// An error of the thin multus code the daemon runs.
    #[error(transparent)]
    Multus(#[from] crate::multus::Error),
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The error reply for this error.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Error::Multus(e) => e.to_cni_error(),
            Error::Config { .. } => CniError::invalid_config(self.to_string()),
            Error::Io { .. } => CniError::new(ErrorCode::IoFailure, self.to_string(), ""),
            Error::Unreachable { .. } => {
                CniError::new(ErrorCode::TryAgainLater, self.to_string(), "")
            }
            Error::Protocol { .. } => {
                CniError::new(ErrorCode::DecodingFailure, self.to_string(), "")
            }
            Error::Certificate { .. } => CniError::internal(self.to_string()),
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        e.to_cni_error()
    }
}
