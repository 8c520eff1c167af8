//! `--cni-gc LIVE,LEAKED`: one `cni-gc` pass on a node of a real
//! containerd (the `--containerd` section's fixture and network: dual-stack
//! bridge with masquerade + host-local + portmap, one host port per
//! sandbox, cniVersion 1.0.0, ours) holding LIVE running sandboxes and
//! LEAKED ones that containerd was made to forget
//! (`Containerd::forget_sandboxes`: their records gone, their network
//! left: cache files, reservations, veths, port mappings, masquerade
//! elements).
//!
//! Prints the pass's wall time as an operator sees it (the `cni-gc`
//! process: the CRI call, the cache scan and one DEL per leaked
//! attachment), what it reclaimed, counted on the node before and after
//! with `ip -j`, `nft -j` and host-local's files, and checks that the live
//! sandboxes' addresses, veths, host ports and cache files are exactly
//! what they were before the leaked sandboxes existed.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cni_testkit::containerd::{Containerd, ContainerdOptions, LIBCNI_CACHE};
use serde_json::Value;

use super::burst::phase;
use super::containerd::{conflist, run_sandbox, Clients};
use super::{set_mode_env, Fallible, Mode, Scratch};

/// Sandboxes started at once while the node is filled.
const IN_FLIGHT: usize = 4;

/// What the node holds of the network, counted with independent tools.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeState {
    /// host-local's reservation files.
    reservations: BTreeSet<String>,
    /// Links on the bridge (the veths' node ends).
    veths: BTreeSet<String>,
    /// Host ports in the port-mapping maps, among the sandboxes' ports.
    host_ports: BTreeSet<u16>,
    /// Elements of the masquerade source sets (one per pod address).
    masq: BTreeSet<String>,
    /// libcni cache files of the network.
    cache: BTreeSet<String>,
}

fn json(args: &[&str]) -> Fallible<Value> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{args:?}: {e}"))
}

fn node_state(scratch: &Scratch, net: &str, bridge: &str, ports: &[u16]) -> Fallible<NodeState> {
    let ns = scratch.node.name();
    let reservations = std::fs::read_dir(scratch.state.join("ipam").join(net))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
        .collect();
    let veths = json(&["ip", "-j", "-n", ns, "link", "show", "master", bridge])?
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
        .collect();
    let ruleset = json(&["ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset"])?;
    let sets: Vec<&Value> = ruleset["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("map").or_else(|| o.get("set")))
        .collect();
    let mut mapped = BTreeSet::new();
    for m in sets.iter().filter(|m| m["table"] == "cni_rs_hostport") {
        collect_numbers(&m["elem"], &mut mapped);
    }
    let host_ports = ports
        .iter()
        .copied()
        .filter(|p| mapped.contains(&u64::from(*p)))
        .collect();
    let masq = sets
        .iter()
        .filter(|m| {
            m["table"] == "cni_rs_masq"
                && m["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("masq_src"))
        })
        .flat_map(|m| m["elem"].as_array().cloned().unwrap_or_default())
        .map(|mut e| {
            // Elements count down their (ten-year) timeout.
            strip_expires(&mut e);
            e.to_string()
        })
        .collect();
    let prefix = format!("{net}-");
    let cache = std::fs::read_dir(LIBCNI_CACHE)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    Ok(NodeState {
        reservations,
        veths,
        host_ports,
        masq,
        cache,
    })
}

fn strip_expires(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("expires");
            o.values_mut().for_each(strip_expires);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_expires),
        _ => {}
    }
}

fn collect_numbers(v: &Value, out: &mut BTreeSet<u64>) {
    match v {
        Value::Number(n) => out.extend(n.as_u64()),
        Value::Array(a) => a.iter().for_each(|x| collect_numbers(x, out)),
        Value::Object(o) => o.values().for_each(|x| collect_numbers(x, out)),
        _ => {}
    }
}

/// Runs `n` sandboxes numbered from `first`, [`IN_FLIGHT`] at a time; their ids.
fn fill(ctd: &Containerd, first: usize, n: usize) -> Fallible<Vec<String>> {
    let clients = Clients::new(ctd);
    let ids = Mutex::new(vec![String::new(); n]);
    let run = phase(
        n,
        IN_FLIGHT,
        |i| {
            let (id, _) = clients.with(|cri| run_sandbox(ctd, cri, first + i))?;
            ids.lock().unwrap_or_else(|p| p.into_inner())[i] = id;
            Ok(Vec::new())
        },
        &Mutex::new(Vec::new()),
    );
    if let Some(f) = run.failures.first() {
        return Err(format!("RunPodSandbox: {f}"));
    }
    let ids = ids.into_inner().unwrap_or_else(|p| p.into_inner());
    if ids.iter().any(String::is_empty) {
        return Err("interrupted".into());
    }
    Ok(ids)
}

/// The section.
pub(crate) fn report(ours: &Path, live: usize, leaked: usize) -> Fallible<()> {
    println!(
        "\n## cni-gc: {live} live and {leaked} leaked sandboxes on containerd; dual-stack \
         bridge (ipMasq) + host-local + portmap, one host port each, cniVersion 1.0.0"
    );
    let cni_gc = ours.join("cni-gc");
    if !cni_gc.is_file() {
        return Err(format!(
            "{} is missing (cargo build -p cni-plugins)",
            cni_gc.display()
        ));
    }
    set_mode_env(Mode::OursExec);
    let scratch = Scratch::new()?;
    // containerd's streaming server listens on 127.0.0.1 (also when
    // forget_sandboxes starts it again).
    let node = cni_netns::Handle::in_netns(scratch.node.netns()).map_err(|e| e.to_string())?;
    node.link_by_name("lo")
        .and_then(|lo| node.set_up(lo.index))
        .map_err(|e| format!("set lo up in the node: {e}"))?;
    let conf_dir = scratch.state.join("conf");
    let ipam = scratch.state.join("ipam");
    std::fs::create_dir_all(&conf_dir).map_err(|e| e.to_string())?;
    let mut ctd = Containerd::start(
        ContainerdOptions::new(ours, &conf_dir)
            .netns(scratch.node.path())
            .timeout(Duration::from_secs(120)),
    )
    .map_err(|e| format!("containerd: {e}"))?;
    let net = format!("bench-cri-{}", scratch.tag);
    let bridge = format!("cc{}", scratch.tag);
    std::fs::write(
        conf_dir.join("10-bench.conflist"),
        conflist(&scratch.tag, &ipam),
    )
    .map_err(|e| e.to_string())?;
    let mut cri = ctd.client().map_err(|e| e.to_string())?;
    ctd.wait_network_ready(&mut cri, Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    // run_sandbox's host port is 30000 + its number.
    let ports: Vec<u16> = (0..live + leaked)
        .map(|i| 30000 + u16::try_from(i).unwrap_or(u16::MAX - 30000))
        .collect();
    let state = || node_state(&scratch, &net, &bridge, &ports);

    let t = Instant::now();
    let live_ids = fill(&ctd, 0, live)?;
    let before = state()?;
    let leaked_ids = fill(&ctd, live, leaked)?;
    let filled = t.elapsed();
    let t = Instant::now();
    ctd.forget_sandboxes(&leaked_ids)
        .map_err(|e| format!("forget the leaked sandboxes: {e}"))?;
    let forgotten = t.elapsed();
    let listed = cri.list_pod_sandbox(None).map_err(|e| e.to_string())?;
    if listed.len() != live {
        return Err(format!(
            "containerd lists {} sandboxes, not {live}",
            listed.len()
        ));
    }
    let leaking = state()?;
    println!(
        "  set-up: {} sandboxes run in {:.1} s ({IN_FLIGHT} in flight), {leaked} forgotten in {:.1} s",
        live + leaked,
        filled.as_secs_f64(),
        forgotten.as_secs_f64()
    );

    let mut cmd = Command::new(&cni_gc);
    cmd.arg("--cri-socket")
        .arg(ctd.socket())
        .arg("--conf-dir")
        .arg(&conf_dir)
        .args(["--cache-dir", "/var/lib/cni", "--min-age", "0s"])
        .arg("--bin-dir")
        .arg(ours);
    let t = Instant::now();
    let out = scratch
        .node
        .netns()
        .run(move || cmd.output())
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("run cni-gc: {e}"))?;
    let took = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default().to_string();
    let after = state()?;
    let gone = |f: fn(&NodeState) -> usize| f(&leaking) - f(&after).min(f(&leaking));
    println!(
        "  cni-gc pass: {:.3} s wall, exit {:?}: {summary}",
        took.as_secs_f64(),
        out.status.code()
    );
    println!(
        "  reclaimed: {} addresses, {} veths, {} host ports, {} masquerade elements, {} cache files \
         ({:.2} ms per leaked sandbox)",
        gone(|s| s.reservations.len()),
        gone(|s| s.veths.len()),
        gone(|s| s.host_ports.len()),
        gone(|s| s.masq.len()),
        gone(|s| s.cache.len()),
        took.as_secs_f64() * 1e3 / leaked.max(1) as f64
    );
    if !out.status.success() || after != before {
        return Err(format!(
            "the node is not what it was before the leak (exit {:?}):\n  before {before:?}\n  after  {after:?}\n{stdout}{}\ncontainerd's log ends:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr),
            ctd.log_tail(15)
        ));
    }
    let still: Vec<String> = cri
        .list_pod_sandbox(None)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|s| s.id)
        .collect();
    if still.len() != live || live_ids.iter().any(|id| !still.contains(id)) {
        return Err("a live sandbox is no longer listed".into());
    }
    println!(
        "  live, untouched: {live} sandboxes with {} addresses, {} veths, {} host ports, {} masquerade \
         elements, {} cache files: the same as before the leaked sandboxes existed",
        after.reservations.len(),
        after.veths.len(),
        after.host_ports.len(),
        after.masq.len(),
        after.cache.len()
    );
    drop(ctd);
    Ok(())
}
