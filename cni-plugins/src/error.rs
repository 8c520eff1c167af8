//! The plugins' error enum, and its mapping to CNI error codes (the one
//! place where plugin failures become error replies). multus has its own
//! (`multus::Error`), which wraps this one for what it shares.

use cni_types::{CniError, ErrorCode};

/// Why a plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin's configuration is invalid (code 7).
    #[error("{0}")]
    Config(String),
    /// Spec data (config, result, args) did not parse or convert.
    #[error(transparent)]
    Types(#[from] cni_types::Error),
    /// A file operation failed (code 999).
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
    /// An I/O error on `path` (code 999).
    pub fn io(op: &'static str, path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// A failed file operation of `cni-exec`'s file mechanics (the atomic
    /// writer [`cni_exec::atomic`], [`cni_exec::FileLock`]): its I/O errors
    /// stay [`Error::Io`] (operation and file named).
    pub fn atomic_write(e: cni_exec::Error) -> Self {
        match e {
            cni_exec::Error::Io { op, path, source } => Error::io(op, path, source),
            e => Error::Internal(e.to_string()),
        }
    }

    /// The CNI error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Config(_) => ErrorCode::InvalidNetworkConfig,
            Error::Types(e) => e.code(),
            Error::Ipam(e) => e.code(),
            Error::Cni(reply) | Error::Delegate(reply) => reply.code,
            Error::NotAvailable(_) => ErrorCode::PluginNotAvailable,
            Error::Io { .. } | Error::Kernel(_) | Error::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The error reply for this error.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Error::Types(e) => e.to_cni_error(),
            Error::Ipam(e) => e.to_cni_error(),
            Error::Cni(reply) | Error::Delegate(reply) => reply.clone(),
            _ => CniError::new(self.code(), self.to_string(), ""),
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        match e {
            Error::Delegate(reply) | Error::Cni(reply) => reply,
            e => e.to_cni_error(),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(e: Error) -> (u32, String) {
        let c = CniError::from(e);
        (c.code.as_u32(), c.msg)
    }

    #[test]
    fn texts_and_codes() {
        assert_eq!(reply(Error::Config("x".into())), (7, "x".into()));
        let not_found = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        assert_eq!(
            reply(Error::io("read", "/etc/x", not_found)),
            (999, "read /etc/x: No such file".into())
        );
        assert_eq!(reply(Error::NotAvailable("x".into())).0, 50);
    }

    #[test]
    fn replies_pass_unchanged() {
        let plugin = CniError::new(ErrorCode::Other(100), "boom", "detail");
        assert_eq!(CniError::from(Error::Delegate(plugin.clone())), plugin);
        assert_eq!(Error::Cni(plugin.clone()).to_cni_error(), plugin);
    }
}
