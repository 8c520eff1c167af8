//! The plugins' error enum, and its mapping to CNI error codes (the one
//! place where plugin failures become error replies).

use cni_types::{CniError, ErrorCode};

/// Why a plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin's configuration is invalid (code 7).
    #[error("{0}")]
    Config(String),
    /// Spec data did not parse or convert.
    #[error(transparent)]
    Types(#[from] cni_types::Error),
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("read", "write", "remove"...).
        op: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An IPAM operation failed; its code comes from [`cni_ipam::Error::code`].
    #[error(transparent)]
    Ipam(#[from] cni_ipam::Error),
    /// A finished error reply, passed on unchanged.
    #[error("{0}")]
    Cni(CniError),
    /// A delegated plugin failed; its error reply is passed on unchanged.
    #[error("{0}")]
    Delegate(CniError),
    /// The plugin cannot serve requests now (STATUS, code 50).
    #[error("{0}")]
    NotAvailable(String),
    /// A kernel operation (namespace, link, address, route, sysctl,
    /// firewall) failed; the error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] cni_netns::Error),
    /// Any other failure (code 999).
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(op: &'static str, path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        match e {
            Error::Config(msg) => CniError::new(ErrorCode::InvalidNetworkConfig, msg, ""),
            Error::Types(e) => e.to_cni_error(),
            Error::Delegate(reply) | Error::Cni(reply) => reply,
            Error::Ipam(e) => e.to_cni_error(),
            Error::NotAvailable(msg) => CniError::new(ErrorCode::PluginNotAvailable, msg, ""),
            e @ (Error::Io { .. } | Error::Kernel(_) | Error::Internal(_)) => {
                CniError::internal(e.to_string())
            }
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
