//! Network namespaces: open, create (persisted like `ip netns add`), delete,
//! and run code inside one.
//!
//! The crate never calls `setns` on a thread it did not create: code that
//! must run inside a namespace goes through [`Netns::run`], which spawns a
//! fresh thread, enters the namespace there, and lets the thread die
//! afterwards (Go's `ns.Do` has to lock and restore an OS thread instead,
//! see containernetworking/plugins `pkg/ns/ns_linux.go`).

use std::fmt;
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::statfs::{NSFS_MAGIC, PROC_SUPER_MAGIC};

use crate::error::{Error, Result};

/// Where `ip netns add` (and we) persist named namespaces.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// An open network namespace: a file descriptor plus the path it came from.
///
/// Holding a `Netns` keeps the namespace alive even if its bind mount is
/// removed.
#[derive(Debug)]
pub struct Netns {
    file: File,
    path: PathBuf,
}

fn io_errno(e: &std::io::Error) -> Errno {
    e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::EIO)
}

impl Netns {
    /// Opens the namespace at `path` (a `/run/netns/<name>` bind mount or a
    /// `/proc/<pid>/ns/net` file).
    ///
    /// Like Go's `ns.GetNS`, a missing path gives [`Error::NetnsNotFound`]
    /// and a path on a filesystem other than nsfs/procfs gives
    /// [`Error::NotANetns`].
    pub fn open(path: impl AsRef<Path>) -> Result<Netns> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                Error::NetnsNotFound {
                    path: path.to_owned(),
                }
            } else {
                Error::Netns {
                    op: "open",
                    path: path.to_owned(),
                    errno: io_errno(&e),
                }
            }
        })?;
        let st = nix::sys::statfs::fstatfs(&file).map_err(|errno| Error::Netns {
            op: "statfs",
            path: path.to_owned(),
            errno,
        })?;
        let magic = st.filesystem_type();
        if magic != NSFS_MAGIC && magic != PROC_SUPER_MAGIC {
            return Err(Error::NotANetns {
                path: path.to_owned(),
            });
        }
        Ok(Netns {
            file,
            path: path.to_owned(),
        })
    }

    /// Opens the namespace of the calling thread.
    ///
    /// The recorded path is `/proc/<pid>/task/<tid>/ns/net` (as Go's
    /// `GetCurrentNS`), the descriptor is what identifies the namespace.
    pub fn current() -> Result<Netns> {
        let path = PathBuf::from(format!(
            "/proc/{}/task/{}/ns/net",
            std::process::id(),
            nix::unistd::gettid()
        ));
        Netns::open(path)
    }

    /// Creates a new, empty network namespace persisted as
    /// `/run/netns/<name>`, exactly like `ip netns add <name>`, so that
    /// `ip netns` and `ip -n <name>` see it.
    pub fn create(name: &str) -> Result<Netns> {
        let op = "create";
        let run_dir = Path::new(NETNS_RUN_DIR);
        let path = run_dir.join(name);
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Error::InvalidArgument {
                op: format!("create network namespace {name:?}"),
                reason: "name must be a single path component".into(),
            });
        }
        let fail = |errno: Errno| Error::Netns {
            op,
            path: path.clone(),
            errno,
        };
        ensure_shared_run_dir().map_err(fail)?;
        // O_EXCL: two callers creating the same name must not share a mount.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| fail(io_errno(&e)))?;
        let mounted = on_own_thread("cni-netns-create", || {
            // This thread is ours and dies right after, so leaving it in the
            // new namespace is harmless.
            unshare(CloneFlags::CLONE_NEWNET)?;
            mount(
                Some("/proc/thread-self/ns/net"),
                &path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
        })
        .map_err(|e| io_errno(&e))
        .and_then(|r| r);
        if let Err(errno) = mounted {
            let _ = std::fs::remove_file(&path);
            return Err(fail(errno));
        }
        Netns::open(&path)
    }

    /// Unmounts and removes the persisted namespace at `path` (like
    /// `ip netns del`). A path that does not exist is not an error.
    pub fn remove(path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        match umount2(path, MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
            Err(errno) => {
                return Err(Error::Netns {
                    op: "delete",
                    path: path.to_owned(),
                    errno,
                })
            }
        }
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Netns {
                op: "delete",
                path: path.to_owned(),
                errno: io_errno(&e),
            }),
        }
    }

    /// Deletes this namespace's bind mount (see [`Netns::remove`]). The
    /// namespace itself goes away once nothing else holds it.
    pub fn delete(self) -> Result<()> {
        let path = self.path.clone();
        drop(self);
        Netns::remove(path)
    }

    /// The path this namespace was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A second handle on the same namespace.
    pub fn try_clone(&self) -> Result<Netns> {
        Ok(Netns {
            file: self.file.try_clone().map_err(|e| Error::Netns {
                op: "duplicate",
                path: self.path.clone(),
                errno: io_errno(&e),
            })?,
            path: self.path.clone(),
        })
    }

    /// True when both handles refer to the same namespace (same nsfs inode).
    pub fn same_as(&self, other: &Netns) -> Result<bool> {
        Ok(self.id()? == other.id()?)
    }

    /// True when the calling thread is inside this namespace.
    pub fn is_current(&self) -> Result<bool> {
        let me = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| Error::Netns {
            op: "stat",
            path: "/proc/thread-self/ns/net".into(),
            errno: io_errno(&e),
        })?;
        Ok(self.id()? == (me.dev(), me.ino()))
    }

    fn id(&self) -> Result<(u64, u64)> {
        let md = self.file.metadata().map_err(|e| Error::Netns {
            op: "stat",
            path: self.path.clone(),
            errno: io_errno(&e),
        })?;
        Ok((md.dev(), md.ino()))
    }

    /// Runs `f` on a fresh thread that has entered this namespace and
    /// returns its value. The calling thread never changes namespace.
    ///
    /// A panic in `f` is propagated to the caller.
    pub fn run<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let span = cni_types::step_span!("netns.enter", netns.path = %self.path.display());
        let entered = span.in_scope(|| {
            on_own_thread("cni-netns", || {
                setns(&self.file, CloneFlags::CLONE_NEWNET).map_err(|errno| Error::Netns {
                    op: "enter",
                    path: self.path.clone(),
                    errno,
                })?;
                Ok(f())
            })
            .map_err(|source| Error::Thread {
                op: format!("enter network namespace {}", self.path.display()),
                source,
            })?
        });
        cni_types::trace::record_result(&span, entered)
    }
}

/// Runs `f` on a fresh thread named `name` that ends with it (the only
/// kind of thread the crate moves into a namespace) and returns its value;
/// a panic in `f` is propagated. `Err` when no thread could be started.
/// The spans `f` makes are children of the caller's current span.
fn on_own_thread<T, F>(name: &str, f: F) -> std::io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let parent = cni_types::trace::Parent::current();
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, move || parent.run(f))?;
        match handle.join() {
            Ok(v) => Ok(v),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Runs `f` on a fresh thread inside the network namespace at `path` (see
/// [`Netns::run`]), or on the calling thread when `path` is `None`: how the
/// crate opens a socket or starts a tool in a namespace it was given by
/// path (a socket stays in the namespace it was created in, a child
/// process starts in its parent thread's).
pub fn run_at<T, F>(path: Option<&Path>, f: F) -> Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    match path {
        Some(path) => Netns::open(path)?.run(f),
        None => Ok(f()),
    }
}

/// How errors name the namespace [`run_at`] was given.
pub fn label(path: Option<&Path>) -> String {
    path.map_or_else(
        || "the current network namespace".into(),
        |p| p.display().to_string(),
    )
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for Netns {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl fmt::Display for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())
    }
}

/// Makes `/run/netns` a shared mount point, as `ip netns add` does, so that
/// namespace mounts made under it propagate to other mount namespaces.
fn ensure_shared_run_dir() -> std::result::Result<(), Errno> {
    // One process-wide attempt at a time: two racing callers would each
    // bind-mount the directory onto itself and stack mounts.
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = Path::new(NETNS_RUN_DIR);
    match std::fs::create_dir_all(dir) {
        Ok(()) => {}
        Err(e) => return Err(io_errno(&e)),
    }
    let make_shared = || {
        mount(
            Some("none"),
            dir,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    match make_shared() {
        Ok(()) => Ok(()),
        // Not a mount point yet: bind it onto itself first (iproute2's
        // netns_add does the same).
        Err(Errno::EINVAL) => {
            mount(
                Some(dir),
                dir,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            make_shared()
        }
        Err(e) => Err(e),
    }
}

/// A namespace created under `/run/netns` that is deleted when dropped.
///
/// Meant for tests and benchmarks: each gets a unique name with a random
/// suffix, and cleanup runs even when a test fails.
#[derive(Debug)]
pub struct OwnedNetns {
    ns: Netns,
    name: String,
}

impl OwnedNetns {
    /// Creates `/run/netns/<prefix>-<8 random hex digits>`.
    pub fn new(prefix: &str) -> Result<OwnedNetns> {
        let mut last = None;
        for _ in 0..10 {
            let name = format!("{prefix}-{:08x}", crate::random_u32());
            match Netns::create(&name) {
                Ok(ns) => return Ok(OwnedNetns { ns, name }),
                Err(e) if e.is_exists() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidArgument {
            op: "create network namespace".into(),
            reason: "no free name".into(),
        }))
    }

    /// The name under `/run/netns` (what `ip -n` takes).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace.
    pub fn netns(&self) -> &Netns {
        &self.ns
    }
}

impl std::ops::Deref for OwnedNetns {
    type Target = Netns;
    fn deref(&self) -> &Netns {
        self.netns()
    }
}

impl Drop for OwnedNetns {
    fn drop(&mut self) {
        // Our descriptor keeps the namespace alive until this value is
        // gone; unmounting first makes it disappear from `ip netns` now.
        let _ = Netns::remove(&self.ns.path);
    }
}
