//! `--tracing-cost N`: what exporting spans costs a call. For each address
//! family, the bridge chain (bridge + host-local + portmap) ADDed and DELed
//! for N pods three ways in one run: Go's plugins, ours with nothing
//! configured (no exporter code runs), and ours exporting every span over
//! OTLP/HTTP to a local sink with a `TRACEPARENT` set (what a node with a
//! collector beside it pays). The sink listens on the throwaway node
//! namespace's loopback (the plugins run there), answers `200` to every
//! POST and counts what it got, so a mode that exported nothing shows 0.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cni_netns::Netns;
use cni_testkit::matrix::{IpStack, MatrixCell, PluginChain};

use crate::{run_mode, Fallible, Mode, ModeReport};

/// The variables that turn exporting on for the traced mode.
const TRACE_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "TRACEPARENT",
    "OTEL_SERVICE_NAME",
];

/// An OTLP/HTTP sink in a network namespace: accepts, reads one request,
/// answers 200, counts requests and body bytes.
pub(crate) struct Sink {
    pub(crate) port: u16,
    pub(crate) requests: Arc<AtomicU64>,
    pub(crate) bytes: Arc<AtomicU64>,
}

impl Sink {
    /// Binds on 127.0.0.1 inside `node` (its loopback brought up first).
    pub(crate) fn start_in(node: &Netns) -> Fallible<Sink> {
        let listener = node
            .run(|| -> std::io::Result<TcpListener> {
                let up = std::process::Command::new("ip")
                    .args(["link", "set", "lo", "up"])
                    .status()?;
                if !up.success() {
                    return Err(std::io::Error::other("ip link set lo up failed"));
                }
                TcpListener::bind("127.0.0.1:0")
            })
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("tracing sink: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let (requests, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (r, b) = (requests.clone(), bytes.clone());
        // Serves until the process ends; the namespace's deletion closes
        // nothing here, so the thread just blocks on accept afterwards.
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                if let Some(n) = serve(conn) {
                    r.fetch_add(1, Ordering::Relaxed);
                    b.fetch_add(n, Ordering::Relaxed);
                }
            }
        });
        Ok(Sink {
            port,
            requests,
            bytes,
        })
    }
}

/// One request: headers, a `Content-Length` body, `200`. The body's size.
fn serve(mut conn: TcpStream) -> Option<u64> {
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    let mut have = (buf.len() - head_end) as u64;
    while have < len {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        have += n as u64;
    }
    conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .ok()?;
    Some(len)
}

/// Sets (or with `None` clears) the traced mode's variables.
pub(crate) fn set_env(sink_port: Option<u16>) {
    match sink_port {
        Some(port) => {
            std::env::set_var(TRACE_VARS[0], format!("http://127.0.0.1:{port}/v1/traces"));
            std::env::set_var(
                TRACE_VARS[1],
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            );
            std::env::set_var(TRACE_VARS[2], "cni-bench");
        }
        None => {
            for v in TRACE_VARS {
                std::env::remove_var(v);
            }
        }
    }
}

/// The section: one table row per family.
pub(crate) fn run(ours: &Path, go: &Path, pods: usize) -> Fallible<()> {
    println!("\n## tracing cost: bridge + host-local + portmap, {pods} pods, sequential, p50 (ms)");
    println!("| family | Go ADD | ours ADD, off | ours ADD, exporting | on/off ADD | Go DEL | ours DEL, off | ours DEL, exporting | on/off DEL | Go/ours ADD, exporting | OTLP requests / KiB |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for stack in [IpStack::V4, IpStack::DualStack, IpStack::V6] {
        let cell = MatrixCell {
            stack,
            chain: PluginChain::Bridge,
        };
        let go_r = run_mode(Mode::GoExec, go, cell, pods, false, true)?;
        let off = run_mode(Mode::OursExec, ours, cell, pods, false, true)?;
        let on = run_mode(Mode::OursTraced, ours, cell, pods, false, true)?;
        let p = |r: &ModeReport, add: bool| {
            if add {
                r.seq.add.pct(50.0) * 1e3
            } else {
                r.seq.del.pct(50.0) * 1e3
            }
        };
        let (requests, kib) = on.exported.unwrap_or((0, 0));
        if requests == 0 {
            return Err(format!(
                "tracing cost, {}: the traced mode exported nothing",
                stack.name()
            ));
        }
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2}x | {:.2} | {:.2} | {:.2} | {:.2}x | {:.1}x | {} / {} |",
            stack.name(),
            p(&go_r, true),
            p(&off, true),
            p(&on, true),
            p(&on, true) / p(&off, true),
            p(&go_r, false),
            p(&off, false),
            p(&on, false),
            p(&on, false) / p(&off, false),
            p(&go_r, true) / p(&on, true),
            requests,
            kib
        );
    }
    Ok(())
}
