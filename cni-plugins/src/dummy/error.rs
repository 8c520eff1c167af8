//! The dummy plugin's errors.

use cni_types::ErrorCode;

/// Why a dummy plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// The config has no IPAM section.
    #[error("dummy interface requires an IPAM configuration")]
    IpamRequired,
    /// CHECK ran without the `prevResult` it compares.
    #[error("dummy: Required prevResult missing")]
    PrevResultMissing,
    /// CHECK: the container interface is down.
    #[error("Interface {ifname} is down")]
    LinkDown {
        /// The interface.
        ifname: String,
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

/// `Result` with the dummy plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
