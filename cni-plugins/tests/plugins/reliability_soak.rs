//! Concurrency and soak (issue #12): runtimes racing on one network and a
//! long-lived multus daemon serving many cycles, with nothing duplicated
//! and nothing leaked.
//!
//! * Two runtimes (two [`CniConfig`] values, one thread each) ADD and DEL
//!   pods in parallel on one bridge + host-local + portmap network with a
//!   /28 subnet, so addresses are reused constantly. A shared table of the
//!   addresses the runtimes hold proves no address is ever handed out
//!   twice (an address leaves the table *before* its DEL is issued); the
//!   kernel (`ip -j addr`) confirms every ADD's address is on the pod's
//!   interface; at the end no reservation, veth, bridge port, tagged nft
//!   rule or map element, or cache file is left.
//! * A `multus-daemon` (thick mode) serves shim ADD/DEL cycles (our bridge +
//!   host-local as delegates, two networks per pod); its RSS and open file
//!   descriptors, and this runtime's descriptors, are sampled and must stay
//!   flat after warm-up.
//!
//! Smoke sizes run by default (CI); the full campaign is the same tests
//! with larger sizes from the environment (see RELIABILITY.md, "Concurrency and soak"):
//!
//! ```text
//! SOAK_CYCLES=5000 SOAK_MULTUS_CYCLES=5000 SOAK_SAMPLE_EVERY=500 \
//!   cargo test --release -p cni-plugins --test plugins reliability_soak:: -- --nocapture --test-threads 1
//! ```
//!
//! The tests need root (they are skipped with a message otherwise) and
//! run serialized within this binary: fd counts are per process.
// Runs the multus binaries too: needs the `multus` feature.
#![cfg(feature = "multus")]

use crate::nodenet;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::nodenet::{sh_ok, suffix, Ns};
use cni_exec::{CniConfig, ProcessExec, RuntimeConf, StderrSink};
use cni_testkit::KubeApiServer;
use cni_types::NetworkConfigList;
use serde_json::{json, Value};

/// fd counts are per process: the tests of this binary take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---- measurements ----------------------------------------------------

/// Latencies in seconds.
#[derive(Default, Clone, Debug)]
struct Samples(Vec<f64>);

impl Samples {
    /// Nearest-rank percentile, in milliseconds.
    fn pct_ms(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
        v[rank.min(v.len()) - 1] * 1e3
    }

    fn row(&self, what: &str) -> String {
        format!(
            "| {what} | {} | {:.1} | {:.1} | {:.1} |",
            self.0.len(),
            self.pct_ms(50.0),
            self.pct_ms(99.0),
            self.pct_ms(100.0)
        )
    }
}

/// Open file descriptors of a process (`/proc/<pid>/fd`).
fn fd_count(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// `VmRSS` of a process, in kB.
fn rss_kb(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

// ---- the runtimes ----------------------------------------------------

/// Addresses currently held by some attachment, with the holder.
type Held = Arc<Mutex<HashMap<IpAddr, String>>>;

/// Builds the runtime config of cycle `i` on pod slot `slot`.
type MakeRuntimeConf = Box<dyn Fn(usize, usize, &Ns) -> RuntimeConf + Send + Sync>;

/// One runtime's part of the soak.
struct Runtime {
    /// Runtime number (in container ids).
    id: usize,
    /// The network list it runs.
    list: NetworkConfigList,
    /// Its own libcni object.
    cni: CniConfig,
    /// Pod namespaces it cycles through: at most one live attachment each.
    pods: Vec<Ns>,
    /// ADD/DEL cycles to run.
    cycles: usize,
    /// Builds the runtime config of each cycle.
    rt: MakeRuntimeConf,
    /// Called every `sample_every` cycles (and at the end) with the cycle.
    sample: Box<dyn Fn(usize) + Send + Sync>,
    sample_every: usize,
}

/// What a runtime measured.
#[derive(Default, Debug)]
struct Outcome {
    add: Samples,
    del: Samples,
    cycles: usize,
    /// Calls slower than a second: (start, in seconds since this process's
    /// first race; latency, s; what), to tell a host-wide stall (every
    /// runtime at once) from one call's.
    slow: Vec<(f64, f64, String)>,
}

/// When this process's first race started, for [`Outcome::slow`].
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

impl Outcome {
    fn record(&mut self, del: bool, t: Instant, what: &str) {
        let took = t.elapsed().as_secs_f64();
        if del {
            self.del.0.push(took);
        } else {
            self.add.0.push(took);
        }
        if took > 1.0 {
            let at = t.duration_since(*EPOCH.get_or_init(Instant::now));
            let op = if del { "DEL" } else { "ADD" };
            self.slow
                .push((at.as_secs_f64(), took, format!("{op} {what}")));
        }
    }
}

/// The sandbox addresses of a result: (interface name, address).
fn sandbox_addrs(r: &cni_types::CniResult) -> Vec<(String, IpAddr, u8)> {
    r.ips
        .iter()
        .filter_map(|ip| {
            let iface = r.interfaces.get(ip.interface? as usize)?;
            (!iface.sandbox.is_empty())
                .then(|| (iface.name.clone(), ip.address.ip(), ip.address.prefix()))
        })
        .collect()
}

/// The kernel's view (`ip -j addr show dev`) of an interface in `pod`.
fn kernel_addrs(pod: &Ns, ifname: &str) -> Vec<String> {
    let out = sh_ok(&["ip", "-j", "-n", &pod.name, "addr", "show", "dev", ifname]);
    let v: Value = serde_json::from_str(&out).unwrap_or(json!([]));
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect()
}

impl Runtime {
    /// Runs the cycles (call from a thread inside the node namespace: the
    /// plugins inherit it). Stops early when `stop` is raised by the other
    /// runtime; raises it on its own failure.
    fn run(&self, held: &Held, stop: &AtomicBool) -> Result<Outcome, String> {
        let mut out = Outcome::default();
        let mut live: Vec<Option<(RuntimeConf, Vec<IpAddr>)>> = vec![None; self.pods.len()];
        let res = self.cycles_inner(held, stop, &mut live, &mut out);
        if res.is_err() {
            stop.store(true, Ordering::SeqCst);
        }
        // Whatever happened, release what is still attached.
        let mut drain = Ok(());
        for slot in live.iter_mut() {
            if let Some((rt, ips)) = slot.take() {
                if let Err(e) = self.del(held, &rt, &ips, &mut out) {
                    drain = Err(e);
                }
            }
        }
        (self.sample)(out.cycles);
        res.and(drain).map(|()| out)
    }

    fn cycles_inner(
        &self,
        held: &Held,
        stop: &AtomicBool,
        live: &mut [Option<(RuntimeConf, Vec<IpAddr>)>],
        out: &mut Outcome,
    ) -> Result<(), String> {
        for i in 0..self.cycles {
            if stop.load(Ordering::SeqCst) {
                return Err(format!("runtime {} stopped at cycle {i}", self.id));
            }
            if i % self.sample_every == 0 {
                (self.sample)(i);
            }
            let slot = i % self.pods.len();
            if let Some((rt, ips)) = live[slot].take() {
                self.del(held, &rt, &ips, out)?;
            }
            let pod = &self.pods[slot];
            let rt = (self.rt)(i, slot, pod);
            let t = Instant::now();
            let added = self.cni.add_network_list(&self.list, &rt);
            out.record(false, t, &rt.container_id);
            let added = match added {
                Ok(a) => a,
                Err(e) => {
                    // Leave nothing behind: the runtime's duty after a failed ADD.
                    let _ = self.cni.del_network_list(&self.list, &rt);
                    return Err(format!("runtime {} ADD {}: {e}", self.id, rt.container_id));
                }
            };
            let addrs = sandbox_addrs(&added.result);
            if addrs.is_empty() {
                live[slot] = Some((rt.clone(), Vec::new()));
                return Err(format!(
                    "runtime {} ADD {}: no sandbox address in {:?}",
                    self.id, rt.container_id, added.result
                ));
            }
            let mut ips = Vec::new();
            let mut dup = None;
            {
                let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
                for (_, ip, _) in &addrs {
                    match h.insert(*ip, rt.container_id.clone()) {
                        Some(other) => {
                            // Put the first holder back: it still owns it.
                            h.insert(*ip, other.clone());
                            dup = Some(format!(
                                "DUPLICATE {ip}: given to {} while held by {other}",
                                rt.container_id
                            ));
                        }
                        None => ips.push(*ip),
                    }
                }
            }
            live[slot] = Some((rt.clone(), ips));
            if let Some(d) = dup {
                return Err(d);
            }
            for (ifname, ip, prefix) in &addrs {
                let want = format!("{ip}/{prefix}");
                let have = kernel_addrs(pod, ifname);
                if !have.contains(&want) {
                    return Err(format!(
                        "runtime {} ADD {}: {want} not on {ifname} in {} (kernel: {have:?})",
                        self.id, rt.container_id, pod.name
                    ));
                }
            }
            out.cycles = i + 1;
        }
        Ok(())
    }

    /// Releases the addresses from the table, then DELs.
    fn del(
        &self,
        held: &Held,
        rt: &RuntimeConf,
        ips: &[IpAddr],
        out: &mut Outcome,
    ) -> Result<(), String> {
        {
            let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
            for ip in ips {
                match h.remove(ip) {
                    Some(holder) if holder == rt.container_id => {}
                    other => {
                        return Err(format!("{ip} of {} was held by {other:?}", rt.container_id))
                    }
                }
            }
        }
        let t = Instant::now();
        let r = self.cni.del_network_list(&self.list, rt);
        out.record(true, t, &rt.container_id);
        r.map_err(|e| format!("runtime {} DEL {}: {e}", self.id, rt.container_id))
    }
}

/// Runs `runtimes` in parallel, each on its own thread inside `node`.
fn race(node: &Ns, runtimes: &[Runtime], held: &Held) -> Vec<Result<Outcome, String>> {
    EPOCH.get_or_init(Instant::now);
    let stop = AtomicBool::new(false);
    let netns = node.netns();
    std::thread::scope(|s| {
        let handles: Vec<_> = runtimes
            .iter()
            .map(|r| {
                let (netns, stop) = (&netns, &stop);
                s.spawn(move || {
                    netns
                        .run(|| r.run(held, stop))
                        .unwrap_or_else(|e| Err(format!("enter node netns: {e}")))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("runtime panicked".into())))
            .collect()
    })
}

fn process_exec() -> Arc<ProcessExec> {
    Arc::new(
        ProcessExec::new()
            .with_timeout(Duration::from_secs(60))
            .with_stderr(StderrSink::Inherit),
    )
}

/// A `CNI_PATH` directory of symlinks to our binaries.
fn plugin_dir(bins: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, path) in bins {
        std::os::unix::fs::symlink(path, dir.path().join(name)).expect("symlink");
    }
    dir
}

// ---- leak oracles ----------------------------------------------------

/// Every file host-local left in the network directories under `data_dir`
/// other than `lock` and `last_reserved_ip.*`: reservations, and temporary
/// files of an interrupted write. (Dot directories hold our store's owner
/// index and inode pool, bounded by design: see [`ipam_index_files`].)
fn reservations(data_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for net in std::fs::read_dir(data_dir).into_iter().flatten().flatten() {
        if net.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for f in std::fs::read_dir(net.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let n = f.file_name().to_string_lossy().into_owned();
            if n != "lock" && !n.starts_with("last_reserved_ip") {
                out.push(format!("{}/{n}", net.file_name().to_string_lossy()));
            }
        }
    }
    out.sort();
    out
}

/// The files of the store's owner index and inode pool
/// (`<dataDir>/.cni-ipam-index`): at most 64 pooled inodes, 256 buckets
/// and a state file per network, whatever the number of cycles.
fn ipam_index_files(data_dir: &Path) -> usize {
    files_under(&data_dir.join(".cni-ipam-index")).len()
}

/// Regular files anywhere under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(_) => out.push(e.path()),
                Err(_) => {}
            }
        }
    }
    out.sort();
    out
}

/// Links in `ns` other than `lo` and `keep` (`ip -j link`).
fn links_except(ns: &Ns, keep: &[&str]) -> Vec<String> {
    let v: Value = serde_json::from_str(&sh_ok(&["ip", "-j", "-n", &ns.name, "link", "show"]))
        .unwrap_or(json!([]));
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str())
        .filter(|n| *n != "lo" && !keep.contains(n))
        .map(str::to_owned)
        .collect()
}

/// Bridge ports in `ns` (`bridge -j link`).
fn bridge_ports(ns: &Ns) -> Vec<String> {
    let out = sh_ok(&["bridge", "-j", "-n", &ns.name, "link", "show"]);
    let v: Value = serde_json::from_str(&out).unwrap_or(json!([]));
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
        .collect()
}

/// What the nft ruleset of `ns` still holds for `networks`: rules whose
/// comment names one of them, per-attachment chains, and map or set
/// elements of any kind (every element belongs to an attachment in our
/// layout) (`nft -j list ruleset`).
fn nft_leftovers(ns: &Ns, networks: &[&str]) -> Vec<String> {
    let v = ns.nft_ruleset();
    let mut out = Vec::new();
    for o in v["nftables"].as_array().into_iter().flatten() {
        if let Some(r) = o.get("rule") {
            let c = r["comment"].as_str().unwrap_or("");
            if networks.iter().any(|n| c.contains(&format!("net: {n},"))) {
                out.push(format!("rule in {}/{}: {c}", r["table"], r["chain"]));
            }
        }
        if let Some(c) = o.get("chain") {
            let name = c["name"].as_str().unwrap_or("");
            let owner = ["pm-", "masq-", "sc-"].iter().any(|p| name.starts_with(p));
            if owner {
                out.push(format!("chain {}/{name}", c["table"]));
            }
        }
        if let Some(m) = o.get("map").or_else(|| o.get("set")) {
            let elems: Vec<&Value> = m
                .get("elem")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .collect();
            if !elems.is_empty() {
                out.push(format!("map {}/{}: {elems:?}", m["table"], m["name"]));
            }
        }
    }
    out
}

fn print_latency(title: &str, rows: &[(String, &Samples)]) {
    eprintln!("\n{title}\n| phase | calls | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|");
    for (what, s) in rows {
        eprintln!("{}", s.row(what));
    }
}

// ---- two runtimes on one network -------------------------------------

fn bridge_conflist(network: &str, bridge: &str, subnet: &str, ipam: &Path) -> NetworkConfigList {
    let v = json!({
        "cniVersion": "1.0.0",
        "name": network,
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": ipam,
                      "ranges": [[{"subnet": subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    NetworkConfigList::from_slice(v.to_string().as_bytes()).expect("conflist")
}

#[test]
fn two_runtimes_race_on_one_network_without_duplicates_or_leaks() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let _serial = serial();
    let cycles = env_usize("SOAK_CYCLES", 80);
    let window = env_usize("SOAK_WINDOW", 3).max(1);
    let sample_every = env_usize("SOAK_SAMPLE_EVERY", 20).max(1);
    let tag = suffix()[..6].to_string();
    let network = format!("soak-{tag}");
    let bridge = format!("sb{tag}");
    let node = Ns::new("soaknode");
    let state = tempfile::tempdir().expect("tempdir");
    let ipam = state.path().join("ipam");
    // Both runtimes use one cache directory, as two runtimes on a node
    // with libcni's default do.
    let cache = state.path().join("cache");
    let bins = plugin_dir(&[
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("host-local", env!("CARGO_BIN_EXE_host-local")),
        ("portmap", env!("CARGO_BIN_EXE_portmap")),
    ]);
    // 13 usable addresses for 2 × `window` live attachments.
    let list = bridge_conflist(&network, &bridge, "10.199.7.0/28", &ipam);

    // (cycle of runtime 0, open fds, VmRSS kB) of this process.
    let self_samples: Arc<Mutex<Vec<(usize, usize, u64)>>> = Arc::default();
    let fds_before = fd_count("self");
    let runtimes: Vec<Runtime> = (0..2)
        .map(|id| {
            let net = network.clone();
            let samples = self_samples.clone();
            Runtime {
                id,
                list: list.clone(),
                cni: CniConfig::new(vec![bins.path().to_path_buf()], process_exec())
                    .with_cache_dir(&cache),
                pods: (0..window).map(|_| Ns::new("soakpod")).collect(),
                cycles,
                rt: Box::new(move |i, slot, pod| {
                    let mut rt = RuntimeConf {
                        container_id: format!("{net}-r{id}-{i:06}"),
                        netns: pod.path(),
                        ifname: "eth0".into(),
                        ..Default::default()
                    };
                    let host_port = 30000 + id * 100 + slot;
                    rt.capability_args.insert(
                        "portMappings".into(),
                        json!([{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"},
                               {"hostPort": host_port, "containerPort": 53, "protocol": "udp"}]),
                    );
                    rt
                }),
                sample: Box::new(move |i| {
                    if id == 0 {
                        samples
                            .lock()
                            .unwrap()
                            .push((i, fd_count("self"), rss_kb("self")));
                    }
                }),
                sample_every,
            }
        })
        .collect();
    let held: Held = Arc::default();
    let start = Instant::now();
    let results = race(&node, &runtimes, &held);
    let took = start.elapsed();
    let fds_after = fd_count("self");

    let mut errors = Vec::new();
    let mut add = Samples::default();
    let mut del = Samples::default();
    let mut rows = Vec::new();
    let mut total = 0;
    let mut slow = Vec::new();
    for (id, r) in results.into_iter().enumerate() {
        match r {
            Ok(o) => {
                total += o.cycles;
                for (at, took, what) in &o.slow {
                    slow.push(format!(
                        "runtime {id}: {what} at {at:.1} s took {took:.2} s"
                    ));
                }
                add.0.extend(&o.add.0);
                del.0.extend(&o.del.0);
                rows.push((format!("runtime {id} ADD"), o.add));
                rows.push((format!("runtime {id} DEL"), o.del));
            }
            Err(e) => errors.push(e),
        }
    }
    assert!(errors.is_empty(), "{errors:#?}");
    eprintln!(
        "\ntwo runtimes: {total} ADD/DEL cycles ({cycles} each, {window} live per runtime, /28) in {:.1} s; duplicates 0",
        took.as_secs_f64()
    );
    let rows: Vec<(String, &Samples)> = rows
        .iter()
        .map(|(w, s)| (w.clone(), s))
        .chain([("all ADD".to_string(), &add), ("all DEL".to_string(), &del)])
        .collect();
    print_latency("latency", &rows);
    eprintln!("calls over 1 s: {slow:#?}");
    eprintln!("\ntest runtime: open fds before {fds_before}, after {fds_after}");
    eprintln!("| cycle (runtime 0) | runtime fds | runtime VmRSS kB |\n|---|---|---|");
    for (c, f, r) in self_samples.lock().unwrap().iter() {
        eprintln!("| {c} | {f} | {r} |");
    }

    assert_eq!(total, 2 * cycles);
    assert!(
        held.lock().unwrap().is_empty(),
        "{:?}",
        held.lock().unwrap()
    );
    // Nothing left: reservations, veths, bridge ports, firewall, caches.
    assert_eq!(reservations(&ipam), Vec::<String>::new());
    let index = ipam_index_files(&ipam);
    eprintln!("host-local index + inode pool: {index} files");
    assert!(index <= 64 + 256 + 4, "{index} index files");
    assert_eq!(links_except(&node, &[&bridge]), Vec::<String>::new());
    assert_eq!(bridge_ports(&node), Vec::<String>::new());
    for r in &runtimes {
        for pod in &r.pods {
            assert_eq!(links_except(pod, &[]), Vec::<String>::new(), "{}", pod.name);
        }
    }
    // Every element, the network's shared masquerade subnet keys too: they
    // go with its last DEL, no GC needed (containerd sends none).
    assert_eq!(nft_leftovers(&node, &[&network]), Vec::<String>::new());
    assert_eq!(files_under(&cache), Vec::<PathBuf>::new());
    // This process's descriptors came back (threads and pipes of every
    // plugin call closed). The process is shared with the binary's other
    // tests, whose descriptors come and go: a leak per cycle would add
    // hundreds.
    assert!(
        fds_after <= fds_before + 32,
        "fds before {fds_before}, after {fds_after}"
    );
}

// ---- the multus daemon ----------------------------------------------

/// The daemon process, killed on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nad(bridge: &str, subnet: &str, ipam: &Path) -> String {
    json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge, "isGateway": true,
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam,
                 "routes": [{"dst": "0.0.0.0/0"}]}})
    .to_string()
}

/// One sample of the resource curve.
#[derive(Debug, Clone, Copy)]
struct Sample {
    cycle: usize,
    daemon_rss_kb: u64,
    daemon_fds: usize,
    runtime_fds: usize,
}

impl Sample {
    /// The daemon `pid` and this process now.
    fn of(pid: &str, cycle: usize) -> Sample {
        Sample {
            cycle,
            daemon_rss_kb: rss_kb(pid),
            daemon_fds: fd_count(pid),
            runtime_fds: fd_count("self"),
        }
    }
}

#[test]
fn multus_daemon_serves_many_cycles_with_flat_rss_and_fds() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let _serial = serial();
    let cycles = env_usize("SOAK_MULTUS_CYCLES", 100);
    let sample_every = env_usize("SOAK_SAMPLE_EVERY", 20).max(1);
    let warm_up = env_usize("SOAK_WARMUP", 30).min(cycles);
    let window = 2;
    let tag = suffix()[..6].to_string();
    let node = Ns::new("soakmnode");
    let state = tempfile::tempdir().expect("tempdir");
    let ipam = state.path().join("ipam");
    let server = KubeApiServer::start_in_netns(Path::new(&node.path())).expect("api server");
    let (cluster_br, extra_br) = (format!("smc{tag}"), format!("sma{tag}"));
    server.add_nad(
        "kube-system",
        "cluster",
        &nad(&cluster_br, "10.198.0.0/28", &ipam),
    );
    server.add_nad("ns1", "net-a", &nad(&extra_br, "10.198.1.0/28", &ipam));
    // Runtime 0 runs the sampled sequential soak; 1 and 2 then race.
    for id in 0..3 {
        for slot in 0..window {
            server.add_pod(
                "ns1",
                &format!("soak-{id}-{slot}"),
                &format!("uid-soak-{id}-{slot}"),
                &[("k8s.v1.cni.cncf.io/networks", r#"[{"name":"net-a"}]"#)],
            );
        }
    }
    let bins = plugin_dir(&[
        ("multus-shim", env!("CARGO_BIN_EXE_multus-shim")),
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("host-local", env!("CARGO_BIN_EXE_host-local")),
    ]);
    let socket_dir = state.path().join("run/multus");
    let multus_cache = state.path().join("multus-cache");
    let config = json!({"socketDir": socket_dir, "kubeconfig": server.kubeconfig_path(),
        "clusterNetwork": "cluster", "binDir": bins.path(),
        "cniDir": multus_cache, "confDir": state.path().join("conf"),
        "logFile": state.path().join("daemon.log"), "logLevel": "error"});
    let config_path = state.path().join("daemon-config.json");
    std::fs::write(&config_path, config.to_string()).expect("write daemon config");
    // Spawned from a thread inside the node namespace: the daemon (and the
    // delegates it runs) live there; its pid is the daemon's own.
    let daemon = node
        .netns()
        .run(|| {
            Command::new(env!("CARGO_BIN_EXE_multus-daemon"))
                .arg("--config")
                .arg(&config_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
        })
        .expect("enter node")
        .expect("spawn multus-daemon");
    let daemon = Daemon(daemon);
    let pid = daemon.0.id().to_string();
    let sock = socket_dir.join("multus.sock");
    assert!(
        nodenet::wait_until(Duration::from_secs(10), || {
            std::os::unix::net::UnixStream::connect(&sock).is_ok()
        }),
        "daemon did not open {}",
        sock.display()
    );

    let runtime_cache = state.path().join("runtime-cache");
    let list = NetworkConfigList::from_slice(
        json!({"cniVersion": "1.0.0", "name": "multus-cni-network", "plugins": [
            {"type": "multus-shim", "socketDir": socket_dir, "cniDir": multus_cache,
             "binDir": bins.path()}]})
        .to_string()
        .as_bytes(),
    )
    .expect("shim conflist");
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let s2 = samples.clone();
    let pid2 = pid.clone();
    let make_runtime = |id: usize, cycles: usize, sample: Box<dyn Fn(usize) + Send + Sync>| {
        let cid_tag = tag.clone();
        Runtime {
            id,
            list: list.clone(),
            cni: CniConfig::new(vec![bins.path().to_path_buf()], process_exec())
                .with_cache_dir(&runtime_cache),
            pods: (0..window).map(|_| Ns::new("soakmpod")).collect(),
            cycles,
            rt: Box::new(move |i, slot, pod| RuntimeConf {
                container_id: format!("soakm-{cid_tag}-r{id}-{i:06}"),
                netns: pod.path(),
                ifname: "eth0".into(),
                args: vec![
                    ("IgnoreUnknown".into(), "1".into()),
                    ("K8S_POD_NAMESPACE".into(), "ns1".into()),
                    ("K8S_POD_NAME".into(), format!("soak-{id}-{slot}")),
                    ("K8S_POD_UID".into(), format!("uid-soak-{id}-{slot}")),
                ],
                ..Default::default()
            }),
            sample,
            sample_every: 1,
        }
    };
    // Asked every cycle; keeps multiples of `sample_every`, the end of the
    // warm-up and the end.
    let runtime = make_runtime(
        0,
        cycles,
        Box::new(move |i| {
            if i % sample_every == 0 || i == warm_up || i == cycles {
                s2.lock().unwrap().push(Sample::of(&pid2, i));
            }
        }),
    );
    let held: Held = Arc::default();
    let start = Instant::now();
    let mut results = race(&node, std::slice::from_ref(&runtime), &held);
    let took = start.elapsed();
    let outcome = results
        .pop()
        .expect("one runtime")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut samples = samples.lock().unwrap().clone();

    // Then two runtimes at once through the same daemon (concurrent
    // requests, one delegate cache), sampled again once both are done.
    let conc_cycles = env_usize("SOAK_MULTUS_CONC_CYCLES", 25);
    let racers: Vec<Runtime> = (1..3)
        .map(|id| make_runtime(id, conc_cycles, Box::new(|_| {})))
        .collect();
    let start = Instant::now();
    let conc = race(&node, &racers, &held);
    let conc_took = start.elapsed();
    let conc_errors: Vec<String> = conc
        .iter()
        .filter_map(|r| r.as_ref().err().cloned())
        .collect();
    assert!(conc_errors.is_empty(), "{conc_errors:#?}");
    // A connection's thread may still be closing its stream when the shim
    // has its answer: let the daemon settle (bounded) before sampling.
    let settled = samples.last().map_or(0, |s| s.daemon_fds);
    nodenet::wait_until(Duration::from_secs(5), || fd_count(&pid) <= settled);
    samples.push(Sample::of(&pid, cycles + 2 * conc_cycles));

    eprintln!(
        "\nmultus daemon (pid {pid}): {} shim ADD/DEL cycles (2 delegates each) in {:.1} s",
        outcome.cycles,
        took.as_secs_f64()
    );
    let conc: Vec<Outcome> = conc.into_iter().flatten().collect();
    eprintln!(
        "then 2 runtimes at once: {} cycles in {:.1} s",
        conc.iter().map(|o| o.cycles).sum::<usize>(),
        conc_took.as_secs_f64()
    );
    let mut rows = vec![
        ("sequential ADD".to_string(), &outcome.add),
        ("sequential DEL".to_string(), &outcome.del),
    ];
    for (n, o) in conc.iter().enumerate() {
        rows.push((format!("concurrent runtime {} ADD", n + 1), &o.add));
        rows.push((format!("concurrent runtime {} DEL", n + 1), &o.del));
    }
    print_latency("shim latency", &rows);
    let slow: Vec<_> = std::iter::once(&outcome)
        .chain(&conc)
        .flat_map(|o| &o.slow)
        .collect();
    eprintln!("calls over 1 s: {slow:#?}");
    eprintln!("\n| cycle | daemon VmRSS kB | daemon fds | runtime fds |\n|---|---|---|---|");
    for s in &samples {
        eprintln!(
            "| {} | {} | {} | {} |",
            s.cycle, s.daemon_rss_kb, s.daemon_fds, s.runtime_fds
        );
    }

    assert_eq!(outcome.cycles, cycles);
    // Flat after warm-up: the same descriptors, bounded RSS growth.
    let warm = samples
        .iter()
        .find(|s| s.cycle >= warm_up)
        .copied()
        .expect("a warm-up sample");
    let rss_bound = env_usize("SOAK_RSS_GROWTH_KB", 4096) as u64;
    assert_eq!(conc.len(), 2);
    for s in samples.iter().filter(|s| s.cycle >= warm_up) {
        assert!(
            s.daemon_rss_kb > 0 && s.daemon_fds > 0,
            "daemon gone? {s:?}"
        );
        assert!(
            s.daemon_fds.abs_diff(warm.daemon_fds) <= 2,
            "daemon fds: {warm:?} -> {s:?}"
        );
        // The runtime side is this test process, shared with the other
        // tests of the binary: their descriptors come and go. A leak of one
        // per cycle would add hundreds; allow the others' noise.
        assert!(
            s.runtime_fds <= warm.runtime_fds + 32,
            "runtime fds: {warm:?} -> {s:?}"
        );
        assert!(
            s.daemon_rss_kb <= warm.daemon_rss_kb + rss_bound,
            "daemon RSS grew more than {rss_bound} kB after warm-up: {warm:?} -> {s:?}"
        );
    }
    // Nothing left behind.
    assert_eq!(reservations(&ipam), Vec::<String>::new());
    assert_eq!(
        links_except(&node, &[&cluster_br, &extra_br]),
        Vec::<String>::new()
    );
    assert_eq!(bridge_ports(&node), Vec::<String>::new());
    for pod in runtime
        .pods
        .iter()
        .chain(racers.iter().flat_map(|r| &r.pods))
    {
        assert_eq!(links_except(pod, &[]), Vec::<String>::new(), "{}", pod.name);
    }
    assert!(held.lock().unwrap().is_empty());
    assert_eq!(files_under(&runtime_cache), Vec::<PathBuf>::new());
    assert_eq!(files_under(&multus_cache), Vec::<PathBuf>::new());
}

// ---- cold start ------------------------------------------------------

/// The first ADDs on a fresh node race to create the shared objects: the
/// bridge, the host-local directory, the nft tables and maps. Every one of
/// them must succeed, and the DELs leave nothing.
#[test]
fn first_adds_on_a_fresh_node_race_without_failures() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let _serial = serial();
    let rounds = env_usize("SOAK_COLD_ROUNDS", 4);
    let racers = 4;
    let bins = plugin_dir(&[
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("host-local", env!("CARGO_BIN_EXE_host-local")),
        ("portmap", env!("CARGO_BIN_EXE_portmap")),
    ]);
    for round in 0..rounds {
        let tag = suffix()[..6].to_string();
        let network = format!("cold-{tag}");
        let bridge = format!("sc{tag}");
        let node = Ns::new("soakcnode");
        let state = tempfile::tempdir().expect("tempdir");
        let ipam = state.path().join("ipam");
        let cache = state.path().join("cache");
        let list = bridge_conflist(&network, &bridge, "10.199.8.0/28", &ipam);
        let pods: Vec<Ns> = (0..racers).map(|_| Ns::new("soakcpod")).collect();
        let rts: Vec<RuntimeConf> = pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let mut rt = RuntimeConf {
                    container_id: format!("{network}-{i}"),
                    netns: pod.path(),
                    ifname: "eth0".into(),
                    ..Default::default()
                };
                rt.capability_args.insert(
                    "portMappings".into(),
                    json!([{"hostPort": 31000 + i, "containerPort": 80, "protocol": "tcp"}]),
                );
                rt
            })
            .collect();
        let barrier = std::sync::Barrier::new(racers);
        let netns = node.netns();
        let run_all = |op: &str| -> Vec<Result<Vec<IpAddr>, String>> {
            std::thread::scope(|s| {
                let handles: Vec<_> = rts
                    .iter()
                    .map(|rt| {
                        let (netns, barrier, list, op) = (&netns, &barrier, &list, op);
                        let cni = CniConfig::new(vec![bins.path().to_path_buf()], process_exec())
                            .with_cache_dir(&cache);
                        s.spawn(move || {
                            netns
                                .run(|| {
                                    barrier.wait();
                                    let r = if op == "ADD" {
                                        cni.add_network_list(list, rt).map(|a| {
                                            sandbox_addrs(&a.result)
                                                .into_iter()
                                                .map(|(_, ip, _)| ip)
                                                .collect()
                                        })
                                    } else {
                                        cni.del_network_list(list, rt).map(|()| Vec::new())
                                    };
                                    r.map_err(|e| format!("{op} {}: {e}", rt.container_id))
                                })
                                .unwrap_or_else(|e| Err(e.to_string()))
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
                    .collect()
            })
        };
        let added = run_all("ADD");
        // The oracles see live attachments (so their emptiness later means
        // something): reservations, bridge ports, firewall elements.
        if added.iter().all(Result::is_ok) {
            assert_eq!(reservations(&ipam).len(), racers);
            assert_eq!(bridge_ports(&node).len(), racers);
            assert!(!nft_leftovers(&node, &[&network]).is_empty());
        }
        let deleted = run_all("DEL");
        let errors: Vec<&String> = added
            .iter()
            .chain(&deleted)
            .filter_map(|r| r.as_ref().err())
            .collect();
        assert!(errors.is_empty(), "round {round}: {errors:#?}");
        let mut ips: Vec<IpAddr> = added.into_iter().flat_map(Result::unwrap).collect();
        ips.sort();
        let n = ips.len();
        ips.dedup();
        assert_eq!((n, ips.len()), (racers, racers), "round {round}: {ips:?}");
        assert_eq!(reservations(&ipam), Vec::<String>::new());
        assert_eq!(links_except(&node, &[&bridge]), Vec::<String>::new());
        assert_eq!(bridge_ports(&node), Vec::<String>::new());
        for pod in &pods {
            assert_eq!(links_except(pod, &[]), Vec::<String>::new(), "{}", pod.name);
        }
        assert_eq!(nft_leftovers(&node, &[&network]), Vec::<String>::new());
        assert_eq!(files_under(&cache), Vec::<PathBuf>::new());
    }
    eprintln!(
        "cold start: {rounds} fresh nodes x {racers} simultaneous first ADDs (then DELs): \
         all succeeded, distinct addresses, nothing left"
    );
}
