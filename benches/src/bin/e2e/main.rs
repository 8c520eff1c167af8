//! End-to-end benchmark: the chain bridge + host-local + portmap (ipMasq
//! on, one port mapping per pod, cniVersion 1.0.0) for N pods in fresh
//! namespaces, run back to back three ways in one process:
//!
//! * `ours-exec`: this workspace's plugins, exec'd by our invoker (firewall
//!   rules through the native nf_tables backend, the default; bridge runs
//!   host-local, a binary of its own build, in-process);
//! * `ours-exec-all`: the same with `CNI_RS_EXEC_DELEGATES=1`: every plugin
//!   a process, host-local exec'd by bridge as Go's bridge does;
//! * `ours-nft`: the same with `CNI_FIREWALL_BACKEND=nft` (one `nft` process
//!   per firewall call);
//! * `ours-inproc`: the same plugins called in-process (no fork/exec);
//! * `go-exec`: the Go reference plugins (`/usr/lib/cni`), exec'd by our
//!   invoker.
//!
//! Every mode runs inside its own throwaway "node" network namespace (the
//! bridge, firewall rules and sysctls live there and vanish with it), so the
//! machine's own network is never touched; traffic stays inside namespaces
//! this program made. Run as root:
//!
//! ```text
//! cargo build --release -p cni-plugins -p cni-benches --bins
//! target/release/e2e --pods 200 --scaling 50,200,1000
//! ```
//!
//! After the modes, the kernel floor (`floor.rs`: the kernel work of an ADD
//! in-process, no plugin, and the veth deletion alone, DEL's kernel share)
//! for the same pods, then process start and peak RSS. Sections on request:
//!
//! * `--scaling 50,1000`: ours-exec ADD p50 at each size (with the
//!   plugins' CPU time and the same code run in-process), and with
//!   `--floor 50,1000` the kernel floor at each size beside it, by step;
//!   `--repeat R` runs them R times and prints the medians and the growth
//!   split into the floor's, our code's and the processes';
//! * `--burst 100 --in-flight 8` (`burst.rs`): 100 pods ADDed 8 at a time,
//!   then DELed, ours and Go's: wall time, pods/s, p50/p99, failures and
//!   duplicate addresses (ours must have none);
//! * `--gc 1000` (`gc.rs`): one CNI GC of 1000 dead attachments, ours;
//! * `--containerd 50` (`containerd.rs`): sandboxes through a real
//!   containerd (CRI `RunPodSandbox`/`StopPodSandbox`), 50 one at a time
//!   and a burst of 20 with 4 in flight, ours and Go's;
//! * `--cni-gc 50,200` (`cni_gc.rs`): one `cni-gc` pass on a containerd
//!   node with 50 live sandboxes and 200 that containerd forgot: its time,
//!   what it reclaimed, and the live sandboxes' state unchanged;
//! * `--start-floors DIR`: the start of every program in DIR next to
//!   `/bin/true` (empty Rust programs, static builds: scripts/benchmarks.sh);
//! * `--tracing-cost 50` (`tracing.rs`): per address family, the bridge
//!   chain's ADD/DEL p50 with tracing off, with every span exported to a
//!   local OTLP sink, and Go's, in one run;
//! * `--breakdown 20` (`breakdown.rs`): per matrix cell (`--families`,
//!   `--chains`), ours' ADD and DEL p50 beside the cell's kernel floor,
//!   taken apart with the plugins' own spans: kernel requests, IPAM files,
//!   plugin code, delegate exec, processes and runtime;
//! * `--only`: those sections without the modes;
//! * `--matrix` (`matrix.rs`): the configuration matrix alone, address
//!   families x chains (`cni_testkit::matrix`), ours, Go's and each cell's
//!   kernel floor (`floor.rs`) in the same run, one table.
//!
//! `--smoke` runs a few pods per mode, per section and per matrix cell and
//! only checks that everything works (CI uses it). `--modes
//! ours-exec,go-exec` picks modes; `--plugins DIR` and `--go DIR` set the
//! plugin directories.
//! `scripts/benchmarks.sh` runs all of it in one run.

// A command-line program: its report goes to stdout.
#![allow(clippy::print_stdout)]

mod breakdown;
mod burst;
mod cni_gc;
mod containerd;
mod floor;
mod gc;
mod matrix;
mod tracing;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_exec::{CniConfig, Exec, ProcessExec, RuntimeConf};
use cni_netns::OwnedNetns;
use cni_testkit::matrix::{pod_capability_args, IpStack, MatrixCell, PluginChain};
use cni_types::NetworkConfigList;

/// The network of the modes, the scaling, the burst and the GC: IPv4,
/// bridge (isGateway, ipMasq) + host-local + portmap.
const BENCH: MatrixCell = MatrixCell {
    stack: IpStack::V4,
    chain: PluginChain::Bridge,
};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

type Fallible<T> = Result<T, String>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    OursExec,
    OursExecAll,
    OursNft,
    OursInProcess,
    GoExec,
    /// ours-exec exporting every span to a local OTLP sink (`tracing.rs`).
    OursTraced,
    /// ours-exec exporting every span to a decoding receiver, the spans
    /// kept (`breakdown.rs`).
    OursSpans,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::OursExec => "ours-exec",
            Mode::OursExecAll => "ours-exec-all",
            Mode::OursNft => "ours-nft",
            Mode::OursInProcess => "ours-inproc",
            Mode::GoExec => "go-exec",
            Mode::OursTraced => "ours-traced",
            Mode::OursSpans => "ours-spans",
        }
    }
    fn parse(s: &str) -> Fallible<Mode> {
        match s {
            "ours-exec" => Ok(Mode::OursExec),
            "ours-exec-all" => Ok(Mode::OursExecAll),
            "ours-nft" => Ok(Mode::OursNft),
            "ours-inproc" => Ok(Mode::OursInProcess),
            "go-exec" => Ok(Mode::GoExec),
            "ours-traced" => Ok(Mode::OursTraced),
            _ => Err(format!(
                "unknown mode {s:?} (ours-exec, ours-exec-all, ours-nft, ours-inproc, go-exec, ours-traced)"
            )),
        }
    }
}

struct Args {
    pods: usize,
    scaling: Vec<usize>,
    modes: Vec<Mode>,
    ours: PathBuf,
    go: PathBuf,
    smoke: bool,
    /// Kernel floor sizes (next to ours-exec at the same sizes).
    floor: Vec<usize>,
    /// `--repeat R`: the scaling (`--scaling`, `--floor`) run R times, sizes
    /// interleaved, then the median of each figure.
    repeat: usize,
    /// Pods of a burst (0: none) and calls in flight.
    burst: usize,
    in_flight: usize,
    /// Dead attachments for one bulk GC (0: none).
    gc: usize,
    /// Sandboxes through a real containerd, one at a time (0: none).
    containerd: usize,
    /// `--containerd-chain bridge|ptp`: the main plugin of that section.
    containerd_chain: containerd::CriChain,
    /// `--cni-gc LIVE,LEAKED`: one cni-gc pass on a containerd node.
    cni_gc: Option<(usize, usize)>,
    /// A directory of programs whose start is measured next to /bin/true
    /// (e.g. empty Rust programs, dynamic and static: the loader's floor).
    start_floors: Option<PathBuf>,
    /// Only the sections asked for (--floor, --burst, --gc), no mode runs.
    only: bool,
    /// `--matrix` (`matrix.rs`): the configuration matrix alone.
    matrix: matrix::Options,
    /// `--tracing-cost N` (`tracing.rs`): pods per family for the tracing
    /// off / on / Go table (0: none).
    tracing_cost: usize,
    /// `--breakdown N` (`breakdown.rs`): pods per cell for the table of
    /// where ours' ADD and DEL time goes beside the floor (0: none).
    breakdown: usize,
}

/// An experiment on the node's kernel work (not a mode: figures with it are
/// not comparable with Go's): `E2E_NODE_IPV6=off` turns IPv6 off in the
/// throwaway node namespace (`all` and `default` `disable_ipv6`), so the
/// host ends of the veths get no link-local address, routes or DAD/MLD
/// work. Used by `--scaling`/`--floor` runs to see how much of the growth
/// with the node's ports is the kernel's IPv6 per-port work.
pub(crate) fn experiment_node(node: &OwnedNetns) -> Fallible<()> {
    if std::env::var("E2E_NODE_IPV6").as_deref() != Ok("off") {
        return Ok(());
    }
    node.netns()
        .run(|| {
            for k in [
                "net/ipv6/conf/all/disable_ipv6",
                "net/ipv6/conf/default/disable_ipv6",
            ] {
                cni_netns::sysctl::set(k, "1")?;
            }
            Ok::<_, cni_netns::Error>(())
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

fn parse_args() -> Fallible<Args> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let mut a = Args {
        pods: 50,
        repeat: 1,
        scaling: Vec::new(),
        modes: vec![
            Mode::OursExec,
            Mode::OursExecAll,
            Mode::OursNft,
            Mode::OursInProcess,
            Mode::GoExec,
        ],
        ours: exe_dir,
        go: PathBuf::from("/usr/lib/cni"),
        smoke: false,
        floor: Vec::new(),
        burst: 0,
        in_flight: 8,
        gc: 0,
        containerd: 0,
        containerd_chain: containerd::CriChain::Bridge,
        cni_gc: None,
        start_floors: None,
        only: false,
        matrix: matrix::Options::default(),
        tracing_cost: 0,
        breakdown: 0,
    };
    let list = |v: String, name: &str| -> Fallible<Vec<usize>> {
        v.split(',')
            .map(|s| s.parse::<usize>().map_err(|e| format!("{name}: {e}")))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--pods" => a.pods = val("--pods")?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--scaling" => a.scaling = list(val("--scaling")?, "--scaling")?,
            "--floor" => a.floor = list(val("--floor")?, "--floor")?,
            "--repeat" => {
                a.repeat = val("--repeat")?
                    .parse::<usize>()
                    .ok()
                    .filter(|r| *r > 0)
                    .ok_or("--repeat takes a count of at least 1")?
            }
            "--burst" => {
                a.burst = list(val("--burst")?, "--burst")?
                    .first()
                    .copied()
                    .unwrap_or(0)
            }
            "--in-flight" => {
                a.in_flight = list(val("--in-flight")?, "--in-flight")?
                    .first()
                    .copied()
                    .unwrap_or(1)
                    .max(1)
            }
            "--gc" => a.gc = list(val("--gc")?, "--gc")?.first().copied().unwrap_or(0),
            "--containerd-chain" => {
                let v = val("--containerd-chain")?;
                a.containerd_chain = containerd::CriChain::parse(&v)
                    .ok_or(format!("--containerd-chain: {v:?} (bridge, ptp)"))?
            }
            "--containerd" => {
                a.containerd = list(val("--containerd")?, "--containerd")?
                    .first()
                    .copied()
                    .unwrap_or(0)
            }
            "--cni-gc" => match list(val("--cni-gc")?, "--cni-gc")?.as_slice() {
                [live, leaked] => a.cni_gc = Some((*live, *leaked)),
                _ => return Err("--cni-gc takes LIVE,LEAKED (e.g. 50,200)".into()),
            },
            "--start-floors" => a.start_floors = Some(PathBuf::from(val("--start-floors")?)),
            "--only" => a.only = true,
            "--modes" => {
                a.modes = val("--modes")?
                    .split(',')
                    .map(Mode::parse)
                    .collect::<Fallible<_>>()?
            }
            "--plugins" => a.ours = PathBuf::from(val("--plugins")?),
            "--go" => a.go = PathBuf::from(val("--go")?),
            "--smoke" => a.smoke = true,
            "--breakdown" => {
                a.breakdown = val("--breakdown")?
                    .parse()
                    .map_err(|e| format!("--breakdown: {e}"))?
            }
            "--tracing-cost" => {
                a.tracing_cost = val("--tracing-cost")?
                    .parse()
                    .map_err(|e| format!("--tracing-cost: {e}"))?
            }
            "-h" | "--help" => {
                println!("usage: e2e [--pods N] [--scaling 50,200,1000] [--floor 50,1000] [--repeat R] [--burst N] [--in-flight K] [--gc N] [--containerd N] [--containerd-chain bridge|ptp] [--cni-gc LIVE,LEAKED] [--start-floors DIR] [--tracing-cost N] [--breakdown N] [--only] [--modes ours-exec,ours-exec-all,ours-nft,ours-inproc,go-exec,ours-traced] [--plugins DIR] [--go DIR] [--smoke] {}", matrix::Options::USAGE);
                std::process::exit(0);
            }
            other => {
                if !a.matrix.parse_arg(other, &mut it)? {
                    return Err(format!("unknown argument {other:?}"));
                }
            }
        }
    }
    if a.smoke {
        // Every section, briefly: the modes, the floor, a burst and a GC.
        a.pods = a.pods.min(4);
        a.scaling.clear();
        a.floor = vec![3];
        a.burst = 6;
        a.in_flight = 3;
        a.gc = 3;
        a.containerd = 2;
        a.cni_gc = Some((2, 2));
        a.tracing_cost = 2;
        a.breakdown = 2;
        a.matrix.smoke();
    }
    Ok(a)
}

/// Latencies of one phase, in seconds.
#[derive(Default, Clone)]
struct Samples(Vec<f64>);

impl Samples {
    fn pct(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        // nearest rank
        let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
        v[rank.min(v.len()) - 1]
    }
    fn max(&self) -> f64 {
        self.0.iter().copied().fold(f64::NAN, f64::max)
    }
    fn row(&self) -> String {
        format!(
            "p50 {:7.2} ms  p95 {:7.2} ms  max {:7.2} ms",
            self.pct(50.0) * 1e3,
            self.pct(95.0) * 1e3,
            self.max() * 1e3
        )
    }
}

#[derive(Default, Clone)]
struct Phase {
    add: Samples,
    del: Samples,
    /// Sequential phases only: the CPU time of the plugin processes of
    /// each ADD (`RUSAGE_CHILDREN` before and after), user and system,
    /// and what is neither (wall - user - system: waiting for a lock, a
    /// CPU, or the kernel's asynchronous work).
    add_user: Samples,
    add_sys: Samples,
    add_off_cpu: Samples,
    add_total: Duration,
    del_total: Duration,
}

struct ModeReport {
    seq: Phase,
    conc: Phase,
    /// ours-traced: the OTLP requests and KiB the sink received.
    exported: Option<(u64, u64)>,
    /// ours-spans: every span the receiver decoded.
    spans: Vec<cni_trace::proto::Span>,
}

fn runtime_conf(i: usize, pod: &OwnedNetns) -> RuntimeConf {
    let mut rt = RuntimeConf {
        container_id: format!("bench-{i:05}"),
        netns: pod.netns().path().display().to_string(),
        ifname: "eth0".into(),
        ..Default::default()
    };
    rt.capability_args = pod_capability_args(i);
    rt
}

fn random_tag() -> String {
    format!("{:06x}", cni_types::random::random_u32() & 0xff_ffff)
}

/// Runs ADD then DEL for `n` pods, `inflight` at a time, inside `node`.
fn run_phase(
    cni: &CniConfig,
    list: &NetworkConfigList,
    node: &OwnedNetns,
    pods: &[OwnedNetns],
    inflight: usize,
) -> Fallible<Phase> {
    let n = pods.len();
    type Lat = Vec<(f64, Option<(f64, f64)>)>;
    let run = |op: &str| -> Fallible<(Lat, Duration)> {
        node.netns()
            .run(|| {
                let start = Instant::now();
                let results: Vec<Fallible<Lat>> = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..inflight)
                        .map(|w| {
                            s.spawn(move || {
                                let mut lat = Vec::new();
                                for i in (w..n).step_by(inflight) {
                                    if INTERRUPTED.load(Ordering::SeqCst) {
                                        return Err("interrupted".to_string());
                                    }
                                    let rt = runtime_conf(i, &pods[i]);
                                    let cpu0 = (inflight == 1).then(children_cpu);
                                    let t = Instant::now();
                                    match op {
                                        "add" => cni
                                            .add_network_list(list, &rt)
                                            .map(|_| ())
                                            .map_err(|e| format!("ADD pod {i}: {e}"))?,
                                        _ => cni
                                            .del_network_list(list, &rt)
                                            .map_err(|e| format!("DEL pod {i}: {e}"))?,
                                    }
                                    let wall = t.elapsed().as_secs_f64();
                                    let cpu = cpu0.map(|(u0, s0)| {
                                        let (u1, s1) = children_cpu();
                                        (u1 - u0, s1 - s0)
                                    });
                                    lat.push((wall, cpu));
                                }
                                Ok(lat)
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into())))
                        .collect()
                });
                let mut all = Vec::new();
                for r in results {
                    all.extend(r?);
                }
                Ok((all, start.elapsed()))
            })
            .map_err(|e| e.to_string())?
    };
    let (add, add_total) = run("add")?;
    let (del, del_total) = run("del")?;
    let cpu = |f: fn(f64, f64, f64) -> f64| {
        Samples(
            add.iter()
                .filter_map(|&(w, c)| c.map(|(u, s)| f(w, u, s)))
                .collect(),
        )
    };
    Ok(Phase {
        add_user: cpu(|_, u, _| u),
        add_sys: cpu(|_, _, s| s),
        add_off_cpu: cpu(|w, u, s| w - u - s),
        add: Samples(add.iter().map(|&(w, _)| w).collect()),
        del: Samples(del.iter().map(|&(w, _)| w).collect()),
        add_total,
        del_total,
    })
}

/// User and system CPU seconds of this process's waited-for children.
fn children_cpu() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return (f64::NAN, f64::NAN);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

fn make_exec(mode: Mode) -> Fallible<Arc<dyn Exec>> {
    match mode {
        Mode::OursExec
        | Mode::OursExecAll
        | Mode::OursNft
        | Mode::GoExec
        | Mode::OursTraced
        | Mode::OursSpans => Ok(Arc::new(ProcessExec::new())),
        Mode::OursInProcess => in_process_exec(),
    }
}

fn in_process_exec() -> Fallible<Arc<dyn Exec>> {
    use cni_plugins::{bridge::Bridge, host_local::HostLocal, portmap::Portmap};
    Ok(Arc::new(
        cni_exec::InProcessExec::builder()
            .register("bridge", Arc::new(Bridge::new()))
            .register("host-local", Arc::new(HostLocal))
            .register("portmap", Arc::new(Portmap::new()))
            .build(),
    ))
}

/// The environment our plugins read for `mode`: the firewall backend (the
/// nft program for ours-nft, native otherwise) and whether delegates are
/// exec'd. Set while no other thread of ours runs.
fn set_mode_env(mode: Mode) {
    if mode == Mode::OursNft {
        std::env::set_var(cni_plugins::binary::FIREWALL_BACKEND_ENV, "nft");
    } else {
        std::env::remove_var(cni_plugins::binary::FIREWALL_BACKEND_ENV);
    }
    if mode == Mode::OursExecAll {
        std::env::set_var("CNI_RS_EXEC_DELEGATES", "1");
    } else {
        std::env::remove_var("CNI_RS_EXEC_DELEGATES");
    }
}

/// `n` fresh pod namespaces.
pub(crate) fn pod_namespaces(n: usize) -> Fallible<Vec<OwnedNetns>> {
    (0..n)
        .map(|_| OwnedNetns::new("cnibench-pod").map_err(|e| e.to_string()))
        .collect()
}

/// ADD then DEL of `n` pods in a fresh node for `net`, one at a time (and
/// 2 at a time with `with_concurrent`); with `warm_up`, one more pod is
/// ADDed first, untimed (it creates the node's shared objects: bridge,
/// tables), and DELed last.
fn run_mode(
    mode: Mode,
    dir: &Path,
    net: MatrixCell,
    n: usize,
    with_concurrent: bool,
    warm_up: bool,
) -> Fallible<ModeReport> {
    let exec = make_exec(mode)?;
    set_mode_env(mode);
    let scratch = Scratch::new()?;
    experiment_node(&scratch.node)?;
    let sink = match mode {
        Mode::OursTraced => Some(tracing::Sink::start_in(scratch.node.netns())?),
        _ => None,
    };
    let receiver = match mode {
        Mode::OursSpans => Some(breakdown::receiver_in(scratch.node.netns())?),
        _ => None,
    };
    let receiver_port = receiver.as_ref().map(breakdown::port_of).transpose()?;
    tracing::set_env(sink.as_ref().map(|s| s.port).or(receiver_port));
    let list = scratch.network(net)?;
    let cni = scratch.runtime(dir, exec);
    let pods = pod_namespaces(n + usize::from(warm_up))?;
    let warm = |add: bool| -> Fallible<()> {
        if !warm_up {
            return Ok(());
        }
        let rt = runtime_conf(n, &pods[n]);
        let (op, r) = scratch
            .node
            .netns()
            .run(|| match add {
                true => ("ADD", cni.add_network_list(&list, &rt).map(drop)),
                false => ("DEL", cni.del_network_list(&list, &rt)),
            })
            .map_err(|e| e.to_string())?;
        r.map_err(|e| format!("warm-up {op}: {e}"))
    };
    warm(true)?;
    let seq = run_phase(&cni, &list, &scratch.node, &pods[..n], 1)?;
    let conc = if with_concurrent {
        run_phase(&cni, &list, &scratch.node, &pods[..n], 2)?
    } else {
        Phase::default()
    };
    warm(false)?;
    check_clean(&scratch.state.join("ipam"), &list.name)?;
    let exported = sink.map(|s| {
        (
            s.requests.load(std::sync::atomic::Ordering::Relaxed),
            s.bytes.load(std::sync::atomic::Ordering::Relaxed) / 1024,
        )
    });
    tracing::set_env(None);
    let spans = receiver.map(|r| r.spans()).unwrap_or_default();
    Ok(ModeReport {
        seq,
        conc,
        exported,
        spans,
    })
}

/// After every DEL, only `lock` and `last_reserved_ip.*` may remain.
fn check_clean(ipam: &Path, net: &str) -> Fallible<()> {
    let dir = ipam.join(net);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name != "lock" && !name.starts_with("last_reserved_ip") {
            return Err(format!(
                "reservation {name} left in {} after DEL",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// Peak RSS (kB) of one process, measured as BASELINE.md did: under GNU
/// time (`%M`, from its `wait4`). Not from our own `wait4`: a child spawned
/// from this large process shares its memory until exec, and the kernel
/// counts that in the child's high-water mark.
fn peak_rss_kb(program: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Fallible<i64> {
    use std::io::Write;
    let out = std::env::temp_dir().join(format!("cni-e2e-time-{}", random_tag()));
    let mut child = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&out)
        .args(["-f", "%M", "--"])
        .arg(program)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn /usr/bin/time {}: {e}", program.display()))?;
    if let Some(mut s) = child.stdin.take() {
        let _ = s.write_all(stdin);
    }
    child.wait().map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("read {}: {e}", out.display()));
    let _ = std::fs::remove_file(&out);
    text?
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<i64>().ok())
        .ok_or_else(|| format!("no RSS figure for {}", program.display()))
}

/// Peak RSS of host-local ADD and of each plugin's VERSION call.
fn rss_report(dir: &Path) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let tmp = std::env::temp_dir().join(format!("cni-e2e-rss-{}", random_tag()));
    let _cleanup = RemoveDir(tmp.clone());
    let conf = serde_json::json!({"cniVersion": "1.0.0", "name": "rss", "type": "host-local",
        "ipam": {"type": "host-local", "dataDir": tmp, "ranges": [[{"subnet": "10.251.0.0/24"}]]}})
    .to_string();
    let path = dir.display().to_string();
    let add = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "rss"),
        ("CNI_NETNS", "/var/run/netns/none"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", path.as_str()),
    ];
    if let Ok(kb) = peak_rss_kb(&dir.join("host-local"), &add, conf.as_bytes()) {
        out.insert("host-local ADD".into(), kb);
    }
    for p in ["bridge", "host-local", "portmap", "loopback"] {
        if let Ok(kb) = peak_rss_kb(&dir.join(p), &[("CNI_COMMAND", "VERSION")], b"{}") {
            out.insert(format!("{p} VERSION"), kb);
        }
    }
    out
}

/// Median wall time of `runs` executions of `program` with CNI_COMMAND=VERSION.
fn version_time(program: &Path, runs: usize) -> Option<f64> {
    let mut s = Samples::default();
    for _ in 0..runs {
        let t = Instant::now();
        let ok = Command::new(program)
            .env("CNI_COMMAND", "VERSION")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?
            .success();
        if !ok && !program.ends_with("true") {
            return None;
        }
        s.0.push(t.elapsed().as_secs_f64());
    }
    Some(s.pct(50.0))
}

fn size_kb(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.len() / 1024)
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2e: {e}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> Fallible<()> {
    let args = parse_args()?;
    if !nix_root() {
        return Err("run as root (the benchmark creates network namespaces)".into());
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    if args.matrix.enabled && !args.smoke {
        return matrix::run(&args);
    }
    println!(
        "# e2e: bridge + host-local + portmap, cniVersion 1.0.0, {} pods",
        args.pods
    );
    println!("# ours: {}  go: {}", args.ours.display(), args.go.display());
    println!(
        "# load: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut reports: BTreeMap<Mode, ModeReport> = BTreeMap::new();
    let modes: &[Mode] = if args.only { &[] } else { &args.modes };
    for &mode in modes {
        let dir = if mode == Mode::GoExec {
            &args.go
        } else {
            &args.ours
        };
        if mode != Mode::OursInProcess && !dir.join("bridge").is_file() {
            println!(
                "\n## {}: skipped (no bridge in {})",
                mode.name(),
                dir.display()
            );
            continue;
        }
        println!("\n## {}", mode.name());
        match run_mode(mode, dir, BENCH, args.pods, true, false) {
            Ok(r) => {
                for (label, ph) in [("sequential", &r.seq), ("2 in flight", &r.conc)] {
                    println!(
                        "  {label:12} ADD {}  total {:.2} s",
                        ph.add.row(),
                        ph.add_total.as_secs_f64()
                    );
                    println!(
                        "  {label:12} DEL {}  total {:.2} s",
                        ph.del.row(),
                        ph.del_total.as_secs_f64()
                    );
                }
                reports.insert(mode, r);
            }
            Err(e) if args.smoke || mode == Mode::OursInProcess => {
                if args.smoke && mode != Mode::OursInProcess {
                    return Err(format!("{}: {e}", mode.name()));
                }
                println!("  skipped: {e}");
            }
            Err(e) => return Err(format!("{}: {e}", mode.name())),
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err("interrupted (everything created was removed)".into());
        }
    }
    if let (Some(go), Some(nft)) = (reports.get(&Mode::GoExec), reports.get(&Mode::OursNft)) {
        println!("\n## ratios Go/ours-nft (exec'd, p50, sequential)");
        println!(
            "  ADD {:.1}x   DEL {:.1}x",
            go.seq.add.pct(50.0) / nft.seq.add.pct(50.0),
            go.seq.del.pct(50.0) / nft.seq.del.pct(50.0)
        );
    }
    if let (Some(go), Some(ours)) = (reports.get(&Mode::GoExec), reports.get(&Mode::OursExec)) {
        println!("\n## ratios Go/ours (exec'd, p50, sequential)");
        println!(
            "  ADD {:.1}x   DEL {:.1}x",
            go.seq.add.pct(50.0) / ours.seq.add.pct(50.0),
            go.seq.del.pct(50.0) / ours.seq.del.pct(50.0)
        );
        println!(
            "  2 in flight: ADD {:.1}x   DEL {:.1}x",
            go.conc.add.pct(50.0) / ours.conc.add.pct(50.0),
            go.conc.del.pct(50.0) / ours.conc.del.pct(50.0)
        );
    }
    if let (Some(go), Some(all)) = (reports.get(&Mode::GoExec), reports.get(&Mode::OursExecAll)) {
        println!("\n## ratios Go/ours-exec-all (every plugin a process, p50, sequential)");
        println!(
            "  ADD {:.1}x   DEL {:.1}x",
            go.seq.add.pct(50.0) / all.seq.add.pct(50.0),
            go.seq.del.pct(50.0) / all.seq.del.pct(50.0)
        );
    }
    if args.tracing_cost > 0 {
        tracing::run(&args.ours, &args.go, args.tracing_cost)?;
    }
    if args.breakdown > 0 {
        let cells = args.matrix.cells(&breakdown::DEFAULT_CHAINS, args.smoke);
        breakdown::run(&args.ours, args.breakdown, &cells)?;
    }
    if !args.only {
        // DEL's kernel share: the veth deletion alone, same run.
        let n = if args.smoke { 3 } else { args.pods };
        let f = floor::run(n)?;
        println!("\n## kernel floor, {n} attachments (in-process, no plugin: veth, addresses, route, nf_tables elements)");
        println!("  ADD                 {}", f.add.row());
        println!("  DEL firewall        {}", f.del_fw.row());
        println!("  DEL veth alone      {}", f.del_link.row());
        if let Some(ours) = reports.get(&Mode::OursExec) {
            let (o, v) = (ours.seq.del.pct(50.0), f.del_link.pct(50.0));
            print!(
                "  ours-exec DEL p50 {:.2} ms = veth deletion {:.2} ms + {:.2} ms ours",
                o * 1e3,
                v * 1e3,
                (o - v) * 1e3
            );
            if let Some(go) = reports.get(&Mode::GoExec) {
                let g = go.seq.del.pct(50.0);
                print!("; Go DEL p50 {:.2} ms ({:.1}x ours", g * 1e3, g / o);
                if o > v {
                    print!(
                        ", {:.1}x on what is not the veth deletion",
                        (g - v) / (o - v)
                    );
                }
                print!(")");
            }
            println!();
        }
    }
    if !args.only && !args.smoke {
        start_report(&args);
    }
    if !args.scaling.is_empty() || !args.floor.is_empty() {
        scaling_report(&args)?;
    }
    if args.burst > 0 {
        burst_report(&args)?;
    }
    if args.gc > 0 {
        let r = gc::run(&args.ours, args.gc)?;
        println!(
            "\n## bulk GC (ours exec'd; bridge: masquerade, MAC spoof check, host-local; portmap)"
        );
        println!(
            "  {} dead attachments: GC {:.3} s (bridge {:.3} s; their ADD took {:.2} s)",
            args.gc,
            r.gc.as_secs_f64(),
            r.bridge.as_secs_f64(),
            r.add_total.as_secs_f64()
        );
    }
    if args.containerd > 0 {
        containerd::report(
            &args.ours,
            &args.go,
            args.containerd,
            args.containerd_chain,
            args.smoke,
        )?;
    }
    if let Some((live, leaked)) = args.cni_gc {
        cni_gc::report(&args.ours, live, leaked)?;
    }
    if args.smoke {
        println!();
        matrix::run(&args)?;
        println!("\nsmoke: ok");
    }
    Ok(())
}

/// Process start (VERSION) next to /bin/true and the start floors, sizes
/// and peak RSS.
fn start_report(args: &Args) {
    println!("\n## process start (VERSION, median of 200) and peak RSS");
    let tru = version_time(Path::new("/bin/true"), 200).unwrap_or(f64::NAN);
    println!("  /bin/true          {:.2} ms", tru * 1e3);
    if let Some(dir) = &args.start_floors {
        let mut progs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        progs.sort();
        for p in progs {
            let name = p.file_name().map(|n| n.to_string_lossy().to_string());
            if let (Some(t), Some(name)) = (version_time(&p, 200), name) {
                println!(
                    "  floor {name:16} {:.2} ms ({:.2}x /bin/true), size {} kB",
                    t * 1e3,
                    t / tru,
                    size_kb(&p).unwrap_or(0)
                );
            }
        }
    }
    for (who, dir) in [("ours", &args.ours), ("go", &args.go)] {
        for p in ["bridge", "host-local", "portmap", "loopback"] {
            if let Some(t) = version_time(&dir.join(p), 200) {
                println!(
                    "  {who:4} {p:12} {:.2} ms ({:.2}x /bin/true), size {} kB",
                    t * 1e3,
                    t / tru,
                    size_kb(&dir.join(p)).unwrap_or(0)
                );
            }
        }
        for (what, kb) in rss_report(dir) {
            println!("  {who:4} peak RSS {what:18} {kb} kB");
        }
    }
}

/// One size's figures of one scaling run, in seconds (NaN when not run).
#[derive(Clone, Copy)]
struct ScalePoint {
    exec: f64,
    inproc: f64,
    floor: f64,
    starts: f64,
}

/// ADD p50 of ours-exec (`--scaling`), of the same code in-process, and
/// of the kernel floor (`--floor`) at each size; with `--repeat R`, R runs
/// and then the median of each figure with the growth split by where it
/// goes.
fn scaling_report(args: &Args) -> Fallible<()> {
    let mut sizes: Vec<usize> = args.scaling.iter().chain(&args.floor).copied().collect();
    sizes.sort_unstable();
    sizes.dedup();
    println!("\n## scaling (sequential ADD p50 over 0..N existing attachments; floor: in-process kernel work)");
    let mut points: Vec<Vec<ScalePoint>> = vec![Vec::new(); sizes.len()];
    for run in 1..=args.repeat {
        if args.repeat > 1 {
            println!("  run {run}/{}", args.repeat);
        }
        for (k, &n) in sizes.iter().enumerate() {
            let point = scaling_point(args, n)?;
            points[k].push(point);
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Err("interrupted (everything created was removed)".into());
            }
        }
    }
    if sizes.len() < 2 {
        return Ok(());
    }
    let median = |v: &[ScalePoint], f: fn(&ScalePoint) -> f64| -> f64 {
        Samples(v.iter().map(f).collect()).pct(50.0)
    };
    println!(
        "\n## scaling, median of {} run(s) (ms): ours-exec, ours-inproc, floor, ours - floor",
        args.repeat
    );
    let fig = |v: &[ScalePoint]| {
        (
            median(v, |p| p.exec),
            median(v, |p| p.inproc),
            median(v, |p| p.floor),
            median(v, |p| p.starts),
        )
    };
    for (k, &n) in sizes.iter().enumerate() {
        let (e, i, f, _) = fig(&points[k]);
        let range = |g: fn(&ScalePoint) -> f64| {
            let v: Vec<f64> = points[k].iter().map(g).collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{:.2}-{:.2}", lo * 1e3, hi * 1e3)
        };
        println!(
            "  {n:5} pods: ours-exec {:6.2} ({}), ours-inproc {:6.2}, floor {:6.2}, ours - floor {:6.2}",
            e * 1e3,
            range(|p| p.exec),
            i * 1e3,
            f * 1e3,
            (e - f) * 1e3
        );
    }
    let (first, last) = (fig(&points[0]), fig(&points[sizes.len() - 1]));
    let d = |a: f64, b: f64| (b - a) * 1e3;
    println!(
        "  from {} to {} pods: ours-exec {:.2}x ({:+.2} ms) = floor {:+.2} (kernel work of the chain's requests) \
         + in-process code beyond the floor {:+.2} + processes {:+.2} (two /bin/true starts beside the floor: {:+.2})",
        sizes[0],
        sizes[sizes.len() - 1],
        last.0 / first.0,
        d(first.0, last.0),
        d(first.2, last.2),
        d(first.1 - first.2, last.1 - last.2),
        d(first.0 - first.1, last.0 - last.1),
        d(first.3, last.3)
    );
    Ok(())
}

/// One size of one scaling run, printed as it is measured.
fn scaling_point(args: &Args, n: usize) -> Fallible<ScalePoint> {
    let mut point = ScalePoint {
        exec: f64::NAN,
        inproc: f64::NAN,
        floor: f64::NAN,
        starts: f64::NAN,
    };
    let mut line = format!("  {n:5} pods:");
    if args.scaling.contains(&n) {
        let r = run_mode(Mode::OursExec, &args.ours, BENCH, n, false, false)?;
        point.exec = r.seq.add.pct(50.0);
        line += &format!(
            " ours-exec ADD p50 {:6.2} ms, DEL p50 {:6.2} ms;",
            point.exec * 1e3,
            r.seq.del.pct(50.0) * 1e3
        );
        // The kernel splits a short process's CPU time into user and
        // system by sampling ticks: only the sum is exact.
        let cpu = Samples(
            r.seq
                .add_user
                .0
                .iter()
                .zip(&r.seq.add_sys.0)
                .map(|(u, s)| u + s)
                .collect(),
        );
        line += &format!(
            "\n         ours-exec ADD p50 by CPU (ms): the plugins' processes {:.2}, neither theirs nor on a CPU (waits, the runtime) {:.2}",
            cpu.pct(50.0) * 1e3,
            r.seq.add_off_cpu.pct(50.0) * 1e3
        );
        // The same plugins' code run in this process (no exec): what grows
        // beyond the floor there is our code's, not the processes'.
        let inproc = run_mode(Mode::OursInProcess, &args.ours, BENCH, n, false, false)?;
        point.inproc = inproc.seq.add.pct(50.0);
        line += &format!(
            "\n         ours-inproc ADD p50 {:6.2} ms\n        ",
            point.inproc * 1e3
        );
    }
    if args.floor.contains(&n) {
        let f = floor::run(n)?;
        point.floor = f.add.pct(50.0);
        point.starts = f.starts.pct(50.0);
        line += &format!(
            " floor ADD p50 {:6.2} ms, veth delete p50 {:6.2} ms",
            point.floor * 1e3,
            f.del_link.pct(50.0) * 1e3
        );
        if point.exec.is_finite() {
            line += &format!("; ours - floor {:.2} ms", (point.exec - point.floor) * 1e3);
        }
        let steps: Vec<String> = f
            .steps
            .iter()
            .map(|(name, s)| format!("{name} {:.2}", s.pct(50.0) * 1e3))
            .collect();
        line += &format!(
            "\n         floor ADD p50 by step (ms): {}; after it, 2 starts of /bin/true {:.2}",
            steps.join(", "),
            point.starts * 1e3
        );
    }
    println!("{line}");
    Ok(point)
}

/// A burst, ours exec'd and Go's.
fn burst_report(args: &Args) -> Fallible<()> {
    let (n, k) = (args.burst, args.in_flight);
    println!("\n## burst: {n} pods, {k} in flight (ADD all, then DEL all; after one warm-up pod)");
    let mut pods_s = BTreeMap::new();
    for (mode, dir) in [(Mode::OursExec, &args.ours), (Mode::GoExec, &args.go)] {
        if !dir.join("bridge").is_file() {
            println!(
                "  {}: skipped (no bridge in {})",
                mode.name(),
                dir.display()
            );
            continue;
        }
        let r = burst::run(mode, dir, BENCH, n, k)?;
        println!("  {:9} ADD {}", mode.name(), r.add.row(n));
        println!("  {:9} DEL {}", mode.name(), r.del.row(n));
        println!(
            "  {:9} duplicate addresses: {}{}",
            mode.name(),
            r.duplicates.len(),
            if r.duplicates.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.duplicates.join(", "))
            }
        );
        for f in r.add.failures.iter().chain(&r.del.failures).take(3) {
            println!("  {:9} failure: {f}", mode.name());
        }
        pods_s.insert(mode, (r.add.pods_per_s(), r.del.pods_per_s()));
        if mode == Mode::OursExec {
            r.verdict().map_err(|e| format!("burst: {e}"))?;
        }
    }
    if let (Some(o), Some(g)) = (pods_s.get(&Mode::OursExec), pods_s.get(&Mode::GoExec)) {
        println!(
            "  pods/s ours/Go: ADD {:.1}x   DEL {:.1}x",
            o.0 / g.0,
            o.1 / g.1
        );
    }
    Ok(())
}

fn nix_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

struct RemoveDir(PathBuf);

/// A run's scratch space: a state directory under `TMPDIR` named by a
/// random tag (the tag also names the run's bridge and network), and a
/// fresh node namespace; both removed on drop, the namespace first.
pub(crate) struct Scratch {
    pub(crate) tag: String,
    pub(crate) state: PathBuf,
    pub(crate) node: OwnedNetns,
    _cleanup: RemoveDir,
}

impl Scratch {
    pub(crate) fn new() -> Fallible<Scratch> {
        let tag = random_tag();
        let state = std::env::temp_dir().join(format!("cni-e2e-{tag}"));
        std::fs::create_dir_all(&state).map_err(|e| e.to_string())?;
        let cleanup = RemoveDir(state.clone());
        let node = OwnedNetns::new("cnibench-node").map_err(|e| e.to_string())?;
        Ok(Scratch {
            tag,
            state,
            node,
            _cleanup: cleanup,
        })
    }

    /// `net` in this node (its node-side setup and state files done): the
    /// conflist, its state under the scratch's state directory.
    pub(crate) fn network(&self, net: MatrixCell) -> Fallible<NetworkConfigList> {
        let e = |e: cni_testkit::Error| e.to_string();
        net.prepare_node(&self.tag, self.node.netns()).map_err(e)?;
        net.prepare_state(&self.tag, &self.state).map_err(e)?;
        net.conflist(&self.tag, &self.state).map_err(e)
    }

    /// Our invoker over the plugins of `dir`, its result cache in the
    /// scratch's state directory.
    pub(crate) fn runtime(&self, dir: &Path, exec: Arc<dyn Exec>) -> CniConfig {
        CniConfig::new(vec![dir.to_path_buf()], exec).with_cache_dir(self.state.join("cache"))
    }
}

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
