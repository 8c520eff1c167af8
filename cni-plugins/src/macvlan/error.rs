//! The macvlan plugin's errors.

use cni_types::ErrorCode;

/// Why a macvlan plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// CHECK: the pod link's mode is not the config's.
    #[error("container macvlan mode {found} does not match expected value: {expected}")]
    ModeMismatch {
        /// The link's mode.
        found: String,
        /// The config's mode.
        expected: String,
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

/// `Result` with the macvlan plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
