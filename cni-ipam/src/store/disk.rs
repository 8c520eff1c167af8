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
//! when it dies between `open` and `write`), even after a power cut.
//!
//! The directory itself is deliberately *not* fsynced after a reservation or
//! a release: that would make the *name* durable across a power cut, which
//! buys nothing here (every pod dies with the node: a lost reservation frees
//! an address whose pod is gone, and a lost release is a stale reservation
//! that GC removes) and costs a full journal commit per call (7 ms median on
//! the VM disk we measured, more than the Go plugin's whole ADD). Go does not
//! sync at all.
//! `last_reserved_ip.<n>` is replaced by rename; it is only a round-robin
//! hint, so its data is not fsynced and an unreadable one is ignored.
//! Temporary files are created only under the lock, so any found while
//! holding it were left by a crashed writer and are removed.
//!
//! Owner index, beyond Go: finding what a container holds (duplicate check,
//! DEL, CHECK) means reading every reservation file in Go's layout, ~270 ms
//! at 60,000 reservations. An index under `<dataDir>/.cni-ipam-index/<network>/`
//! (outside the network directory, so Go's directory walks never see it) maps
//! a hash of each owner key to the addresses it may hold:
//! - every entry is verified against the reservation file before use, so
//!   stale entries (a release by Go, a wiped directory) are harmless;
//! - an entry is written *before* the reservation it describes, so a killed
//!   process can leave an extra entry but never a missing one;
//! - `state` records a fingerprint as of our last write: the boot id, and
//!   inode, size, times and content of every `last_reserved_ip.<n>`. Go
//!   rewrites one of these on every reservation, so a mismatch means a
//!   reservation we did not index, and the index is rebuilt from a full
//!   scan, as it is when `state` is missing. A new boot id also rebuilds, so
//!   a power cut (which can lose unsynced index writes) costs one full scan
//!   per network after the reboot, and index writes need no fsync.
//!   Reservation files created by hand are the one thing it misses.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::{LockedStore, Owner, OwnerMatch, Reservation, Store};
use crate::error::{Error, Result};

/// Go's default `dataDir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

const LAST_IP_PREFIX: &str = "last_reserved_ip.";
const LOCK_FILE: &str = "lock";
/// Starts with a dot and never parses as an IP, so Go's backend, which walks
/// the directory and parses names as IPs, ignores these files.
const TEMP_PREFIX: &str = ".cni-ipam-tmp.";

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
    index_dir: PathBuf,
}

/// A locked [`DiskStore`]; the `flock` is released on drop.
#[derive(Debug)]
pub struct DiskStoreLock<'a> {
    store: &'a DiskStore,
    index_valid: bool,
    state_stale: bool,
    _lock: Flock<File>,
}

const INDEX_DIR: &str = ".cni-ipam-index";
const STATE_FILE: &str = "state";
const STATE_HEADER: &str = "cni-ipam index v1\n";
const BUCKET_HEADER: &str = "cni-ipam owner index v1\n";
/// `last_reserved_ip.<n>` files covered by the fingerprint.
const FINGERPRINTED_SETS: usize = 32;

/// FNV-1a: a stable hash of an owner key. Collisions only merge two owners'
/// lists, which verification against the reservation files sorts out.
fn key_hash(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Owners are spread over 256 bucket files (`00`..`ff`) of `<hash> <ip>`
/// lines: a rebuild writes 256 files, not one per owner, and a lookup reads
/// one small file.
fn bucket_name(hash: u64) -> String {
    format!("{:02x}", hash >> 56)
}

fn reservation_key(r: &Reservation) -> String {
    match &r.ifname {
        Some(ifname) => format!("{}\r\n{}", r.container_id, ifname),
        None => r.container_id.clone(),
    }
}

/// The kernel's boot id: part of the index fingerprint, so that the first
/// operation after a reboot rebuilds the index from the (fsynced)
/// reservations. Index writes are then never synced: within one boot the
/// page cache keeps them in write order, even when a process is killed.
fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl DiskStore {
    /// Opens (creating with mode 0755 if needed) the directory of `network`
    /// under `data_dir` (Go: `disk.New`). The network name is validated first.
    pub fn open(data_dir: impl AsRef<Path>, network: &str) -> Result<DiskStore> {
        validate_network_name(network)?;
        let dir = data_dir.as_ref().join(network);
        let index_dir = data_dir.as_ref().join(INDEX_DIR).join(network);
        for d in [&dir, &index_dir] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(d)
                .map_err(|e| Error::io("create store directory", d, e))?;
        }
        Ok(DiskStore { dir, index_dir })
    }

    /// The network's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// STATUS probe: the directory can be locked and written, and a file in it
    /// can be synced and removed.
    pub fn check_usable(&self) -> Result<()> {
        let lock = self.lock()?;
        let probe = lock.temp_path("probe");
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
            index_valid: false,
            state_stale: false,
            _lock: lock,
        })
    }
}

impl DiskStoreLock<'_> {
    fn dir(&self) -> &Path {
        &self.store.dir
    }

    /// A temporary file name for one purpose. Fixed names suffice because
    /// temporary files are only written under the lock, and a fixed name is
    /// reused (so cleaned up) by the next writer after a crash.
    fn temp_path(&self, purpose: &str) -> PathBuf {
        self.dir().join(format!("{TEMP_PREFIX}{purpose}"))
    }

    /// Creates `path` (replacing a leftover) with `content`, synced to disk.
    fn write_temp(&self, path: &Path, content: &[u8]) -> Result<()> {
        let result = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
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

    fn index_dir(&self) -> &Path {
        &self.store.index_dir
    }

    /// The fingerprint of every `last_reserved_ip.<n>` (see the module doc).
    fn fingerprint(&self) -> String {
        use std::os::unix::fs::MetadataExt;
        let mut out = format!("{STATE_HEADER}boot {}\n", boot_id());
        for i in 0..FINGERPRINTED_SETS {
            let path = self.dir().join(format!("{LAST_IP_PREFIX}{i}"));
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let content = fs::read(&path).unwrap_or_default();
            out.push_str(&format!(
                "{i} {} {} {}.{} {}.{} {:?}\n",
                meta.ino(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec(),
                String::from_utf8_lossy(&content)
            ));
        }
        out
    }

    /// Makes the owner index usable for this lock session, rebuilding it
    /// when reservations were made behind its back.
    fn ensure_index(&mut self) -> Result<()> {
        if self.index_valid {
            return Ok(());
        }
        let state = fs::read_to_string(self.index_dir().join(STATE_FILE)).ok();
        if state.as_deref() == Some(self.fingerprint().as_str()) {
            self.index_valid = true;
            return Ok(());
        }
        self.rebuild_index()
    }

    fn rebuild_index(&mut self) -> Result<()> {
        let index_dir = self.index_dir().to_path_buf();
        let state = index_dir.join(STATE_FILE);
        match fs::remove_file(&state) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove index state", &state, e)),
        }
        let mut buckets: std::collections::BTreeMap<String, Vec<(u64, IpAddr)>> =
            Default::default();
        for r in self.reservations()? {
            let hash = key_hash(&reservation_key(&r));
            buckets
                .entry(bucket_name(hash))
                .or_default()
                .push((hash, r.ip));
        }
        let entries =
            fs::read_dir(&index_dir).map_err(|e| Error::io("read directory", &index_dir, e))?;
        for entry in entries.flatten() {
            let _ = fs::remove_file(entry.path());
        }
        for (name, lines) in &buckets {
            let path = index_dir.join(name);
            fs::write(&path, bucket_file(lines))
                .map_err(|e| Error::io("write owner index", &path, e))?;
        }
        self.index_valid = true;
        self.write_state()
    }

    fn write_state(&mut self) -> Result<()> {
        let state = self.index_dir().join(STATE_FILE);
        let temp = self.index_dir().join(format!("{TEMP_PREFIX}state"));
        fs::write(&temp, self.fingerprint())
            .and_then(|()| fs::rename(&temp, &state))
            .map_err(|e| Error::io("write index state", &state, e))?;
        self.state_stale = false;
        Ok(())
    }

    fn bucket_lines(&self, bucket: &str) -> Vec<(u64, IpAddr)> {
        let Ok(text) = fs::read_to_string(self.index_dir().join(bucket)) else {
            return Vec::new();
        };
        text.lines()
            .skip(1)
            .filter_map(|l| {
                let (h, ip) = l.split_once(' ')?;
                Some((u64::from_str_radix(h, 16).ok()?, ip.parse().ok()?))
            })
            .collect()
    }

    fn owner_ips(&self, hash: u64) -> Vec<IpAddr> {
        self.bucket_lines(&bucket_name(hash))
            .into_iter()
            .filter(|(h, _)| *h == hash)
            .map(|(_, ip)| ip)
            .collect()
    }

    /// Adds (`add`) or removes an index entry.
    fn update_owner(&self, hash: u64, ip: IpAddr, add: bool) -> Result<()> {
        let bucket = bucket_name(hash);
        let mut lines = self.bucket_lines(&bucket);
        let present = lines.contains(&(hash, ip));
        if present == add {
            return Ok(());
        }
        if add {
            lines.push((hash, ip));
        } else {
            lines.retain(|l| *l != (hash, ip));
        }
        let path = self.index_dir().join(&bucket);
        let temp = self.index_dir().join(format!("{TEMP_PREFIX}{bucket}"));
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut f| f.write_all(bucket_file(&lines).as_bytes()))
            .and_then(|()| fs::rename(&temp, &path));
        written.map_err(|e| Error::io("write owner index", &path, e))
    }

    fn read_reservation(&self, ip: IpAddr) -> Option<Reservation> {
        let bytes = fs::read(self.dir().join(ip.to_string())).ok()?;
        Some(Reservation::from_content(
            ip,
            &String::from_utf8_lossy(&bytes),
        ))
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
        // Names only: no per-entry path or metadata. Any entry named like an
        // IP blocks that address, as it blocks Go's O_EXCL create.
        let entries =
            fs::read_dir(self.dir()).map_err(|e| Error::io("read directory", self.dir(), e))?;
        let mut out = HashSet::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("read directory", self.dir(), e))?;
            if let Some(ip) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<IpAddr>().ok())
            {
                out.insert(ip);
            }
        }
        Ok(out)
    }

    fn held_by(&mut self, owner: &Owner) -> Result<Vec<Reservation>> {
        self.ensure_index()?;
        let mut out: Vec<Reservation> = Vec::new();
        for key in [owner.file_content(), owner.container_id.trim().to_string()] {
            for ip in self.owner_ips(key_hash(&key)) {
                if out.iter().any(|r| r.ip == ip) {
                    continue;
                }
                if let Some(r) = self.read_reservation(ip) {
                    if r.matches(owner) != OwnerMatch::None {
                        out.push(r);
                    }
                }
            }
        }
        Ok(out)
    }

    fn is_reserved(&mut self, ip: IpAddr) -> Result<bool> {
        let path = self.dir().join(ip.to_string());
        match fs::symlink_metadata(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("stat reservation", &path, e)),
        }
    }

    fn reindex(&mut self) -> Result<()> {
        self.rebuild_index()
    }

    fn reserve(&mut self, ip: IpAddr, owner: &Owner, range_set: usize) -> Result<bool> {
        self.ensure_index()?;
        let content = owner.file_content();
        // The index entry goes first (see the module doc).
        self.update_owner(key_hash(&content), ip, true)?;
        let target = self.dir().join(ip.to_string());
        let temp = self.temp_path("reservation");
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
        let temp = self.temp_path("last_reserved_ip");
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut f| f.write_all(ip.to_string().as_bytes()))
            .and_then(|()| fs::rename(&temp, &last));
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            // Go reports this failure too, though the reservation stays.
            return Err(Error::io("write last reserved ip", &last, e));
        }
        self.state_stale = true;
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
        let holder = self.read_reservation(ip);
        match fs::remove_file(&path) {
            Ok(()) => {
                if let Some(r) = holder {
                    // A leftover entry would be harmless (entries are verified).
                    self.update_owner(key_hash(&reservation_key(&r)), ip, false)?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("remove reservation", &path, e)),
        }
    }
}

impl Drop for DiskStoreLock<'_> {
    fn drop(&mut self) {
        // Still under the flock: fields drop after this body.
        if self.state_stale && self.index_valid {
            if let Err(e) = self.write_state() {
                // The next operation sees a mismatch and rebuilds.
                tracing::warn!(error = %e, "write owner index state");
            }
        }
    }
}

fn bucket_file(lines: &[(u64, IpAddr)]) -> String {
    let mut out = String::from(BUCKET_HEADER);
    for (hash, ip) in lines {
        out.push_str(&format!("{hash:016x} {ip}\n"));
    }
    out
}
