//! The flannel plugin's errors.

use cni_types::ErrorCode;

/// Why a flannel plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// flanneld's `subnet.env` could not be read or parsed.
    #[error("failed to load flannel 'subnet.env' file: {source}. Check the flannel pod log for this node.")]
    SubnetEnv {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: Box<Error>,
    },
    /// The config does not load (code 7).
    #[error("failed to load flannel netconf file: {source}")]
    NetconfLoad {
        /// Why.
        source: Box<Error>,
    },
    /// `delegate.type` is not a string (code 7).
    #[error("'delegate' dictionary, if present, must have (string) 'type' field")]
    DelegateTypeNotString,
    /// `delegate` has a key flannel sets itself (code 7).
    #[error("'delegate' dictionary must not have '{key}' field, it'll be set by flannel")]
    DelegateKeyForbidden {
        /// The key (`name`, `ipam`).
        key: &'static str,
    },
    /// `ipam.routes` does not decode (code 7).
    #[error("failed to read IPAM routes: failed to parse ipam.routes: {reason}")]
    IpamRoutesInvalid {
        /// The decoder's error.
        reason: String,
    },
    /// A network of `subnet.env` does not parse (code 7).
    #[error("{key}: {reason}")]
    SubnetEnvNetwork {
        /// The key.
        key: String,
        /// The parser's error.
        reason: String,
    },
    /// `FLANNEL_MTU` of `subnet.env` does not parse (code 7).
    #[error("FLANNEL_MTU {value:?}: {reason}")]
    SubnetEnvMtu {
        /// The value.
        value: String,
        /// The parser's error.
        reason: String,
    },
    /// `subnet.env` lacks required keys (code 7).
    #[error("{} is missing {}", .path.display(), .keys.join(", "))]
    SubnetEnvMissing {
        /// The file.
        path: std::path::PathBuf,
        /// The keys missing.
        keys: Vec<&'static str>,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::NetconfLoad { .. }
            | Error::DelegateTypeNotString
            | Error::DelegateKeyForbidden { .. }
            | Error::IpamRoutesInvalid { .. }
            | Error::SubnetEnvNetwork { .. }
            | Error::SubnetEnvMtu { .. }
            | Error::SubnetEnvMissing { .. } => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the flannel plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
