//! The `cni-gc` program's logic: collects the attachments a container
//! runtime leaked on its node, with the runtime the node already has. One
//! pass asks the runtime for its sandboxes over CRI ([`CriSandboxes`]),
//! reads libcni's result cache and the network configs, and does libcni's
//! two GC phases ([`crate::collector`]: DEL of cached attachments whose
//! sandbox is not ready, then GC of the 1.1.0 networks with the live
//! attachments as `cni.dev/valid-attachments`). It never guesses: see the
//! collector's rules, and docs/cni-gc.md.
//!
//! This module is the command line and one pass; the `cni-gc` binary
//! (`cni-plugins/src/bin/cni-gc.rs`) prints and, with `--interval`,
//! repeats.
//!
//! ```
//! use std::time::Duration;
//! use cni_gc::cli::{parse_args, Command};
//!
//! let args = ["--cri-socket", "unix:///var/run/crio/crio.sock", "--min-age", "2d", "--dry-run"];
//! let Command::Run(opts) = parse_args(args.map(String::from))? else { unreachable!() };
//! assert_eq!(opts.cri_socket.to_str(), Some("/var/run/crio/crio.sock"));
//! assert_eq!(opts.min_age, Duration::from_secs(2 * 86400));
//! assert!(opts.dry_run && opts.interval.is_none());
//! # Ok::<(), cni_gc::Error>(())
//! ```

use std::collections::BTreeSet;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cni_cri::RuntimeClient;
use cni_exec::{CniConfig, ProcessExec};

use crate::collector::{Collector, ConfiguredNetwork, Observation, Policy, Skipped, Summary};
use crate::{CriSandboxes, Error, Refusal};

/// This module's results.
type Result<T, E = Error> = std::result::Result<T, E>;

/// containerd's socket: the default runtime.
pub const DEFAULT_CRI_SOCKET: &str = "/run/containerd/containerd.sock";
/// Where runtimes read network configs.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";
/// libcni's cache directory (its `results/` holds the attachments).
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";
/// The plugin directory.
pub const DEFAULT_CNI_PATH: &str = "/opt/cni/bin";
/// How old a cached attachment must be before it may be judged dead.
pub const DEFAULT_MIN_AGE: Duration = Duration::from_secs(3600);
/// How long the runtime may take to list its sandboxes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one plugin call may run before it is killed (kubelet's CRI
/// request timeout: a DEL may wait on a DHCP server or a lock).
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How many leaked attachments are DELeted at once (a kubelet stopping
/// pods does several at once too). `e2e --cni-gc 50,200` (BENCHMARKS.md):
/// 200 DELs in 2.9 s, 9.4 s one at a time.
pub const DEL_IN_FLIGHT: usize = 4;
/// How far `--interval` periods stray from the period, each way.
pub const JITTER: f64 = 0.1;
/// The longest `--min-age`, `--interval` and `--timeout` (365 days): a
/// longer one is a typo, and past it a period's arithmetic could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// Exit status: every action succeeded (or there was none).
pub const EXIT_OK: u8 = 0;
/// Exit status: at least one DEL or GC failed (the rest was done).
pub const EXIT_FAILED: u8 = 1;
/// Exit status: nothing done: a refusal (docs/cni-gc.md lists them: the
/// runtime could not say which sandboxes are alive, lists none of the
/// containers cached on a network, or no sandbox while young attachments
/// are cached; the cache has no `results/`; the conf dir is missing), or a
/// bad command line.
pub const EXIT_REFUSED: u8 = 2;

/// What `cni-gc` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The runtime's CRI socket (`unix://` stripped).
    pub cri_socket: PathBuf,
    /// The network configs.
    pub conf_dir: PathBuf,
    /// libcni's cache directory (its `results/`).
    pub cache_dir: PathBuf,
    /// The plugin directories, searched in order.
    pub cni_path: Vec<PathBuf>,
    /// Attachments and network namespaces younger than this are never
    /// judged dead.
    pub min_age: Duration,
    /// Print what would be done, do nothing.
    pub dry_run: bool,
    /// Keep running, a pass every period (jittered); `None`: one pass.
    pub interval: Option<Duration>,
    /// How long the runtime may take to answer.
    pub timeout: Duration,
    /// Only these networks (empty: every network of the conf dir).
    pub networks: Vec<String>,
    /// `--delete-unlisted-networks`: DEL a network's cached attachments
    /// even when the runtime lists none of their containers
    /// ([`Policy::delete_unlisted`]).
    pub delete_unlisted_networks: bool,
    /// `--metrics-address`: with `interval`, serve Prometheus metrics
    /// there ([`crate::metrics::serve`]); `None`: no listener.
    pub metrics_address: Option<SocketAddr>,
    /// `--textfile-dir`: write the metrics to `<dir>/cni_gc.prom` after
    /// each pass, for node_exporter's textfile collector
    /// ([`crate::metrics::write_textfile`]).
    pub textfile_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cri_socket: DEFAULT_CRI_SOCKET.into(),
            conf_dir: DEFAULT_CONF_DIR.into(),
            cache_dir: DEFAULT_CACHE_DIR.into(),
            cni_path: vec![DEFAULT_CNI_PATH.into()],
            min_age: DEFAULT_MIN_AGE,
            dry_run: false,
            interval: None,
            timeout: DEFAULT_TIMEOUT,
            networks: Vec::new(),
            delete_unlisted_networks: false,
            metrics_address: None,
            textfile_dir: None,
        }
    }
}

/// A parsed command line.
// Made once per process: boxing the options would only make matching on it
// clumsier.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Collect.
    Run(Options),
    /// `-h`, `--help`: print [`USAGE`].
    Help,
    /// `--version`.
    Version,
}

/// `cni-gc`'s usage text.
pub const USAGE: &str = "usage: cni-gc [options]
Collects the CNI attachments the container runtime leaked on this node: DEL of
each cached attachment whose pod sandbox is not ready, then GC (CNI 1.1.0
networks) with the live attachments as valid. Does nothing when the runtime
cannot say which sandboxes are alive.

  --cri-socket PATH   the runtime's CRI socket, unix:// accepted
                      (default /run/containerd/containerd.sock; CRI-O:
                      /var/run/crio/crio.sock)
  --conf-dir DIR      network configs (default /etc/cni/net.d)
  --cache-dir DIR     libcni's cache, holding results/ (default /var/lib/cni)
  --bin-dir DIRS      plugin directories, colon-separated (default
  --cni-path DIRS       /opt/cni/bin)
  --min-age D         never judge an attachment or network namespace younger
                      than D dead (default 1h; 0s, 30s, 10m, 1h, 2d)
  --dry-run           print what would be done, do nothing
  --interval D        keep running, a pass every D (+-10%), the first at once;
                      SIGTERM or SIGINT ends it between passes
  --timeout D         how long the runtime may take to list its sandboxes
                      (default 10s)
  --network NAMES     only these networks, comma-separated or repeated
                      (default: every network of the conf dir; for a conf
                      dir shared with a runtime that is not on --cri-socket)
  --delete-unlisted-networks
                      DEL a network's cached attachments even when the
                      runtime lists none of their pods (refused otherwise:
                      a runtime that lost its state, or the wrong socket)
  --metrics-address ADDR
                      with --interval: serve Prometheus metrics at
                      http://ADDR/metrics (e.g. 127.0.0.1:9153; default: off)
  --textfile-dir DIR  write the metrics to DIR/cni_gc.prom after each pass,
                      atomically, for node_exporter's textfile collector
  -h, --help          this text
  --version           the version and build

Output: one line per action or thing left alone, then a summary.
Durations are at most 365d.
Exit status: 0 all done, 1 some DEL or GC failed, 2 refused (nothing done) or
a bad command line.";

/// A duration: Go's form (`30s`, `10m`, `1h30m`, `1.5h`, `0`) or whole
/// days (`2d`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    if let Some(days) = s.strip_suffix('d') {
        return days
            .parse::<u64>()
            .ok()
            .and_then(|d| d.checked_mul(86_400))
            .map(Duration::from_secs);
    }
    cni_types::go_duration::parse(s)
}

/// Parses `cni-gc`'s command line (without the program name); each option
/// also as `--opt=value`.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command> {
    let mut o = Options::default();
    let mut args = args.into_iter();
    let bad = |msg: String| Error::ParseArgs(format!("{msg}\n{USAGE}"));
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(format!("{flag} needs a value")))
        };
        let duration = |v: String| {
            let d = parse_duration(&v).ok_or_else(|| {
                bad(format!(
                    "{flag}: {v:?} is not a duration (30s, 10m, 1h, 2d)"
                ))
            })?;
            if d > MAX_DURATION {
                return Err(bad(format!("{flag}: {v:?} is longer than 365d")));
            }
            Ok(d)
        };
        match flag.as_str() {
            "--cri-socket" => {
                let v = value()?;
                o.cri_socket = PathBuf::from(v.strip_prefix("unix://").unwrap_or(&v));
                if !o.cri_socket.is_absolute() {
                    return Err(bad(format!(
                        "--cri-socket: {v:?} is not an absolute path or unix:// URL"
                    )));
                }
            }
            "--conf-dir" => o.conf_dir = value()?.into(),
            "--cache-dir" => o.cache_dir = value()?.into(),
            "--bin-dir" | "--cni-path" => {
                o.cni_path = value()?
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
                    .collect();
                if o.cni_path.is_empty() {
                    return Err(bad(format!("{flag} names no directory")));
                }
            }
            "--min-age" => o.min_age = duration(value()?)?,
            "--interval" => {
                let d = duration(value()?)?;
                if d < Duration::from_secs(1) {
                    return Err(bad("--interval must be at least 1s".into()));
                }
                o.interval = Some(d);
            }
            "--timeout" => {
                o.timeout = duration(value()?)?;
                if o.timeout.is_zero() {
                    return Err(bad("--timeout must be more than 0".into()));
                }
            }
            "--network" => {
                let v = value()?;
                o.networks.extend(
                    v.split(',')
                        .map(str::trim)
                        .filter(|n| !n.is_empty())
                        .map(str::to_string),
                );
                if o.networks.is_empty() {
                    return Err(bad("--network names no network".into()));
                }
            }
            "--metrics-address" => {
                let v = value()?;
                o.metrics_address = Some(v.parse().map_err(|_| {
                    bad(format!(
                        "--metrics-address: {v:?} is not an address and port (127.0.0.1:9153, [::1]:9153)"
                    ))
                })?);
            }
            "--textfile-dir" => o.textfile_dir = Some(value()?.into()),
            "--dry-run" if inline.is_none() => o.dry_run = true,
            "--delete-unlisted-networks" if inline.is_none() => o.delete_unlisted_networks = true,
            "-h" | "--help" if inline.is_none() => return Ok(Command::Help),
            "--version" if inline.is_none() => return Ok(Command::Version),
            _ => return Err(bad(format!("unknown argument {arg:?}"))),
        }
    }
    if o.metrics_address.is_some() && o.interval.is_none() {
        return Err(bad(
            "--metrics-address needs --interval (a one-shot run: --textfile-dir)".into(),
        ));
    }
    Ok(Command::Run(o))
}

/// `period` moved by up to ±[`JITTER`] of itself; `unit` in `[0, 1)` picks
/// where (0: the shortest, 0.5: `period`). Nodes started together spread
/// their passes instead of all asking the runtime at once.
pub fn jittered(period: Duration, unit: f64) -> Duration {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    // Never a panic: a period too long to scale stays as it is.
    Duration::try_from_secs_f64(period.as_secs_f64() * (1.0 - JITTER + 2.0 * JITTER * unit))
        .unwrap_or(period)
}

/// One pass: asks the runtime, plans, acts (or with `dry_run` only
/// reports), calling `line` with each skipped thing and each action, in
/// that order. The summary, or why nothing was done
/// ([`Error::CollectRefused`] when the runtime cannot say which
/// sandboxes are alive).
pub fn run_pass(opts: &Options, line: &mut dyn FnMut(&dyn Display)) -> Result<Summary> {
    // A missing conf dir (a typo) would make every network "not
    // configured": say so instead of reporting a clean node.
    if !opts.conf_dir.is_dir() {
        return Err(Error::CollectRefused {
            kind: Refusal::ConfDirMissing,
            reason: format!("conf dir {} is not a directory", opts.conf_dir.display()),
        });
    }
    let client = RuntimeClient::new(&opts.cri_socket)?.with_timeout(opts.timeout);
    let runtime = CriSandboxes::new(client);
    let exec = ProcessExec::new().with_timeout(PLUGIN_TIMEOUT);
    let collector = Collector {
        conf_dir: opts.conf_dir.clone(),
        cni: CniConfig::new(opts.cni_path.clone(), Arc::new(exec)).with_cache_dir(&opts.cache_dir),
        policy: Policy {
            min_age: opts.min_age,
            delete_unlisted: opts.delete_unlisted_networks,
        },
        in_flight: DEL_IN_FLIGHT,
    };
    let mut observed = collector.observe(&runtime)?;
    let unselected = select(&mut observed, &opts.networks)?;
    let plan = collector.plan(&observed)?;
    for s in unselected.iter().chain(&plan.skipped) {
        line(s);
    }
    let mut summary = collector.execute(&plan, opts.dry_run, |a| line(a));
    for s in &unselected {
        summary.count_skipped(s);
    }
    Ok(summary)
}

/// Keeps only the `networks` asked for (all when empty) in `observed`:
/// the others' configs and cached attachments go, each network reported
/// as left alone. A network asked for that no config names is a refusal
/// (a typo must not look like a clean node).
fn select(observed: &mut Observation, networks: &[String]) -> Result<Vec<Skipped>> {
    if networks.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: BTreeSet<&str> = networks.iter().map(String::as_str).collect();
    let name = |n: &ConfiguredNetwork| n.list.as_ref().ok().map(|l| l.name.clone());
    let configured: BTreeSet<String> = observed.networks.iter().filter_map(name).collect();
    if let Some(missing) = wanted.iter().find(|w| !configured.contains(**w)) {
        return Err(Error::CollectRefused {
            kind: Refusal::UnknownNetwork,
            reason: format!("--network {missing}: no config in the conf dir names it"),
        });
    }
    let unselected: BTreeSet<String> = configured
        .into_iter()
        .filter(|n| !wanted.contains(n.as_str()))
        .collect();
    // Unreadable configs stay: they are reported, and select nothing.
    observed
        .networks
        .retain(|n| name(n).is_none_or(|n| !unselected.contains(&n)));
    observed.cache.retain(|f| {
        f.attachment
            .as_ref()
            .map_or(true, |a| !unselected.contains(&a.network))
    });
    Ok(unselected
        .into_iter()
        .map(|n| Skipped {
            what: format!("network {n:?}"),
            why: "not selected (--network): left alone".into(),
            network: Some(n),
        })
        .collect())
}

/// The exit status of a pass.
pub fn exit_status(pass: &Result<Summary>) -> u8 {
    match pass {
        Ok(s) if s.failed == 0 => EXIT_OK,
        Ok(_) => EXIT_FAILED,
        Err(_) => EXIT_REFUSED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Command> {
        parse_args(s.split_whitespace().map(str::to_string))
    }

    fn run(s: &str) -> Options {
        match parse(s) {
            Ok(Command::Run(o)) => o,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn defaults_are_containerds_node() {
        let o = run("");
        assert_eq!(o, Options::default());
        assert_eq!(o.cri_socket, PathBuf::from(DEFAULT_CRI_SOCKET));
        assert_eq!(o.cni_path, [PathBuf::from("/opt/cni/bin")]);
        assert_eq!(o.min_age, Duration::from_secs(3600));
        assert_eq!(o.interval, None);
    }

    #[test]
    fn every_flag_in_both_forms() {
        let o = run(
            "--cri-socket=unix:///var/run/crio/crio.sock --conf-dir /c --cache-dir=/k \
             --cni-path /a:/b: --min-age 0s --dry-run --interval=10m --timeout 2s",
        );
        assert_eq!(o.cri_socket, PathBuf::from("/var/run/crio/crio.sock"));
        assert_eq!(o.conf_dir, PathBuf::from("/c"));
        assert_eq!(o.cache_dir, PathBuf::from("/k"));
        assert_eq!(o.cni_path, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(o.min_age, Duration::ZERO);
        assert!(o.dry_run);
        assert_eq!(o.interval, Some(Duration::from_secs(600)));
        assert_eq!(o.timeout, Duration::from_secs(2));
        assert_eq!(run("--bin-dir /x").cni_path, [PathBuf::from("/x")]);
        assert!(run("--delete-unlisted-networks").delete_unlisted_networks);
        let o = run("--interval 1m --metrics-address 127.0.0.1:9153 --textfile-dir=/t");
        assert_eq!(
            o.metrics_address,
            Some(SocketAddr::from(([127, 0, 0, 1], 9153)))
        );
        assert_eq!(o.textfile_dir, Some(PathBuf::from("/t")));
        assert_eq!(run("--interval 365d").interval, Some(MAX_DURATION));
        assert_eq!(parse("--version").unwrap(), Command::Version);
        assert_eq!(parse("--dry-run -h").unwrap(), Command::Help);
    }

    #[test]
    fn durations() {
        for (s, secs) in [
            ("30s", 30.0),
            ("10m", 600.0),
            ("1h", 3600.0),
            ("2d", 172_800.0),
            ("1h30m", 5400.0),
            ("0", 0.0),
            ("1.5s", 1.5),
        ] {
            assert_eq!(
                parse_duration(s),
                Some(Duration::from_secs_f64(secs)),
                "{s}"
            );
        }
        for s in [
            "",
            "d",
            "-1h",
            "1x",
            "h",
            "1.5d",
            "99999999999999999999d",
            "1 h",
        ] {
            assert_eq!(parse_duration(s), None, "{s:?}");
        }
    }

    #[test]
    fn bad_command_lines_are_errors_not_panics() {
        for bad in [
            "--cri-socket",
            "--cri-socket relative.sock",
            "--cri-socket=",
            "--min-age forever",
            "--min-age -1h",
            "--interval 0s",
            "--interval 500ms",
            "--interval 213503982334601d",
            "--interval 366d",
            "--min-age 366d",
            "--timeout 400d",
            "--delete-unlisted-networks=yes",
            "--timeout 0",
            "--cni-path :",
            "--dry-run=yes",
            "--metrics-address 127.0.0.1:9153",
            "--interval 1m --metrics-address localhost",
            "--textfile-dir",
            "--bogus",
            "positional",
        ] {
            let e = parse(bad).expect_err(bad).to_string();
            assert!(e.contains("usage: cni-gc"), "{bad}: {e}");
        }
    }

    #[test]
    fn network_selection() {
        assert_eq!(run("--network a,b --network c").networks, ["a", "b", "c"]);
        assert!(parse("--network ,").is_err());
        let net = |name: &str| ConfiguredNetwork {
            file: PathBuf::from(format!("/c/{name}.conflist")),
            list: cni_types::NetworkConfigList::from_slice(
                format!(
                    r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge"}}]}}"#
                )
                .as_bytes(),
            )
            .map_err(|e| e.to_string()),
        };
        let cached = |network: &str| cni_exec::cache::CachedFile {
            path: PathBuf::from(format!("/r/{network}-c-eth0")),
            modified: None,
            attachment: Ok(cni_exec::CachedAttachment {
                container_id: "c".into(),
                network: network.into(),
                ifname: "eth0".into(),
                config: Vec::new(),
                netns: String::new(),
                cni_args: Vec::new(),
                capability_args: Default::default(),
            }),
        };
        let mut obs = Observation {
            now: std::time::SystemTime::now(),
            sandboxes: Vec::new(),
            cache: vec![cached("a"), cached("b"), cached("elsewhere")],
            networks: vec![net("a"), net("b")],
            netns: Vec::new(),
        };
        let all = obs.clone();
        assert!(select(&mut obs, &[]).unwrap().is_empty());
        assert_eq!(obs.cache.len(), all.cache.len());
        let skipped = select(&mut obs, &["a".into()]).unwrap();
        assert_eq!(
            skipped.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["skip network \"b\": not selected (--network): left alone"]
        );
        let left = |o: &Observation| -> Vec<String> {
            o.cache
                .iter()
                .map(|f| f.path.display().to_string())
                .collect()
        };
        assert_eq!(left(&obs), ["/r/a-c-eth0", "/r/elsewhere-c-eth0"]);
        assert_eq!(obs.networks.len(), 1);
        let mut obs = all;
        let e = select(&mut obs, &["typo".into()]).unwrap_err().to_string();
        assert!(e.contains("--network typo: no config"), "{e}");
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let p = Duration::from_secs(600);
        assert_eq!(jittered(p, 0.0), Duration::from_secs(540));
        assert_eq!(jittered(p, 0.5), p);
        assert!(jittered(p, 0.999_999) <= Duration::from_secs(660));
        assert_eq!(jittered(p, f64::NAN), p);
        assert_eq!(jittered(p, 7.0), Duration::from_secs(660));
        // A period too long to scale: as it is, never a panic.
        assert_eq!(jittered(Duration::MAX, 1.0), Duration::MAX);
        assert!(jittered(MAX_DURATION, 1.0) > MAX_DURATION);
    }

    #[test]
    fn exit_statuses() {
        let ok = Summary::default();
        assert_eq!(exit_status(&Ok(ok.clone())), EXIT_OK);
        let failed = Summary { failed: 1, ..ok };
        assert_eq!(exit_status(&Ok(failed)), EXIT_FAILED);
        assert_eq!(
            exit_status(&Err(Error::CollectRefused {
                kind: Refusal::NoSandboxes,
                reason: "no runtime".into()
            })),
            EXIT_REFUSED
        );
    }
}
