//! Unary gRPC calls over a unix socket, blocking.
//!
//! The transport kubelet's node APIs use: HTTP/2 over a unix socket,
//! each message a length-prefixed protobuf frame, the outcome in the
//! `grpc-status` trailer (or header, for a trailers-only answer). Messages
//! are any `prost` structs (generated, as [`crate::v1`], or written by
//! hand); no tonic: the callers here need a handful of unary calls.
//!
//! A [`Channel`] runs the HTTP/2 connection on a current-thread tokio
//! runtime of its own, driven only while a call blocks: no thread is
//! started and nothing runs between calls. The connection is kept for the
//! next call and made again when the server went away (a restarted
//! runtime). One channel serves one thread at a time; open one per thread
//! for calls in parallel.
//!
//! Every call is bounded by the channel's timeout (connecting included),
//! which the server is told in a `grpc-timeout` header, and its answer by
//! [`Channel::max_answer`] bytes (Go's `MaxCallRecvMsgSize`, 16 MiB by
//! default in kubelet's clients). A request the server did not process (a
//! stream refused with `REFUSED_STREAM`, or above the last stream of a
//! `GOAWAY`: a server shutting down or restarting) is sent once more on a
//! new connection, as gRPC's transparent retry does.
//!
//! ```
//! use cni_cri::grpc;
//!
//! #[derive(Clone, PartialEq, prost::Message)]
//! struct Ping {
//!     #[prost(string, tag = "1")]
//!     text: String,
//! }
//!
//! let frame = grpc::encode_frame(&Ping { text: "hi".into() });
//! assert_eq!(&frame[..5], &[0, 0, 0, 0, 4]);
//! let back: Ping = grpc::decode_frame(&frame, grpc::MAX_ANSWER).unwrap();
//! assert_eq!(back.text, "hi");
//!
//! // A call to a socket nobody serves fails with the socket's name.
//! let mut ch = grpc::Channel::new("/nonexistent/api.sock").unwrap();
//! let err = ch.call::<_, Ping>("/pkg.Service/Ping", &Ping::default()).unwrap_err();
//! assert!(err.to_string().contains("/nonexistent/api.sock"));
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

use crate::Error;

/// How many times a call is sent again after the server refused it
/// unprocessed (`REFUSED_STREAM`, `GOAWAY`).
const REFUSED_RETRIES: usize = 1;

/// The largest answer accepted unless the channel says otherwise (16 MiB,
/// Go's `MaxCallRecvMsgSize` in kubelet's clients).
pub const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// The time a call may take, connecting included, unless the channel
/// says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A gRPC message frame: a zero "compressed" flag, the length (big endian
/// u32), the protobuf bytes.
pub fn encode_frame<M: prost::Message>(msg: &M) -> Vec<u8> {
    let body = msg.encode_to_vec();
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(0);
    // A message of 4 GiB cannot be sent anyway: the length saturates and
    // the peer refuses the frame.
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes one uncompressed gRPC frame holding exactly one message of at
/// most `max` bytes. Fields the message does not declare are skipped, so
/// answers of newer servers decode.
pub fn decode_frame<M: prost::Message + Default>(buf: &[u8], max: usize) -> Result<M, Error> {
    let bad = |reason: String| Error::DecodeFrame { reason };
    let [flag, a, b, c, d, rest @ ..] = buf else {
        return Err(bad(format!(
            "answer of {} bytes has no gRPC frame",
            buf.len()
        )));
    };
    if *flag != 0 {
        return Err(bad("compressed gRPC answers are not supported".into()));
    }
    let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    if len > max {
        return Err(bad(format!(
            "gRPC message of {len} bytes is larger than the limit of {max}"
        )));
    }
    if rest.len() != len {
        return Err(bad(format!(
            "gRPC frame announces {len} bytes but carries {}",
            rest.len()
        )));
    }
    M::decode(rest).map_err(|e| bad(format!("malformed protobuf: {e}")))
}

/// A live HTTP/2 connection and the task driving it.
struct Connection {
    send: h2::client::SendRequest<Bytes>,
    /// HTTP/2 PING, to prove a kept connection alive before reusing it.
    ping: Option<h2::PingPong>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A blocking gRPC client for unary calls on one unix socket (see the
/// [module](self) documentation).
pub struct Channel {
    socket: PathBuf,
    timeout: Duration,
    max_answer: usize,
    runtime: tokio::runtime::Runtime,
    connection: Option<Connection>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("socket", &self.socket)
            .field("timeout", &self.timeout)
            .field("max_answer", &self.max_answer)
            .field("connected", &self.connection.is_some())
            .finish()
    }
}

/// Why one attempt of a call failed, and whether the request may have
/// reached the server.
enum Failure {
    /// The connection was found dead before the request was sent: a fresh
    /// connection may try again.
    Stale(String),
    /// The server refused the request without processing it
    /// (`REFUSED_STREAM`, or a `GOAWAY` below its stream): a fresh
    /// connection may try again.
    Refused(String),
    /// Anything else: reported as it is.
    Fatal(Error),
}

impl Channel {
    /// A channel to `socket` with [`DEFAULT_TIMEOUT`] and [`MAX_ANSWER`];
    /// it connects on the first call. Fails only when the I/O runtime
    /// cannot be made (no file descriptors left).
    pub fn new(socket: impl Into<PathBuf>) -> Result<Channel, Error> {
        let socket = socket.into();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::Call {
                socket: socket.clone(),
                method: String::new(),
                reason: format!("start I/O runtime: {e}"),
            })?;
        Ok(Channel {
            socket,
            timeout: DEFAULT_TIMEOUT,
            max_answer: MAX_ANSWER,
            runtime,
            connection: None,
        })
    }

    /// Sets the time each call may take, connecting included.
    pub fn with_timeout(mut self, timeout: Duration) -> Channel {
        self.timeout = timeout;
        self
    }

    /// Sets the largest answer accepted, in bytes.
    pub fn with_max_answer(mut self, max: usize) -> Channel {
        self.max_answer = max;
        self
    }

    /// The socket this channel calls.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The time each call may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The largest answer accepted, in bytes.
    pub fn max_answer(&self) -> usize {
        self.max_answer
    }

    /// One unary call of `method` (`/package.Service/Method`): sends
    /// `request`, returns the decoded answer. A non-zero `grpc-status`
    /// is [`Error::Status`] (with the server's code and message);
    /// anything else that goes wrong is [`Error::Call`]. The request
    /// carries the call's deadline (`grpc-timeout`). A call that fails or
    /// times out drops the connection (the next call connects again); a
    /// kept connection is first checked with an HTTP/2 PING, and one found
    /// closed is replaced before the request goes out; a request the server
    /// refused unprocessed (`REFUSED_STREAM`, `GOAWAY`) is sent once more
    /// on a new connection. A request the server may have processed is
    /// never sent twice.
    pub fn call<Req, Resp>(&mut self, method: &str, request: &Req) -> Result<Resp, Error>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let body = Bytes::from(encode_frame(request));
        let (timeout, max) = (self.timeout, self.max_answer);
        let deadline = tokio::time::Instant::now() + timeout;
        let Channel {
            socket,
            runtime,
            connection,
            ..
        } = self;
        let socket: &Path = socket;
        let outcome = runtime.block_on(async {
            let attempt = async {
                let mut refusals = 0;
                let mut stale_retried = false;
                loop {
                    let reused = connection.is_some();
                    match exchange(connection, socket, method, body.clone(), max, deadline).await {
                        Err(Failure::Stale(_)) if reused && !stale_retried => {
                            stale_retried = true;
                            *connection = None;
                        }
                        Err(Failure::Refused(_)) if refusals < REFUSED_RETRIES => {
                            refusals += 1;
                            *connection = None;
                        }
                        other => return other,
                    }
                }
            };
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(r) => r,
                Err(_) => Err(Failure::Fatal(grpc_err(
                    socket,
                    method,
                    format!("no answer within {timeout:?}"),
                ))),
            }
        });
        let frame = match outcome {
            Ok(frame) => frame,
            Err(failure) => {
                *connection = None;
                return Err(match failure {
                    Failure::Stale(reason) | Failure::Refused(reason) => {
                        grpc_err(socket, method, reason)
                    }
                    Failure::Fatal(e) => e,
                });
            }
        };
        decode_frame(&frame, max).map_err(|e| match e {
            Error::DecodeFrame { reason } => grpc_err(socket, method, reason),
            other => other,
        })
    }
}

fn grpc_err(socket: &Path, method: &str, reason: String) -> Error {
    Error::Call {
        socket: socket.to_path_buf(),
        method: method.to_string(),
        reason,
    }
}

async fn connect(socket: &Path) -> Result<Connection, String> {
    let io = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (send, mut conn) = h2::client::Builder::new()
        .max_header_list_size(64 * 1024)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let ping = conn.ping_pong();
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Connection { send, ping, driver })
}

/// One attempt: (re)connects when needed, sends the request, returns the
/// raw answer frame.
async fn exchange(
    connection: &mut Option<Connection>,
    socket: &Path,
    method: &str,
    body: Bytes,
    max: usize,
    deadline: tokio::time::Instant,
) -> Result<Vec<u8>, Failure> {
    let fatal = |reason: String| Failure::Fatal(grpc_err(socket, method, reason));
    // An HTTP/2 error of the request's stream: refused unprocessed, or not.
    let stream_failure = |what: &str, e: h2::Error| {
        if refused_unprocessed(&e) {
            Failure::Refused(format!("{what}: {e}"))
        } else {
            fatal(format!("{what}: {e}"))
        }
    };
    // Before the request is sent: a fresh connection may always try again.
    let unsent = |what: &str, e: h2::Error| {
        if refused_unprocessed(&e) {
            Failure::Refused(format!("{what}: {e}"))
        } else {
            Failure::Stale(format!("{what}: {e}"))
        }
    };
    if let Some(c) = connection.as_mut() {
        // The server may have gone away since the last call (a restarted
        // runtime): a PING round trip (tens of microseconds on a unix
        // socket) proves the connection alive before a request goes out
        // that must not be sent twice.
        let alive = match c.ping.as_mut() {
            Some(p) => p.ping(h2::Ping::opaque()).await.is_ok(),
            None => false,
        };
        if !alive || c.driver.is_finished() {
            return Err(Failure::Stale("connection closed".into()));
        }
    }
    let conn = match connection {
        Some(c) => c,
        None => connection.insert(connect(socket).await.map_err(fatal)?),
    };
    let mut send = conn
        .send
        .clone()
        .ready()
        .await
        .map_err(|e| unsent("HTTP/2", e))?;
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header(
            "grpc-timeout",
            grpc_timeout(deadline.saturating_duration_since(tokio::time::Instant::now())),
        )
        .body(())
        .map_err(|e| fatal(format!("build request: {e}")))?;
    let (answer, mut stream) = send
        .send_request(req, false)
        .map_err(|e| unsent("send request", e))?;
    stream
        .send_data(body, true)
        .map_err(|e| stream_failure("send request body", e))?;
    let answer = answer.await.map_err(|e| stream_failure("read answer", e))?;
    if answer.status() != http::StatusCode::OK {
        return Err(fatal(format!("HTTP status {}", answer.status())));
    }
    let status_err = |(code, message): (u32, String)| {
        Failure::Fatal(Error::Status {
            socket: socket.to_path_buf(),
            method: method.to_string(),
            code,
            message,
        })
    };
    // A trailers-only answer carries the status in the headers.
    if let Some(status) = grpc_status(answer.headers()) {
        if status.0 != 0 {
            return Err(status_err(status));
        }
    }
    let mut body = answer.into_body();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| fatal(format!("read answer body: {e}")))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if buf.len() + chunk.len() > max.saturating_add(5) {
            return Err(fatal(format!(
                "answer larger than the limit of {max} bytes"
            )));
        }
        buf.extend_from_slice(&chunk);
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|e| fatal(format!("read trailers: {e}")))?;
    match trailers.as_ref().and_then(grpc_status) {
        Some((0, _)) => Ok(buf),
        Some(status) => Err(status_err(status)),
        None if buf.is_empty() => Err(fatal("empty answer without gRPC status".into())),
        None => Err(fatal("answer without gRPC status".into())),
    }
}

/// Whether the server refused the request's stream without processing
/// it: a `RST_STREAM` with `REFUSED_STREAM`, or a `GOAWAY` (h2 hands a
/// peer's `GOAWAY` to a stream only when the stream is above the last one
/// the server processes, and to a request not yet sent).
fn refused_unprocessed(e: &h2::Error) -> bool {
    e.is_remote() && (e.is_go_away() || e.reason() == Some(h2::Reason::REFUSED_STREAM))
}

/// The `grpc-timeout` header's value for `left`: the most precise unit
/// whose count fits the header's 8 digits (gRPC's HTTP/2 protocol).
fn grpc_timeout(left: std::time::Duration) -> String {
    const MAX: u128 = 99_999_999;
    let nanos = left.as_nanos();
    for (unit, per) in [
        ("n", 1u128),
        ("u", 1_000),
        ("m", 1_000_000),
        ("S", 1_000_000_000),
        ("M", 60_000_000_000),
    ] {
        // Rounded up: a deadline is never announced shorter than it is.
        let count = nanos.div_ceil(per);
        if count <= MAX {
            return format!("{count}{unit}");
        }
    }
    format!("{}H", (nanos.div_ceil(3_600_000_000_000)).min(MAX))
}

/// `grpc-status` (an unparsable code counts as 2, UNKNOWN) and
/// `grpc-message` (percent-encoded on the wire, as gRPC sends it).
fn grpc_status(headers: &http::HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?;
    let code = code
        .to_str()
        .ok()
        .and_then(|c| c.trim().parse::<u32>().ok())
        .unwrap_or(2);
    let msg = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Some((code, msg))
}

/// gRPC's `grpc-message` encoding: `%XX` for bytes outside printable ASCII
/// and `%` itself.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, PartialEq, prost::Message)]
    struct Two {
        #[prost(string, tag = "1")]
        a: String,
        #[prost(int64, tag = "2")]
        b: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct One {
        #[prost(string, tag = "1")]
        a: String,
    }

    #[test]
    fn frames() {
        let f = encode_frame(&One::default());
        assert_eq!(f, [0, 0, 0, 0, 0]);
        assert_eq!(decode_frame::<One>(&f, 10).unwrap(), One::default());
        assert!(decode_frame::<One>(&[0, 0], 10).is_err());
        assert!(decode_frame::<One>(&[1, 0, 0, 0, 0], 10)
            .unwrap_err()
            .to_string()
            .contains("compressed"));
        let big = [0, 0, 0, 1, 0];
        assert!(decode_frame::<One>(&big, 10)
            .unwrap_err()
            .to_string()
            .contains("larger than the limit"));
        assert!(decode_frame::<One>(&[0, 0, 0, 0, 2, 0xff, 0xff], 10)
            .unwrap_err()
            .to_string()
            .contains("malformed"));
        assert!(decode_frame::<One>(&[0, 0, 0, 1, 0, 1, 2], 1000)
            .unwrap_err()
            .to_string()
            .contains("announces 256 bytes but carries 2"));
    }

    #[test]
    fn unknown_fields_are_skipped() {
        let f = encode_frame(&Two {
            a: "x".into(),
            b: 7,
        });
        assert_eq!(decode_frame::<One>(&f, 100).unwrap().a, "x");
    }

    #[test]
    fn status_message_is_percent_decoded() {
        assert_eq!(percent_decode("a%20b%25c%zz%4"), "a b%c%zz%4");
        assert_eq!(percent_decode("caf%C3%A9"), "café");
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", "5".parse().unwrap());
        h.insert("grpc-message", "not%20found".parse().unwrap());
        assert_eq!(grpc_status(&h), Some((5, "not found".into())));
        h.insert("grpc-status", "x".parse().unwrap());
        assert_eq!(grpc_status(&h).unwrap().0, 2);
    }

    #[test]
    fn missing_socket_names_socket_and_method() {
        let mut ch = Channel::new("/nonexistent/x.sock")
            .unwrap()
            .with_timeout(Duration::from_secs(1));
        let e = ch.call::<_, One>("/p.S/M", &One::default()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("/nonexistent/x.sock")
                && text.contains("/p.S/M")
                && text.contains("connect"),
            "{text}"
        );
        assert!(matches!(e, Error::Call { .. }));
    }

    #[test]
    fn timeouts_use_the_most_precise_unit_that_fits() {
        assert_eq!(grpc_timeout(Duration::from_nanos(5)), "5n");
        assert_eq!(grpc_timeout(Duration::from_millis(50)), "50000000n");
        assert_eq!(grpc_timeout(Duration::from_secs(10)), "10000000u");
        assert_eq!(grpc_timeout(Duration::from_secs(120)), "120000m");
        assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
        assert_eq!(
            grpc_timeout(Duration::from_secs(100_000_000 * 60)),
            "1666667H"
        );
        assert_eq!(grpc_timeout(Duration::MAX), "99999999H");
        assert_eq!(grpc_timeout(Duration::ZERO), "0n");
    }
}
