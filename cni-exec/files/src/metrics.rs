//! Prometheus metrics for the node daemons: the text exposition format
//! 0.0.4 ([`Exposition`], [`Histogram`]) and its scrape endpoint
//! ([`serve`]), with nothing but `std`.
//!
//! It lives here, the lowest crate both `cni-gc` and `cni-multus` build
//! on, so that label escaping, `HELP`/`TYPE` lines, histogram buckets and
//! the HTTP endpoint are written once. Each daemon keeps its own counters
//! and renders them through an [`Exposition`].
//!
//! ```
//! use cni_files::metrics::{Exposition, Histogram, Kind};
//!
//! let mut h = Histogram::new(&[0.1, 1.0]);
//! h.observe(0.5);
//! let mut e = Exposition::new();
//! e.family("demo_passes_total", Kind::Counter, "Passes, by outcome.");
//! e.sample("demo_passes_total", &[("outcome", "ok \"quoted\"")], 3.0);
//! e.family("demo_pass_duration_seconds", Kind::Histogram, "How long a pass took.");
//! e.histogram("demo_pass_duration_seconds", &[], &h);
//! let text = e.finish();
//! assert!(text.contains("demo_passes_total{outcome=\"ok \\\"quoted\\\"\"} 3\n"));
//! assert!(text.contains("demo_pass_duration_seconds_bucket{le=\"0.1\"} 0\n"));
//! assert!(text.contains("demo_pass_duration_seconds_bucket{le=\"1\"} 1\n"));
//! assert!(text.contains("demo_pass_duration_seconds_bucket{le=\"+Inf\"} 1\n"));
//! assert!(text.contains("demo_pass_duration_seconds_count 1\n"));
//! ```

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The scrape reply's content type (text format 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The largest request head [`serve`] reads (a scraper sends a few hundred
/// bytes); a longer one gets 400.
pub const MAX_REQUEST_HEAD: usize = 8 << 10;
/// How long [`serve`] waits for a request head, and for a reply to be
/// taken: a stalled client holds the endpoint at most this long.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Bucket bounds in seconds for the duration of a CNI call or a
/// collection pass: from a few milliseconds to a minute.
pub const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A metric family's type (the `# TYPE` line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (a restart resets it); the name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in cumulative buckets, with their sum and count.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A histogram: observations counted in buckets with upper bounds
/// (cumulative when rendered, with `+Inf`), their sum and count.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative); one more for above the last bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram with these upper bounds (ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Counts one observation.
    pub fn observe(&mut self, value: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum += value;
        self.count += 1;
    }

    /// How many observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Their sum.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// A text exposition being written: families in the order given, each a
/// [`Exposition::family`] line pair, then its samples.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Exposition {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
        self
    }

    /// One sample: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Exposition {
        self.out.push_str(name);
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {}", format_value(value));
        self
    }

    /// A histogram's samples: `name_bucket{labels,le}` (cumulative, then
    /// `+Inf`), `name_sum`, `name_count`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        h: &Histogram,
    ) -> &mut Exposition {
        let mut cumulative = 0;
        for (bound, n) in h.bounds.iter().zip(&h.counts) {
            cumulative += n;
            let _ = write!(self.out, "{name}_bucket");
            write_labels(&mut self.out, labels, Some(&format_value(*bound)));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let _ = write!(self.out, "{name}_bucket");
        write_labels(&mut self.out, labels, Some("+Inf"));
        let _ = writeln!(self.out, " {}", h.count);
        let _ = write!(self.out, "{name}_sum");
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {}", format_value(h.sum));
        let _ = write!(self.out, "{name}_count");
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {}", h.count);
        self
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// `{a="x",le="0.1"}`, nothing when there are no labels.
fn write_labels(out: &mut String, labels: &[(&str, &str)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
    for (i, (k, v)) in all.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        out.push_str(&escape_label_value(v));
        out.push('"');
    }
    out.push('}');
}

/// A label value escaped for the text format: `\`, `"` and newline.
pub fn escape_label_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A value as the text format writes it: `+Inf`, `-Inf`, `NaN`, whole
/// numbers without a fraction.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Serves `GET /metrics` (with or without a query) on `listener` with
/// `render()`'s text until `stop` is set (checked after each connection:
/// a caller that sets it connects once to wake the loop). `GET /healthz`
/// answers `ok`; other paths 404, other methods 405. One connection at a
/// time, one request each (`Connection: close`): a request head is read
/// up to [`MAX_REQUEST_HEAD`] bytes within [`IO_TIMEOUT`], so a stalled
/// or oversized client costs the endpoint at most that. Run it on a thread
/// of its own.
pub fn serve(listener: &TcpListener, stop: &AtomicBool, render: &dyn Fn() -> String) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut stream) = conn else { continue };
        let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
        let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
        let Some(head) = read_head(&mut stream) else {
            continue;
        };
        let (status, content_type, body) = route(&head, render);
        let reason = match status {
            200 => "OK",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Bad Request",
        };
        let reply = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(reply.as_bytes());
        let _ = stream.flush();
    }
}

/// What a request head gets: (status, content type, body).
fn route(head: &Result<String, ()>, render: &dyn Fn() -> String) -> (u16, &'static str, String) {
    let Ok(head) = head else {
        return (400, "text/plain", "bad request\n".into());
    };
    let mut parts = head.lines().next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return (400, "text/plain", "bad request\n".into());
    };
    if !version.starts_with("HTTP/1.") {
        return (400, "text/plain", "bad request\n".into());
    }
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    match (method, path) {
        ("GET", "/metrics") => (200, CONTENT_TYPE, render()),
        ("GET", "/healthz") => (200, "text/plain", "ok".into()),
        (_, "/metrics" | "/healthz") => (405, "text/plain", "method not allowed\n".into()),
        _ => (404, "text/plain", "not found\n".into()),
    }
}

/// The request head (up to the blank line) as text; `None` when the peer
/// sent nothing (closed, or a probe that only connects); `Err` when it is
/// too long, not text, or did not come in time.
fn read_head(stream: &mut impl Read) -> Option<Result<String, ()>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) if head.is_empty() => return None,
            Ok(0) => return Some(Err(())),
            Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) if head.is_empty() => return None,
            Err(_) => return Some(Err(())),
        }
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            if end + 4 > MAX_REQUEST_HEAD {
                return Some(Err(()));
            }
            head.truncate(end);
            return Some(String::from_utf8(head).map_err(|_| ()));
        }
        if head.len() > MAX_REQUEST_HEAD {
            return Some(Err(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::sync::Arc;

    #[test]
    fn values_and_escapes() {
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.005), "0.005");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(1.7e9), "1700000000");
        assert_eq!(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        let mut e = Exposition::new();
        e.family("x_total", Kind::Counter, "Line one\nback\\slash");
        e.sample("x_total", &[], 2.0);
        assert_eq!(
            e.finish(),
            "# HELP x_total Line one\\nback\\\\slash\n# TYPE x_total counter\nx_total 2\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 3.0] {
            h.observe(v);
        }
        assert_eq!((h.count(), h.sum()), (4, 6.0));
        let mut e = Exposition::new();
        e.histogram("d_seconds", &[("command", "ADD")], &h);
        assert_eq!(
            e.finish(),
            "d_seconds_bucket{command=\"ADD\",le=\"1\"} 2\n\
             d_seconds_bucket{command=\"ADD\",le=\"2\"} 3\n\
             d_seconds_bucket{command=\"ADD\",le=\"+Inf\"} 4\n\
             d_seconds_sum{command=\"ADD\"} 6\n\
             d_seconds_count{command=\"ADD\"} 4\n"
        );
    }

    fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(request);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn endpoint_serves_metrics_and_refuses_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || serve(&listener, &s, &|| "up 1\n".to_string()));
        let ok = exchange(addr, b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")),
            "{ok}"
        );
        assert!(ok.ends_with("\r\n\r\nup 1\n"), "{ok}");
        let other = exchange(addr, b"GET /other HTTP/1.1\r\n\r\n");
        assert!(other.starts_with("HTTP/1.1 404 "), "{other}");
        let post = exchange(addr, b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        let big = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_REQUEST_HEAD));
        let big = exchange(addr, big.as_bytes());
        assert!(big.starts_with("HTTP/1.1 400 "), "{big}");
        // A client that connects and leaves does not stop the endpoint.
        drop(TcpStream::connect(addr).unwrap());
        assert!(exchange(addr, b"GET /healthz HTTP/1.0\r\n\r\n").ends_with("ok"));
        stop.store(true, Ordering::SeqCst);
        drop(TcpStream::connect(addr).unwrap());
        t.join().unwrap();
    }
}
