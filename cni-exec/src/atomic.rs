//! The one atomic file writer of the workspace: every file a runtime,
//! plugin or store persists is written to a temporary file in the same
//! directory and renamed (or linked) into place, so a killed process or a
//! full disk leaves the old file or the new one, never an empty or torn one.
//!
//! Temporary names are `.<name>.tmp.<pid>.<nonce>`: hidden (libcni never
//! loads them as configurations, Go's host-local never parses them as
//! addresses), unique among concurrent writers (pid plus a per-write
//! counter), and recognisable by [`is_temp_name`] so that whoever finds one
//! left by a killed writer can remove it ([`remove_stale_temps`]). The names
//! of earlier builds are recognised too, so their leftovers are cleaned:
//! `.<name>.tmp<digits and dots>` (result cache, flannel, multus cache),
//! `.<name>.<pid>.tmp` (multus auto-configuration), `<stem>.json.tmp`
//! (tuning backups) and `.cni-ipam-tmp.*` (host-local store).
//!
//! Durability is the caller's choice ([`AtomicWrite::fsync`],
//! [`AtomicWrite::fsync_dir`]): an fsync costs milliseconds on a disk, and
//! most of CNI's state does not have to survive a power cut, which takes
//! every pod with it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// The prefix of the host-local store's temporary files of earlier builds.
const IPAM_TEMP_PREFIX: &str = ".cni-ipam-tmp.";
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
}

impl Default for AtomicWrite {
    fn default() -> Self {
        AtomicWrite::new()
    }
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
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

    /// Replaces `path` with `data`: a temporary file, then `rename(2)`.
    /// On any error the temporary file is removed and `path` is untouched.
    pub fn write(&self, path: &Path, data: &[u8]) -> Result<(), Error> {
        self.stage(path, data)?.commit()
    }

    /// Writes `data` to a fresh temporary file next to `path` and returns it
    /// without renaming, for callers that link it somewhere first (or
    /// instead). Dropping the [`Staged`] file without committing removes it.
    pub fn stage(&self, path: &Path, data: &[u8]) -> Result<Staged, Error> {
        let dir = parent(path);
        if let Some(mode) = self.create_dir {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)
                .map_err(io("create directory", dir))?;
        }
        let mut attempt = 0;
        let (temp, mut file) = loop {
            let temp = temp_path(path);
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(self.mode)
                .open(&temp)
            {
                Ok(f) => break (temp, f),
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < NAME_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(io("create temporary file", &temp)(e)),
            }
        };
        let staged = Staged {
            temp,
            target: path.to_path_buf(),
            fsync_dir: self.fsync_dir,
            done: false,
        };
        file.write_all(data)
            .map_err(io("write temporary file", &staged.temp))?;
        if self.fsync {
            file.sync_all()
                .map_err(io("sync temporary file", &staged.temp))?;
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
        std::fs::rename(&self.temp, &self.target).map_err(io("rename onto", &self.target))?;
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
        .map_err(io("sync directory", dir))
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

fn digits_and_dots(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// Whether `file` is a temporary name of a write to a file named `target`
/// (this writer's names and every earlier writer's; see the module doc).
pub fn is_temp_name_of(file: &str, target: &str) -> bool {
    if target.is_empty() {
        return false;
    }
    if let Some(rest) = file.strip_prefix('.').and_then(|f| f.strip_prefix(target)) {
        // `.<name>.tmp<digits and dots>`: this writer and the result cache,
        // flannel and multus cache of earlier builds.
        if rest.strip_prefix(".tmp").is_some_and(digits_and_dots) {
            return true;
        }
        // `.<name>.<pid>.tmp`: multus auto-configuration.
        if let Some(pid) = rest.strip_prefix('.').and_then(|r| r.strip_suffix(".tmp")) {
            if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
                return true;
            }
        }
    }
    // `<stem>.json.tmp`: tuning's backups.
    if let Some(stem) = target.strip_suffix(".json") {
        if file.strip_suffix(".json.tmp") == Some(stem) {
            return true;
        }
    }
    // The host-local store's `.cni-ipam-tmp.*` belong to no target: only
    // [`remove_stale_temps_in`] (run under the store's lock) removes them.
    false
}

/// Whether `file` is a temporary name of any atomic write, this build's or
/// an earlier one's, whatever its target. Only hidden names qualify (and
/// tuning's `<stem>.json.tmp`), so no file a user or Go wrote matches.
pub fn is_temp_name(file: &str) -> bool {
    if file.starts_with(IPAM_TEMP_PREFIX) && file.len() > IPAM_TEMP_PREFIX.len() {
        return true;
    }
    if let Some(stem) = file.strip_suffix(".json.tmp") {
        return !stem.is_empty();
    }
    let Some(hidden) = file.strip_prefix('.') else {
        return false;
    };
    // `.<name>.<pid>.tmp`
    if let Some((name, pid)) = hidden.strip_suffix(".tmp").and_then(|r| r.rsplit_once('.')) {
        if !name.is_empty() && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
            return true;
        }
    }
    // `.<name>.tmp<digits and dots>`
    hidden
        .rmatch_indices(".tmp")
        .any(|(i, _)| i > 0 && digits_and_dots(&hidden[i + 4..]))
}

/// Removes the temporary files that writers killed before their rename left
/// next to `path` (every writer's names for that target, nothing else).
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
            (".r.tmp12", "r"),
            (".00-multus.conf.77.tmp", "00-multus.conf"),
            ("c-eth0.json.tmp", "c-eth0.json"),
        ] {
            assert!(is_temp_name_of(file, target), "{file} of {target}");
            assert!(is_temp_name(file), "{file}");
        }
        assert!(is_temp_name(".cni-ipam-tmp.reservation"));
        assert!(!is_temp_name_of(".cni-ipam-tmp.reservation", "10.0.0.1"));
        for (file, target) in [
            ("r", "r"),
            (".r.tmp", "r"),
            (".r.tmpx", "r"),
            (".s.tmp.1", "r"),
            (".r.x.tmp", "r"),
            ("r.json.tmp", "r.conf"),
            (".cni-ipam-tmp.", "x"),
        ] {
            assert!(!is_temp_name_of(file, target), "{file} of {target}");
        }
        for file in [
            "10.0.0.1",
            "lock",
            ".tmp1",
            "last_reserved_ip.0",
            ".x.tmp",
            ".json.tmp",
            "state",
        ] {
            assert!(!is_temp_name(file), "{file}");
        }
        let p = temp_path(Path::new("/d/name.conf"));
        let f = p.file_name().unwrap().to_str().unwrap();
        assert!(is_temp_name_of(f, "name.conf") && is_temp_name(f), "{f}");
    }
}
