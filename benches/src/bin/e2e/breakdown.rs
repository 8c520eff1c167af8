//! `--breakdown N` (#38 item 3): where the time of our ADD and DEL goes,
//! beside the cell's kernel floor, for each cell of the matrix
//! (`--families`, `--chains` as `--matrix`). Per cell, in one run:
//!
//! 1. ours exec'd, nothing traced: ADD and DEL p50 (the figure);
//! 2. ours exec'd again, every span exported to a decoding OTLP receiver
//!    (`cni_trace::receiver`) in the node namespace: the plugins' own spans
//!    (the `cni <COMMAND>` server span of each plugin process, its step
//!    spans, the `cni.exec` client span around a delegate) taken apart per
//!    pod into self times by kind:
//!    * **kernel**: the step spans of kernel requests (`netns.enter`,
//!      `link.*`, `address.add`, `route.add`, `sysctl.write`, `dad.settle`,
//!      `firewall.*`, `portmap.apply`, `tc.apply`, `tuning.link`);
//!    * **IPAM files**: `ipam.lock` (host-local's directory lock) and
//!      `ipam.store` (its reservation and index files, written atomically
//!      and synced);
//!    * **plugin code**: the rest of each plugin's server span (config and
//!      result JSON, logging set-up, the plugin's logic, and any kernel
//!      request without a step span of its own, such as link lookups);
//!    * **delegate exec**: a `cni.exec` span minus the delegate's own server
//!      span (a delegate run as a process: its start and exit);
//! 3. the cell's kernel floor (`floor.rs`, same pods).
//!
//! What no span covers, the untraced p50 minus the median of the plugins'
//! top-level server spans, is **processes + runtime**: each top-level
//! plugin's fork/exec, dynamic loading, runtime start, stdin read and
//! exit, and our invoker's own work between them (the per-pod median of a
//! sum is not the sum of medians, so the columns add up to the p50 only
//! roughly). Where a plugin runs steps at the same time (bridge's IPAM
//! beside its link set-up, the masquerade commit beside the pod's
//! addresses, DEL's link deletion beside the firewall), the self times of
//! those steps are all counted: kernel + IPAM files + plugin code can exceed
//! the plugins' server spans. Under each table, the eight largest self
//! times by span name (a server span as `cni ADD [plugin]`), and for ADD the
//! floor's own steps. The traced run's export (after each reply) is in none of the
//! columns: the export happens outside the server span, and the wall
//! figure comes from the untraced run.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use cni_netns::Netns;
use cni_testkit::matrix::{MatrixCell, PluginChain};
use cni_trace::proto::{Span, SpanKind, Value};
use cni_trace::receiver::Receiver;

use super::floor;
use super::{run_mode, Fallible, Mode};

/// The span id of the fixed `TRACEPARENT` the traced run sets
/// (`tracing::set_env`): the top-level plugins' server spans' parent.
const PARENT: [u8; 8] = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];

/// One pod's ADD or DEL, taken apart (seconds).
#[derive(Default, Clone, Copy)]
struct Parts {
    kernel: f64,
    files: f64,
    code: f64,
    delegate_exec: f64,
    /// The top-level plugins' server spans, summed.
    top: f64,
    /// Plugin server spans (processes, or in-process delegates).
    calls: usize,
}

/// A pod's ADD or DEL: its parts, and the self time of each span name
/// (a server span's name with its plugin: `cni ADD [bridge]`).
#[derive(Default, Clone)]
struct Pod {
    parts: Parts,
    by_name: BTreeMap<String, f64>,
}

/// A decoding OTLP receiver on the loopback of `node` (brought up first).
pub(crate) fn receiver_in(node: &Netns) -> Fallible<Receiver> {
    node.run(|| -> Fallible<Receiver> {
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .map_err(|e| format!("ip link set lo up: {e}"))?;
        if !up.success() {
            return Err("ip link set lo up failed".into());
        }
        Receiver::start().map_err(|e| format!("OTLP receiver: {e}"))
    })
    .map_err(|e| e.to_string())?
}

/// The port of a receiver's `http://127.0.0.1:<port>` endpoint.
pub(crate) fn port_of(r: &Receiver) -> Fallible<u16> {
    let e = r.endpoint();
    e.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or(format!("OTLP receiver endpoint {e:?} has no port"))
}

fn text<'a>(s: &'a Span, key: &str) -> Option<&'a str> {
    match s.attribute(key) {
        Some(Value::Str(v)) => Some(v.as_str()),
        _ => None,
    }
}

fn seconds(s: &Span) -> f64 {
    s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano) as f64 / 1e9
}

fn is_kernel(name: &str) -> bool {
    const KERNEL: [&str; 10] = [
        "netns.",
        "link.",
        "address.",
        "route.",
        "sysctl.",
        "dad.",
        "firewall.",
        "portmap.",
        "tc.",
        "tuning.",
    ];
    KERNEL.iter().any(|p| name.starts_with(p))
}

/// The top-level server span `s` belongs to (itself, or an ancestor whose
/// parent is [`PARENT`]).
fn top_of<'a>(mut s: &'a Span, by_id: &HashMap<[u8; 8], &'a Span>) -> Option<&'a Span> {
    for _ in 0..64 {
        match s.parent_span_id {
            Some(p) if p == PARENT => return Some(s),
            Some(p) => s = by_id.get(&p)?,
            None => return None,
        }
    }
    None
}

/// Each pod's ADD and DEL (keyed by command and container id) from the
/// spans of one traced run.
fn take_apart(spans: &[Span]) -> BTreeMap<(String, String), Pod> {
    let by_id: HashMap<[u8; 8], &Span> = spans.iter().map(|s| (s.span_id, s)).collect();
    let mut children: HashMap<[u8; 8], f64> = HashMap::new();
    for s in spans {
        if let Some(p) = s.parent_span_id {
            *children.entry(p).or_default() += seconds(s);
        }
    }
    let mut out: BTreeMap<(String, String), Pod> = BTreeMap::new();
    for s in spans {
        let Some(t) = top_of(s, &by_id) else {
            continue;
        };
        let key = (
            text(t, "cni.command").unwrap_or("?").to_string(),
            text(t, "cni.container.id").unwrap_or("?").to_string(),
        );
        let pod = out.entry(key).or_default();
        let own = (seconds(s) - children.get(&s.span_id).copied().unwrap_or(0.0)).max(0.0);
        let server = s.kind == SpanKind::Server && s.name.starts_with("cni ");
        let name = match text(s, "cni.plugin").filter(|_| server) {
            Some(plugin) => format!("{} [{plugin}]", s.name),
            None => s.name.clone(),
        };
        *pod.by_name.entry(name).or_default() += own;
        let parts = &mut pod.parts;
        if server {
            parts.calls += 1;
            if std::ptr::eq(s, t) {
                parts.top += seconds(s);
            }
        }
        if server {
            parts.code += own;
        } else if s.kind == SpanKind::Client && s.name.starts_with("cni.exec ") {
            parts.delegate_exec += own;
        } else if s.name == "ipam.lock" || s.name == "ipam.store" {
            parts.files += own;
        } else if is_kernel(&s.name) {
            parts.kernel += own;
        } else {
            parts.code += own;
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The section: one table for ADD, one for DEL.
pub(crate) fn run(ours: &Path, pods: usize, cells: &[MatrixCell]) -> Fallible<()> {
    let mut rows: Vec<(MatrixCell, [String; 2], [String; 2])> = Vec::new();
    for &cell in cells {
        if let Some(why) = cell.chain.kernel_lacks().map_err(|e| e.to_string())? {
            eprintln!("# breakdown {}: skipped ({why})", cell.name());
            continue;
        }
        let plain = run_mode(Mode::OursExec, ours, cell, pods, false, true)?;
        let traced = run_mode(Mode::OursSpans, ours, cell, pods, false, true)?;
        let floor = floor::run_cell(cell, pods, true, false)?;
        let parts = take_apart(&traced.spans);
        let mut row = [String::new(), String::new()];
        let mut steps = [String::new(), String::new()];
        for (k, (cmd, wall, floor)) in [
            ("ADD", plain.seq.add.pct(50.0), floor.add.pct(50.0)),
            ("DEL", plain.seq.del.pct(50.0), floor.del.pct(50.0)),
        ]
        .into_iter()
        .enumerate()
        {
            let pods_of: Vec<&Pod> = parts
                .iter()
                .filter(|((c, id), _)| c == cmd && id.starts_with("bench-"))
                .map(|(_, p)| p)
                .collect();
            let of: Vec<&Parts> = pods_of.iter().map(|p| &p.parts).collect();
            if of.len() < pods {
                return Err(format!(
                    "breakdown {}: spans of {} of {pods} {cmd}s received",
                    cell.name(),
                    of.len()
                ));
            }
            let m = |f: fn(&Parts) -> f64| median(of.iter().map(|p| f(p)).collect()) * 1e3;
            let top = m(|p| p.top);
            let calls = median(of.iter().map(|p| p.calls as f64).collect());
            let names: std::collections::BTreeSet<&String> =
                pods_of.iter().flat_map(|p| p.by_name.keys()).collect();
            let mut named: Vec<(f64, &String)> = names
                .into_iter()
                .map(|n| {
                    let v = pods_of
                        .iter()
                        .map(|p| p.by_name.get(n).copied().unwrap_or(0.0))
                        .collect();
                    (median(v) * 1e3, n)
                })
                .collect();
            named.sort_by(|a, b| b.0.total_cmp(&a.0));
            steps[k] = named
                .iter()
                .take(8)
                .map(|(v, n)| format!("{n} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ");
            row[k] = format!(
                "| {} | {} | {:.2} | {:.2} | {:.1}x | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                cell.stack.label(),
                cell.chain.label(),
                wall * 1e3,
                floor * 1e3,
                wall / floor,
                m(|p| p.kernel),
                m(|p| p.files),
                m(|p| p.code),
                m(|p| p.delegate_exec),
                wall * 1e3 - top,
                calls,
            );
        }
        let floor_steps = floor
            .steps
            .iter()
            .map(|(n, v)| format!("{n} {:.2}", v.pct(50.0) * 1e3))
            .collect::<Vec<_>>()
            .join(", ");
        steps[0] = format!("{}\n  floor: {floor_steps}", steps[0]);
        eprintln!("# breakdown {}: done", cell.name());
        rows.push((cell, row, steps));
    }
    for (k, cmd) in ["ADD", "DEL"].into_iter().enumerate() {
        println!("\n## breakdown: {cmd}, p50 (ms), {pods} pods per cell, one at a time");
        println!(
            "| family | chain | ours {cmd} | floor {cmd} | ours/floor | kernel (spans) | IPAM files | plugin code | delegate exec | processes + runtime | plugin calls |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for (_, row, _) in &rows {
            println!("{}", row[k]);
        }
        println!("\nself time by span, median per pod (ms; the 8 largest), {cmd}:");
        for (cell, _, steps) in &rows {
            println!("- {}: {}", cell.name(), steps[k]);
        }
    }
    Ok(())
}

/// The chains the section runs by default: those of the targets.
pub(crate) const DEFAULT_CHAINS: [PluginChain; 5] = [
    PluginChain::Bridge,
    PluginChain::BridgeTuned,
    PluginChain::Ptp,
    PluginChain::Macvlan,
    PluginChain::Flannel,
];

#[cfg(test)]
mod tests {
    use super::*;
    use cni_trace::proto::{KeyValue, Status};

    fn span(id: u8, parent: Option<[u8; 8]>, name: &str, kind: SpanKind, ms: u64) -> Span {
        Span {
            trace_id: [1; 16],
            span_id: [id; 8],
            trace_state: String::new(),
            parent_span_id: parent,
            name: name.into(),
            kind,
            start_time_unix_nano: 1_000_000_000,
            end_time_unix_nano: 1_000_000_000 + ms * 1_000_000,
            attributes: Vec::new(),
            events: Vec::new(),
            status: Status::default(),
        }
    }

    #[test]
    fn self_times_by_kind() {
        let mut bridge = span(1, Some(PARENT), "cni ADD", SpanKind::Server, 10);
        for (k, v) in [("cni.command", "ADD"), ("cni.container.id", "bench-00001")] {
            bridge.attributes.push(KeyValue {
                key: k.into(),
                value: Value::Str(v.into()),
            });
        }
        let spans = vec![
            bridge,
            span(2, Some([1; 8]), "link.create", SpanKind::Internal, 3),
            span(3, Some([1; 8]), "ipam", SpanKind::Internal, 4),
            span(4, Some([3; 8]), "cni.exec host-local", SpanKind::Client, 3),
            span(5, Some([4; 8]), "cni ADD", SpanKind::Server, 2),
            span(6, Some([5; 8]), "ipam.store", SpanKind::Internal, 1),
            // Another trace's span: ignored.
            span(7, Some([9; 8]), "link.create", SpanKind::Internal, 5),
        ];
        let parts = take_apart(&spans);
        let pod = &parts[&("ADD".to_string(), "bench-00001".to_string())];
        let p = pod.parts;
        assert!((pod.by_name["cni ADD"] - 0.004).abs() < 1e-9);
        assert!((pod.by_name["link.create"] - 0.003).abs() < 1e-9);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(p.kernel, 0.003));
        assert!(close(p.files, 0.001));
        // bridge's own 3 ms, ipam's 1 ms, host-local's own 1 ms.
        assert!(close(p.code, 0.005), "{}", p.code);
        assert!(close(p.delegate_exec, 0.001));
        assert!(close(p.top, 0.010));
        assert_eq!(p.calls, 2);
        assert_eq!(parts.len(), 1);
    }
}
