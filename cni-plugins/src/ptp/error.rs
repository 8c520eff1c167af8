//! The ptp plugin's errors.

use cni_types::ErrorCode;

/// Why a ptp command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// Several teardown steps of DEL or GC failed: all of them.
    #[error("{0}")]
    Teardown(#[from] crate::Failures<Error>),
    /// `mtu` is negative or too large (code 7).
    #[error("invalid MTU {mtu}")]
    MtuInvalid {
        /// The configured MTU.
        mtu: i64,
    },
    /// An address of the IPAM result has no gateway (ptp needs one).
    #[error("IPAM result for {address} has no gateway")]
    IpamNoGateway {
        /// The address.
        address: String,
    },
    /// An address of the IPAM result is its own gateway (or the node
    /// side's address): the pod and the node would both hold it.
    #[error("IPAM result for {address} has the address as its gateway {gateway}")]
    IpamAddressIsGateway {
        /// The address.
        address: String,
        /// The gateway.
        gateway: String,
    },
    /// A prefix derived from an IPAM address is invalid (the gateway and
    /// host routes).
    #[error("{object}: {reason}")]
    InvalidPrefix {
        /// What was being derived (`subnet of 10.1.0.2/24`).
        object: String,
        /// Why it is invalid.
        reason: String,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::Teardown(all) => all.code(),
            Error::MtuInvalid { .. } => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the ptp plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
