//! [`FileLock`]: an exclusive `flock` held until dropped. sbr locks the
//! pod's namespace file with it (as Go's sbr does, so both exclude each
//! other); the firewall plugin locks a file of its state directory around
//! its read-modify-write of the node's firewall.

use std::fs::File;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, Result};

/// Holds an exclusive `flock` on a file until dropped.
#[derive(Debug)]
pub struct FileLock {
    _lock: Flock<File>,
}

fn errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

impl FileLock {
    /// Locks the existing file `path` (blocking). Unlike Go's `filemutex`,
    /// a missing path is not created: [`Error::NetnsNotFound`] (DEL paths
    /// treat it as gone).
    pub fn acquire(path: impl AsRef<Path>) -> Result<FileLock> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NetnsNotFound { path: path.into() },
            _ => Error::Netns {
                op: "lock",
                path: path.into(),
                errno: errno(&e),
            },
        })?;
        FileLock::lock(file, path)
    }

    /// Locks `path`, creating it (and its directory, mode 0700) first.
    pub fn create(path: impl AsRef<Path>) -> Result<FileLock> {
        use std::os::unix::fs::DirBuilderExt;
        let path = path.as_ref();
        let fail = |e: std::io::Error| Error::Netns {
            op: "create lock file",
            path: path.into(),
            errno: errno(&e),
        };
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(fail)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(fail)?;
        FileLock::lock(file, path)
    }

    fn lock(file: File, path: &Path) -> Result<FileLock> {
        let lock =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| Error::Netns {
                op: "lock",
                path: path.into(),
                errno,
            })?;
        Ok(FileLock { _lock: lock })
    }
}
