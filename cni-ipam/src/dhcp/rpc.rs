//! The plugin ↔ daemon protocol: one request and one reply per unix-socket
//! connection, each a single line of JSON (newline-delimited JSON).
//!
//! Request: `{"op": "add"|"del"|"check"|"gc"|"status", "containerId": ...,
//! "netns": ..., "ifname": ..., "args": <CNI_ARGS>, "config": <the plugin's
//! stdin as JSON>}` (GC carries `cni.dev/valid-attachments` inside
//! `config`, as the runtime sent it).
//! Reply: `{"result": <CNI 1.1.0 result>}` (ADD), `{}` (success without a
//! result), or `{"error": {"code": N, "msg": ..., "details": ...}}`.
//!
//! This is not the Go daemon's protocol (gob-encoded `net/rpc` over HTTP):
//! our plugin cannot talk to Go's daemon nor Go's plugin to ours.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use cni_types::CniError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The longest line either side reads (a config with a large
/// `prevResult` fits many times over).
pub const MAX_LINE: u64 = 1 << 20;

/// What the plugin asks the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DaemonOp {
    /// Acquire (or return the held) lease.
    Add,
    /// Release and forget the lease.
    Del,
    /// The lease is held and its address is on the interface.
    Check,
    /// Release the leases of attachments not in the valid list.
    Gc,
    /// The daemon answers.
    Status,
}

/// One request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DaemonRequest {
    /// The operation.
    pub op: DaemonOp,
    /// `CNI_CONTAINERID`.
    #[serde(rename = "containerId", default)]
    pub container_id: String,
    /// `CNI_NETNS`, made absolute by the plugin.
    #[serde(default)]
    pub netns: String,
    /// `CNI_IFNAME`.
    #[serde(default)]
    pub ifname: String,
    /// `CNI_ARGS`.
    #[serde(default)]
    pub args: String,
    /// The network configuration the plugin received.
    #[serde(default)]
    pub config: Value,
}

/// One reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonReply {
    /// ADD's result in the 1.1.0 shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The failure, as the plugin should print it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CniError>,
}

/// Sends `req` to the daemon at `socket` and waits up to `timeout` for the
/// reply. An absent socket, a path that is not a socket, or a refused
/// connection is [`Error::DhcpDaemonUnreachable`] (code 11); a reply that
/// does not come in time or does not parse is [`Error::DhcpDaemonProtocol`].
pub fn call(socket: &Path, req: &DaemonRequest, timeout: Duration) -> Result<DaemonReply> {
    let unreachable = |source| Error::DhcpDaemonUnreachable {
        path: socket.to_owned(),
        source,
    };
    let protocol = |reason: String| Error::DhcpDaemonProtocol {
        path: socket.to_owned(),
        reason,
    };
    let mut stream = UnixStream::connect(socket).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
        .and_then(|()| stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1)))))
        .map_err(unreachable)?;
    let mut line = serde_json::to_vec(req).map_err(|e| protocol(e.to_string()))?;
    line.push(b'\n');
    // A daemon that answers before reading everything ("busy") or that
    // died mid-request closes its end: the reply, if any, is still there
    // to read after a failed write.
    let sent = stream.write_all(&line);
    let closed = || Error::DhcpDaemonClosed {
        path: socket.to_owned(),
    };
    let text = read_line(&stream).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            protocol(format!("no reply within {timeout:?}"))
        }
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => closed(),
        _ => protocol(format!("read reply: {e}")),
    })?;
    if text.is_empty() {
        return Err(match sent {
            Err(e)
                if e.kind() != std::io::ErrorKind::BrokenPipe
                    && e.kind() != std::io::ErrorKind::ConnectionReset =>
            {
                protocol(format!("send request: {e}"))
            }
            _ => closed(),
        });
    }
    serde_json::from_str(&text).map_err(|e| {
        let shown: String = text.chars().take(80).collect();
        protocol(format!("reply is not a daemon reply ({e}): {shown:?}"))
    })
}

/// Listens on `path` (daemon side) with the daemons' one socket rule
/// ([`cni_files::daemon::listen`]): its directory is created (mode 0700), a
/// stale socket (one nobody answers on) that a killed daemon left is
/// replaced (where Go fails with "address already in use"), a socket
/// someone answers on is an `AddrInUse` error, and any other file at
/// `path` is refused and left alone.
pub fn listen(path: &Path) -> Result<UnixListener> {
    cni_files::daemon::listen(path).map_err(Error::atomic_write)
}

/// The listening socket systemd passed as fd 3 (socket activation with
/// one socket), marked close-on-exec. Fails when fd 3 is not a listening
/// unix socket.
pub fn activated_listener() -> Result<UnixListener> {
    const SD_LISTEN_FDS_START: i32 = 3;
    let fd = SD_LISTEN_FDS_START;
    let check = |what: &str| {
        Error::io(
            "use socket-activated fd 3",
            Path::new("fd:3"),
            std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_owned()),
        )
    };
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt(2) on an fd number writes at most `len` bytes
    // into `ty`; a non-socket fd is an error, not undefined behaviour.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            std::ptr::addr_of_mut!(ty).cast(),
            &mut len,
        )
    };
    if rc < 0 || ty != libc::SOCK_STREAM {
        return Err(check("not a stream socket"));
    }
    // SAFETY: fcntl(2) on an fd number; errors are returned.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(Error::io(
            "use socket-activated fd 3",
            Path::new("fd:3"),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: systemd hands fd 3 to this process, checked above to be a
    // stream socket; nothing else in the process owns it.
    Ok(unsafe { <UnixListener as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Reads one line (at most [`MAX_LINE`] bytes), without its newline.
pub fn read_line(stream: &UnixStream) -> std::io::Result<String> {
    let mut text = String::new();
    BufReader::new(stream.take(MAX_LINE)).read_line(&mut text)?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

/// Reads a request from a connection (daemon side).
pub fn read_request(stream: &UnixStream) -> std::result::Result<DaemonRequest, String> {
    let text = read_line(stream).map_err(|e| format!("read request: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("decode request: {e}"))
}

/// A reply as it goes on the wire: one line, its newline included.
pub fn reply_line(reply: &DaemonReply) -> std::io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

/// Writes a reply (daemon side).
pub fn write_reply(mut stream: &UnixStream, reply: &DaemonReply) -> std::io::Result<()> {
    stream.write_all(&reply_line(reply)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::ErrorCode;

    #[test]
    fn wire_shapes() {
        let req = DaemonRequest {
            op: DaemonOp::Add,
            container_id: "c".into(),
            netns: "/run/netns/x".into(),
            ifname: "eth0".into(),
            args: String::new(),
            config: serde_json::json!({"name": "n"}),
        };
        let text = serde_json::to_string(&req).unwrap();
        assert!(
            text.starts_with(r#"{"op":"add","containerId":"c""#),
            "{text}"
        );
        let err = DaemonReply {
            result: None,
            error: Some(CniError::new(ErrorCode::TryAgainLater, "m", "")),
        };
        assert_eq!(
            serde_json::to_string(&err).unwrap(),
            r#"{"error":{"code":11,"msg":"m"}}"#
        );
        assert_eq!(
            serde_json::to_string(&DaemonReply::default()).unwrap(),
            "{}"
        );
    }

    #[test]
    fn listen_replaces_a_stale_socket_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/cni/d.sock");
        let first = listen(&path).unwrap();
        let e = listen(&path).unwrap_err().to_string();
        assert!(e.contains("another daemon is listening"), "{e}");
        drop(first);
        let _second = listen(&path).unwrap();
    }

    #[test]
    fn unreachable_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let req = DaemonRequest {
            op: DaemonOp::Status,
            container_id: String::new(),
            netns: String::new(),
            ifname: String::new(),
            args: String::new(),
            config: Value::Null,
        };
        let missing = dir.path().join("none.sock");
        let e = call(&missing, &req, Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::TryAgainLater);
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(
            call(&file, &req, Duration::from_secs(1))
                .unwrap_err()
                .code(),
            ErrorCode::TryAgainLater
        );

        let sock = dir.path().join("garbage.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            for answer in ["hello\n", ""] {
                let (s, _) = listener.accept().unwrap();
                let _ = read_line(&s);
                (&s).write_all(answer.as_bytes()).unwrap();
                if answer.is_empty() {
                    // No answer until the client gives up and closes (or
                    // 30 s): only its own timeout ends the call.
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    let _ = std::io::Read::read(&mut &s, &mut [0u8; 1]);
                }
            }
        });
        let e = call(&sock, &req, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a daemon reply"), "{e}");
        let t = std::time::Instant::now();
        let e = call(&sock, &req, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no reply within"), "{e}");
        // Bounded by its timeout, far below the server's 30 s (generous:
        // a busy machine schedules late).
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        server.join().unwrap();
    }

    /// #31.9: a daemon that closes the connection mid-request (killed,
    /// restarted) is transient: code 11, not 999.
    #[test]
    fn a_connection_closed_mid_request_is_try_again() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("closing.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            for read_first in [true, false] {
                let (s, _) = listener.accept().unwrap();
                if read_first {
                    let mut b = [0u8; 8];
                    let _ = (&s).read(&mut b);
                }
                drop(s);
            }
        });
        let req = DaemonRequest {
            op: DaemonOp::Status,
            container_id: String::new(),
            netns: String::new(),
            ifname: String::new(),
            args: "x".repeat(1 << 20),
            config: Value::Null,
        };
        for _ in 0..2 {
            let e = call(&sock, &req, Duration::from_secs(10)).unwrap_err();
            assert_eq!(e.code(), ErrorCode::TryAgainLater, "{e}");
            assert!(e.to_string().contains("closed the connection"), "{e}");
        }
        server.join().unwrap();
    }
}
