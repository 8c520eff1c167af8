//! The vlan plugin's errors.

use cni_types::ErrorCode;

/// Why a vlan plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// The config names no master link.
    #[error(
        "\"master\" field is required. It specifies the host interface name to create the VLAN for"
    )]
    MasterMissing,
    /// The VLAN ID is outside 0..=4094 (Go's message says 4095).
    #[error("invalid VLAN ID {id} (must be between 0 and 4095 inclusive)")]
    IdInvalid {
        /// The configured ID.
        id: i64,
    },
    /// The config has no IPAM section.
    #[error("vlan requires an IPAM configuration (\"ipam\")")]
    IpamRequired,
    /// CHECK ran without the `prevResult` it compares.
    #[error("vlan: Required prevResult missing")]
    PrevResultMissing,
    /// CHECK: the link's VLAN ID is not the configured one.
    #[error("Error: link {ifname} configured vlanId is {configured}, current value is {}", .current.map(|c| c.to_string()).unwrap_or_default())]
    IdMismatch {
        /// The VLAN link.
        ifname: String,
        /// The configured ID.
        configured: u16,
        /// The link's ID (`None`: not a VLAN).
        current: Option<u16>,
    },
    /// CHECK: the link's MTU is not the configured one.
    #[error("Error: configured MTU of {ifname} is {configured}, current value is {current}")]
    MtuMismatch {
        /// The link.
        ifname: String,
        /// The configured MTU.
        configured: i64,
        /// The link's MTU.
        current: u32,
    },
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

/// `Result` with the vlan plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
