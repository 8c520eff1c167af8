//! The passthru plugin's errors: a `prevResult` that does not decode,
//! with the text and code of the shared decoder.

use cni_types::ErrorCode;

/// Why a passthru plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, types, IPAM...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
        }
    }

    fn shared(&self) -> Option<&crate::Error> {
        match self {
            Error::Shared(e) => Some(e),
        }
    }
}

crate::plugin_error_glue!(Error);

/// `Result` with the passthru plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
