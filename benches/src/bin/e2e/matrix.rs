//! The configuration matrix (#29, #38): address families {IPv4,
//! dual-stack, IPv6-only} x chains {bridge + host-local + portmap, the
//! same with tuning and bandwidth, ptp + host-local, macvlan +
//! host-local, ipvlan + host-local, bridge with `vlan`, bridge with two
//! host-local ranges per family, flannel delegating to bridge + portmap},
//! each cell ours and Go's
//! (1.1.1) exec'd by our invoker in the same run: ADD and DEL p50/p99 one
//! pod at a time (after an untimed warm-up pod), then a burst (`burst.rs`)
//! of N pods with K in flight; beside them the cell's kernel floor
//! (`floor.rs`: the chain's kernel requests without CNI, same pods, same
//! warm-up). Every cell and side runs in its own throwaway node namespace
//! with subnets of its own (`cni_testkit::matrix`).
//!
//! ```text
//! target/release/e2e --matrix [--matrix-pods 30] [--matrix-burst 100] [--in-flight 8] [--settle-load 0.8]
//!     [--families v4,ds,v6] [--chains bridge,bridge-tb,ptp,macvlan,ipvlan,bridge-vlan,bridge-2r,flannel]
//!     [--plugins DIR] [--go DIR]
//! ```
//!
//! With `--settle-load L` each side and floor starts only once the
//! 1-minute load average is at most L (a quiet run throughout: the
//! highest load seen while the cells ran is printed either way).
//!
//! It prints one table (with the floor's ADD and DEL p50 and ours/floor
//! beside Go/ours), the load average at the start and the end, and the
//! issue's two headline ratios on the bridge chain. A chain this kernel
//! cannot run (`PluginChain::kernel_lacks`: ipvlan, bridge VLAN filtering)
//! is printed as skipped with the kernel's reason; a cell Go's plugins
//! cannot run (no flannel in /usr/lib/cni) has Go's side n/a, with the
//! reason; a cell of ours (or a floor) that fails, or leaves a reservation
//! behind, makes the program fail after the table. `--smoke` runs every
//! cell with a few pods (2 where the chain waits for IPv6 DAD) and a tiny
//! burst, several cells at a time (the DAD waits overlap; no figure of the
//! smoke is a measurement).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::burst::{self, BurstReport};
use super::floor::{self, FloorReport};
use super::{run_mode, Args, Fallible, Mode, Phase, INTERRUPTED};
use cni_testkit::matrix::{IpStack, MatrixCell, PluginChain};

/// The matrix's command-line options.
pub(crate) struct Options {
    /// `--matrix` (or the smoke) asked for it.
    pub(crate) enabled: bool,
    stacks: Vec<IpStack>,
    chains: Vec<PluginChain>,
    /// `--chains` was given (else other sections pick their own).
    chains_given: bool,
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
    /// `--settle-load L`: before each side and floor, wait (up to 5
    /// minutes) until the 1-minute load average is at most L, so that a
    /// run stays quiet throughout; the time waited is printed.
    settle_load: Option<f64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            enabled: false,
            stacks: IpStack::ALL.to_vec(),
            chains: PluginChain::ALL.to_vec(),
            chains_given: false,
            pods: 30,
            burst: 100,
            jobs: 1,
            smoke: false,
            settle_load: None,
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
            "--settle-load" => {
                let v = val()?;
                self.settle_load = Some(v.parse().map_err(|e| format!("{arg}: {e}"))?)
            }
            "--families" => {
                self.stacks = val()?
                    .split(',')
                    .map(|s| IpStack::parse(s).ok_or(format!("unknown family {s:?} (v4, ds, v6)")))
                    .collect::<Fallible<_>>()?
            }
            "--chains" => {
                self.chains_given = true;
                self.chains = val()?
                    .split(',')
                    .map(|s| {
                        PluginChain::parse(s)
                            .ok_or(format!("unknown chain {s:?} ({})", PluginChain::names()))
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

    /// The cells of another section (`--breakdown`): `--families` x
    /// `--chains`, or `default` chains when `--chains` was not given; the
    /// smoke's: two cells (IPv4 bridge, IPv6-only ptp).
    pub(crate) fn cells(&self, default: &[PluginChain], smoke: bool) -> Vec<MatrixCell> {
        if smoke {
            return vec![
                MatrixCell {
                    stack: IpStack::V4,
                    chain: PluginChain::Bridge,
                },
                MatrixCell {
                    stack: IpStack::V6,
                    chain: PluginChain::Ptp,
                },
            ];
        }
        let chains = if self.chains_given {
            &self.chains[..]
        } else {
            default
        };
        self.stacks
            .iter()
            .flat_map(|&stack| chains.iter().map(move |&chain| MatrixCell { stack, chain }))
            .collect()
    }

    /// The usage line's part.
    pub(crate) const USAGE: &'static str =
        "[--matrix [--matrix-pods N] [--matrix-burst N] [--settle-load L] \
        [--families v4,ds,v6] \
        [--chains bridge,bridge-tb,ptp,macvlan,ipvlan,bridge-vlan,bridge-2r,flannel]]";
}

/// One side (ours or Go's) of one cell.
#[derive(Default)]
struct Side {
    seq: Option<Phase>,
    burst: Option<BurstReport>,
    /// Why the side did not run, or failed.
    error: Option<String>,
}

/// What runs for a cell: one side, or the kernel floor.
#[derive(Clone, Copy)]
enum Work {
    Side(Mode),
    Floor,
}

/// A cell's kernel floor.
#[derive(Default)]
struct Floor {
    report: Option<FloorReport>,
    error: Option<String>,
}

/// A cell's results: ours, Go's, the floor, or why the cell was skipped.
#[derive(Default)]
struct CellResult {
    ours: Side,
    go: Side,
    floor: Floor,
    skipped: Option<String>,
}

/// The sequential pods of `net`, and whether an untimed warm-up pod comes
/// first: the smoke's DAD-waiting cells get 2 pods, no warm-up.
fn sequential_pods(opts: &Options, net: MatrixCell) -> (usize, bool) {
    let few = opts.smoke && net.waits_for_dad();
    (if few { opts.pods.min(2) } else { opts.pods }, !few)
}

/// Runs one side of `net`: the sequential pods, then the burst.
fn run_side(opts: &Options, k: usize, net: MatrixCell, mode: Mode, dir: &Path) -> Side {
    let mut side = Side::default();
    if let Some(p) = net.chain.plugins().iter().find(|p| !dir.join(p).is_file()) {
        side.error = Some(format!("no {p} in {}", dir.display()));
        return side;
    }
    let (pods, warm_up) = sequential_pods(opts, net);
    let few = !warm_up;
    match run_mode(mode, dir, net, pods, false, warm_up) {
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

/// The 1-minute load average (NaN when unreadable).
fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Waits until the 1-minute load average is at most `limit` (at most 5
/// minutes, polled every second); the time waited.
fn settle(limit: f64) -> std::time::Duration {
    let t = Instant::now();
    // An unreadable load (NaN) waits the whole time, as a high one.
    while t.elapsed().as_secs() < 300 && !INTERRUPTED.load(Ordering::SeqCst) {
        let l = load1();
        if l.is_finite() && l <= limit {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    t.elapsed()
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
    // The chains this kernel cannot run, found once per chain.
    let mut lacks = BTreeMap::new();
    for &chain in &opts.chains {
        lacks.insert(chain, chain.kernel_lacks().map_err(|e| e.to_string())?);
    }
    let skipped = |c: usize| lacks.get(&cells[c].chain).cloned().flatten();
    // Work items: each cell's sides and floor, the DAD-waiting ones first
    // so that, run several at a time, their waits overlap.
    let mut items: Vec<(usize, Work)> = (0..cells.len())
        .filter(|&c| skipped(c).is_none())
        .flat_map(|c| {
            [
                (c, Work::Side(Mode::OursExec)),
                (c, Work::Side(Mode::GoExec)),
                (c, Work::Floor),
            ]
        })
        .collect();
    items.sort_by_key(|&(c, _)| !cells[c].waits_for_dad());
    let results: Vec<Mutex<CellResult>> = (0..cells.len())
        .map(|c| {
            Mutex::new(CellResult {
                skipped: skipped(c),
                ..Default::default()
            })
        })
        .collect();
    let next = AtomicUsize::new(0);
    let settled = AtomicUsize::new(0);
    // The highest 1-minute load average seen while the cells run (in
    // hundredths), sampled every second.
    let peak = AtomicUsize::new(0);
    let running = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        s.spawn(|| {
            while running.load(Ordering::SeqCst) {
                let l = load1();
                if l.is_finite() {
                    peak.fetch_max((l * 100.0) as usize, Ordering::SeqCst);
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        });
        let mut workers = Vec::new();
        for _ in 0..opts.jobs.max(1) {
            workers.push(s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(c, work)) = items.get(i) else {
                    return;
                };
                if INTERRUPTED.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(limit) = opts.settle_load {
                    let waited = settle(limit);
                    settled.fetch_add(waited.as_millis() as usize, Ordering::SeqCst);
                }
                let mode = match work {
                    Work::Side(mode) => mode,
                    Work::Floor => {
                        let t = Instant::now();
                        let (pods, warm_up) = sequential_pods(opts, cells[c]);
                        let f = floor::run_cell(cells[c], pods, warm_up, false);
                        eprintln!(
                            "# matrix {} floor: {:.1} s{}",
                            cells[c].name(),
                            t.elapsed().as_secs_f64(),
                            f.as_ref()
                                .err()
                                .map(|e| format!(" ({e})"))
                                .unwrap_or_default()
                        );
                        let mut r = results[c].lock().unwrap_or_else(|p| p.into_inner());
                        match f {
                            Ok(f) => r.floor.report = Some(f),
                            Err(e) => r.floor.error = Some(e),
                        }
                        continue;
                    }
                };
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
                    r.go = side;
                } else {
                    r.ours = side;
                }
            }));
        }
        for w in workers {
            let _ = w.join();
        }
        running.store(false, Ordering::SeqCst);
    });
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err("interrupted (everything created was removed)".into());
    }
    let results: Vec<(MatrixCell, CellResult)> = cells
        .iter()
        .zip(results)
        .map(|(n, r)| (*n, r.into_inner().unwrap_or_else(|p| p.into_inner())))
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
    println!(
        "\n# load (1-minute) at most {:.2} while the cells ran{}",
        peak.load(Ordering::SeqCst) as f64 / 100.0,
        match opts.settle_load {
            Some(l) => format!(
                "; {:.0} s waited for it to fall to {l} before a side or floor",
                settled.load(Ordering::SeqCst) as f64 / 1000.0
            ),
            None => String::new(),
        }
    );
    let failed: Vec<String> = results
        .iter()
        .flat_map(|(n, r)| {
            let ours = r.ours.error.as_ref().map(|e| format!("{}: {e}", n.name()));
            let floor = r
                .floor
                .error
                .as_ref()
                .map(|e| format!("{} floor: {e}", n.name()));
            ours.into_iter().chain(floor)
        })
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

/// The floor's ADD or DEL p50.
fn floor_p50(floor: &Floor, del: bool) -> f64 {
    floor.report.as_ref().map_or(f64::NAN, |f| {
        if del {
            f.del.pct(50.0)
        } else {
            f.add.pct(50.0)
        }
    })
}

/// The table, the notes and the headline.
fn report(
    args: &Args,
    results: &[(MatrixCell, CellResult)],
    load_start: &str,
    load_end: &str,
    took: f64,
) -> String {
    let opts = &args.matrix;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# e2e --matrix: cniVersion 1.0.0 conflists, ours vs Go exec'd by our invoker, \
         and the kernel floor (the chain's kernel requests in-process, no CNI)\n\
         # ours: {}  go: {}\n\
         # sequential: {} pods per cell and side (and floor) after 1 warm-up pod{}; burst: {} pods, {} in flight\n\
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
         | floor ADD / DEL p50 (ms) | ours/floor ADD p50 | ours/floor DEL p50 \
         | burst ADD pods/s ours / Go | ours/Go | burst DEL pods/s ours / Go | ours/Go |"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(15));
    let mut notes = Vec::new();
    for (net, r) in results {
        let (ours, go) = (&r.ours, &r.go);
        if let Some(why) = &r.skipped {
            let _ = writeln!(
                out,
                "| {} | {} | skipped (kernel, see below) |{}",
                net.stack.label(),
                net.chain.label(),
                " |".repeat(12)
            );
            notes.push(format!("- {} skipped: {why}", net.name()));
            continue;
        }
        let (oa, og) = (lat(ours, false), lat(go, false));
        let (od, gd) = (lat(ours, true), lat(go, true));
        let (fa, fd) = (floor_p50(&r.floor, false), floor_p50(&r.floor, true));
        let (opa, gpa) = (pods_s(ours, false), pods_s(go, false));
        let (opd, gpd) = (pods_s(ours, true), pods_s(go, true));
        let go_cell = |v: String| {
            if go.seq.is_none() {
                "n/a".to_string()
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
            "| {} | {} | {} / {} | {} / {} | {} | {} / {} | {} / {} | {} | {} / {} | {} | {} | {} / {} | {} | {} / {} | {} |",
            net.stack.label(),
            net.chain.label(),
            ms(oa.0),
            go_cell(ms(og.0)),
            ms(oa.1),
            go_cell(ms(og.1)),
            go_cell(ratio(og.0, oa.0)),
            ms(od.0),
            go_cell(ms(gd.0)),
            ms(od.1),
            go_cell(ms(gd.1)),
            go_cell(ratio(gd.0, od.0)),
            ms(fa),
            ms(fd),
            ratio(oa.0, fa),
            ratio(od.0, fd),
            pods(opa),
            go_cell(pods(gpa)),
            go_cell(ratio(opa, gpa)),
            pods(opd),
            go_cell(pods(gpd)),
            go_cell(ratio(opd, gpd)),
        );
        if let Some(e) = &ours.error {
            notes.push(format!("- {} ours FAILED: {e}", net.name()));
        }
        if let Some(e) = &r.floor.error {
            notes.push(format!("- {} floor FAILED: {e}", net.name()));
        }
        if let Some(e) = &go.error {
            let what = if go.seq.is_none() {
                "Go's side n/a"
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
            .find(|(n, _)| n.stack == stack && n.chain == PluginChain::Bridge)
            .map_or(f64::NAN, |(_, r)| {
                lat(if go { &r.go } else { &r.ours }, false).0
            })
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
