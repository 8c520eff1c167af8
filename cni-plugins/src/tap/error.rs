//! The tap plugin's errors.

use cni_types::ErrorCode;

/// Why a tap plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// A `*uint32` field of the config holds something else (code 7, Go's
    /// decoder's text).
    #[error("failed to load netconf: json: cannot unmarshal {found} into Go struct field NetConf.{field} of type uint32")]
    FieldNotU32 {
        /// The field.
        field: String,
        /// Go's words for what it holds (`number -1`, `string`...).
        found: String,
    },
    /// The bridge to put the tap device on was not found.
    #[error("failed to get bridge {bridge}: {source}")]
    BridgeLookup {
        /// The bridge.
        bridge: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// CHECK: the tap device was not found.
    #[error("Failed to find interface {ifname}")]
    LinkLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::FieldNotU32 { .. } => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the tap plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
