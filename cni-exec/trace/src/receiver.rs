//! A tiny OTLP/HTTP receiver for a human view without a tracing back-end:
//! it listens on `127.0.0.1`, decodes every POST with [`crate::proto`],
//! keeps the spans, and [`render_tree`] prints them as a tree with
//! durations (`cnitool --trace`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::proto::{decode_request, Span, StatusCode, Value};
use crate::Error;

/// The most of a request's head read.
const MAX_HEAD: usize = 64 * 1024;
/// The most of a request's body read.
const MAX_BODY: usize = 16 << 20;

/// A running receiver; stopped when dropped.
pub struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn io(endpoint: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        endpoint: endpoint.to_string(),
        source,
    }
}

/// Reads one request from `stream`, keeps its spans, and answers it.
/// Spans are kept before the reply goes out: a sender that saw its reply
/// finds them in [`Receiver::spans`].
fn serve_one(mut stream: TcpStream, kept: &Mutex<Vec<Span>>) -> Result<(), Error> {
    let peer = "receiver";
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(io(peer))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(Error::Decode("request head too large"));
        }
        let n = stream.read(&mut chunk).map_err(io(peer))?;
        if n == 0 {
            return Err(Error::Decode("request ended in its head"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .ok_or(Error::Decode("no content-length"))?;
    if length > MAX_BODY {
        return Err(Error::Decode("request body too large"));
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).map_err(io(peer))?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    let decoded = decode_request(&body);
    let status = match &decoded {
        Ok(batches) => {
            let spans = batches.iter().flat_map(|b| b.spans.iter().cloned());
            match kept.lock() {
                Ok(mut k) => k.extend(spans),
                Err(p) => p.into_inner().extend(spans),
            }
            "200 OK"
        }
        Err(_) => "400 Bad Request",
    };
    let _ = stream.write_all(
        format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    decoded.map(drop)
}

impl Receiver {
    /// Listens on `127.0.0.1` (a free port), serving on a thread of its own.
    pub fn start() -> Result<Receiver, Error> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io("127.0.0.1:0"))?;
        let addr = listener.local_addr().map_err(io("127.0.0.1:0"))?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, stopped) = (spans.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("cni-trace-receiver".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stopped.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        let _ = serve_one(stream, &kept);
                    }
                }
            })
            .map_err(io("127.0.0.1:0"))?;
        Ok(Receiver {
            addr,
            spans,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>`: an `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        match self.spans.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread; when that cannot be done (no
        // loopback here), the thread is left to end with the process.
        let woken = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok();
        if let Some(t) = self.thread.take().filter(|_| woken) {
            let _ = t.join();
        }
    }
}

/// `spans` as an indented tree, children under their parent in start
/// order, each line the span's name, its plugin (`cni.plugin`), its
/// duration and an error status:
///
/// ```text
/// cnitool ADD  41.2 ms
///   cni.exec bridge  20.3 ms
///     cni ADD [bridge]  18.9 ms
/// ```
///
/// Spans whose parent is not among them are roots.
pub fn render_tree(spans: &[Span]) -> String {
    let mut sorted: Vec<&Span> = spans.iter().collect();
    sorted.sort_by_key(|s| s.start_time_unix_nano);
    let known = |id: &[u8; 8]| sorted.iter().any(|s| &s.span_id == id);
    let mut out = String::new();
    fn walk(out: &mut String, all: &[&Span], span: &Span, depth: usize) {
        if depth > 64 {
            return;
        }
        let ms = span
            .end_time_unix_nano
            .saturating_sub(span.start_time_unix_nano) as f64
            / 1e6;
        out.push_str(&"  ".repeat(depth));
        out.push_str(&span.name);
        if span.name.starts_with("cni ") {
            if let Some(Value::Str(p)) = span.attribute("cni.plugin") {
                out.push_str(&format!(" [{p}]"));
            }
        }
        out.push_str(&format!("  {ms:.1} ms"));
        if span.status.code == StatusCode::Error {
            out.push_str(&format!("  ERROR: {}", span.status.message));
        }
        out.push('\n');
        for child in all
            .iter()
            .filter(|c| c.parent_span_id == Some(span.span_id) && c.span_id != span.span_id)
        {
            walk(out, all, child, depth + 1);
        }
    }
    for root in sorted
        .iter()
        .filter(|s| s.parent_span_id.as_ref().is_none_or(|p| !known(p)))
    {
        walk(&mut out, &sorted, root, 0);
    }
    out
}
