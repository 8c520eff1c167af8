//! The crate's error enum.

use std::path::{Path, PathBuf};

/// A file-system operation of this crate failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file-system operation failed: `op` on `path`.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("create temporary file", "rename onto",
        /// "lock", "listen on", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
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

    /// Whether this error says a file is missing (a
    /// [`FileLock::acquire`](crate::FileLock::acquire) of a namespace that
    /// is gone).
    pub fn is_not_found(&self) -> bool {
        self.io_kind() == Some(std::io::ErrorKind::NotFound)
    }

    /// The kind of the OS error underneath.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
        }
    }
}
