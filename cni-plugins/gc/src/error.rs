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
        /// Which of the refusals of docs/cni-gc.md (the metrics' `reason`
        /// label).
        kind: Refusal,
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
    /// Writing the metrics' textfile failed.
    #[error(transparent)]
    Files(#[from] cni_files::Error),
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

/// The kinds of refusal (docs/cni-gc.md, "Refusals"): one each, so
/// that a metric labelled with them stays small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// The runtime cannot be asked (no socket, no answer, a CRI error).
    RuntimeUnavailable,
    /// The conf dir is not a directory.
    ConfDirMissing,
    /// The cache has no `results/` directory.
    NoResultsDir,
    /// The runtime lists no sandbox while young attachments are cached.
    NoSandboxes,
    /// The runtime lists none of the containers cached on a network.
    UnlistedNetwork,
    /// A `--network` name no config has.
    UnknownNetwork,
}

impl Refusal {
    /// Every kind, in the order of docs/cni-gc.md.
    pub const ALL: [Refusal; 6] = [
        Refusal::RuntimeUnavailable,
        Refusal::ConfDirMissing,
        Refusal::NoResultsDir,
        Refusal::NoSandboxes,
        Refusal::UnlistedNetwork,
        Refusal::UnknownNetwork,
    ];

    /// The kind as a metric label value (`runtime_unavailable`, ...).
    pub fn label(self) -> &'static str {
        match self {
            Refusal::RuntimeUnavailable => "runtime_unavailable",
            Refusal::ConfDirMissing => "conf_dir_missing",
            Refusal::NoResultsDir => "no_results_dir",
            Refusal::NoSandboxes => "no_sandboxes",
            Refusal::UnlistedNetwork => "unlisted_network",
            Refusal::UnknownNetwork => "unknown_network",
        }
    }
}

impl Error {
    /// The kind of refusal this is, if it is one: a
    /// [`Error::CollectRefused`], or a CRI or runtime error (the runtime
    /// could not be asked).
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            Error::CollectRefused { kind, .. } => Some(*kind),
            Error::Cri(_) | Error::Runtime(_) => Some(Refusal::RuntimeUnavailable),
            _ => None,
        }
    }

    /// A runtime's own error, for a [`crate::SandboxLister`] that is not
    /// the CRI one: `Error::runtime("no answer")`, or any error type.
    pub fn runtime(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error::Runtime(e.into())
    }
}
