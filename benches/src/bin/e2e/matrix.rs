//! The configuration matrix (#29): address families {IPv4, dual-stack,
//! IPv6-only} x chains {bridge + host-local + portmap, the same + tuning +
//! bandwidth, ptp + host-local, macvlan + host-local}, each cell ours and
//! Go's (1.1.1) exec'd by our invoker in the same run: ADD and DEL p50/p99
//! one pod at a time (after an untimed warm-up pod), then a burst (`burst.rs`)
//! of N pods with K in flight. Every cell and side runs in its own
//! throwaway node namespace with subnets of its own (`cni_testkit::matrix`).
//!
//! ```text
//! target/release/e2e --matrix [--matrix-pods 30] [--matrix-burst 100] [--in-flight 8]
//!     [--families v4,ds,v6] [--chains bridge,bridge-tb,ptp,macvlan] [--plugins DIR] [--go DIR]
//! ```
//!
//! It prints one table, the load average at the start and the end, and the
//! issue's two headline ratios on the bridge chain. A cell Go's plugins
//! cannot run is reported as such (with Go's error); a cell of ours that
//! fails, or leaves a reservation behind, makes the program fail after the
//! table. `--smoke` runs every cell with a few pods (2 where the chain waits
//! for IPv6 DAD) and a tiny burst, several cells at a time (the DAD waits
//! overlap; no figure of the smoke is a measurement).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::burst::{self, BurstReport};
use super::{run_mode, Args, Fallible, Mode, Phase, INTERRUPTED};
use cni_testkit::matrix::{IpStack, MatrixCell, PluginChain};

/// The matrix's command-line options.
pub(crate) struct Options {
    /// `--matrix` (or the smoke) asked for it.
    pub(crate) enabled: bool,
    stacks: Vec<IpStack>,
    chains: Vec<PluginChain>,
    /// Pods ADDed and DELed one at a time per cell and side.
    pods: usize,
    /// Pods of each cell's burst (0: none); in flight: `--in-flight`.
    burst: usize,
    /// Cell sides run at the same time (1 for figures; the smoke's checks
    /// run several so the DAD waits overlap).
    jobs: usize,
    /// Smoke sizes: `pods` and `burst` capped at 2 where the chain waits
    /// for IPv6 DAD (1-2 s per ADD, Go's and ours).
    smoke: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            enabled: false,
            stacks: IpStack::ALL.to_vec(),
            chains: PluginChain::ALL.to_vec(),
            pods: 30,
            burst: 100,
            jobs: 1,
            smoke: false,
        }
    }
}

impl Options {
    /// Takes `arg` (and its value from `rest`) when it is the matrix's;
    /// false when it is not.
    pub(crate) fn parse_arg(
        &mut self,
        arg: &str,
        rest: &mut impl Iterator<Item = String>,
    ) -> Fallible<bool> {
        let mut val = || rest.next().ok_or(format!("{arg} needs a value"));
        let count = |v: String| v.parse::<usize>().map_err(|e| format!("{arg}: {e}"));
        match arg {
            "--matrix" => self.enabled = true,
            "--matrix-pods" => self.pods = count(val()?)?.max(1),
            "--matrix-burst" => self.burst = count(val()?)?,
            "--families" => {
                self.stacks = val()?
                    .split(',')
                    .map(|s| IpStack::parse(s).ok_or(format!("unknown family {s:?} (v4, ds, v6)")))
                    .collect::<Fallible<_>>()?
            }
            "--chains" => {
                self.chains = val()?
                    .split(',')
                    .map(|s| {
                        PluginChain::parse(s).ok_or(format!(
                            "unknown chain {s:?} (bridge, bridge-tb, ptp, macvlan)"
                        ))
                    })
                    .collect::<Fallible<_>>()?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The smoke's sizes: every cell, a few pods, a tiny burst.
    pub(crate) fn smoke(&mut self) {
        self.enabled = true;
        self.pods = 3;
        self.burst = 3;
        self.jobs = 8;
        self.smoke = true;
    }

    /// The usage line's part.
    pub(crate) const USAGE: &'static str = "[--matrix [--matrix-pods N] [--matrix-burst N] \
        [--families v4,ds,v6] [--chains bridge,bridge-tb,ptp,macvlan]]";
}

/// One side (ours or Go's) of one cell.
#[derive(Default)]
struct Side {
    seq: Option<Phase>,
    burst: Option<BurstReport>,
    /// Why the side did not run, or failed.
    error: Option<String>,
}

/// Runs one side of `net`: the sequential pods, then the burst.
fn run_side(opts: &Options, k: usize, net: MatrixCell, mode: Mode, dir: &Path) -> Side {
    let mut side = Side::default();
    if let Some(p) = net.chain.plugins().iter().find(|p| !dir.join(p).is_file()) {
        side.error = Some(format!("no {p} in {}", dir.display()));
        return side;
    }
    // The smoke's DAD-waiting sides: 2 pods, no warm-up of their own.
    let few = opts.smoke && net.waits_for_dad();
    let pods = if few { opts.pods.min(2) } else { opts.pods };
    match run_mode(mode, dir, net, pods, false, !few) {
        Ok(r) => side.seq = Some(r.seq),
        Err(e) => {
            side.error = Some(e);
            return side;
        }
    }
    if opts.burst > 0 {
        let n = if few { opts.burst.min(2) } else { opts.burst };
        match burst::run(mode, dir, net, n, k) {
            Ok(b) => {
                side.error = b.verdict().err().map(|e| format!("burst: {e}"));
                side.burst = Some(b);
            }
            Err(e) => side.error = Some(format!("burst: {e}")),
        }
    }
    side
}

/// Runs the matrix and prints its table.
pub(crate) fn run(args: &Args) -> Fallible<()> {
    let opts = &args.matrix;
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let load_start = load();
    let start = Instant::now();
    let mut cells = Vec::new();
    for &stack in &opts.stacks {
        for &chain in &opts.chains {
            cells.push(MatrixCell { stack, chain });
        }
    }
    // Work items: each cell's sides, the DAD-waiting ones first so that,
    // run several at a time, their waits overlap.
    let mut items: Vec<(usize, Mode)> = (0..cells.len())
        .flat_map(|c| [(c, Mode::OursExec), (c, Mode::GoExec)])
        .collect();
    items.sort_by_key(|&(c, _)| !cells[c].waits_for_dad());
    let results: Vec<Mutex<(Side, Side)>> = cells.iter().map(|_| Mutex::default()).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(c, mode)) = items.get(i) else {
                    return;
                };
                if INTERRUPTED.load(Ordering::SeqCst) {
                    return;
                }
                let dir = if mode == Mode::GoExec {
                    &args.go
                } else {
                    &args.ours
                };
                let t = Instant::now();
                let side = run_side(opts, args.in_flight, cells[c], mode, dir);
                eprintln!(
                    "# matrix {} {}: {:.1} s{}",
                    cells[c].name(),
                    mode.name(),
                    t.elapsed().as_secs_f64(),
                    side.error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                );
                let mut r = results[c].lock().unwrap_or_else(|p| p.into_inner());
                if mode == Mode::GoExec {
                    r.1 = side;
                } else {
                    r.0 = side;
                }
            });
        }
    });
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err("interrupted (everything created was removed)".into());
    }
    let results: Vec<(MatrixCell, Side, Side)> = cells
        .iter()
        .zip(results)
        .map(|(n, r)| {
            let (o, g) = r.into_inner().unwrap_or_else(|p| p.into_inner());
            (*n, o, g)
        })
        .collect();
    print!(
        "{}",
        report(
            args,
            &results,
            &load_start,
            &load(),
            start.elapsed().as_secs_f64()
        )
    );
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(n, o, _)| o.error.as_ref().map(|e| format!("{}: {e}", n.name())))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("matrix: our cells failed: {}", failed.join("; ")))
    }
}

/// A latency in ms with the digits that matter.
fn ms(s: f64) -> String {
    let v = s * 1e3;
    if !v.is_finite() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn ratio(a: f64, b: f64) -> String {
    let r = a / b;
    if r.is_finite() {
        format!("{r:.1}x")
    } else {
        "-".into()
    }
}

/// ADD or DEL p50 and p99 of a side's sequential phase.
fn lat(side: &Side, del: bool) -> (f64, f64) {
    side.seq.as_ref().map_or((f64::NAN, f64::NAN), |p| {
        let s = if del { &p.del } else { &p.add };
        (s.pct(50.0), s.pct(99.0))
    })
}

fn pods_s(side: &Side, del: bool) -> f64 {
    side.burst.as_ref().map_or(f64::NAN, |b| {
        if del {
            b.del.pods_per_s()
        } else {
            b.add.pods_per_s()
        }
    })
}

/// The table, the notes and the headline.
fn report(
    args: &Args,
    results: &[(MatrixCell, Side, Side)],
    load_start: &str,
    load_end: &str,
    took: f64,
) -> String {
    let opts = &args.matrix;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# e2e --matrix: cniVersion 1.0.0 conflists, ours vs Go exec'd by our invoker\n\
         # ours: {}  go: {}\n\
         # sequential: {} pods per cell and side after 1 warm-up pod{}; burst: {} pods, {} in flight\n\
         # load at start: {load_start}\n# load at end:   {load_end}\n# took {took:.0} s\n",
        args.ours.display(),
        args.go.display(),
        opts.pods,
        if opts.smoke { " (2 where ADD waits for DAD)" } else { "" },
        opts.burst,
        args.in_flight,
    );
    let _ = writeln!(
        out,
        "| family | chain | ADD p50 ours / Go (ms) | ADD p99 ours / Go | Go/ours ADD p50 \
         | DEL p50 ours / Go (ms) | DEL p99 ours / Go | Go/ours DEL p50 \
         | burst ADD pods/s ours / Go | ours/Go | burst DEL pods/s ours / Go | ours/Go |"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(12));
    let mut notes = Vec::new();
    for (net, ours, go) in results {
        let (oa, og) = (lat(ours, false), lat(go, false));
        let (od, gd) = (lat(ours, true), lat(go, true));
        let (opa, gpa) = (pods_s(ours, false), pods_s(go, false));
        let (opd, gpd) = (pods_s(ours, true), pods_s(go, true));
        let go_cell = |v: String| {
            if go.seq.is_none() {
                "Go cannot run".to_string()
            } else {
                v
            }
        };
        let pods = |v: f64| {
            if v.is_finite() {
                format!("{v:.1}")
            } else {
                "-".into()
            }
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} / {} | {} / {} | {} | {} / {} | {} / {} | {} | {} / {} | {} | {} / {} | {} |",
            net.stack.label(),
            net.chain.label(),
            ms(oa.0),
            go_cell(ms(og.0)),
            ms(oa.1),
            go_cell(ms(og.1)),
            ratio(og.0, oa.0),
            ms(od.0),
            go_cell(ms(gd.0)),
            ms(od.1),
            go_cell(ms(gd.1)),
            ratio(gd.0, od.0),
            pods(opa),
            go_cell(pods(gpa)),
            ratio(opa, gpa),
            pods(opd),
            go_cell(pods(gpd)),
            ratio(opd, gpd),
        );
        if let Some(e) = &ours.error {
            notes.push(format!("- {} ours FAILED: {e}", net.name()));
        }
        if let Some(e) = &go.error {
            let what = if go.seq.is_none() {
                "Go cannot run this cell"
            } else {
                "Go failed"
            };
            notes.push(format!("- {} {what}: {e}", net.name()));
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\n{}", notes.join("\n"));
    }
    let add_p50 = |stack: IpStack, go: bool| {
        results
            .iter()
            .find(|(n, _, _)| n.stack == stack && n.chain == PluginChain::Bridge)
            .map_or(f64::NAN, |(_, o, g)| lat(if go { g } else { o }, false).0)
    };
    let (ds, v4, go_ds) = (
        add_p50(IpStack::DualStack, false),
        add_p50(IpStack::V4, false),
        add_p50(IpStack::DualStack, true),
    );
    let _ = writeln!(
        out,
        "\n## headline (bridge + host-local + portmap, ADD p50)"
    );
    if !(ds / v4).is_finite() || !(go_ds / ds).is_finite() {
        let _ = writeln!(
            out,
            "  (needs the v4/bridge and ds/bridge cells, both sides)"
        );
        return out;
    }
    let _ = writeln!(
        out,
        "  ours dual-stack / ours IPv4: {} / {} ms = {:.2} (target <= 1.3)",
        ms(ds),
        ms(v4),
        ds / v4
    );
    let _ = writeln!(
        out,
        "  Go dual-stack / ours dual-stack: {} / {} ms = {:.1} (target >= 10)",
        ms(go_ds),
        ms(ds),
        go_ds / ds
    );
    out
}
