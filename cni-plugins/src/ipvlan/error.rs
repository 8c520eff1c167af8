//! The ipvlan plugin's errors.

use cni_types::ErrorCode;

/// Why a ipvlan plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// CHECK: the pod link's mode is not the config's.
    #[error("Container IPVlan mode {found} does not match expected value: {expected}")]
    ModeMismatch {
        /// The link's mode.
        found: String,
        /// The config's mode.
        expected: String,
    },
    /// A chained ipvlan without `master` and without a single named
    /// interface in the previous result.
    #[error("chained master failure. PrevResult lacks a single named interface")]
    ChainedMasterMissing,
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

/// `Result` with the ipvlan plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
