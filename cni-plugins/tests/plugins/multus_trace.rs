//! Multus in the runtime's trace: the thin plugin, and the shim with the
//! daemon, each run with a caller's `TRACEPARENT` and the `OTEL_*`
//! variables pointing at an OTLP/HTTP receiver that decodes with the
//! official `opentelemetry-proto` package (`cni_testkit::otlp`). Two
//! delegates (the cluster network and one more), our bridge: multus's
//! `cni ADD` is the caller's child, one `multus.delegate` span per
//! delegate under it, and each delegate's own `cni ADD` (bridge, run by
//! multus's same-build executor in its own process) under the
//! `cni.exec bridge` span of that delegate call.

use std::path::Path;
use std::time::Duration;

use cni_testkit::multus_node::{BridgeNad, Call, MultusNode};
use cni_testkit::otlp::{self, Mode, Receiver};
use serde_json::{json, Value};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

struct Setup {
    node: MultusNode,
    rx: Receiver,
    bins: tempfile::TempDir,
}

fn setup(prefix: &str) -> Option<Setup> {
    if !cni_testkit::premise::require_root() || !otlp::require() {
        return None;
    }
    let mut node = MultusNode::start(
        prefix,
        &[
            BridgeNad::new("kube-system", "cluster", "mtcl0", "10.231.0.0/24"),
            BridgeNad::new("ns1", "net-a", "mta0", "10.232.0.0/24"),
        ],
    )
    .unwrap();
    // The receiver listens in the node namespace, where the plugins run.
    let rx = node
        .node
        .netns()
        .run(|| Receiver::start(Mode::Normal))
        .unwrap()
        .unwrap();
    node.env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), rx.endpoint()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT".into(), "1000".into()),
        ("TRACEPARENT".into(), format!("00-{TRACE}-{CALLER_SPAN}-01")),
    ];
    // Our bridge and host-local as the delegates.
    let bins = tempfile::tempdir().unwrap();
    for (name, bin) in [
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("host-local", env!("CARGO_BIN_EXE_host-local")),
    ] {
        std::os::unix::fs::symlink(bin, bins.path().join(name)).unwrap();
    }
    node.server.add_pod(
        "ns1",
        "tp",
        "uid-tp",
        &[("k8s.v1.cni.cncf.io/networks", "net-a")],
    );
    Some(Setup { node, rx, bins })
}

/// One line a span: service, name, id, parent.
fn summary(spans: &[Value]) -> String {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} {} {} <- {}\n",
                s["service_name"], s["name"], s["span_id"], s["parent_span_id"]
            )
        })
        .collect()
}

/// Every span in the caller's trace.
fn one_trace(spans: &[Value]) {
    for s in spans {
        assert_eq!(s["trace_id"], TRACE, "one trace: {}", summary(spans));
    }
}

fn with_bins(mut conf: Value, bins: &Path) -> Value {
    conf["binDir"] = json!(bins);
    conf
}

fn find<'a>(spans: &'a [Value], pred: impl Fn(&Value) -> bool, what: &str) -> Vec<&'a Value> {
    let found: Vec<&Value> = spans.iter().filter(|s| pred(s)).collect();
    assert!(!found.is_empty(), "no {what} in {spans:#?}");
    found
}

/// The tree under `root` (multus's call, or the daemon's request): one
/// `multus.delegate` per delegate, each with bridge's `cni ADD` under its
/// `cni.exec bridge`.
fn check_tree(spans: &[Value], root: &Value) {
    let delegates = find(
        spans,
        |s| s["name"] == "multus.delegate" && s["parent_span_id"] == root["span_id"],
        "multus.delegate under multus's call",
    );
    let mut nets: Vec<&str> = delegates
        .iter()
        .map(|d| d["attributes"]["cni.network.name"].as_str().unwrap_or(""))
        .collect();
    nets.sort();
    assert_eq!(nets.len(), 2, "{delegates:#?}");
    for d in delegates {
        let under = |s: &Value, ancestor: &Value| {
            let mut at = s.clone();
            for _ in 0..16 {
                if at["parent_span_id"] == ancestor["span_id"] {
                    return true;
                }
                match spans.iter().find(|p| p["span_id"] == at["parent_span_id"]) {
                    Some(p) => at = p.clone(),
                    None => return false,
                }
            }
            false
        };
        let exec = spans
            .iter()
            .find(|s| s["name"] == "cni.exec bridge" && under(s, d))
            .unwrap_or_else(|| panic!("cni.exec bridge under {d:#}: {spans:#?}"));
        let call = spans
            .iter()
            .find(|s| {
                s["name"] == "cni ADD"
                    && s["attributes"]["cni.plugin"] == "bridge"
                    && s["parent_span_id"] == exec["span_id"]
            })
            .unwrap_or_else(|| panic!("bridge's cni ADD under {exec:#}: {spans:#?}"));
        assert_eq!(call["kind"], "SPAN_KIND_SERVER");
    }
}

#[test]
fn thin_multus_delegates_under_its_call() {
    let Some(s) = setup("mtt") else { return };
    let conf = with_bins(s.node.thin_conf(), s.bins.path());
    let call = |command| Call {
        command,
        cid: "trace-thin",
        pod: "tp",
        ifname: "eth0",
        netns: s.node.pod_path(),
    };
    let add = s
        .node
        .run(Path::new(env!("CARGO_BIN_EXE_multus")), &conf, call("ADD"))
        .unwrap();
    assert!(add.success, "{add:?}");
    // multus's call, 2 delegates, 2 exec spans, 2 bridge calls at least.
    let spans = s.rx.wait_spans(7, Duration::from_secs(10));
    one_trace(&spans);
    let root = spans
        .iter()
        .find(|x| x["name"] == "cni ADD" && x["parent_span_id"] == CALLER_SPAN)
        .unwrap_or_else(|| panic!("multus's call under the caller: {}", summary(&spans)));
    assert_eq!(root["attributes"]["cni.plugin"], "multus");
    check_tree(&spans, root);
    let del = s
        .node
        .run(Path::new(env!("CARGO_BIN_EXE_multus")), &conf, call("DEL"))
        .unwrap();
    assert!(del.success, "{del:?}");
}

#[test]
fn shim_and_daemon_delegates_under_the_request() {
    let Some(s) = setup("mtd") else { return };
    let daemon_conf = with_bins(s.node.daemon_config(), s.bins.path());
    let socket = s.node.socket_dir().join("multus.sock");
    let _daemon = s
        .node
        .start_daemon(
            Path::new(env!("CARGO_BIN_EXE_multus-daemon")),
            &daemon_conf,
            &socket,
        )
        .unwrap();
    let call = |command| Call {
        command,
        cid: "trace-thick",
        pod: "tp",
        ifname: "eth0",
        netns: s.node.pod_path(),
    };
    let shim = Path::new(env!("CARGO_BIN_EXE_multus-shim"));
    let add = s.node.run(shim, &s.node.shim_conf(), call("ADD")).unwrap();
    assert!(add.success, "{add:?}");
    // The daemon exports its request's spans after it answered the shim,
    // so they may come after the shim's and the delegates': wait for the
    // request span and its delegates' exec spans themselves.
    let daemon = |x: &Value, name: &str| x["service_name"] == "multus-daemon" && x["name"] == name;
    let spans = s.rx.wait_until(
        |spans| {
            spans.iter().any(|x| daemon(x, "cni ADD"))
                && spans.iter().any(|x| daemon(x, "cni.exec bridge"))
                && spans.len() >= 8
        },
        Duration::from_secs(10),
    );
    // The shim's call is the caller's child; the daemon's request span is
    // the shim's child (the context went with the request).
    let shim_call = spans
        .iter()
        .find(|x| x["name"] == "cni ADD" && x["service_name"] == "multus-shim")
        .unwrap_or_else(|| panic!("{}", summary(&spans)));
    assert_eq!(
        shim_call["parent_span_id"],
        CALLER_SPAN,
        "{}",
        summary(&spans)
    );
    let request = spans
        .iter()
        .find(|x| x["name"] == "cni ADD" && x["service_name"] == "multus-daemon")
        .unwrap_or_else(|| panic!("{}", summary(&spans)));
    assert_eq!(
        request["parent_span_id"],
        shim_call["span_id"],
        "{}",
        summary(&spans)
    );
    let in_trace: Vec<Value> = spans
        .iter()
        .filter(|x| x["trace_id"] == TRACE)
        .cloned()
        .collect();
    check_tree(&in_trace, request);
    let del = s.node.run(shim, &s.node.shim_conf(), call("DEL")).unwrap();
    assert!(del.success, "{del:?}");
}
