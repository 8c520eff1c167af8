//! `cni-install`: copies plugin binaries into a live node's plugin directory
//! (`/opt/cni/bin`) without ever exposing a half-written file.
//!
//! Each binary is written by the workspace's atomic writer
//! ([`cni_files::atomic`]) to a hidden temp name in the target directory,
//! made mode 0755 exactly and owned by root (when the installer runs as
//! root), fsynced, and renamed over the destination; the directory is
//! fsynced once after the renames. The source's mode is not copied: a
//! set-user-ID or set-group-ID bit on a source (a file owned by `nobody` in
//! an unpacked tarball) must never become a set-ID-root plugin. A runtime exec'ing the
//! plugin at that moment runs either the old inode or the new one, never a
//! partial file, and since the destination is never opened for writing,
//! `ETXTBSY` cannot happen (the failure of `cp` onto a running binary).
//!
//! Everything that can be checked is checked before the first rename: every
//! requested binary exists in the source, no destination is a symlink or a
//! directory, and every temp file is written. A failure there removes the
//! temp files and leaves the target directory as it was.
//!
//! This module uses only `std` and `cni-files`' atomic writer (no multus,
//! no Kubernetes client), so the `cni-install` binary stays small.
//!
//! ```no_run
//! use cni_plugins::install::{install, Options};
//!
//! let changes = install(&Options::new("/opt/cni/bin", "/tmp/cni-rs")).unwrap();
//! for c in &changes {
//!     eprintln!("{c}");
//! }
//! ```

use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cni_files::atomic::{self, AtomicWrite, Staged};

/// Why an installation or its command line failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file operation failed (its operation and file named).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// The target is not a directory.
    #[error("target {} is not a directory", .path.display())]
    TargetNotDirectory {
        /// `--to`.
        path: PathBuf,
    },
    /// The source directory holds no executable file.
    #[error("no executable file to install in {}", .dir.display())]
    NothingToInstall {
        /// `--from`.
        dir: PathBuf,
    },
    /// A destination exists and is not a regular file.
    #[error("refusing to replace {}: it is not a regular file ({kind})", .path.display())]
    NotARegularFile {
        /// The destination.
        path: PathBuf,
        /// What it is (`a directory`, `a symlink`...).
        kind: &'static str,
    },
    /// A name of `--only` is not a file name.
    #[error("--only: {name:?} is not a binary name")]
    OnlyNameInvalid {
        /// The name.
        name: String,
    },
    /// Names of `--only` are not executables of the source directory.
    #[error("not in {} (or not an executable file): {}; nothing installed", .dir.display(), .names.join(", "))]
    OnlyMissing {
        /// `--from`.
        dir: PathBuf,
        /// The names missing.
        names: Vec<String>,
    },
    /// `--only` names nothing.
    #[error("--only names no binary")]
    OnlyEmpty,
    /// An option lacks its value.
    #[error("{flag} needs a value\n{USAGE}")]
    ArgValueMissing {
        /// The option.
        flag: String,
    },
    /// An argument is not an option of the installer.
    #[error("unknown argument {arg:?}\n{USAGE}")]
    ArgUnknown {
        /// The argument.
        arg: String,
    },
    /// `--to` is missing.
    #[error("--to is required\n{USAGE}")]
    TargetMissing,
    /// No `--from` and the installer's own directory is unknown.
    #[error("cannot find the installer's own directory: pass --from")]
    OwnDirUnknown,
}

/// `Result` with the installer's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// The installer's own binary name (one of the [`PROGRAMS`]).
pub const INSTALLER_NAME: &str = "cni-install";

include!(concat!(env!("OUT_DIR"), "/programs.rs"));

/// What to install, from where, to where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The plugin directory to install into (`/opt/cni/bin`).
    pub to: PathBuf,
    /// The directory holding the new binaries.
    pub from: PathBuf,
    /// Install only these binaries (every one must exist in `from`); `None`:
    /// every executable regular file of `from` but the [`PROGRAMS`] (the
    /// installer, daemons: not plugins).
    pub only: Option<Vec<String>>,
    /// Keep a destination that already exists, whatever its content.
    pub skip_existing: bool,
}

impl Options {
    /// Every plugin of `from` into `to`, replacing what differs.
    pub fn new(to: impl Into<PathBuf>, from: impl Into<PathBuf>) -> Self {
        Options {
            to: to.into(),
            from: from.into(),
            only: None,
            skip_existing: false,
        }
    }
}

/// What happened to one destination file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Written (new, or its content or mode differed).
    Installed,
    /// Already identical (content and mode): left alone.
    Unchanged,
    /// Exists and `skip_existing` was set: left alone.
    Skipped,
}

/// One line of the installer's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The binary's name.
    pub name: String,
    /// The destination path.
    pub path: PathBuf,
    /// What was done.
    pub outcome: Outcome,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.outcome {
            Outcome::Installed => "installed",
            Outcome::Unchanged => "unchanged",
            Outcome::Skipped => "skipped",
        };
        write!(f, "{what} {}", self.path.display())
    }
}

/// One binary to write: source, destination, and the temp file once staged
/// (removed on drop unless committed).
struct Step {
    name: String,
    src: PathBuf,
    dest: PathBuf,
    outcome: Outcome,
    staged: Option<Staged>,
}

/// Installs the binaries that `opts` selects; returns one [`Change`] per
/// binary, in name order. On error before the renames, the target directory
/// is unchanged.
pub fn install(opts: &Options) -> Result<Vec<Change>> {
    let dir = std::fs::metadata(&opts.to).map_err(io("stat target directory", &opts.to))?;
    if !dir.is_dir() {
        return Err(Error::TargetNotDirectory {
            path: opts.to.clone(),
        });
    }
    // Temp files of installers killed before their rename (a live
    // installer's are kept).
    atomic::remove_dead_writers_temps(&opts.to);
    let mut steps = plan(opts)?;
    // On an error, the staged temp files are removed as `steps` drops.
    stage(&mut steps)?;
    commit(&mut steps, &opts.to)?;
    Ok(steps
        .into_iter()
        .map(|s| Change {
            name: s.name,
            path: s.dest,
            outcome: s.outcome,
        })
        .collect())
}

/// The mode of every installed binary, whatever the source's.
pub const INSTALLED_MODE: u32 = 0o755;

/// How every binary is written: [`INSTALLED_MODE`] exactly, root's (when
/// root), data fsynced before the rename (the directory is fsynced once,
/// after every rename: [`commit`]).
fn writer() -> AtomicWrite {
    let w = AtomicWrite::new()
        .mode(INSTALLED_MODE)
        .exact_mode(true)
        .fsync(true);
    match installed_owner() {
        Some((uid, gid)) => w.owner(uid, gid),
        None => w,
    }
}

/// Root's, when the installer runs as root (else the installer's own: a
/// test or an unprivileged install cannot chown).
fn installed_owner() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    // `/proc/self` belongs to the process's effective user (std only: no
    // libc call in this binary).
    let euid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    (euid == 0).then_some((0, 0))
}

fn owned_as_installed(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    installed_owner().is_none_or(|(uid, gid)| m.uid() == uid && m.gid() == gid)
}

/// The binaries to install and what each destination needs, all checked
/// before anything is written.
fn plan(opts: &Options) -> Result<Vec<Step>> {
    let names = match &opts.only {
        Some(only) => requested(&opts.from, only)?,
        None => executables(&opts.from)?,
    };
    if names.is_empty() {
        return Err(Error::NothingToInstall {
            dir: opts.from.clone(),
        });
    }
    names
        .into_iter()
        .map(|name| {
            let src = opts.from.join(&name);
            let dest = opts.to.join(&name);
            std::fs::metadata(&src).map_err(io("stat source", &src))?;
            let outcome = match std::fs::symlink_metadata(&dest) {
                Err(e) if e.kind() == ErrorKind::NotFound => Outcome::Installed,
                Err(e) => return Err(io("stat destination", &dest)(e)),
                // Whatever it is (a symlink to another build included), it
                // is kept: nothing is overwritten.
                Ok(_) if opts.skip_existing => Outcome::Skipped,
                Ok(m) if !m.file_type().is_file() => {
                    return Err(Error::NotARegularFile {
                        path: dest.clone(),
                        kind: kind(&m.file_type()),
                    })
                }
                Ok(m)
                    if m.permissions().mode() & 0o7777 == INSTALLED_MODE
                        && owned_as_installed(&m)
                        && same_content(&src, &dest)? =>
                {
                    Outcome::Unchanged
                }
                Ok(_) => Outcome::Installed,
            };
            Ok(Step {
                name,
                src,
                dest,
                outcome,
                staged: None,
            })
        })
        .collect()
}

/// `--only`: each name must be a plain file name present in `from` as an
/// executable regular file; every missing one is named in the error.
fn requested(from: &Path, only: &[String]) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    for name in only {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Error::OnlyNameInvalid { name: name.clone() });
        }
        let ok = std::fs::metadata(from.join(name))
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        if !ok {
            missing.push(name.as_str());
        } else if !names.contains(name) {
            names.push(name.clone());
        }
    }
    if !missing.is_empty() {
        return Err(Error::OnlyMissing {
            dir: from.to_owned(),
            names: missing.into_iter().map(str::to_owned).collect(),
        });
    }
    names.sort();
    Ok(names)
}

/// Every executable regular file of `from` (symlinks followed), but the
/// [`PROGRAMS`] and hidden files, sorted.
fn executables(from: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(from).map_err(io("read source directory", from))? {
        let entry = entry.map_err(io("read source directory", from))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || PROGRAMS.contains(&name.as_str()) {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::metadata(&path).map_err(io("stat source", &path))?;
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Writes every binary that needs installing to its temp file (mode and
/// owner set, data fsynced).
fn stage(steps: &mut [Step]) -> Result<()> {
    let writer = writer();
    for step in steps.iter_mut().filter(|s| s.outcome == Outcome::Installed) {
        let mut input = File::open(&step.src).map_err(io("open source", &step.src))?;
        let staged = writer
            .stage_from(&step.dest, &mut input)
            .map_err(crate::Error::atomic_write)?;
        step.staged = Some(staged);
    }
    Ok(())
}

/// Renames every staged file into place, then fsyncs the directory so the
/// renames survive a power cut (nothing staged: nothing to do). A rename
/// failure stops there: files already renamed are complete (each rename is
/// atomic), the rest are removed as they drop.
fn commit(steps: &mut [Step], dir: &Path) -> Result<()> {
    let mut renamed = false;
    for step in steps.iter_mut() {
        if let Some(staged) = step.staged.take() {
            staged.commit().map_err(crate::Error::atomic_write)?;
            renamed = true;
        }
    }
    if renamed {
        atomic::sync_dir(dir).map_err(crate::Error::atomic_write)?;
    }
    Ok(())
}

fn same_content(a: &Path, b: &Path) -> Result<bool> {
    let (ma, mb) = (
        std::fs::metadata(a).map_err(io("stat source", a))?,
        std::fs::metadata(b).map_err(io("stat destination", b))?,
    );
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let mut fa = File::open(a).map_err(io("open source", a))?;
    let mut fb = File::open(b).map_err(io("open destination", b))?;
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut fa, &mut ba).map_err(io("read source", a))?;
        let m = read_full(&mut fb, &mut bb).map_err(io("read destination", b))?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "a symlink"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a fifo"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a file"
    }
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| crate::Error::io(op, path, source).into()
}

/// Parses `cni-install`'s command line (without the program name):
/// `--to DIR [--from DIR] [--only a,b] [--skip-existing]`, each option also
/// as `--opt=value`. `default_from` is used when `--from` is absent (the
/// binary passes its own directory). `Ok(None)`: `--help` was asked for.
pub fn parse_args(
    args: impl IntoIterator<Item = String>,
    default_from: impl FnOnce() -> Option<PathBuf>,
) -> Result<Option<Options>> {
    let mut to = None;
    let mut from = None;
    let mut only: Option<Vec<String>> = None;
    let mut skip_existing = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| Error::ArgValueMissing {
                    flag: flag.to_owned(),
                })
        };
        match flag.as_str() {
            "--to" => to = Some(PathBuf::from(value("--to")?)),
            "--from" => from = Some(PathBuf::from(value("--from")?)),
            "--only" => {
                let v = value("--only")?;
                only.get_or_insert_with(Vec::new).extend(
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string),
                );
            }
            "--skip-existing" if inline.is_none() => skip_existing = true,
            "-h" | "--help" => return Ok(None),
            _ => return Err(Error::ArgUnknown { arg }),
        }
    }
    let to = to.ok_or(Error::TargetMissing)?;
    let from = match from {
        Some(f) => f,
        None => default_from().ok_or(Error::OwnDirUnknown)?,
    };
    if only.as_ref().is_some_and(Vec::is_empty) {
        return Err(Error::OnlyEmpty);
    }
    Ok(Some(Options {
        to,
        from,
        only,
        skip_existing,
    }))
}

/// `cni-install`'s usage text.
pub const USAGE: &str = "usage: cni-install --to DIR [--from DIR] [--only a,b] [--skip-existing]
  --to DIR         plugin directory to install into (e.g. /opt/cni/bin)
  --from DIR       directory of the new binaries (default: cni-install's own directory)
  --only a,b       install only these binaries (each must exist in --from); without
                   it, every executable of --from but this build's programs
                   that are not plugins (the installer, daemons)
  --skip-existing  keep any binary already present in --to
Each file is written to a temp name in DIR, fsynced and renamed into place.";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parses_every_flag_form() {
        let o = parse_args(args("--to /t --only=a,b --only c --skip-existing"), || {
            Some("/self".into())
        })
        .unwrap()
        .unwrap();
        assert_eq!(o.to, Path::new("/t"));
        assert_eq!(o.from, Path::new("/self"));
        assert_eq!(o.only, Some(vec!["a".into(), "b".into(), "c".into()]));
        assert!(o.skip_existing);
        let o = parse_args(args("--from=/f --to=/t"), || None)
            .unwrap()
            .unwrap();
        assert_eq!((o.from.as_path(), o.only), (Path::new("/f"), None));
    }

    #[test]
    fn rejects_bad_command_lines() {
        for bad in [
            "",
            "--from /f",
            "--to",
            "--to /t --bogus",
            "--to /t --only ,",
        ] {
            assert!(
                parse_args(args(bad), || Some("/s".into())).is_err(),
                "{bad}"
            );
        }
        assert!(parse_args(args("--help"), || None).unwrap().is_none());
    }
}
