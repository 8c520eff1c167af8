//! The on-disk store, file-compatible with Go's host-local
//! (containernetworking/plugins `backend/disk/backend.go`, `lock.go`):
//!
//! ```text
//! <dataDir>/<network>/lock                 flock(2)ed around every operation
//! <dataDir>/<network>/<ip>                 "<containerID>\r\n<ifname>", 0600
//! <dataDir>/<network>/last_reserved_ip.<n> "<ip>" of range set n
//! ```
//!
//! Crash safety, beyond Go: a reservation is written to a temporary file,
//! fsynced, then hard-linked to its final name. `link(2)` fails with `EEXIST`
//! when the name exists, which gives Go's `O_EXCL` semantics, and the final
//! name only ever appears with its full content (Go can leave an empty file
//! when it dies between `open` and `write`). The directory is fsynced after
//! every change so a reservation or a release survives a power cut.
//! `last_reserved_ip.<n>` is replaced by rename; it is only a round-robin
//! hint, so its data is not fsynced and an unreadable one is ignored.
//! Temporary files are created only under the lock, so any found while
//! holding it were left by a crashed writer and are removed.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{Flock, FlockArg};

use super::{LockedStore, Owner, Reservation, Store};
use crate::error::{Error, Result};

/// Go's default `dataDir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

const LAST_IP_PREFIX: &str = "last_reserved_ip.";
const LOCK_FILE: &str = "lock";
/// Starts with a dot and never parses as an IP, so Go's backend, which walks
/// the directory and parses names as IPs, ignores these files.
const TEMP_PREFIX: &str = ".cni-ipam-tmp.";

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Checks a network name the way libcni does (`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`),
/// which also guarantees a single path component that is neither `.` nor
/// `..`: the store directory can never escape `dataDir`.
pub fn validate_network_name(name: &str) -> Result<()> {
    let reject = |reason| {
        Err(Error::InvalidNetworkName {
            name: name.to_string(),
            reason,
        })
    };
    let mut bytes = name.bytes();
    match bytes.next() {
        None => return reject("missing network name"),
        Some(b) if !b.is_ascii_alphanumeric() => {
            return reject("invalid characters found in network name")
        }
        Some(_) => {}
    }
    if !bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) {
        return reject("invalid characters found in network name");
    }
    Ok(())
}

/// Reservations of one network under `<dataDir>/<network>/`.
#[derive(Debug)]
pub struct DiskStore {
    dir: PathBuf,
}

/// A locked [`DiskStore`]; the `flock` is released on drop.
#[derive(Debug)]
pub struct DiskStoreLock<'a> {
    store: &'a DiskStore,
    _lock: Flock<File>,
}

impl DiskStore {
    /// Opens (creating with mode 0755 if needed) the directory of `network`
    /// under `data_dir` (Go: `disk.New`). The network name is validated first.
    pub fn open(data_dir: impl AsRef<Path>, network: &str) -> Result<DiskStore> {
        validate_network_name(network)?;
        let dir = data_dir.as_ref().join(network);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(|e| Error::io("create store directory", &dir, e))?;
        Ok(DiskStore { dir })
    }

    /// The network's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// STATUS probe: the directory can be locked and written, and a file in it
    /// can be synced and removed.
    pub fn check_usable(&self) -> Result<()> {
        let lock = self.lock()?;
        let probe = lock.temp_path();
        lock.write_temp(&probe, b"status")?;
        fs::remove_file(&probe).map_err(|e| Error::io("remove probe file", &probe, e))
    }
}

impl Store for DiskStore {
    type Locked<'a> = DiskStoreLock<'a>;

    fn lock(&self) -> Result<DiskStoreLock<'_>> {
        let path = self.dir.join(LOCK_FILE);
        // A fresh open file description per lock: flock(2) locks belong to
        // the description, so this also excludes other threads of this process.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("open lock file", &path, e))?;
        let mut file = file;
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => break lock,
                Err((f, nix::errno::Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(Error::io("lock", &path, std::io::Error::from(errno)))
                }
            }
        };
        Ok(DiskStoreLock {
            store: self,
            _lock: lock,
        })
    }
}

impl DiskStoreLock<'_> {
    fn dir(&self) -> &Path {
        &self.store.dir
    }

    fn temp_path(&self) -> PathBuf {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        self.dir()
            .join(format!("{TEMP_PREFIX}{}.{n}", std::process::id()))
    }

    /// Creates `path` exclusively with `content`, synced to disk.
    fn write_temp(&self, path: &Path, content: &[u8]) -> Result<()> {
        let result = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| {
                f.write_all(content)?;
                f.sync_all()
            });
        result.map_err(|e| {
            let _ = fs::remove_file(path);
            Error::io("write temporary file", path, e)
        })
    }

    fn sync_dir(&self) -> Result<()> {
        File::open(self.dir())
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("sync directory", self.dir(), e))
    }

    /// Lists the directory: reserved addresses by file name, removing stale
    /// temporary files on the way.
    fn scan(&self) -> Result<Vec<(IpAddr, PathBuf)>> {
        let entries =
            fs::read_dir(self.dir()).map_err(|e| Error::io("read directory", self.dir(), e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("read directory", self.dir(), e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(TEMP_PREFIX) {
                let _ = fs::remove_file(entry.path());
                continue;
            }
            // Go's GetByID keeps the files whose name parses as an IP; that
            // skips `lock` and `last_reserved_ip.*`.
            let Ok(ip) = name.parse::<IpAddr>() else {
                continue;
            };
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            out.push((ip, entry.path()));
        }
        Ok(out)
    }

    /// Fallback for file systems without hard links: Go's direct `O_EXCL`
    /// create and write.
    fn reserve_direct(&self, target: &Path, content: &[u8]) -> Result<bool> {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(target)
        {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::io("create reservation", target, e)),
            Ok(mut f) => match f.write_all(content).and_then(|()| f.sync_all()) {
                Ok(()) => Ok(true),
                Err(e) => {
                    let _ = fs::remove_file(target);
                    Err(Error::io("write reservation", target, e))
                }
            },
        }
    }
}

impl LockedStore for DiskStoreLock<'_> {
    fn reservations(&mut self) -> Result<Vec<Reservation>> {
        let mut out = Vec::new();
        for (ip, path) in self.scan()? {
            // Like Go, a file that vanished or cannot be read is skipped.
            if let Ok(bytes) = fs::read(&path) {
                out.push(Reservation::from_content(
                    ip,
                    &String::from_utf8_lossy(&bytes),
                ));
            }
        }
        Ok(out)
    }

    fn reserved_ips(&mut self) -> Result<HashSet<IpAddr>> {
        Ok(self.scan()?.into_iter().map(|(ip, _)| ip).collect())
    }

    fn reserve(&mut self, ip: IpAddr, owner: &Owner, range_set: usize) -> Result<bool> {
        let target = self.dir().join(ip.to_string());
        let content = owner.file_content();
        let temp = self.temp_path();
        self.write_temp(&temp, content.as_bytes())?;
        let linked = fs::hard_link(&temp, &target);
        let _ = fs::remove_file(&temp);
        let reserved = match linked {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS)
                ) =>
            {
                self.reserve_direct(&target, content.as_bytes())?
            }
            Err(e) => return Err(Error::io("create reservation", &target, e)),
        };
        if !reserved {
            return Ok(false);
        }
        let last = self.dir().join(format!("{LAST_IP_PREFIX}{range_set}"));
        let temp = self.temp_path();
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut f| f.write_all(ip.to_string().as_bytes()))
            .and_then(|()| fs::rename(&temp, &last));
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            // Go reports this failure too, though the reservation stays.
            return Err(Error::io("write last reserved ip", &last, e));
        }
        self.sync_dir()?;
        Ok(true)
    }

    fn last_reserved_ip(&mut self, range_set: usize) -> Result<Option<IpAddr>> {
        let path = self.dir().join(format!("{LAST_IP_PREFIX}{range_set}"));
        match fs::read(&path) {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes)
                .trim()
                .parse::<IpAddr>()
                .ok()
                .map(|ip| ip.to_canonical())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => {
                // Go logs and loses round-robin once; so do we.
                tracing::warn!(path = %path.display(), error = %e, "read last reserved ip");
                Ok(None)
            }
        }
    }

    fn release(&mut self, ip: IpAddr) -> Result<bool> {
        let path = self.dir().join(ip.to_string());
        match fs::remove_file(&path) {
            Ok(()) => {
                self.sync_dir()?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("remove reservation", &path, e)),
        }
    }
}
