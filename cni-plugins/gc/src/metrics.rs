//! `cni-gc`'s Prometheus metrics: what its passes did, per network, and
//! why a pass was refused. `cni-gc --interval --metrics-address ADDR`
//! serves them ([`serve`]); a one-shot run writes them for node_exporter's
//! textfile collector ([`write_textfile`]). The text is written by
//! [`cni_files::metrics`]; docs/observability.md lists the families.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use cni_gc::collector::{NetworkCounts, Summary};
//! use cni_gc::metrics::GcMetrics;
//!
//! let mut m = GcMetrics::new("0.1.0", "abc");
//! let mut summary = Summary { deleted: 1, ..Summary::default() };
//! summary.networks.insert("pods".into(), NetworkCounts { deleted: 1, ..NetworkCounts::default() });
//! m.record(&Ok(summary), Duration::from_millis(40), SystemTime::now());
//! let text = m.render();
//! assert!(text.contains("cni_gc_attachments_deleted_total{network=\"pods\"} 1\n"));
//! assert!(text.contains("cni_gc_passes_total{outcome=\"success\"} 1\n"));
//! ```

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cni_files::metrics::{Exposition, Histogram, Kind, DURATION_BUCKETS};
use cni_files::AtomicWrite;

use crate::collector::{NetworkCounts, Summary};
use crate::{Error, Refusal};

/// The textfile's name in `--textfile-dir` (node_exporter reads `*.prom`).
pub const TEXTFILE: &str = "cni_gc.prom";

/// A pass's `outcome` label values: every action done; some DEL or GC
/// failed; refused (docs/cni-gc.md); nothing done for another error (the
/// cache or conf dir unreadable).
pub const OUTCOMES: [&str; 4] = ["success", "failed", "refused", "error"];

/// One count of a network's.
type Count = fn(&NetworkCounts) -> usize;

/// The counters of every pass of this process.
#[derive(Clone, Debug)]
pub struct GcMetrics {
    version: String,
    build: String,
    passes: BTreeMap<&'static str, u64>,
    refusals: BTreeMap<&'static str, u64>,
    networks: BTreeMap<String, NetworkCounts>,
    duration: Histogram,
    last_pass: Option<SystemTime>,
    last_success: Option<SystemTime>,
    last_ok: bool,
}

impl GcMetrics {
    /// No pass yet; `version` and `build` label `cni_gc_build_info`.
    pub fn new(version: &str, build: &str) -> GcMetrics {
        GcMetrics {
            version: version.into(),
            build: build.into(),
            passes: OUTCOMES.iter().map(|o| (*o, 0)).collect(),
            refusals: Refusal::ALL.iter().map(|r| (r.label(), 0)).collect(),
            networks: BTreeMap::new(),
            duration: Histogram::new(DURATION_BUCKETS),
            last_pass: None,
            last_success: None,
            last_ok: false,
        }
    }

    /// Counts one pass that took `took` and ended at `finished`.
    pub fn record(&mut self, pass: &Result<Summary, Error>, took: Duration, finished: SystemTime) {
        let outcome = match pass {
            Ok(s) if s.failed == 0 => "success",
            Ok(_) => "failed",
            Err(e) => match e.refusal() {
                Some(r) => {
                    *self.refusals.entry(r.label()).or_default() += 1;
                    "refused"
                }
                None => "error",
            },
        };
        *self.passes.entry(outcome).or_default() += 1;
        if let Ok(s) = pass {
            for (name, n) in &s.networks {
                let t = self.networks.entry(name.clone()).or_default();
                t.deleted += n.deleted;
                t.collected += n.collected;
                t.failed_dels += n.failed_dels;
                t.failed_gcs += n.failed_gcs;
                t.skipped += n.skipped;
                t.dry += n.dry;
            }
        }
        self.duration.observe(took.as_secs_f64());
        self.last_pass = Some(finished);
        self.last_ok = outcome == "success";
        if self.last_ok {
            self.last_success = Some(finished);
        }
    }

    /// The text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut e = Exposition::new();
        e.family(
            "cni_gc_build_info",
            Kind::Gauge,
            "cni-gc's version and build; always 1.",
        )
        .sample(
            "cni_gc_build_info",
            &[("version", &self.version), ("build", &self.build)],
            1.0,
        );
        e.family(
            "cni_gc_passes_total",
            Kind::Counter,
            "Collection passes, by outcome: success, failed (some DEL or GC failed), refused (nothing done, see cni_gc_refusals_total), error (nothing done: the cache or conf dir unreadable).",
        );
        for (outcome, n) in &self.passes {
            e.sample("cni_gc_passes_total", &[("outcome", outcome)], *n as f64);
        }
        e.family(
            "cni_gc_refusals_total",
            Kind::Counter,
            "Passes refused, by reason (one value per refusal of docs/cni-gc.md).",
        );
        for (reason, n) in &self.refusals {
            e.sample("cni_gc_refusals_total", &[("reason", reason)], *n as f64);
        }
        let per_network: [(&str, &str, Count); 4] = [
            (
                "cni_gc_attachments_deleted_total",
                "Leaked attachments DELeted (phase 1), by network.",
                |n| n.deleted,
            ),
            (
                "cni_gc_networks_collected_total",
                "GCs done on a network (phase 2), by network.",
                |n| n.collected,
            ),
            (
                "cni_gc_skipped_total",
                "Attachments, networks and configs left alone, by network.",
                |n| n.skipped,
            ),
            (
                "cni_gc_dry_run_actions_total",
                "Actions a --dry-run pass would have taken, by network.",
                |n| n.dry,
            ),
        ];
        for (name, help, value) in per_network {
            e.family(name, Kind::Counter, help);
            for (network, n) in &self.networks {
                e.sample(name, &[("network", network)], value(n) as f64);
            }
        }
        e.family(
            "cni_gc_failures_total",
            Kind::Counter,
            "DELs (action=\"del\", the cache file kept for the next pass) and GCs (action=\"gc\") that failed, by network.",
        );
        for (network, n) in &self.networks {
            for (action, v) in [("del", n.failed_dels), ("gc", n.failed_gcs)] {
                e.sample(
                    "cni_gc_failures_total",
                    &[("network", network), ("action", action)],
                    v as f64,
                );
            }
        }
        e.family(
            "cni_gc_pass_duration_seconds",
            Kind::Histogram,
            "How long a pass took, from asking the runtime to the last action.",
        )
        .histogram("cni_gc_pass_duration_seconds", &[], &self.duration);
        let unix = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        e.family(
            "cni_gc_last_pass_timestamp_seconds",
            Kind::Gauge,
            "When the last pass ended (Unix time; 0 before the first).",
        )
        .sample(
            "cni_gc_last_pass_timestamp_seconds",
            &[],
            self.last_pass.map_or(0.0, unix),
        );
        e.family(
            "cni_gc_last_success_timestamp_seconds",
            Kind::Gauge,
            "When the last pass whose every action succeeded ended (Unix time; 0 if none did).",
        )
        .sample(
            "cni_gc_last_success_timestamp_seconds",
            &[],
            self.last_success.map_or(0.0, unix),
        );
        e.family(
            "cni_gc_last_pass_success",
            Kind::Gauge,
            "1 when the last pass's every action succeeded, else 0.",
        )
        .sample(
            "cni_gc_last_pass_success",
            &[],
            if self.last_ok { 1.0 } else { 0.0 },
        );
        e.finish()
    }
}

/// Writes `metrics` to `dir/cni_gc.prom` atomically (a temporary file
/// in `dir`, then a rename: node_exporter never reads half a file), mode
/// 0644; the file's path.
pub fn write_textfile(dir: &Path, metrics: &GcMetrics) -> Result<PathBuf, Error> {
    let path = dir.join(TEXTFILE);
    AtomicWrite::new()
        .mode(0o644)
        .write(&path, metrics.render().as_bytes())?;
    Ok(path)
}

/// Serves `metrics` on `addr` (`GET /metrics`, [`cni_files::metrics::serve`])
/// from a thread of its own for the rest of the process; the address it
/// listens on (the port chosen when `addr`'s is 0).
pub fn serve(addr: SocketAddr, metrics: Arc<Mutex<GcMetrics>>) -> Result<SocketAddr, Error> {
    let io = |source| Error::Io {
        op: "listen for metrics scrapes on",
        path: PathBuf::from(addr.to_string()),
        source,
    };
    let listener = TcpListener::bind(addr).map_err(io)?;
    let bound = listener.local_addr().map_err(io)?;
    std::thread::Builder::new()
        .name("cni-gc-metrics".into())
        .spawn(move || {
            let never = AtomicBool::new(false);
            cni_files::metrics::serve(&listener, &never, &|| {
                metrics.lock().map(|m| m.render()).unwrap_or_default()
            });
        })
        .map_err(io)?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_refusals_and_networks_are_counted() {
        let mut m = GcMetrics::new("1", "b");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut s = Summary {
            failed: 1,
            ..Summary::default()
        };
        s.networks.insert(
            "a".into(),
            NetworkCounts {
                deleted: 2,
                failed_dels: 1,
                skipped: 3,
                ..NetworkCounts::default()
            },
        );
        m.record(&Ok(s), Duration::from_millis(20), t);
        m.record(
            &Err(Error::CollectRefused {
                kind: Refusal::UnlistedNetwork,
                reason: "x".into(),
            }),
            Duration::from_millis(3),
            t,
        );
        let text = m.render();
        for want in [
            "cni_gc_passes_total{outcome=\"failed\"} 1\n",
            "cni_gc_passes_total{outcome=\"refused\"} 1\n",
            "cni_gc_passes_total{outcome=\"success\"} 0\n",
            "cni_gc_refusals_total{reason=\"unlisted_network\"} 1\n",
            "cni_gc_refusals_total{reason=\"no_results_dir\"} 0\n",
            "cni_gc_attachments_deleted_total{network=\"a\"} 2\n",
            "cni_gc_failures_total{network=\"a\",action=\"del\"} 1\n",
            "cni_gc_skipped_total{network=\"a\"} 3\n",
            "cni_gc_pass_duration_seconds_count 2\n",
            "cni_gc_pass_duration_seconds_bucket{le=\"0.005\"} 1\n",
            "cni_gc_last_pass_timestamp_seconds 1000\n",
            "cni_gc_last_success_timestamp_seconds 0\n",
            "cni_gc_last_pass_success 0\n",
            "cni_gc_build_info{version=\"1\",build=\"b\"} 1\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = write_textfile(dir.path(), &m).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [TEXTFILE]);
    }
}
