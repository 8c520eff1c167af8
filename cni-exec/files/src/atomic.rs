//! The one atomic file writer of the workspace: every file a runtime,
//! plugin or store persists is written to a temporary file in the same
//! directory and renamed (or linked) into place, so a killed process or a
//! full disk leaves the old file or the new one, never an empty or torn one.
//!
//! Temporary names are `.<name>.tmp.<pid>.<nonce>`: hidden (libcni never
//! loads them as configurations, Go's host-local never parses them as
//! addresses), unique among concurrent writers (pid plus a per-write
//! counter), and recognisable by [`is_temp_name`] so that whoever finds one
//! left by a killed writer can remove it ([`remove_stale_temps`]).
//!
//! Durability is the caller's choice ([`AtomicWrite::fsync`],
//! [`AtomicWrite::fsync_dir`]): an fsync costs milliseconds on a disk, and
//! most of CNI's state does not have to survive a power cut, which takes
//! every pod with it.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;

/// Attempts at a fresh temporary name when one exists (a leftover of a
/// killed process whose pid was reused).
const NAME_ATTEMPTS: usize = 16;

/// How [`AtomicWrite::write`] writes: the file's mode, what it syncs, and
/// whether it creates the parent directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicWrite {
    mode: u32,
    fsync: bool,
    fsync_dir: bool,
    create_dir: Option<u32>,
    owner: Option<(u32, u32)>,
    exact_mode: bool,
}

impl Default for AtomicWrite {
    fn default() -> Self {
        AtomicWrite::new()
    }
}

impl AtomicWrite {
    /// Mode 0600, nothing synced, the directory must exist.
    pub const fn new() -> AtomicWrite {
        AtomicWrite {
            mode: 0o600,
            fsync: false,
            fsync_dir: false,
            create_dir: None,
            owner: None,
            exact_mode: false,
        }
    }

    /// The new file's permission bits (before the umask); 0600 by default.
    pub const fn mode(mut self, mode: u32) -> AtomicWrite {
        self.mode = mode;
        self
    }

    /// Fsyncs the file's data before it takes the final name, so the name
    /// never points at unwritten data after a power cut.
    pub const fn fsync(mut self, on: bool) -> AtomicWrite {
        self.fsync = on;
        self
    }

    /// Fsyncs the directory after the rename, so the new name itself
    /// survives a power cut.
    pub const fn fsync_dir(mut self, on: bool) -> AtomicWrite {
        self.fsync_dir = on;
        self
    }

    /// Creates the parent directory (and its parents) with `mode` when it
    /// is missing.
    pub const fn create_dir(mut self, mode: u32) -> AtomicWrite {
        self.create_dir = Some(mode);
        self
    }

    /// Gives the new file to `uid`:`gid` (`fchown(2)` after its data,
    /// before its mode: a chown clears set-ID bits).
    pub const fn owner(mut self, uid: u32, gid: u32) -> AtomicWrite {
        self.owner = Some((uid, gid));
        self
    }

    /// Sets [`AtomicWrite::mode`] exactly, whatever the umask: the
    /// temporary file is created 0600 and `fchmod(2)`ed after its data and
    /// owner (so a mode without the owner's write bit, like an installed
    /// binary's, does not stop the write).
    pub const fn exact_mode(mut self, on: bool) -> AtomicWrite {
        self.exact_mode = on;
        self
    }

    /// Replaces `path` with `data`: a temporary file, then `rename(2)`.
    /// On any error the temporary file is removed and `path` is untouched.
    pub fn write(&self, path: &Path, data: &[u8]) -> Result<(), Error> {
        self.stage(path, data)?.commit()
    }

    /// Writes `data` to a fresh temporary file next to `path` and returns it
    /// without renaming, for callers that link it somewhere first (or
    /// instead). Dropping the [`Staged`] file without committing removes it.
    pub fn stage(&self, path: &Path, data: &[u8]) -> Result<Staged, Error> {
        self.stage_from(path, &mut &data[..])
    }

    /// [`AtomicWrite::stage`] with the data read from `data` to its end (a
    /// file copied without holding it in memory).
    pub fn stage_from(&self, path: &Path, data: &mut impl Read) -> Result<Staged, Error> {
        let dir = parent(path);
        if let Some(mode) = self.create_dir {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)
                .map_err(Error::io("create directory", dir))?;
        }
        let mut attempt = 0;
        let create_mode = if self.exact_mode { 0o600 } else { self.mode };
        let (temp, mut file) = loop {
            let temp = temp_path(path);
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(create_mode)
                .open(&temp)
            {
                Ok(f) => break (temp, f),
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < NAME_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(Error::io("create temporary file", &temp)(e)),
            }
        };
        let staged = Staged {
            temp,
            target: path.to_path_buf(),
            fsync_dir: self.fsync_dir,
            done: false,
        };
        std::io::copy(data, &mut file).map_err(Error::io("write temporary file", &staged.temp))?;
        if let Some((uid, gid)) = self.owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
                .map_err(Error::io("chown temporary file", &staged.temp))?;
        }
        if self.exact_mode {
            file.set_permissions(std::fs::Permissions::from_mode(self.mode))
                .map_err(Error::io("chmod temporary file", &staged.temp))?;
        }
        if self.fsync {
            file.sync_all()
                .map_err(Error::io("sync temporary file", &staged.temp))?;
        }
        Ok(staged)
    }
}

/// A fully written temporary file waiting for its final name; removed on
/// drop unless [`Staged::commit`] renamed it.
#[derive(Debug)]
pub struct Staged {
    temp: PathBuf,
    target: PathBuf,
    fsync_dir: bool,
    done: bool,
}

impl Staged {
    /// The temporary file's path (to `link(2)` it elsewhere).
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Renames the temporary file onto the target (replacing it), then
    /// syncs the directory if asked to.
    pub fn commit(mut self) -> Result<(), Error> {
        std::fs::rename(&self.temp, &self.target)
            .map_err(Error::io("rename onto", &self.target))?;
        self.done = true;
        if self.fsync_dir {
            sync_dir(parent(&self.target))?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Fsyncs a directory (after creating, renaming or removing names in it).
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("sync directory", dir))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A fresh temporary name next to `path`: `.<name>.tmp.<pid>.<nonce>`.
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nonce = NEXT.fetch_add(1, Ordering::Relaxed);
    parent(path).join(format!(
        ".{}.tmp.{}.{nonce}",
        file_name(path),
        std::process::id()
    ))
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The `<name>` and `<pid>` of a temporary name `.<name>.tmp.<pid>.<nonce>`.
fn temp_parts(file: &str) -> Option<(&str, &str)> {
    let (rest, nonce) = file.strip_prefix('.')?.rsplit_once('.')?;
    let (rest, pid) = rest.rsplit_once('.')?;
    let name = rest.strip_suffix(".tmp")?;
    (!name.is_empty() && all_digits(pid) && all_digits(nonce)).then_some((name, pid))
}

/// The `<name>` of a temporary name.
fn temp_target(file: &str) -> Option<&str> {
    temp_parts(file).map(|(name, _)| name)
}

/// The `<pid>` of a temporary name's writer.
fn temp_writer(file: &str) -> Option<&str> {
    temp_parts(file).map(|(_, pid)| pid)
}

/// Whether `file` is a temporary name of a write to a file named `target`.
pub fn is_temp_name_of(file: &str, target: &str) -> bool {
    temp_target(file) == Some(target)
}

/// Whether `file` is a temporary name of any atomic write, whatever its
/// target. Only hidden names qualify, so no file a user or Go wrote matches.
pub fn is_temp_name(file: &str) -> bool {
    temp_target(file).is_some()
}

/// Removes the temporary files that writers killed before their rename left
/// next to `path` (the temporary names of that target, nothing else).
/// Best effort: errors are ignored. Returns how many were removed.
pub fn remove_stale_temps(path: &Path) -> usize {
    let target = file_name(path);
    remove_matching(parent(path), |f| is_temp_name_of(f, &target))
}

/// Removes every temporary file ([`is_temp_name`]) in `dir`, whatever its
/// target. Only safe where no writer can be mid-write (under the lock that
/// every writer of the directory holds). Returns how many were removed.
pub fn remove_stale_temps_in(dir: &Path) -> usize {
    remove_matching(dir, is_temp_name)
}

/// Removes every temporary file ([`is_temp_name`]) in `dir` whose writer
/// no longer runs (no `/proc/<pid>`): safe while other writers are at
/// work, since a live writer's files are kept. Best effort. Returns how
/// many were removed.
pub fn remove_dead_writers_temps(dir: &Path) -> usize {
    remove_matching(dir, |f| {
        temp_writer(f).is_some_and(|pid| !Path::new("/proc").join(pid).exists())
    })
}

fn remove_matching(dir: &Path, stale: impl Fn(&str) -> bool) -> usize {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if stale(&name.to_string_lossy()) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for (file, target) in [
            (".r.tmp.12.3", "r"),
            (".00-multus.conf.tmp.77.0", "00-multus.conf"),
            (".10.1.2.3.tmp.1.2", "10.1.2.3"),
        ] {
            assert!(is_temp_name_of(file, target), "{file} of {target}");
            assert!(is_temp_name(file), "{file}");
        }
        for (file, target) in [
            ("r", "r"),
            (".r.tmp", "r"),
            (".r.tmp12", "r"),
            (".r.tmp.12", "r"),
            (".r.tmp.1.x", "r"),
            (".s.tmp.1.2", "r"),
            (".r.x.tmp", "r"),
            (".r.tmp.1.2", ""),
        ] {
            assert!(!is_temp_name_of(file, target), "{file} of {target}");
        }
        for file in [
            "10.0.0.1",
            "lock",
            ".tmp.1.2",
            "r.tmp.1.2",
            "last_reserved_ip.0",
            ".00-multus.conf.77.tmp",
            "c-eth0.json.tmp",
            ".cni-ipam-tmp.reservation",
            "state",
        ] {
            assert!(!is_temp_name(file), "{file}");
        }
        let p = temp_path(Path::new("/d/name.conf"));
        let f = p.file_name().unwrap().to_str().unwrap();
        assert!(is_temp_name_of(f, "name.conf") && is_temp_name(f), "{f}");
    }
}
