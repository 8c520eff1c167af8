//! The crate's error enum.

use std::path::PathBuf;

/// Why a collection pass did nothing, or an action of it failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The collector would have to guess which attachments are dead: it
    /// collects nothing.
    #[error("collect leaked attachments: refused: {reason}")]
    CollectRefused {
        /// What it could not tell.
        reason: String,
    },
    /// The command line of `cni-gc` is wrong (the text ends with the
    /// usage).
    #[error("{0}")]
    ParseArgs(String),
    /// The runtime could not list its sandboxes or tell a sandbox's
    /// network mode ([`crate::SandboxLister`]).
    #[error(transparent)]
    Runtime(Box<dyn std::error::Error + Send + Sync>),
    /// A CRI call failed (making the client, listing sandboxes).
    #[error(transparent)]
    Cri(#[from] cni_cri::Error),
    /// libcni failed: reading the cache or the configs, a plugin's DEL or
    /// GC.
    #[error(transparent)]
    Exec(#[from] cni_exec::Error),
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("remove cache file").
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Error {
    /// A runtime's own error, for a [`crate::SandboxLister`] that is not
    /// the CRI one: `Error::runtime("no answer")`, or any error type.
    pub fn runtime(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error::Runtime(e.into())
    }
}
