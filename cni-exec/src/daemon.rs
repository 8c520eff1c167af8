//! What a plugin's long-running companion (the dhcp daemon, multus-daemon)
//! needs from the unix socket its plugin talks to: the socket made at a
//! path an operator names without ever destroying what is there
//! ([`listen`]), and its connections served on a thread each, at most so
//! many at once, without ever dying when the system refuses a thread
//! ([`serve`]).
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("run/d.sock");
//! let listener = cni_exec::daemon::listen(&path)?;
//! // A second daemon on the same path is refused while the first listens.
//! assert!(cni_exec::daemon::listen(&path).is_err());
//! drop(listener);
//! // A socket nobody listens on (a killed daemon's) is replaced.
//! let _again = cni_exec::daemon::listen(&path)?;
//! // Anything else at the path is refused and left alone.
//! let file = dir.path().join("config.json");
//! std::fs::write(&file, "{}")?;
//! assert!(cni_exec::daemon::listen(&file).is_err());
//! assert_eq!(std::fs::read(&file)?, b"{}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::Error;

fn io_error(op: &'static str, path: &Path, kind: ErrorKind, msg: String) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::new(kind, msg),
    }
}

/// What is at `path`, in words, for an error message.
fn file_kind(t: std::fs::FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a socket"
    }
}

/// Makes `path` ready for a daemon's socket: creates its directory (mode
/// 0700) when missing, and removes a socket nobody answers on (a killed
/// daemon's). Nothing else is ever removed: a socket someone answers on is
/// refused (`AddrInUse`), and so is any other kind of file, found with
/// `lstat` (a symbolic link is not followed): a typo in a unit file must
/// not delete a configuration or a system file.
pub fn prepare_socket_path(path: &Path) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| Error::Io {
                    op: "create socket directory",
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                op: "inspect socket path",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(io_error(
            "refuse to replace",
            path,
            ErrorKind::AlreadyExists,
            format!(
                "{} is there, not a socket (remove it or choose another socket path)",
                file_kind(meta.file_type())
            ),
        ));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(io_error(
            "listen on",
            path,
            ErrorKind::AddrInUse,
            "another daemon is listening on this socket".into(),
        ));
    }
    std::fs::remove_file(path).map_err(Error::io("remove stale socket", path))
}

/// Listens on the unix socket `path` after [`prepare_socket_path`]. The
/// socket file is created mode 0600, owned by the caller (root, for a
/// daemon), whatever the umask: its mode is set on the socket before
/// `bind(2)` (which creates the file with the socket's mode less the
/// umask), so there is no instant in which another user may connect.
pub fn listen(path: &Path) -> Result<UnixListener, Error> {
    use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};
    use nix::sys::stat::{fchmod, Mode};
    prepare_socket_path(path)?;
    let io = |op: &'static str| {
        move |e: nix::Error| Error::Io {
            op,
            path: path.to_path_buf(),
            source: std::io::Error::from(e),
        }
    };
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io("create socket for"))?;
    fchmod(&fd, Mode::from_bits_truncate(0o600)).map_err(io("restrict socket mode of"))?;
    let addr = UnixAddr::new(path).map_err(io("listen on"))?;
    socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr).map_err(io("listen on"))?;
    socket::listen(&fd, Backlog::MAXCONN).map_err(io("listen on"))?;
    Ok(UnixListener::from(fd))
}

/// The connections a daemon serves at once unless told otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Connections waiting for the overflow handler; more are closed at once.
const OVERFLOW_QUEUE: usize = 64;

/// How [`serve`] serves: the thread names and the cap.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    name: String,
    max_connections: usize,
}

impl ServeOptions {
    /// Threads named after `name` (`<name>-conn`, `<name>-overflow`), at
    /// most [`DEFAULT_MAX_CONNECTIONS`] connections at once.
    pub fn new(name: impl Into<String>) -> Self {
        ServeOptions {
            name: name.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// At most `max` connections served at once (at least 1).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }
}

/// A connection slot, given back when the connection's thread ends (a
/// panic in a handler included: a lost slot would shrink the daemon for
/// good).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves `listener` until `stop` is set (checked after each accepted
/// connection: whoever sets it connects once to wake the loop).
///
/// Each connection runs `handle` on a thread of its own, at most
/// `max_connections` at once. A connection over the cap, or one whose
/// thread the system refuses (`EAGAIN`: a `pids.max` or `RLIMIT_NPROC`
/// reached), goes to `overflow` instead, run one connection at a time on
/// one thread made at start, which answers it cheaply (a "try again"
/// error, code 11; multus also answers health probes there). Past a
/// queue of 64 such connections, a connection is closed at once. Nothing
/// here panics: a daemon must outlive a burst.
///
/// Fails only when the overflow thread cannot be made (at start).
pub fn serve<H, O>(
    listener: UnixListener,
    options: &ServeOptions,
    stop: &AtomicBool,
    handle: H,
    overflow: O,
) -> Result<(), Error>
where
    H: Fn(UnixStream) + Send + Sync + 'static,
    O: Fn(UnixStream) + Send + 'static,
{
    let (queue, waiting) = sync_channel::<UnixStream>(OVERFLOW_QUEUE);
    std::thread::Builder::new()
        .name(format!("{}-overflow", options.name))
        .spawn(move || {
            for stream in waiting {
                overflow(stream);
            }
        })
        .map_err(|source| Error::Io {
            op: "start overflow thread of",
            path: listener
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(Path::to_path_buf))
                .unwrap_or_default(),
            source,
        })?;
    let to_overflow = |stream: UnixStream| match queue.try_send(stream) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            tracing::warn!("{}: overflow queue full, connection closed", options.name)
        }
        Err(TrySendError::Disconnected(_)) => {}
    };
    let handle = Arc::new(handle);
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: let a connection end before the next
                // accept instead of spinning.
                tracing::warn!("{}: accept: {e}", options.name);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= options.max_connections {
            active.fetch_sub(1, Ordering::SeqCst);
            to_overflow(stream);
            continue;
        }
        let slot = Slot(Arc::clone(&active));
        // The stream travels through a cell so that a refused thread
        // (whose closure is dropped unrun) leaves it to the overflow.
        let cell = Arc::new(Mutex::new(Some(stream)));
        let taken = Arc::clone(&cell);
        let h = Arc::clone(&handle);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-conn", options.name))
            .spawn(move || {
                let _slot = slot;
                let stream = taken.lock().map(|mut s| s.take()).unwrap_or(None);
                if let Some(s) = stream {
                    h(s);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("{}: no thread for a connection: {e}", options.name);
            let stream = cell.lock().map(|mut s| s.take()).unwrap_or(None);
            if let Some(s) = stream {
                to_overflow(s);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_every_kind_of_file_but_a_dead_socket() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        std::fs::write(&file, "root:x:0:0").unwrap();
        let e = listen(&file).unwrap_err().to_string();
        assert!(
            e.contains("refuse to replace") && e.contains("a regular file"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "root:x:0:0");

        let sub = dir.path().join("dir");
        std::fs::create_dir(&sub).unwrap();
        let e = listen(&sub).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        assert!(sub.is_dir());

        // A symlink to a socket is not followed, and not removed.
        let target = dir.path().join("real.sock");
        let l = listen(&target).unwrap();
        drop(l);
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = listen(&link).unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "{e}");
        assert!(std::fs::symlink_metadata(&link).is_ok());

        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = listen(&fifo).unwrap_err().to_string();
        assert!(e.contains("a named pipe"), "{e}");
    }

    #[test]
    fn replaces_a_dead_socket_and_refuses_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/d.sock");
        let live = listen(&path).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let e = listen(&path).unwrap_err().to_string();
        assert!(e.contains("another daemon is listening"), "{e}");
        drop(live);
        let _again = listen(&path).unwrap();
    }

    #[test]
    fn connections_over_the_cap_go_to_the_overflow() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let listener = listen(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let server = std::thread::spawn(move || {
            serve(
                listener,
                &ServeOptions::new("t").max_connections(2),
                &s,
                |mut c| {
                    let mut b = [0u8; 1];
                    // Held until the client writes.
                    let _ = c.read(&mut b);
                    let _ = c.write_all(b"served");
                },
                |mut c| {
                    let _ = c.write_all(b"busy");
                },
            )
        });
        let reply = |c: &mut UnixStream| {
            let mut out = String::new();
            c.read_to_string(&mut out).unwrap();
            out
        };
        let mut held: Vec<UnixStream> = (0..2)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        // The third is answered by the overflow while two are held.
        let mut third = UnixStream::connect(&path).unwrap();
        assert_eq!(reply(&mut third), "busy");
        for c in &mut held {
            c.write_all(b"x").unwrap();
            assert_eq!(reply(c), "served");
        }
        // Slots come back: served again (the held threads may still be
        // ending, so wait for it).
        let mut served = false;
        for _ in 0..500 {
            let mut c = UnixStream::connect(&path).unwrap();
            c.write_all(b"x").unwrap();
            if reply(&mut c) == "served" {
                served = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(served);
        stop.store(true, Ordering::SeqCst);
        drop(UnixStream::connect(&path));
        server.join().unwrap().unwrap();
    }
}
