//! [`FileLock`]: the workspace's one exclusive `flock(2)`, held until
//! dropped. The IPAM disk store serialises its writers with it; sbr locks
//! the pod's namespace file (as Go's sbr does, so both exclude each other);
//! the firewall plugin locks a file of its state directory around its
//! read-modify-write of the node's firewall.
//!
//! Each lock opens its own file description, and `flock` locks belong to
//! the description: two threads of one process exclude each other too.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::Error;

/// Holds an exclusive `flock` on a file until dropped.
#[derive(Debug)]
pub struct FileLock {
    _lock: Flock<File>,
}

impl FileLock {
    /// Locks the existing file `path` (blocking). Unlike Go's `filemutex`,
    /// a missing path is not created: an [`Error::Io`] whose source is
    /// [`std::io::ErrorKind::NotFound`] (DEL paths treat it as gone).
    pub fn acquire(path: impl AsRef<Path>) -> Result<FileLock, Error> {
        let path = path.as_ref();
        let file = File::open(path).map_err(Error::io("open lock file", path))?;
        FileLock::lock(file, path)
    }

    /// Locks `path`, creating it (mode 0600) and its directory (mode 0700)
    /// first when missing.
    pub fn create(path: impl AsRef<Path>) -> Result<FileLock, Error> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(Error::io("create lock directory", dir))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(Error::io("open lock file", path))?;
        FileLock::lock(file, path)
    }

    /// Blocks until the lock is held (a signal's `EINTR` retries).
    fn lock(mut file: File, path: &Path) -> Result<FileLock, Error> {
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => return Ok(FileLock { _lock: lock }),
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(Error::io("lock", path)(std::io::Error::from(errno)))
                }
            }
        }
    }
}
