//! The crate's error type.

use std::path::PathBuf;

/// Errors of the kit itself (a misbehaving plugin is a failed case, not an
/// error) and of the test API server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Certificate generation failed.
    #[cfg(feature = "kube-server")]
    #[error("generate test certificate {what}: {reason}")]
    Cert {
        /// Which certificate.
        what: &'static str,
        /// The generator's message.
        reason: String,
    },
    /// TLS configuration failed.
    #[cfg(feature = "kube-server")]
    #[error("configure TLS for the test API server: {0}")]
    Tls(String),
    /// A socket, file or process operation failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A CRI call of the containerd fixture failed (feature `containerd`).
    #[cfg(feature = "containerd")]
    #[error("{op}: {source}")]
    Runtime {
        /// What was being done.
        op: String,
        /// The client's error.
        source: Box<cni_cri::Error>,
    },
    /// Setting up the conformance sandbox's kernel state failed.
    #[error("{op}: {source}")]
    Kernel {
        /// What was being done.
        op: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Another step of the conformance sandbox's set-up failed.
    #[error("{op}: {reason}")]
    Setup {
        /// What was being done.
        op: String,
        /// Why it failed.
        reason: String,
    },
    /// The plugin binary does not exist.
    #[error("plugin binary {path} not found")]
    PluginNotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The kit has no built-in config for the plugin's type.
    #[error("no built-in config for plugin type {plugin_type:?}: pass one with --config")]
    UnknownPluginType {
        /// The type (the binary's file name).
        plugin_type: String,
    },
    /// The run was cancelled through [`Options::cancel`](crate::conformance::Options::cancel);
    /// everything it created has been removed.
    #[error("interrupted; the kit's namespaces and files are removed")]
    Interrupted,
    /// A config file cannot be used.
    #[error("config {path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

pub(crate) fn io_err(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let op = op.into();
    move |source| Error::Io { op, source }
}
