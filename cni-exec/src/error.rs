//! The crate's error enum.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_types::{CniError, ErrorCode};

/// Errors of the runtime side (invoking plugins, loading configs, the
/// result cache) and of delegation from a plugin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin ran and replied with an error (or failed in a way the
    /// reply was built from, as Go's `RawExec.pluginErr` does).
    #[error("{0}")]
    Plugin(CniError),
    /// Delegation was asked of an executor that runs nothing ([`NoExec`](crate::NoExec)):
    /// give the request or environment a real one.
    #[error(
        "delegate to plugin {0:?}: no executor was given (Env::with_exec / RequestBuilder::exec)"
    )]
    NoExecutor(String),
    /// No plugin type was given.
    #[error("no plugin name provided")]
    NoPluginName,
    /// A plugin type containing a path separator.
    #[error("invalid plugin name: {0}")]
    InvalidPluginName(String),
    /// `CNI_PATH` is empty.
    #[error("no paths provided")]
    NoPaths,
    /// No regular file with the plugin's name in any `CNI_PATH` directory.
    #[error("failed to find plugin {plugin:?} in path {paths:?}")]
    PluginNotFound {
        /// The plugin type.
        plugin: String,
        /// The directories searched.
        paths: Vec<PathBuf>,
    },
    /// Starting the plugin process failed.
    #[error("exec plugin {path}: {source}")]
    Spawn {
        /// The plugin binary.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The plugin ran past the timeout and was killed.
    #[error("plugin {path} timed out after {timeout:?} and was killed")]
    Timeout {
        /// The plugin binary.
        path: PathBuf,
        /// The timeout.
        timeout: Duration,
    },
    /// The plugin wrote more than the cap to its stdout or stderr and was
    /// killed.
    #[error("plugin {path} wrote more than {limit} bytes to its {stream} and was killed")]
    OutputTooLarge {
        /// The plugin binary.
        path: PathBuf,
        /// "stdout" or "stderr".
        stream: &'static str,
        /// The cap, in bytes.
        limit: usize,
    },
    /// The plugin printed something that is not a result of the version it
    /// claims.
    #[error("decode result of plugin {plugin:?}: {source}")]
    DecodeResult {
        /// The plugin type.
        plugin: String,
        /// Why.
        source: cni_types::Error,
    },
    /// The plugin's VERSION reply does not decode.
    #[error("decoding version info of plugin {plugin:?}: {reason}")]
    DecodeVersion {
        /// The plugin type.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// A file mechanism of `cni-files` failed (the atomic writer, a lock)
    /// in a way that is not a plain I/O error (those become [`Error::Io`]).
    #[error(transparent)]
    Files(cni_files::Error),
    /// Bad spec data (config, version, name).
    #[error(transparent)]
    Types(#[from] cni_types::Error),
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("read", "write cache file", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A config file does not parse.
    #[error("{path}: {source}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: cni_types::Error,
    },
    /// No config in `dir` has the network name.
    #[error("no net configuration with name \"{name}\" in {dir}")]
    ConfigNotFound {
        /// The directory searched.
        dir: PathBuf,
        /// The network name.
        name: String,
    },
    /// `dir` holds no `.conf`/`.json` file.
    #[error("no net configurations found in {dir}")]
    NoConfigsFound {
        /// The directory searched.
        dir: PathBuf,
    },
    /// A conflist that ends up with no plugin (`plugins` absent and an empty
    /// `<dir>/<name>/` folder).
    #[error("no plugin configs found")]
    NoPluginConfigs,
    /// CHECK on a list older than 0.4.0.
    #[error("configuration version \"{0}\" does not support the CHECK command")]
    CheckNotSupported(String),
    /// A plugin of the chain failed; names it as libcni does.
    #[error("plugin {plugin} failed ({op}): {source}")]
    Chain {
        /// `type="x" name="n"`.
        plugin: String,
        /// "add", "check", "delete".
        op: &'static str,
        /// The plugin's error.
        source: Box<Error>,
    },
    /// The plugin does not list the config's version.
    #[error("plugin {plugin} does not support config version \"{version}\"")]
    UnsupportedVersion {
        /// The plugin type.
        plugin: String,
        /// The config version.
        version: String,
    },
    /// The result cache of an attachment is unreadable.
    #[error("failed to get network \"{network}\" cached result: {reason}")]
    Cache {
        /// The network name.
        network: String,
        /// Why.
        reason: String,
    },
    /// Several operations failed (GC, validate).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Multiple(Vec<Error>),
    /// The in-process registry has no plugin of this type.
    #[error("no in-process plugin registered for type {0:?}")]
    NotRegistered(String),
}

impl Error {
    /// Wraps an I/O failure of `op` on `path`:
    /// `.map_err(Error::io("read", path))`.
    pub(crate) fn io<'a>(
        op: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> Error + 'a {
        move |source| Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether this error says a file is missing.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::Files(e) => e.is_not_found(),
            _ => false,
        }
    }

    /// The CNI error code this error carries: the plugin's own code for a
    /// plugin error, 999 (internal) for anything else, as the Go skel wraps
    /// non-CNI errors.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Plugin(e) => e.code,
            Error::Chain { source, .. } => source.code(),
            Error::Types(e) => e.code(),
            _ => ErrorCode::Internal,
        }
    }

    /// The error as a CNI error reply. A plugin error keeps its code,
    /// message and details (so a delegate's code 50 reaches the runtime).
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Error::Plugin(e) => e.clone(),
            Error::Types(e) => e.to_cni_error(),
            other => CniError::new(other.code(), other.to_string(), ""),
        }
    }
}

/// The file mechanisms' I/O errors keep their operation and path as
/// [`Error::Io`].
impl From<cni_files::Error> for Error {
    fn from(e: cni_files::Error) -> Self {
        match e {
            cni_files::Error::Io { op, path, source } => Error::Io { op, path, source },
            other => Error::Files(other),
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        e.to_cni_error()
    }
}
