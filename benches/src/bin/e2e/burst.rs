//! Bursts: N pods ADDed with K calls in flight (workers taking the next pod
//! as soon as they are free, as a kubelet after a node reboot), then DELed
//! the same way, after one untimed warm-up pod that creates the node's
//! bridge and tables. Failures are counted, not fatal, and the ADD results
//! are checked for duplicate addresses.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cni_testkit::matrix::MatrixCell;

use super::{check_clean, make_exec, pod_namespaces, runtime_conf, set_mode_env, Fallible, Mode};
use super::{Samples, Scratch, INTERRUPTED};

/// One direction (ADD or DEL) of a burst.
#[derive(Default)]
pub(crate) struct BurstPhase {
    pub(crate) lat: Samples,
    pub(crate) wall: Duration,
    pub(crate) failures: Vec<String>,
}

impl BurstPhase {
    pub(crate) fn pods_per_s(&self) -> f64 {
        self.lat.0.len() as f64 / self.wall.as_secs_f64()
    }

    pub(crate) fn row(&self, n: usize) -> String {
        format!(
            "wall {:6.2} s  {:7.1} pods/s  p50 {:7.2} ms  p99 {:7.2} ms  (p99/p50 {:.1})  failures {}/{n}",
            self.wall.as_secs_f64(),
            self.pods_per_s(),
            self.lat.pct(50.0) * 1e3,
            self.lat.pct(99.0) * 1e3,
            self.lat.pct(99.0) / self.lat.pct(50.0),
            self.failures.len()
        )
    }
}

/// A burst's figures.
pub(crate) struct BurstReport {
    pub(crate) add: BurstPhase,
    pub(crate) del: BurstPhase,
    /// Addresses handed to more than one pod.
    pub(crate) duplicates: Vec<String>,
    /// A reservation left after every DEL (`check_clean`'s complaint).
    pub(crate) unclean: Option<String>,
}

impl BurstReport {
    /// Whether the burst went as it must for ours: no failure, no
    /// duplicate address, no reservation left.
    pub(crate) fn verdict(&self) -> Fallible<()> {
        let failed = !self.add.failures.is_empty() || !self.del.failures.is_empty();
        if failed || !self.duplicates.is_empty() {
            return Err(format!(
                "{} ADD and {} DEL failures, {} duplicate addresses{}",
                self.add.failures.len(),
                self.del.failures.len(),
                self.duplicates.len(),
                self.add
                    .failures
                    .iter()
                    .chain(&self.del.failures)
                    .next()
                    .map(|f| format!(" (first: {f})"))
                    .unwrap_or_default()
            ));
        }
        self.unclean.clone().map_or(Ok(()), Err)
    }
}

/// Runs `op` for every pod with `inflight` workers.
pub(crate) fn phase(
    n: usize,
    inflight: usize,
    op: impl Fn(usize) -> Result<Vec<String>, String> + Sync,
    addresses: &Mutex<Vec<String>>,
) -> BurstPhase {
    let next = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..inflight {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n || INTERRUPTED.load(Ordering::SeqCst) {
                    return;
                }
                let t = Instant::now();
                let r = op(i);
                let took = t.elapsed().as_secs_f64();
                match r {
                    Ok(ips) => {
                        lat.lock().unwrap_or_else(|p| p.into_inner()).push(took);
                        addresses
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .extend(ips);
                    }
                    Err(e) => failures.lock().unwrap_or_else(|p| p.into_inner()).push(e),
                }
            });
        }
    });
    BurstPhase {
        lat: Samples(lat.into_inner().unwrap_or_else(|p| p.into_inner())),
        wall: start.elapsed(),
        failures: failures.into_inner().unwrap_or_else(|p| p.into_inner()),
    }
}

/// A burst of `n` pods of `net` with `inflight` in flight, in a fresh node
/// namespace.
pub(crate) fn run(
    mode: Mode,
    dir: &Path,
    net: MatrixCell,
    n: usize,
    inflight: usize,
) -> Fallible<BurstReport> {
    let exec = make_exec(mode)?;
    set_mode_env(mode);
    let scratch = Scratch::new()?;
    let node = &scratch.node;
    let list = scratch.network(net)?;
    let cni = scratch.runtime(dir, exec);
    // One more pod than the burst: the warm-up (below).
    let pods = pod_namespaces(n + 1)?;
    let addresses = Mutex::new(Vec::new());
    let none = Mutex::new(Vec::new());
    let (add, del) = node
        .netns()
        .run(|| {
            // A warm-up pod, untimed: it creates the bridge and the nftables
            // tables, so the burst measures pods on a node that has its
            // network (the first pods of a cold node all race to create the
            // same shared objects, which is no lock of ours convoying).
            cni.add_network_list(&list, &runtime_conf(n, &pods[n]))
                .map_err(|e| format!("warm-up ADD: {e}"))?;
            let add = phase(
                n,
                inflight,
                |i| {
                    let r = cni
                        .add_network_list(&list, &runtime_conf(i, &pods[i]))
                        .map_err(|e| format!("ADD pod {i}: {e}"))?;
                    Ok(r.result
                        .ips
                        .iter()
                        .map(|ip| ip.address.ip().to_string())
                        .collect())
                },
                &addresses,
            );
            let del = phase(
                n,
                inflight,
                |i| {
                    cni.del_network_list(&list, &runtime_conf(i, &pods[i]))
                        .map(|()| Vec::new())
                        .map_err(|e| format!("DEL pod {i}: {e}"))
                },
                &none,
            );
            cni.del_network_list(&list, &runtime_conf(n, &pods[n]))
                .map_err(|e| format!("warm-up DEL: {e}"))?;
            Ok::<_, String>((add, del))
        })
        .map_err(|e| e.to_string())??;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for a in addresses.into_inner().unwrap_or_else(|p| p.into_inner()) {
        *seen.entry(a).or_default() += 1;
    }
    let mut duplicates: Vec<String> = seen
        .into_iter()
        .filter(|(_, c)| *c > 1)
        .map(|(a, c)| format!("{a} x{c}"))
        .collect();
    duplicates.sort();
    Ok(BurstReport {
        add,
        del,
        duplicates,
        unclean: check_clean(&scratch.state.join("ipam"), &list.name).err(),
    })
}
