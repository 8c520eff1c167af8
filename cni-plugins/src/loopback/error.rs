//! The loopback plugin's errors.

use cni_types::ErrorCode;

/// Why a loopback plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// The pod's loopback holds an address outside the loopback ranges.
    #[error("loopback interface found with non-loopback address \"{address}\"")]
    ForeignAddress {
        /// The address.
        address: std::net::IpAddr,
    },
    /// CHECK: the pod's loopback is down.
    #[error("loopback interface is down")]
    Down,
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            _ => ErrorCode::Internal,
        }
    }

    fn shared(&self) -> Option<&crate::Error> {
        match self {
            Error::Shared(e) => Some(e),
            _ => None,
        }
    }
}

crate::plugin_error_glue!(Error);

/// `Result` with the loopback plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
