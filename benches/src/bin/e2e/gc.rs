//! Bulk GC: N pods ADDed (bridge with `ipMasq` and `macspoofchk`, host-local,
//! portmap; cniVersion 1.1.0), their namespaces removed (the pods died
//! without a DEL), then one CNI GC with no valid attachment: bridge
//! collects the masquerade and MAC spoof check elements and host-local's
//! reservations, portmap the port mappings. Ours only: the Go plugins of
//! Debian 12 (1.1.1) predate GC.

use std::path::Path;
use std::time::{Duration, Instant};

use cni_exec::CniConfig;
use cni_firewall::{Firewall, NativeFirewall, RuleKind};
use cni_netns::OwnedNetns;
use cni_types::NetworkConfigList;

use super::{check_clean, make_exec, runtime_conf, set_mode_env, Fallible, Mode, BENCH};
use super::{Scratch, INTERRUPTED};

/// The GC's figures.
pub(crate) struct GcReport {
    /// The attachments' ADD, for reference.
    pub(crate) add_total: Duration,
    /// One GC of every attachment (both plugins exec'd).
    pub(crate) gc: Duration,
    /// Of which bridge's (masquerade, MAC spoof check, host-local).
    pub(crate) bridge: Duration,
}

/// The benchmark's network at cniVersion 1.1.0 (GC), with bridge's MAC
/// spoof check on.
fn gc_conflist(tag: &str, state: &Path) -> Fallible<NetworkConfigList> {
    let mut v = BENCH.conflist_json(tag, state);
    v["cniVersion"] = "1.1.0".into();
    v["plugins"][0]["macspoofchk"] = true.into();
    NetworkConfigList::from_slice(v.to_string().as_bytes()).map_err(|e| e.to_string())
}

/// GC of `n` dead attachments, ours exec'd.
pub(crate) fn run(dir: &Path, n: usize) -> Fallible<GcReport> {
    let mode = Mode::OursExec;
    set_mode_env(mode);
    let scratch = Scratch::new()?;
    let (tag, state, node) = (&scratch.tag, &scratch.state, &scratch.node);
    let list = gc_conflist(tag, state)?;
    let cni =
        CniConfig::new(vec![dir.to_path_buf()], make_exec(mode)?).with_cache_dir(state.join("c1"));
    let mut pods = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("interrupted".into());
        }
        let pod = OwnedNetns::new("cnibench-pod").map_err(|e| e.to_string())?;
        node.netns()
            .run(|| cni.add_network_list(&list, &runtime_conf(i, &pod)))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("ADD pod {i}: {e}"))?;
        pods.push(pod);
    }
    let add_total = start.elapsed();
    // The pods die: their namespaces (and veths) go, nothing is DELed.
    drop(pods);
    // A runtime that lost its cache: GC has only the plugins to ask.
    let gc_cni =
        CniConfig::new(vec![dir.to_path_buf()], make_exec(mode)?).with_cache_dir(state.join("c2"));
    // The list's GC runs its plugins one after the other: timed apart
    // (the same list cut to each plugin).
    let mut bridge_only = list.clone();
    bridge_only.plugins.truncate(1);
    let mut portmap_only = list.clone();
    portmap_only.plugins.remove(0);
    let timed_gc = |l: &NetworkConfigList| -> Fallible<Duration> {
        let t = Instant::now();
        node.netns()
            .run(|| gc_cni.gc_network_list(l, Some(&[])))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("GC: {e}"))?;
        Ok(t.elapsed())
    };
    let bridge = timed_gc(&bridge_only)?;
    let gc = bridge + timed_gc(&portmap_only)?;
    // Oracle: nothing of the network left in the tables or the store.
    let fw = NativeFirewall::in_netns(node.path());
    for kind in [
        RuleKind::Masquerade,
        RuleKind::PortMapping,
        RuleKind::MacSpoofCheck,
    ] {
        let left = fw.list(kind).map_err(|e| e.to_string())?;
        if !left.is_empty() {
            return Err(format!("GC left {} owners of {kind}", left.len()));
        }
    }
    check_clean(&state.join("ipam"), &list.name)?;
    Ok(GcReport {
        add_total,
        gc,
        bridge,
    })
}
