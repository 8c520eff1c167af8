//! The host-local plugin's errors.

use cni_types::ErrorCode;

/// Why a host-local plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// GC without `cni.dev/valid-attachments` (code 7): every reservation
    /// would look stale.
    #[error(
        "GC needs the valid attachments list ({})",
        cni_types::config::VALID_ATTACHMENTS_KEY
    )]
    ValidAttachmentsMissing,
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::ValidAttachmentsMissing => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the host-local plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
