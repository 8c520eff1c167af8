//! The daemon's Prometheus metrics (text exposition format 0.0.4):
//! `multus_server_request_total{handler,code}` as the reference exposes
//! (multus-cni `pkg/server/server.go`), and a latency histogram per CNI
//! command, `multus_server_cni_request_duration_seconds{command}`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Histogram bucket bounds in seconds (a CNI ADD takes from a few ms to
/// the readiness wait's tens of seconds).
pub const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Default, Debug)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Default, Debug)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
}

/// Request counters and latency histograms, shared by the server threads.
#[derive(Default, Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// Counts one request of `handler` answered with `code`.
    pub fn count_request(&self, handler: &str, code: u16) {
        if let Ok(mut m) = self.inner.lock() {
            *m.requests.entry((handler.to_string(), code)).or_default() += 1;
        }
    }

    /// Records how long one CNI `command` took.
    pub fn observe(&self, command: &str, took: Duration) {
        if let Ok(mut m) = self.inner.lock() {
            let h = m.latency.entry(command.to_string()).or_default();
            if h.counts.is_empty() {
                h.counts = vec![0; BUCKETS.len()];
            }
            let s = took.as_secs_f64();
            for (i, b) in BUCKETS.iter().enumerate() {
                if s <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += s;
            h.count += 1;
        }
    }

    /// The counter value for `handler` and `code` (tests).
    pub fn request_count(&self, handler: &str, code: u16) -> u64 {
        self.inner
            .lock()
            .ok()
            .and_then(|m| m.requests.get(&(handler.to_string(), code)).copied())
            .unwrap_or(0)
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let Ok(m) = self.inner.lock() else {
            return out;
        };
        out.push_str("# HELP multus_server_request_total Counter of HTTP requests to the multus daemon, by handler and status code.\n");
        out.push_str("# TYPE multus_server_request_total counter\n");
        for ((handler, code), n) in &m.requests {
            let _ = writeln!(
                out,
                "multus_server_request_total{{handler=\"{handler}\",code=\"{code}\"}} {n}"
            );
        }
        out.push_str("# HELP multus_server_cni_request_duration_seconds Time to serve a CNI request, by command.\n");
        out.push_str("# TYPE multus_server_cni_request_duration_seconds histogram\n");
        for (cmd, h) in &m.latency {
            let name = "multus_server_cni_request_duration_seconds";
            for (b, c) in BUCKETS.iter().zip(&h.counts) {
                let _ = writeln!(out, "{name}_bucket{{command=\"{cmd}\",le=\"{b}\"}} {c}");
            }
            let _ = writeln!(
                out,
                "{name}_bucket{{command=\"{cmd}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "{name}_sum{{command=\"{cmd}\"}} {}", h.sum);
            let _ = writeln!(out, "{name}_count{{command=\"{cmd}\"}} {}", h.count);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition() {
        let m = Metrics::default();
        m.count_request("cni", 200);
        m.count_request("cni", 200);
        m.count_request("cni", 400);
        m.observe("ADD", Duration::from_millis(30));
        let t = m.render();
        assert!(t.contains("multus_server_request_total{handler=\"cni\",code=\"200\"} 2\n"));
        assert!(t.contains("multus_server_request_total{handler=\"cni\",code=\"400\"} 1\n"));
        assert!(t.contains(
            "multus_server_cni_request_duration_seconds_bucket{command=\"ADD\",le=\"0.025\"} 0\n"
        ));
        assert!(t.contains(
            "multus_server_cni_request_duration_seconds_bucket{command=\"ADD\",le=\"0.05\"} 1\n"
        ));
        assert!(t.contains("multus_server_cni_request_duration_seconds_count{command=\"ADD\"} 1\n"));
        assert_eq!(m.request_count("cni", 200), 2);
    }
}
