//! `--containerd N`: pod sandboxes through a real containerd (Debian's
//! 1.6 with runc; `cni_testkit::containerd`: a private instance, a pause
//! image built locally), the CRI calls a kubelet makes, ours
//! (`--plugins`) and Go's (`--go`) on the same dual-stack network in the
//! same run: bridge (isGateway, ipMasq) + host-local with an IPv4 and an
//! IPv6 range + portmap, one host port per sandbox. Each side gets its
//! own node namespace (containerd, its shims and the plugins run there)
//! and containerd instance. `--containerd-chain ptp` runs ptp (ipMasq)
//! in bridge's place, kindnet's network.
//!
//! After one untimed warm-up sandbox: N sandboxes one at a time
//! (`RunPodSandbox`, then `StopPodSandbox` and `RemovePodSandbox`), then a
//! burst of 20 with 4 in flight (all run, then all stopped and removed).
//! What is timed is the CRI call as kubelet sees it: containerd's own work
//! (container, shim, runc) is in both sides' figures alike.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cni_cri::v1::{PortMapping, Protocol};
use cni_cri::RuntimeClient;
use cni_testkit::containerd::{Containerd, ContainerdOptions};

use super::burst::{phase, BurstPhase};
use super::{check_clean, set_mode_env, Fallible, Mode, Samples, Scratch, INTERRUPTED};

/// Sandboxes of the burst and calls in flight (issue 29's figures).
const BURST: usize = 20;
const IN_FLIGHT: usize = 4;

/// One side's figures.
struct Side {
    run: Samples,
    stop: Samples,
    remove: Samples,
    burst_run: BurstPhase,
    burst_stop: BurstPhase,
}

pub(crate) fn conflist(tag: &str, ipam: &Path) -> String {
    conflist_of(CriChain::Bridge, tag, ipam)
}

/// The main plugin of the section's network (`--containerd-chain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CriChain {
    /// bridge (isGateway, ipMasq) + host-local + portmap: a Kubernetes
    /// node's usual network.
    Bridge,
    /// ptp (ipMasq) + host-local + portmap: kindnet's (kind's default
    /// CNI), where each ADD waited for IPv6 DAD before #38.
    Ptp,
}

impl CriChain {
    /// Parses `bridge` or `ptp`.
    pub(crate) fn parse(s: &str) -> Option<CriChain> {
        match s {
            "bridge" => Some(CriChain::Bridge),
            "ptp" => Some(CriChain::Ptp),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            CriChain::Bridge => "bridge",
            CriChain::Ptp => "ptp",
        }
    }
}

/// The dual-stack conflist of `chain`.
fn conflist_of(chain: CriChain, tag: &str, ipam: &Path) -> String {
    let ipam = serde_json::json!({"type": "host-local", "dataDir": ipam,
        "ranges": [[{"subnet": "10.252.0.0/16"}], [{"subnet": "fd00:252::/64"}]],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]});
    let main = match chain {
        CriChain::Bridge => serde_json::json!({"type": "bridge", "bridge": format!("cc{tag}"),
            "isGateway": true, "ipMasq": true, "ipam": ipam}),
        CriChain::Ptp => serde_json::json!({"type": "ptp", "ipMasq": true, "ipam": ipam}),
    };
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": format!("bench-cri-{tag}"),
        "plugins": [main, {"type": "portmap", "capabilities": {"portMappings": true}}]
    })
    .to_string()
}

/// A CRI client per worker, made once and handed back after each call.
pub(crate) struct Clients<'a> {
    ctd: &'a Containerd,
    idle: Mutex<Vec<RuntimeClient>>,
}

impl<'a> Clients<'a> {
    pub(crate) fn new(ctd: &'a Containerd) -> Clients<'a> {
        Clients {
            ctd,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut RuntimeClient) -> Fallible<T>) -> Fallible<T> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut client = match idle {
            Some(c) => c,
            None => self.ctd.client().map_err(|e| e.to_string())?,
        };
        let r = f(&mut client);
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(client);
        r
    }
}

/// Runs one sandbox `i` with host port `30000 + i`; returns its id and
/// addresses.
pub(crate) fn run_sandbox(
    ctd: &Containerd,
    cri: &mut RuntimeClient,
    i: usize,
) -> Fallible<(String, Vec<String>)> {
    let mut config = ctd.pod_config(&format!("bench-{i}"));
    config.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 80,
        host_port: 30000 + i as i32,
        host_ip: "127.0.0.1".into(),
    }];
    let id = ctd
        .run_pod_sandbox(cri, config)
        .map_err(|e| e.to_string())?;
    let ips = cri
        .pod_sandbox_status(&id, false)
        .map_err(|e| e.to_string())?
        .ips()
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok((id, ips))
}

fn timed<T>(f: impl FnOnce() -> Fallible<T>) -> Fallible<(T, f64)> {
    let t = Instant::now();
    let r = f()?;
    Ok((r, t.elapsed().as_secs_f64()))
}

fn run_side(
    chain: CriChain,
    plugins: &Path,
    n: usize,
    burst: usize,
    in_flight: usize,
) -> Fallible<Side> {
    // containerd passes its environment on to the plugins: none of the
    // other modes' settings.
    set_mode_env(Mode::OursExec);
    let scratch = Scratch::new()?;
    let conf_dir = scratch.state.join("conf");
    let ipam = scratch.state.join("ipam");
    std::fs::create_dir_all(&conf_dir).map_err(|e| e.to_string())?;
    let ctd = Containerd::start(
        ContainerdOptions::new(plugins, &conf_dir)
            .netns(scratch.node.path())
            .timeout(Duration::from_secs(120)),
    )
    .map_err(|e| format!("containerd: {e}"))?;
    let list = conflist_of(chain, &scratch.tag, &ipam);
    // In place: containerd 1.6 does not see a file moved in.
    std::fs::write(conf_dir.join("10-bench.conflist"), &list).map_err(|e| e.to_string())?;
    let mut cri = ctd.client().map_err(|e| e.to_string())?;
    ctd.wait_network_ready(&mut cri, Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    let stop_remove = |cri: &mut RuntimeClient, id: &str| -> Fallible<(f64, f64)> {
        let ((), stop) = timed(|| cri.stop_pod_sandbox(id).map_err(|e| e.to_string()))?;
        let ((), remove) = timed(|| cri.remove_pod_sandbox(id).map_err(|e| e.to_string()))?;
        Ok((stop, remove))
    };
    // Warm-up: the bridge, the firewall tables, containerd's caches.
    let (warm, _) = run_sandbox(&ctd, &mut cri, 0)?;
    stop_remove(&mut cri, &warm)?;
    let (mut run, mut stop, mut remove) =
        (Samples::default(), Samples::default(), Samples::default());
    for i in 1..=n {
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("interrupted (everything created was removed)".into());
        }
        let ((id, _), r) = timed(|| run_sandbox(&ctd, &mut cri, i))?;
        run.0.push(r);
        let (s, rm) = stop_remove(&mut cri, &id)?;
        stop.0.push(s);
        remove.0.push(rm);
    }
    let clients = Clients::new(&ctd);
    let addresses = Mutex::new(Vec::new());
    let ids = Mutex::new(vec![String::new(); burst]);
    let burst_run = phase(
        burst,
        in_flight,
        |i| {
            let (id, ips) = clients.with(|cri| run_sandbox(&ctd, cri, 1000 + i))?;
            ids.lock().unwrap_or_else(|p| p.into_inner())[i] = id;
            Ok(ips)
        },
        &addresses,
    );
    let ids = ids.into_inner().unwrap_or_else(|p| p.into_inner());
    let burst_stop = phase(
        burst,
        in_flight,
        |i| {
            clients.with(|cri| stop_remove(cri, &ids[i]))?;
            Ok(Vec::new())
        },
        &Mutex::new(Vec::new()),
    );
    let addresses = addresses.into_inner().unwrap_or_else(|p| p.into_inner());
    let distinct: HashSet<&String> = addresses.iter().collect();
    if distinct.len() != addresses.len() {
        return Err(format!(
            "burst: {} duplicate addresses",
            addresses.len() - distinct.len()
        ));
    }
    if let Some(f) = burst_run.failures.iter().chain(&burst_stop.failures).next() {
        return Err(format!("burst: {f}"));
    }
    let leftovers = cri.list_pod_sandbox(None).map_err(|e| e.to_string())?;
    if !leftovers.is_empty() {
        return Err(format!(
            "{} sandboxes left after the burst",
            leftovers.len()
        ));
    }
    check_clean(&ipam, &format!("bench-cri-{}", scratch.tag))?;
    drop(clients);
    drop(ctd);
    Ok(Side {
        run,
        stop,
        remove,
        burst_run,
        burst_stop,
    })
}

/// The section: both sides, then the ratios.
pub(crate) fn report(
    ours: &Path,
    go: &Path,
    n: usize,
    chain: CriChain,
    smoke: bool,
) -> Fallible<()> {
    let (burst, in_flight) = if smoke { (3, 2) } else { (BURST, IN_FLIGHT) };
    let main = chain.name();
    println!(
        "\n## containerd (CRI): {n} sandboxes one at a time, then {burst} with {in_flight} in flight; \
         dual-stack {main} + host-local + portmap, one host port each"
    );
    let mut sides = Vec::new();
    for (who, dir) in [("ours", ours), ("go", go)] {
        if !dir.join(main).is_file() || !dir.join("loopback").is_file() {
            println!(
                "  {who}: skipped (no {main} or loopback in {})",
                dir.display()
            );
            continue;
        }
        let s = run_side(chain, dir, n, burst, in_flight)
            .map_err(|e| format!("containerd, {who}: {e}"))?;
        let row = |s: &Samples| {
            format!(
                "p50 {:7.1} ms  p99 {:7.1} ms",
                s.pct(50.0) * 1e3,
                s.pct(99.0) * 1e3
            )
        };
        println!("  {who:4} RunPodSandbox     {}", row(&s.run));
        println!("  {who:4} StopPodSandbox    {}", row(&s.stop));
        println!("  {who:4} RemovePodSandbox  {}", row(&s.remove));
        println!("  {who:4} burst run          {}", s.burst_run.row(burst));
        println!("  {who:4} burst stop+remove  {}", s.burst_stop.row(burst));
        sides.push((who, s));
    }
    if let [(_, o), (_, g)] = sides.as_slice() {
        println!(
            "  Go/ours: RunPodSandbox p50 {:.2}x, StopPodSandbox p50 {:.2}x, burst run wall {:.2}x, burst stop+remove wall {:.2}x",
            g.run.pct(50.0) / o.run.pct(50.0),
            g.stop.pct(50.0) / o.stop.pct(50.0),
            g.burst_run.wall.as_secs_f64() / o.burst_run.wall.as_secs_f64(),
            g.burst_stop.wall.as_secs_f64() / o.burst_stop.wall.as_secs_f64(),
        );
    }
    Ok(())
}
