//! The `static` plugin's errors: a config the shared decoder refuses
//! (addresses, routes, DNS, `CNI_ARGS`), with Go's texts and codes.

use cni_types::ErrorCode;

/// Why a static IPAM plugin command failed.
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

/// `Result` with the static IPAM plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
