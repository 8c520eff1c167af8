//! A test OTLP/HTTP trace receiver: `otlp_receiver.py` (next to this
//! crate's `Cargo.toml`) decodes every POST with the official
//! `opentelemetry-proto` Python package and writes one JSON line per
//! request and per span; [`Receiver`] starts it and reads them back.
//!
//! Its premise ([`require`]): `python3` with `opentelemetry-proto`
//! installed (`scripts/test-all.sh` installs it). Missing, a test fails,
//! unless `CNI_TEST_SKIP_OTLP=1`, which prints `SKIP` with the reason.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The variable that turns a missing receiver premise into a SKIP.
pub const SKIP_OTLP: &str = "CNI_TEST_SKIP_OTLP";

/// The receiver script.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("otlp_receiver.py")
}

/// Why the receiver cannot run here, if it cannot.
pub fn missing() -> Option<String> {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match probe {
        Err(e) => Some(format!("python3 cannot run: {e}")),
        Ok(o) if !o.status.success() => Some(format!(
            "python3 lacks the opentelemetry-proto package (pip install opentelemetry-proto==1.29.0): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

/// `true` when the receiver can run; otherwise panics naming the reason,
/// or with `CNI_TEST_SKIP_OTLP=1` prints `SKIP <test>: <reason>` and
/// returns `false`.
pub fn require() -> bool {
    let Some(reason) = missing() else {
        return true;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    if std::env::var(SKIP_OTLP).as_deref() == Ok("1") {
        eprintln!("SKIP {test}: {reason}");
        return false;
    }
    panic!("{test}: {reason} (set {SKIP_OTLP}=1 to skip such tests instead)");
}

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 200 with an empty `ExportTraceServiceResponse`.
    Normal,
    /// Reads the request, never answers.
    Blackhole,
    /// 200 with a 64 MB body (more than loopback's socket buffers), and
    /// a [`Receiver::replies`] line of how much went out.
    Big,
}

/// A running receiver on `127.0.0.1`; killed when dropped.
#[derive(Debug)]
pub struct Receiver {
    child: Child,
    port: u16,
    out: tempfile::NamedTempFile,
}

impl Receiver {
    /// Starts the receiver in `mode`.
    pub fn start(mode: Mode) -> Result<Receiver, crate::Error> {
        let io = |op: &str| {
            let op = op.to_string();
            move |source| crate::Error::Io { op, source }
        };
        let out = tempfile::NamedTempFile::new().map_err(io("otlp receiver output file"))?;
        let mode = match mode {
            Mode::Normal => "normal",
            Mode::Blackhole => "blackhole",
            Mode::Big => "big",
        };
        let mut child = Command::new("python3")
            .arg(script())
            .arg("--out")
            .arg(out.path())
            .args(["--mode", mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io("start python3 otlp_receiver.py"))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout)
                .read_line(&mut line)
                .map_err(io("read otlp_receiver.py's port"))?;
        }
        let Ok(port) = line.trim().parse::<u16>() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(crate::Error::Io {
                op: "otlp_receiver.py printed no port".into(),
                source: std::io::Error::other(line),
            });
        };
        Ok(Receiver { child, port, out })
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>` (an `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn lines(&self, kind: &str) -> Vec<Value> {
        std::fs::read_to_string(self.out.path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == kind)
            .collect()
    }

    /// Every request received so far (`path`, `content_type`, `headers`,
    /// `bytes`, `spans`, `error`).
    pub fn posts(&self) -> Vec<Value> {
        self.lines("post")
    }

    /// Mode [`Mode::Big`]: one line per reply (`sent` bytes, `whole`:
    /// whether all of it went out, which a client that stops reading
    /// prevents).
    pub fn replies(&self) -> Vec<Value> {
        self.lines("reply")
    }

    /// Every span received so far, as the official package decoded it
    /// (`trace_id`, `span_id`, `parent_span_id` in hex, `name`, `kind`
    /// (`SPAN_KIND_SERVER`...), `attributes`, `events`, `status`
    /// (`code`: `STATUS_CODE_ERROR`...), `service_name`, `resource`,
    /// `scope`).
    pub fn spans(&self) -> Vec<Value> {
        self.lines("span")
    }

    /// Waits until at least `n` spans arrived (or `timeout`); the spans.
    pub fn wait_spans(&self, n: usize, timeout: Duration) -> Vec<Value> {
        self.wait_until(|spans| spans.len() >= n, timeout)
    }

    /// Waits until the spans received so far satisfy `done` (or
    /// `timeout`); the spans. For a sender that exports after its reply
    /// (a daemon flushing after it answered), where a count of spans from
    /// other senders proves nothing.
    pub fn wait_until(&self, done: impl Fn(&[Value]) -> bool, timeout: Duration) -> Vec<Value> {
        let end = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || Instant::now() >= end {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
