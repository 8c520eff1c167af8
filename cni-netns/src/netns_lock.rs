//! [`NetnsLock`]: an exclusive `flock` on a namespace file, to serialise
//! plugins that change one namespace's routing state (Go's sbr locks the
//! namespace path the same way, so both implementations exclude each other).

use std::fs::File;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, Result};

/// Holds an exclusive `flock` on a namespace file until dropped.
#[derive(Debug)]
pub struct NetnsLock {
    _lock: Flock<File>,
}

impl NetnsLock {
    /// Locks `path` (blocking). Unlike Go's `filemutex`, a missing path is
    /// not created: [`Error::NetnsNotFound`] (DEL paths treat it as gone).
    pub fn acquire(path: impl AsRef<Path>) -> Result<NetnsLock> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NetnsNotFound { path: path.into() },
            _ => Error::Netns {
                op: "lock",
                path: path.into(),
                errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            },
        })?;
        let lock =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| Error::Netns {
                op: "lock",
                path: path.into(),
                errno,
            })?;
        Ok(NetnsLock { _lock: lock })
    }
}
