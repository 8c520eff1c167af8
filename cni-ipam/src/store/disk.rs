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
//! then hard-linked to its final name. `link(2)` fails with `EEXIST`
//! when the name exists, which gives Go's `O_EXCL` semantics, and the final
//! name only ever appears with its full content (Go can leave an empty file
//! when it dies between `open` and `write`).
//!
//! Nothing is fsynced by default, as in Go: making a name or its content
//! durable across a power cut buys nothing here (every pod dies with the
//! node: a lost reservation frees an address whose pod is gone, and a lost
//! release is a stale reservation that GC removes) and costs a journal
//! commit per call (more than the Go plugin's whole ADD: BENCHMARKS.md,
//! "Node scale"). A reservation caught unsynced by a power cut may
//! come back empty: it then belongs to no attachment, blocks only its own
//! address, and GC frees it. [`DiskStore::durable`] turns on fsync of files
//! and directories for callers that want every change on disk on return.
//! `last_reserved_ip.<n>` is overwritten in place like Go does; it is only a
//! round-robin hint, so its data is not fsynced and an unreadable one is
//! ignored. Nothing on the ADD/DEL path truncates or renames over a file:
//! on ext4 either one forces a flush of delayed allocation.
//! Temporary files are created only under the lock, so any found while
//! holding it were left by a crashed writer and are removed.
//!
//! Inode pool, beyond Go: creating a file (inode allocation) is most of an
//! ADD on ext4 (BENCHMARKS.md, "Node scale"). A released reservation file is moved to
//! `<dataDir>/.cni-ipam-index/<network>/free/` (at most 64 wait there), and
//! a later reservation rewrites one of them while it is still out of sight,
//! then renames it into place with `RENAME_NOREPLACE`, which fails on an
//! existing name like Go's `O_EXCL`.
//!
//! Nothing is left after a network's last release, beyond Go's own
//! `lock` and `last_reserved_ip.<n>`: the index and the pool below are made
//! when the network gets its first reservation, and the operation that
//! releases its last one removes them (`.cni-ipam-index/<network>/`, and
//! `.cni-ipam-index/` once empty). Without a reservation there is nothing to
//! index, so operations on an empty network make neither.
//!
//! Owner index, beyond Go: finding what a container holds (duplicate check,
//! DEL, CHECK) means reading every reservation file in Go's layout, ~270 ms
//! at 60,000 reservations. An index under `<dataDir>/.cni-ipam-index/<network>/`
//! (outside the network directory, so Go's directory walks never see it) maps
//! a hash of each owner key to the addresses it may hold:
//! - every entry is verified against the reservation file before use, so
//!   stale entries (a release by Go, a wiped directory) are harmless;
//! - an entry is appended (and, when durable, synced) *before* the
//!   reservation it describes, so a crash can leave an extra entry but never
//!   a missing one; releases leave entries behind, and a bucket that grows
//!   past 512 lines is compacted to its verified entries;
//! - `state` records a fingerprint (inode, size, times, content) of every
//!   `last_reserved_ip.<n>` as of our last write. Go rewrites one of these on
//!   every reservation, so a mismatch means a reservation we did not index:
//!   the index is then rebuilt from a full scan, as it is when `state` is
//!   missing. A new boot id also rebuilds, so a power cut (which can lose
//!   unsynced index writes) costs one full scan per network after the
//!   reboot, and index writes need no fsync. Reservation files created by
//!   hand are the one thing it misses.
//!
//! Full disk, beyond Go: every file is written through the shared atomic
//! writer ([`cni_files::atomic`]) or undone on failure, so a failed write
//! (ENOSPC) leaves the old content or no file, never an empty or torn one:
//! a new bucket appears only with its content, a failed append is truncated
//! back to its old length (and `state` removed, so the index is rebuilt),
//! and a failed `state` write removes `state` (missing means "rebuild").

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cni_files::atomic::{self, AtomicWrite};
use cni_files::FileLock;

use super::{LockedStore, Owner, OwnerMatch, Reservation, Store};
use crate::error::{Error, Result};

/// Go's default `dataDir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

const LAST_IP_PREFIX: &str = "last_reserved_ip.";
const LOCK_FILE: &str = "lock";

/// Makes pool names unique within a process (with its pid and the time).
static POOL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Checks a network name the way libcni does (`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`),
/// which also guarantees a single path component that is neither `.` nor
/// `..`: the store directory can never escape `dataDir`.
pub(crate) fn validate_network_name(name: &str) -> Result<()> {
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
    durable: bool,
}

/// A locked [`DiskStore`]; the `flock` is released on drop.
#[derive(Debug)]
pub struct DiskStoreLock<'a> {
    store: &'a DiskStore,
    index_valid: bool,
    state_stale: bool,
    /// A reservation was released in this session: the drop checks
    /// whether it was the network's last.
    released: bool,
    _lock: FileLock,
}

const INDEX_DIR: &str = ".cni-ipam-index";
const STATE_FILE: &str = "state";
const STATE_HEADER: &str = "cni-ipam index v1\n";
const BUCKET_HEADER: &str = "cni-ipam owner index v1\n";
/// `last_reserved_ip.<n>` files covered by the fingerprint.
const FINGERPRINTED_SETS: usize = 32;
/// A bucket with this many lines is compacted on the next append.
const COMPACT_AT: usize = 512;
/// Released reservation files kept for reuse, under the index directory.
const POOL_DIR: &str = "free";
/// At most this many files wait in the pool; more releases unlink.
const POOL_MAX: usize = 64;

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
/// operation after a reboot rebuilds the index from the reservations.
/// Index writes are then never synced: within one boot the page cache keeps
/// them in write order, even when a process is killed.
fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Makes `path` and its missing parents (mode 0755). Retried: the last
/// release of another network may remove an empty `.cni-ipam-index`
/// between the parent's creation and the child's.
fn create_dirs(path: &Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
        {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
            r => return r,
        }
    }
}

fn sync_path(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync directory", path, e))
}

impl DiskStore {
    /// Opens (creating with mode 0755 if needed) the directory of `network`
    /// under `data_dir` (Go: `disk.New`). The network name is validated first.
    /// The owner index and the pool are made with the first reservation.
    pub fn open(data_dir: impl AsRef<Path>, network: &str) -> Result<DiskStore> {
        validate_network_name(network)?;
        let dir = data_dir.as_ref().join(network);
        let index_dir = data_dir.as_ref().join(INDEX_DIR).join(network);
        create_dirs(&dir).map_err(|e| Error::io("create store directory", &dir, e))?;
        Ok(DiskStore {
            dir,
            index_dir,
            durable: false,
        })
    }

    /// Fsyncs every change (files and directories) before returning, so
    /// reservations and releases survive a power cut. Off by default (see
    /// the module doc).
    pub fn durable(mut self, durable: bool) -> DiskStore {
        self.durable = durable;
        self
    }

    /// The network's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// STATUS probe: the directory can be locked and written, and a file in it
    /// can be synced and removed.
    pub fn check_usable(&self) -> Result<()> {
        let lock = self.lock()?;
        let probe = lock.writer().stage(&self.dir.join("probe"), b"status");
        let probe = probe.map_err(Error::atomic_write)?;
        let path = probe.temp_path();
        fs::remove_file(path).map_err(|e| Error::io("remove probe file", path, e))
    }
}

impl Store for DiskStore {
    type Locked<'a> = DiskStoreLock<'a>;

    fn lock(&self) -> Result<DiskStoreLock<'_>> {
        let span = cni_types::step_span!("ipam.lock");
        cni_types::trace::in_step(span, || {
            let path = self.dir.join(LOCK_FILE);
            // Its own file description per lock: this also excludes other
            // threads of this process.
            let lock = FileLock::create(&path).map_err(Error::atomic_write)?;
            Ok(DiskStoreLock {
                store: self,
                index_valid: false,
                state_stale: false,
                released: false,
                _lock: lock,
            })
        })
    }
}

impl DiskStoreLock<'_> {
    fn dir(&self) -> &Path {
        &self.store.dir
    }

    /// The shared atomic writer ([`cni_files::atomic`]) with this store's
    /// durability: its temporary names start with a dot and never parse as
    /// an IP, so Go's backend, which walks the directory and parses names as
    /// IPs, ignores them. They are created only under the lock, so any found
    /// while holding it were left by a crashed writer.
    fn writer(&self) -> AtomicWrite {
        AtomicWrite::new().mode(0o600).fsync(self.store.durable)
    }

    fn sync_dir(&self) -> Result<()> {
        if !self.store.durable {
            return Ok(());
        }
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
            if atomic::is_temp_name(name) {
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
            Ok(()) if self.store.durable => sync_path(&index_dir)?,
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove index state", &state, e)),
        }
        let reservations = self.reservations()?;
        if reservations.is_empty() {
            // Nothing to index: no index (the next reservation makes it).
            self.remove_index();
            self.index_valid = true;
            return Ok(());
        }
        create_dirs(&index_dir).map_err(|e| Error::io("create index directory", &index_dir, e))?;
        let mut buckets: std::collections::BTreeMap<String, Vec<(u64, IpAddr)>> =
            Default::default();
        for r in reservations {
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
            // Through a temporary file, so a full disk leaves no empty or
            // torn bucket (the names are new: no flush on rename). Synced
            // when durable: the state written below must never be durable
            // before the entries it vouches for.
            self.writer()
                .write(&index_dir.join(name), bucket_file(lines).as_bytes())
                .map_err(Error::atomic_write)?;
        }
        if self.store.durable {
            sync_path(&index_dir)?;
        }
        self.index_valid = true;
        self.write_state()
    }

    fn write_state(&mut self) -> Result<()> {
        let state = self.index_dir().join(STATE_FILE);
        // In place (no flush on ext4). A failed write removes it: a missing
        // state means "rebuild", which is right after any failure; a torn
        // one (the process killed mid-write) never equals a fingerprint
        // either.
        if let Err(e) = write_in_place(&state, self.fingerprint().as_bytes()) {
            let _ = fs::remove_file(&state);
            self.index_valid = false;
            return Err(Error::io("write index state", &state, e));
        }
        self.state_stale = false;
        Ok(())
    }

    fn bucket_lines(&self, bucket: &str) -> Vec<(u64, IpAddr)> {
        self.read_bucket(bucket).unwrap_or_default()
    }

    /// A bucket's entries; `None` when the bucket does not exist.
    fn read_bucket(&self, bucket: &str) -> Option<Vec<(u64, IpAddr)>> {
        let text = match fs::read_to_string(self.index_dir().join(bucket)) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            // Exists but unreadable: treated as empty, never replaced.
            Err(_) => String::new(),
        };
        // The header line does not parse as `<hex hash> <ip>` and is skipped
        // like any damaged line.
        Some(
            text.lines()
                .filter_map(|l| {
                    let (h, ip) = l.split_once(' ')?;
                    Some((u64::from_str_radix(h, 16).ok()?, ip.parse().ok()?))
                })
                .collect(),
        )
    }

    fn owner_ips(&self, hash: u64) -> Vec<IpAddr> {
        self.bucket_lines(&bucket_name(hash))
            .into_iter()
            .filter(|(h, _)| *h == hash)
            .map(|(_, ip)| ip)
            .collect()
    }

    /// Adds an index entry by appending one line (one `write(2)`, so a
    /// killed process cannot leave half of it); `durable` syncs it before
    /// returning. Entries are never removed one by one: stale ones are
    /// verified away on lookup, and a bucket is compacted when it grows.
    ///
    /// A failed write (a full disk) leaves the bucket as it was: a new
    /// bucket is created through the atomic writer, so it appears only with
    /// its content; a failed append is truncated back to the old length,
    /// and the state is removed (with the index marked invalid) so that
    /// whatever remains is rebuilt rather than trusted.
    fn add_owner(&mut self, hash: u64, ip: IpAddr, durable: bool) -> Result<()> {
        let bucket = bucket_name(hash);
        let path = self.index_dir().join(&bucket);
        let Some(lines) = self.read_bucket(&bucket) else {
            // The network's first reservation makes the index directory.
            create_dirs(self.index_dir())
                .map_err(|e| Error::io("create index directory", self.index_dir(), e))?;
            // The name is new: the rename flushes nothing on ext4.
            AtomicWrite::new()
                .mode(0o600)
                .fsync(durable)
                .fsync_dir(durable)
                .write(&path, bucket_file(&[(hash, ip)]).as_bytes())
                .map_err(Error::atomic_write)?;
            return Ok(());
        };
        if lines.contains(&(hash, ip)) {
            return Ok(());
        }
        if lines.len() >= COMPACT_AT {
            return self.compact_bucket(&bucket, lines, (hash, ip), durable);
        }
        // Rewriting the bucket (truncate or rename) makes ext4 flush its
        // delayed allocation, a disk write per call; an append does not.
        let mut file = OpenOptions::new()
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("open owner index", &path, e))?;
        let before = file
            .metadata()
            .map_err(|e| Error::io("stat owner index", &path, e))?
            .len();
        let written = file
            .write_all(format!("{hash:016x} {ip}\n").as_bytes())
            .and_then(|()| if durable { file.sync_all() } else { Ok(()) });
        if let Err(e) = written {
            let _ = file.set_len(before);
            let state = self.index_dir().join(STATE_FILE);
            let _ = fs::remove_file(&state);
            self.index_valid = false;
            return Err(Error::io("write owner index", &path, e));
        }
        if durable {
            sync_path(self.index_dir())?;
        }
        Ok(())
    }

    /// Rewrites a bucket with only its verified entries plus `new`.
    fn compact_bucket(
        &self,
        bucket: &str,
        lines: Vec<(u64, IpAddr)>,
        new: (u64, IpAddr),
        durable: bool,
    ) -> Result<()> {
        let mut live: Vec<(u64, IpAddr)> = lines
            .into_iter()
            .filter(|(h, ip)| {
                self.read_reservation(*ip)
                    .is_some_and(|r| key_hash(&reservation_key(&r)) == *h)
            })
            .collect();
        live.dedup();
        live.push(new);
        // A failure leaves the old bucket: the rename never happened.
        AtomicWrite::new()
            .mode(0o600)
            .fsync(durable)
            .fsync_dir(durable)
            .write(
                &self.index_dir().join(bucket),
                bucket_file(&live).as_bytes(),
            )
            .map_err(Error::atomic_write)
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
            Ok(mut f) => match f.write_all(content).and_then(|()| {
                if self.store.durable {
                    f.sync_all()?;
                }
                Ok(())
            }) {
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
        if let Err(e) = self.ensure_index() {
            // The index is only a cache. When it cannot be rebuilt (a full
            // disk: ENOSPC), DEL must still find and free the owner's
            // addresses, so scan the reservations as Go's backend does.
            tracing::warn!(error = %e, "owner index unusable, scanning reservations");
            return Ok(self
                .reservations()?
                .into_iter()
                .filter(|r| r.matches(owner) != OwnerMatch::None)
                .collect());
        }
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
        let span = cni_types::step_span!("ipam.store", ipam.op = "reserve", ipam.ip = %ip);
        cni_types::trace::in_step(span, || {
            self.ensure_index()?;
            let content = owner.file_content();
            // The index entry goes first (see the module doc).
            self.add_owner(key_hash(&content), ip, self.store.durable)?;
            let target = self.dir().join(ip.to_string());
            let reserved = match self.reserve_pooled(&target, content.as_bytes()) {
                Some(reserved) => reserved,
                None => self.reserve_new(&target, content.as_bytes())?,
            };
            if !reserved {
                return Ok(false);
            }
            let last = self.dir().join(format!("{LAST_IP_PREFIX}{range_set}"));
            // Rewritten in place, as Go does (but without its truncate to zero,
            // which costs an ext4 flush): it is only a round-robin hint, and a
            // torn one is ignored or merely moves the starting point.
            if let Err(e) = write_in_place(&last, ip.to_string().as_bytes()) {
                // Go reports this failure too, though the reservation stays.
                return Err(Error::io("write last reserved ip", &last, e));
            }
            self.state_stale = true;
            self.sync_dir()?;
            Ok(true)
        })
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
        let span = cni_types::step_span!("ipam.store", ipam.op = "release", ipam.ip = %ip);
        cni_types::trace::in_step(span, || {
            let path = self.dir().join(ip.to_string());
            match self.pool_or_remove(&path) {
                Ok(()) => {
                    // The owner's index entry stays: entries are verified against
                    // the reservation file, and compaction drops dead ones (or
                    // the drop of the session that released the network's last
                    // reservation removes the whole index).
                    self.released = true;
                    self.sync_dir()?;
                    Ok(true)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(Error::io("remove reservation", &path, e)),
            }
        })
    }
}

impl DiskStoreLock<'_> {
    fn pool_dir(&self) -> PathBuf {
        self.index_dir().join(POOL_DIR)
    }

    /// Reuses a released file's inode: its content is rewritten while it
    /// is still in the pool, then it is renamed to `target` with
    /// `RENAME_NOREPLACE` (Go's `O_EXCL`): far cheaper than creating an
    /// inode on ext4 (BENCHMARKS.md, "Node scale"). `None` when the pool is empty or the file
    /// system refuses; `Some(false)` when `target` exists.
    fn reserve_pooled(&self, target: &Path, content: &[u8]) -> Option<bool> {
        use std::os::unix::fs::{FileExt, PermissionsExt};
        let pooled = fs::read_dir(self.pool_dir())
            .ok()?
            .flatten()
            .find(|e| e.file_type().is_ok_and(|t| t.is_file()))?
            .path();
        let file = OpenOptions::new().write(true).open(&pooled).ok()?;
        file.write_all_at(content, 0).ok()?;
        file.set_len(content.len() as u64).ok()?;
        // A file Go released may carry Go's 0644.
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .ok()?;
        if self.store.durable {
            file.sync_all().ok()?;
        }
        drop(file);
        match nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &pooled,
            nix::fcntl::AT_FDCWD,
            target,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => Some(true),
            Err(nix::errno::Errno::EEXIST) => Some(false),
            Err(_) => None,
        }
    }

    /// A new reservation file: temporary file, then a hard link (Go's
    /// `O_EXCL` without its window of an empty file).
    fn reserve_new(&self, target: &Path, content: &[u8]) -> Result<bool> {
        // A leftover temporary file (a writer killed between write and
        // link) goes with the next full scan (GC, index rebuild).
        let staged = self
            .writer()
            .stage(target, content)
            .map_err(Error::atomic_write)?;
        let linked = fs::hard_link(staged.temp_path(), target);
        // Dropping the staged file unlinks its temporary name.
        drop(staged);
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS)
                ) =>
            {
                self.reserve_direct(target, content)
            }
            Err(e) => Err(Error::io("create reservation", target, e)),
        }
    }

    /// Moves a released file into the pool (if it has room) instead of
    /// unlinking it, so a later ADD skips creating an inode.
    fn pool_or_remove(&self, path: &Path) -> std::io::Result<()> {
        let pool = self.pool_dir();
        let room = match fs::read_dir(&pool) {
            Ok(d) => d.count() < POOL_MAX,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_dirs(&pool).is_ok(),
            Err(_) => false,
        };
        if room {
            let n = POOL_COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = pool.join(format!("{}.{n}.{nanos}", std::process::id()));
            match fs::rename(path, &name) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(e),
                Err(_) => {}
            }
        }
        fs::remove_file(path)
    }
}

impl DiskStoreLock<'_> {
    /// Whether the network directory holds no reservation (any name that
    /// parses as an IP is one, as for [`LockedStore::reserved_ips`]); the
    /// listing stops at the first.
    fn holds_nothing(&self) -> bool {
        fs::read_dir(self.dir()).is_ok_and(|mut d| {
            !d.any(|e| {
                e.ok()
                    .and_then(|e| e.file_name().to_str().map(|n| n.parse::<IpAddr>().is_ok()))
                    .unwrap_or(true)
            })
        })
    }

    /// Removes the network's index and pool, and `.cni-ipam-index` when no
    /// other network has one. Only a cache: a failure leaves files that the
    /// next rebuild or release removes.
    fn remove_index(&mut self) {
        let dir = self.index_dir().to_path_buf();
        let _ = fs::remove_dir_all(&dir);
        if let Some(parent) = dir.parent() {
            let _ = fs::remove_dir(parent);
        }
        self.state_stale = false;
    }
}

impl Drop for DiskStoreLock<'_> {
    fn drop(&mut self) {
        // Still under the flock: fields drop after this body.
        if self.released && self.holds_nothing() {
            // The network's last reservation went: its index and pool go
            // with it, so nothing but Go's own files is left.
            self.remove_index();
            return;
        }
        if self.state_stale && self.index_valid {
            if let Err(e) = self.write_state() {
                // The next operation sees a mismatch and rebuilds.
                tracing::warn!(error = %e, "write owner index state");
            }
        }
    }
}

/// Overwrites `path` (created 0600 if missing) with `content` without
/// truncating it to zero first.
fn write_in_place(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    file.write_all_at(content, 0)?;
    file.set_len(content.len() as u64)
}

fn bucket_file(lines: &[(u64, IpAddr)]) -> String {
    let mut out = String::from(BUCKET_HEADER);
    for (hash, ip) in lines {
        out.push_str(&format!("{hash:016x} {ip}\n"));
    }
    out
}
