//! What a plugin's long-running companion (the dhcp daemon, multus-daemon)
//! needs from the unix socket its plugin talks to: the socket made at a
//! path an operator names without ever destroying what is there
//! ([`listen`]), and its connections served on a thread each, at most so
//! many at once, without ever dying when the system refuses a thread, the
//! others answered by one thread that never waits on any of them
//! ([`serve`]).
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("run/d.sock");
//! let listener = cni_files::daemon::listen(&path)?;
//! // A second daemon on the same path is refused while the first listens.
//! assert!(cni_files::daemon::listen(&path).is_err());
//! drop(listener);
//! // A socket nobody listens on (a killed daemon's) is replaced.
//! let _again = cni_files::daemon::listen(&path)?;
//! // Anything else at the path is refused and left alone.
//! let file = dir.path().join("config.json");
//! std::fs::write(&file, "{}")?;
//! assert!(cni_files::daemon::listen(&file).is_err());
//! assert_eq!(std::fs::read(&file)?, b"{}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Error;

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

/// Connections the overflow holds at once; past it, the one held longest
/// is answered (or closed) to make room for the newest.
const OVERFLOW_HELD: usize = 64;

/// Connections handed to the overflow thread and not yet taken by it;
/// past it, accepting waits for the thread (which never waits on a
/// connection) to take one.
const OVERFLOW_QUEUE: usize = 64;

/// How long the overflow waits for what a connection sends (when its
/// answer depends on it), and then for the peer to close after the answer
/// (what it sends meanwhile is discarded, so that a peer still writing its
/// request is not cut off mid-write).
pub const OVERFLOW_WAIT: Duration = Duration::from_millis(500);

/// The most the overflow reads of a connection before answering.
pub const OVERFLOW_READ_MAX: usize = 4 << 10;

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
/// reached), goes to the overflow instead: one thread made at start that
/// holds up to 64 such connections at once and never waits on any one of
/// them (`poll(2)`, non-blocking reads and writes). It asks
/// `overflow(sent, last)` for each connection's answer: `sent` is what the
/// connection has sent so far (nothing at first: an answer that does not
/// depend on it is given before anything is read), `last` is true when
/// nothing more will be read (the peer stopped writing, sent
/// [`OVERFLOW_READ_MAX`] bytes, or [`OVERFLOW_WAIT`] passed). `Some` is
/// the answer, written at once without waiting (a peer that cannot take
/// it is closed); `None` waits for more (closes, when `last`). After its
/// answer a connection is held until the peer closes or for
/// [`OVERFLOW_WAIT`], discarding what it sends. Past 64 held connections,
/// the one held longest is answered (`last`) and closed, so that the
/// newest (a health probe, say) are always answered.
/// Nothing here panics: a daemon must outlive a burst.
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
    O: FnMut(&[u8], bool) -> Option<Vec<u8>> + Send + 'static,
{
    let start_error = |source| Error::Io {
        op: "start overflow thread of",
        path: listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_path_buf))
            .unwrap_or_default(),
        source,
    };
    let (queue, waiting) = sync_channel::<UnixStream>(OVERFLOW_QUEUE);
    // A byte on `wake` for each connection queued: the overflow thread
    // polls its other end with the connections it holds.
    let (wake, woken) = UnixStream::pair().map_err(start_error)?;
    wake.set_nonblocking(true)
        .and_then(|()| woken.set_nonblocking(true))
        .map_err(start_error)?;
    std::thread::Builder::new()
        .name(format!("{}-overflow", options.name))
        .spawn(move || Overflow::new(overflow).run(&waiting, &woken))
        .map_err(start_error)?;
    let to_overflow = |stream: UnixStream| {
        if queue.send(stream).is_ok() {
            // A full `wake`: the thread has bytes to read already.
            let _ = (&wake).write(&[1]);
        }
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

/// A connection the overflow holds.
struct Held {
    stream: UnixStream,
    /// When it is answered (`last`) or, once answered, closed.
    deadline: Instant,
    /// What it sent, until it is answered.
    sent: Vec<u8>,
    answered: bool,
}

/// What becomes of a held connection after a step.
enum Next {
    Hold,
    Close,
}

/// The overflow thread: the connections it holds and how they are
/// answered.
struct Overflow<O> {
    answer: O,
    held: VecDeque<Held>,
}

impl<O: FnMut(&[u8], bool) -> Option<Vec<u8>>> Overflow<O> {
    fn new(answer: O) -> Self {
        Overflow {
            answer,
            held: VecDeque::new(),
        }
    }

    /// Serves connections from `waiting` (a byte on `woken` for each)
    /// until it is closed (the daemon stopped) and every held connection
    /// is done.
    fn run(mut self, waiting: &Receiver<UnixStream>, woken: &UnixStream) {
        let mut open = true;
        while open || !self.held.is_empty() {
            self.wait_and_step(open.then_some(woken));
            while open {
                match waiting.try_recv() {
                    Ok(s) => self.admit(s),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
        }
    }

    /// Takes a connection: answered at once when its answer does not
    /// depend on what it sends, else held (making room first).
    fn admit(&mut self, stream: UnixStream) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let mut h = Held {
            stream,
            deadline: Instant::now() + OVERFLOW_WAIT,
            sent: Vec::new(),
            answered: false,
        };
        if let Next::Close = self.ask(&mut h, false) {
            return;
        }
        if self.held.len() >= OVERFLOW_HELD {
            if let Some(mut oldest) = self.held.pop_front() {
                if !oldest.answered {
                    // Answered, then closed: no room to hold it longer.
                    let _ = self.ask(&mut oldest, true);
                }
            }
        }
        self.held.push_back(h);
    }

    /// Asks for `h`'s answer from what it sent; writes it when given.
    fn ask(&mut self, h: &mut Held, last: bool) -> Next {
        match (self.answer)(&h.sent, last) {
            Some(reply) => reply_to(h, &reply),
            None if last => Next::Close,
            None => Next::Hold,
        }
    }

    /// Waits for a held connection to send or for a new one to be queued
    /// (`woken`, drained), at most until the nearest deadline; then reads
    /// what came and answers those past their deadline.
    fn wait_and_step(&mut self, woken: Option<&UnixStream>) {
        let pollfd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds: Vec<libc::pollfd> = woken
            .iter()
            .map(|w| pollfd(w.as_raw_fd()))
            .chain(self.held.iter().map(|h| pollfd(h.stream.as_raw_fd())))
            .collect();
        let now = Instant::now();
        let ms = self
            .held
            .iter()
            .map(|h| h.deadline.saturating_duration_since(now))
            .min()
            .map_or(-1, |wait| {
                wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            });
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds, each
        // naming a descriptor kept open during the call (`woken` and the
        // streams of `self.held`).
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc < 0 {
            // Deadlines are still kept below; only EINTR is retried at once.
            if std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                std::thread::sleep(Duration::from_millis(10));
            }
            fds.iter_mut().for_each(|f| f.revents = 0);
        }
        if let Some(mut w) = woken {
            let mut buf = [0u8; 256];
            while matches!(w.read(&mut buf), Ok(n) if n > 0) {}
        }
        let skip = usize::from(woken.is_some());
        let mut held = std::mem::take(&mut self.held);
        let now = Instant::now();
        let mut ready = fds[skip..].iter().map(|f| f.revents != 0);
        held.retain_mut(|h| {
            let mut next = Next::Hold;
            if ready.next().unwrap_or(false) {
                next = self.read(h);
            }
            if let Next::Hold = next {
                if now >= h.deadline {
                    if !h.answered {
                        // Answered, then closed: it had its time.
                        let _ = self.ask(h, true);
                    }
                    next = Next::Close;
                }
            }
            matches!(next, Next::Hold)
        });
        self.held = held;
    }

    /// Reads what `h` sent without waiting: discarded once it is
    /// answered, else kept (up to [`OVERFLOW_READ_MAX`]) and asked about.
    fn read(&mut self, h: &mut Held) -> Next {
        let mut buf = [0u8; 4096];
        let mut last = false;
        // Bounded: a peer writing as fast as it is read gets no more than
        // its share of the thread.
        for _ in 0..16 {
            let room = if h.answered {
                buf.len()
            } else {
                OVERFLOW_READ_MAX
                    .saturating_sub(h.sent.len())
                    .min(buf.len())
            };
            if room == 0 {
                last = true;
                break;
            }
            match (&h.stream).read(&mut buf[..room]) {
                Ok(0) => {
                    if h.answered {
                        return Next::Close;
                    }
                    last = true;
                    break;
                }
                Ok(_) if h.answered => {}
                Ok(n) => h.sent.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        if h.answered {
            return Next::Hold;
        }
        self.ask(h, last)
    }
}

/// Writes `reply` to `h` without waiting: on success its writing side is
/// shut (the peer reads the end of the answer) and it is held until the
/// peer closes, else closed at once.
fn reply_to(h: &mut Held, reply: &[u8]) -> Next {
    let mut rest = reply;
    while !rest.is_empty() {
        match (&h.stream).write(rest) {
            Ok(0) => return Next::Close,
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A peer that cannot take a short answer at once is not
            // waited for.
            Err(_) => return Next::Close,
        }
    }
    let _ = h.stream.shutdown(std::net::Shutdown::Write);
    h.answered = true;
    h.sent = Vec::new();
    h.deadline = Instant::now() + OVERFLOW_WAIT;
    Next::Hold
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

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
                |_: &[u8], _| Some(b"busy".to_vec()),
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

    /// A daemon with one connection slot, taken by an idle connection,
    /// whose overflow answers `ping` with `pong` and anything else with
    /// `busy`; stopped when dropped.
    struct PingDaemon {
        path: std::path::PathBuf,
        stop: Arc<AtomicBool>,
        server: Option<std::thread::JoinHandle<Result<(), Error>>>,
        _slot: UnixStream,
        _dir: tempfile::TempDir,
    }

    impl PingDaemon {
        fn start() -> PingDaemon {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("d.sock");
            let listener = listen(&path).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let s = Arc::clone(&stop);
            let server = std::thread::spawn(move || {
                serve(
                    listener,
                    &ServeOptions::new("t").max_connections(1),
                    &s,
                    |c| {
                        // Holds its slot until the peer closes.
                        let _ = std::io::copy(&mut &c, &mut std::io::sink());
                    },
                    |sent: &[u8], last| {
                        let ping = b"ping\n";
                        if sent.starts_with(ping) {
                            Some(b"pong".to_vec())
                        } else if !last && ping.starts_with(sent) {
                            None
                        } else {
                            Some(b"busy".to_vec())
                        }
                    },
                )
            });
            let slot = UnixStream::connect(&path).unwrap();
            PingDaemon {
                path,
                stop,
                server: Some(server),
                _slot: slot,
                _dir: dir,
            }
        }

        /// The answer to `request` and how long it took to come.
        fn ask(&self, request: &[u8]) -> (String, Duration) {
            let started = Instant::now();
            let mut c = UnixStream::connect(&self.path).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            c.write_all(request).unwrap();
            let mut out = String::new();
            let _ = c.read_to_string(&mut out);
            (out, started.elapsed())
        }
    }

    impl Drop for PingDaemon {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            drop(UnixStream::connect(&self.path));
            if let Some(s) = self.server.take() {
                let _ = s.join();
            }
        }
    }

    #[test]
    fn the_overflow_never_waits_on_one_connection() {
        let d = PingDaemon::start();
        // More idle connections over the cap than the overflow holds.
        let idle: Vec<UnixStream> = (0..OVERFLOW_HELD + 40)
            .map(|_| {
                let c = UnixStream::connect(&d.path).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                c
            })
            .collect();
        // What decides at once is answered at once, whatever is held.
        let (out, took) = d.ask(b"ping\n");
        assert_eq!(out, "pong");
        assert!(took < Duration::from_secs(4), "pong after {took:?}");
        let (out, took) = d.ask(b"post /cni");
        assert_eq!(out, "busy");
        assert!(took < Duration::from_secs(4), "busy after {took:?}");
        // A request sent in pieces is waited for (without holding others).
        let started = Instant::now();
        let mut c = UnixStream::connect(&d.path).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"pi").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        c.write_all(b"ng\n").unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        assert_eq!(out, "pong");
        assert!(started.elapsed() < Duration::from_secs(4));
        // Each idle one is answered within its wait, none after another's.
        let started = Instant::now();
        for mut c in idle {
            let mut out = String::new();
            let _ = c.read_to_string(&mut out);
            assert_eq!(out, "busy");
        }
        let took = started.elapsed();
        assert!(took < OVERFLOW_WAIT * 2, "idle answered after {took:?}");
    }

    #[test]
    fn an_answer_that_needs_nothing_is_given_before_anything_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let listener = listen(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let server = std::thread::spawn(move || {
            serve(
                listener,
                &ServeOptions::new("t").max_connections(1),
                &s,
                |c| {
                    let _ = std::io::copy(&mut &c, &mut std::io::sink());
                },
                |_: &[u8], _| Some(b"busy\n".to_vec()),
            )
        });
        let slot = UnixStream::connect(&path).unwrap();
        let started = Instant::now();
        let idle: Vec<UnixStream> = (0..OVERFLOW_HELD + 40)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        for mut c in idle {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut line = [0u8; 5];
            c.read_exact(&mut line).unwrap();
            assert_eq!(&line, b"busy\n");
        }
        let took = started.elapsed();
        assert!(took < OVERFLOW_WAIT, "answered after {took:?}");
        // A peer that writes its request after the answer is not cut off:
        // the write succeeds (discarded), then the answer is read.
        let mut late = UnixStream::connect(&path).unwrap();
        late.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        late.write_all(&[b'x'; 64 << 10]).unwrap();
        let mut out = String::new();
        late.read_to_string(&mut out).unwrap();
        assert_eq!(out, "busy\n");
        drop(slot);
        stop.store(true, Ordering::SeqCst);
        drop(UnixStream::connect(&path));
        server.join().unwrap().unwrap();
    }
}
