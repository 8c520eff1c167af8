//! Trace context through a real chain: our invoker (`CniConfig` over
//! `ProcessExec`) runs bridge + host-local + portmap + tuning (our
//! binaries, in a throwaway node namespace) with a caller's `TRACEPARENT`;
//! every process exports to an OTLP/HTTP receiver that decodes with the
//! official `opentelemetry-proto` package (`cni_testkit::otlp`). One trace,
//! each plugin's `cni ADD` a child of the invoker's `cni.exec <type>`, that
//! a child of the caller's span; a failed ADD carries ERROR and its code;
//! Go's tuning in the middle changes nothing for the others; with no
//! exporter configured nothing is sent and the result is the same bytes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cni_exec::{CniConfig, ProcessExec, RuntimeConf, TraceContext};
use cni_testkit::otlp::{self, Mode, Receiver};
use cni_types::NetworkConfigList;
use serde_json::{json, Value};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

use crate::nodenet::{suffix, Ns};

const TRACE: &str = "5b8efff798038103d269b633813fc60c";
const CALLER_SPAN: &str = "eee19b7ec3c1b174";

fn caller() -> TraceContext {
    TraceContext::from_values(
        &format!("00-{TRACE}-{CALLER_SPAN}-01"),
        Some("rojo=00f067aa0ba902b7"),
        None,
    )
    .unwrap()
}

struct Chain {
    node: Ns,
    pod: Ns,
    state: tempfile::TempDir,
    bins: tempfile::TempDir,
    rx: Receiver,
    bridge: String,
}

impl Chain {
    /// A node namespace with a receiver listening inside it (the plugins
    /// run there: its 127.0.0.1 is theirs), a pod, and `tuning` from
    /// `tuning_bin`.
    fn new(tuning_bin: &str) -> Chain {
        let node = Ns::new("trnode");
        let pod = Ns::new("trpod");
        let rx = node
            .netns()
            .run(|| Receiver::start(Mode::Normal))
            .unwrap()
            .unwrap();
        let bins = tempfile::tempdir().unwrap();
        for (name, bin) in [
            ("bridge", env!("CARGO_BIN_EXE_bridge")),
            ("host-local", env!("CARGO_BIN_EXE_host-local")),
            ("portmap", env!("CARGO_BIN_EXE_portmap")),
            ("tuning", tuning_bin),
        ] {
            std::os::unix::fs::symlink(bin, bins.path().join(name)).unwrap();
        }
        Chain {
            node,
            pod,
            state: tempfile::tempdir().unwrap(),
            bins,
            rx,
            bridge: format!("trbr{}", &suffix()[..6]),
        }
    }

    fn list(&self, otlp: bool, tuning: Value) -> NetworkConfigList {
        let mut plugins = vec![
            json!({"type": "bridge", "bridge": self.bridge, "isGateway": true,
                   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.93.0.0/24"}]],
                            "dataDir": self.state.path().join("ipam")}}),
            tuning,
            json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        ];
        if otlp {
            for p in &mut plugins {
                p["otlp"] = json!({"endpoint": self.rx.endpoint(), "timeoutMs": 1000});
            }
        }
        let conf = json!({"cniVersion": "1.0.0", "name": "tracenet", "plugins": plugins});
        NetworkConfigList::from_slice(conf.to_string().as_bytes()).unwrap()
    }

    fn rt(&self) -> RuntimeConf {
        let mut caps = HashMap::new();
        caps.insert(
            "portMappings".to_string(),
            json!([{"hostPort": 18093, "containerPort": 80, "protocol": "tcp"}]),
        );
        RuntimeConf {
            container_id: format!("trace-{}", suffix()),
            netns: self.pod.path(),
            ifname: "eth0".into(),
            capability_args: caps.into_iter().collect(),
            ..Default::default()
        }
    }

    /// Runs `f` with our invoker in the node namespace, recording its own
    /// spans (`cni.exec <type>`) and exporting them to the receiver.
    fn invoke<T: Send>(&self, trace: bool, f: impl FnOnce(&CniConfig) -> T + Send) -> T {
        let exec = ProcessExec::new().with_timeout(Duration::from_secs(60));
        let mut cni = CniConfig::new(vec![self.bins.path().to_path_buf()], Arc::new(exec))
            .with_cache_dir(self.state.path().join("cache"));
        if trace {
            cni = cni.with_trace_context(caller());
        }
        let endpoint = self.rx.endpoint();
        self.node
            .netns()
            .run(move || {
                let vars: HashMap<&str, String> =
                    HashMap::from([("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)]);
                let config = cni_trace::ExportConfig::resolve(
                    |k| vars.get(k).cloned(),
                    &cni_trace::Overrides::default(),
                    "trace-test-invoker",
                )
                .unwrap()
                .unwrap();
                let (layer, exporter) = cni_trace::layer(config);
                let subscriber = tracing_subscriber::registry()
                    .with(layer.with_filter(cni_trace::default_filter()));
                let out = tracing::subscriber::with_default(subscriber, || f(&cni));
                if trace {
                    exporter.flush().unwrap();
                }
                out
            })
            .unwrap()
    }
}

fn span<'a>(spans: &'a [Value], name: &str, attr: (&str, &str)) -> &'a Value {
    let found: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == name && s["attributes"][attr.0] == attr.1)
        .collect();
    assert_eq!(found.len(), 1, "one {name} {attr:?} in {spans:#?}");
    found[0]
}

fn child_of(child: &Value, parent: &Value) {
    assert_eq!(
        child["parent_span_id"], parent["span_id"],
        "{} should be a child of {}",
        child["name"], parent["name"]
    );
    assert_eq!(child["trace_id"], TRACE);
}

fn descendant_of(span: &Value, ancestor: &Value, spans: &[Value]) {
    let mut at = span;
    for _ in 0..16 {
        let Some(parent) = spans.iter().find(|s| s["span_id"] == at["parent_span_id"]) else {
            break;
        };
        if parent["span_id"] == ancestor["span_id"] {
            assert_eq!(span["trace_id"], TRACE);
            return;
        }
        at = parent;
    }
    panic!(
        "{} should be under {}: {spans:#?}",
        span["name"], ancestor["name"]
    );
}

/// The invoker's `cni.exec <plugin>` (a child of the caller) and, when
/// `ours`, the plugin's `cni <cmd>` under it; that `cni` span.
fn check_call<'a>(spans: &'a [Value], plugin: &str, cmd: &str, ours: bool) -> Option<&'a Value> {
    let exec = spans
        .iter()
        .find(|s| {
            s["name"] == format!("cni.exec {plugin}")
                && s["attributes"]["cni.command"] == cmd
                && s["service_name"] == "trace-test-invoker"
        })
        .unwrap_or_else(|| panic!("no invoker span for {plugin} {cmd}: {spans:#?}"));
    assert_eq!(exec["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(exec["parent_span_id"], CALLER_SPAN);
    assert_eq!(exec["trace_id"], TRACE);
    assert_eq!(exec["trace_state"], "rojo=00f067aa0ba902b7");
    if !ours {
        assert!(
            !spans.iter().any(|s| s["parent_span_id"] == exec["span_id"]),
            "Go's {plugin} sends no spans"
        );
        return None;
    }
    let call = span(spans, &format!("cni {cmd}"), ("cni.plugin", plugin));
    child_of(call, exec);
    assert_eq!(call["kind"], "SPAN_KIND_SERVER");
    assert_eq!(call["service_name"], plugin);
    assert_eq!(call["attributes"]["cni.command"], cmd);
    assert_eq!(call["attributes"]["cni.network.name"], "tracenet");
    assert_eq!(call["attributes"]["cni.ifname"], "eth0");
    assert_eq!(call["attributes"]["cni.version"], "1.0.0");
    assert!(call["attributes"]["cni.container.id"]
        .as_str()
        .unwrap()
        .starts_with("trace-"));
    Some(call)
}

fn run_chain(tuning_bin: &str, go_tuning: bool) {
    if !cni_testkit::premise::require_root() || !otlp::require() {
        return;
    }
    let c = Chain::new(tuning_bin);
    let tuning = json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.forwarding": "1"}});
    let list = c.list(true, tuning);
    let rt = c.rt();
    c.invoke(true, |cni| cni.add_network_list(&list, &rt).map(drop))
        .unwrap();
    c.invoke(true, |cni| cni.del_network_list(&list, &rt))
        .unwrap();
    // Our plugins' ADD and DEL (bridge, host-local, portmap, tuning unless
    // Go's), the invoker's 6 + bridge's 2 exec spans.
    let ours = if go_tuning { 4 } else { 5 };
    let spans = c.rx.wait_spans(2 * ours + 8, Duration::from_secs(10));
    for s in &spans {
        assert_eq!(s["trace_id"], TRACE, "one trace: {s:#}");
    }
    for cmd in ["ADD", "DEL"] {
        let bridge = check_call(&spans, "bridge", cmd, true).unwrap();
        // bridge runs host-local: its own client span, host-local's under it.
        let ipam_exec = spans
            .iter()
            .find(|s| {
                s["name"] == "cni.exec host-local"
                    && s["attributes"]["cni.command"] == cmd
                    && s["service_name"] == "bridge"
            })
            .unwrap_or_else(|| panic!("bridge's host-local exec span: {spans:#?}"));
        // Under bridge's call, through its IPAM step span.
        descendant_of(ipam_exec, bridge, &spans);
        let ipam = span(&spans, &format!("cni {cmd}"), ("cni.plugin", "host-local"));
        child_of(ipam, ipam_exec);
        check_call(&spans, "portmap", cmd, true);
        check_call(&spans, "tuning", cmd, !go_tuning);
    }
    for p in c.rx.posts() {
        assert!(p["error"].is_null(), "{p}");
        assert_eq!(p["path"], "/v1/traces");
    }
}

#[test]
fn chain_spans_link_up() {
    run_chain(env!("CARGO_BIN_EXE_tuning"), false);
}

#[test]
fn chain_with_go_tuning_in_the_middle() {
    if !cni_testkit::premise::require_all(&[cni_testkit::premise::Need::GoPlugin("tuning")]) {
        return;
    }
    run_chain("/usr/lib/cni/tuning", true);
}

#[test]
fn failed_add_has_error_status_and_code() {
    if !cni_testkit::premise::require_root() || !otlp::require() {
        return;
    }
    let c = Chain::new(env!("CARGO_BIN_EXE_tuning"));
    // A sysctl tuning refuses: outside the allowed net.* keys.
    let tuning = json!({"type": "tuning", "sysctl": {"kernel.hostname": "x"}});
    let list = c.list(true, tuning);
    let rt = c.rt();
    let err = c
        .invoke(true, |cni| cni.add_network_list(&list, &rt).map(drop))
        .unwrap_err();
    c.invoke(true, |cni| cni.del_network_list(&list, &rt))
        .unwrap();
    let spans = c.rx.wait_spans(6, Duration::from_secs(10));
    let failed = span(&spans, "cni ADD", ("cni.plugin", "tuning"));
    assert_eq!(failed["status"]["code"], "STATUS_CODE_ERROR", "{failed:#}");
    let code = failed["attributes"]["cni.error.code"].as_i64().unwrap();
    assert!(code > 0, "{failed:#}");
    let msg = failed["status"]["message"].as_str().unwrap();
    assert!(
        !msg.is_empty() && err.to_string().contains(msg),
        "{err} / {msg}"
    );
    // The successful ADD before it is not an error.
    let ok = span(&spans, "cni ADD", ("cni.plugin", "bridge"));
    assert_eq!(ok["status"]["code"], "STATUS_CODE_UNSET");
}

#[test]
fn no_exporter_no_traffic_same_result() {
    if !cni_testkit::premise::require_root() || !otlp::require() {
        return;
    }
    // host-local alone is deterministic: the same first address of a
    // fresh store, with and without a TRACEPARENT, exporter or not.
    let mut results = Vec::new();
    for (trace, otlp_key) in [(false, false), (true, false), (true, true)] {
        let c = Chain::new(env!("CARGO_BIN_EXE_tuning"));
        let mut conf = json!({"cniVersion": "1.0.0", "name": "tracenet", "type": "host-local",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.94.0.0/24"}]],
                     "dataDir": c.state.path().join("ipam")}});
        if otlp_key {
            conf["otlp"] = json!({"endpoint": c.rx.endpoint()});
        }
        let list = json!({"cniVersion": "1.0.0", "name": "tracenet", "plugins": [conf]});
        let list = NetworkConfigList::from_slice(list.to_string().as_bytes()).unwrap();
        let rt = RuntimeConf {
            container_id: "trace-same".into(),
            ..c.rt()
        };
        let result = c
            .invoke(trace, |cni| cni.add_network_list(&list, &rt))
            .unwrap();
        results.push(result.to_json_pretty().unwrap());
        if otlp_key {
            assert!(!c.rx.wait_spans(1, Duration::from_secs(10)).is_empty());
        } else {
            std::thread::sleep(Duration::from_millis(300));
            // The invoker exported its own span only when tracing.
            let from_plugin =
                c.rx.spans()
                    .into_iter()
                    .filter(|s| s["service_name"] != "trace-test-invoker")
                    .count();
            assert_eq!(from_plugin, 0, "no exporter configured, yet spans arrived");
        }
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
}

#[test]
fn cnitool_trace_prints_the_tree() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let cnitool = crate::nodenet::workspace_bin("cni-exec", "cnitool");
    let c = Chain::new(env!("CARGO_BIN_EXE_tuning"));
    let netdir = c.state.path().join("net");
    std::fs::create_dir_all(&netdir).unwrap();
    let tuning = json!({"type": "tuning", "sysctl": {"net.core.somaxconn": "512"}});
    let list = c.list(false, tuning);
    std::fs::write(
        netdir.join("10-trace.conflist"),
        serde_json::to_vec(&list).unwrap(),
    )
    .unwrap();
    let run = |cmd: &str| {
        let netconf = format!("NETCONFPATH={}", netdir.display());
        let path = format!("CNI_PATH={}", c.bins.path().display());
        let cache = format!("CNI_CACHEDIR={}", c.state.path().join("cache").display());
        let tp = format!("TRACEPARENT=00-{TRACE}-{CALLER_SPAN}-01");
        let pod = c.pod.path();
        let out = c.node.exec(&[
            "env",
            &netconf,
            &path,
            &cache,
            &tp,
            r#"CAP_ARGS={"portMappings":[{"hostPort":18094,"containerPort":80,"protocol":"tcp"}]}"#,
            cnitool.to_str().unwrap(),
            "--trace",
            cmd,
            "tracenet",
            &pod,
        ]);
        assert!(out.status.success(), "{cmd}: {out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let tree = run("add");
    // Each expected line's depth (step spans may sit in between).
    let depth = |want: &str| {
        tree.lines()
            .find(|l| l.trim_start().starts_with(&format!("{want}  ")) && l.ends_with(" ms"))
            .map(|l| l.len() - l.trim_start().len())
            .unwrap_or_else(|| panic!("{want:?} missing in\n{tree}"))
    };
    assert!(tree.starts_with("cnitool ADD  "), "{tree}");
    for plugin in ["bridge", "tuning", "portmap"] {
        assert_eq!(depth(&format!("cni.exec {plugin}")), 2, "{tree}");
        assert_eq!(depth(&format!("cni ADD [{plugin}]")), 4, "{tree}");
    }
    assert!(
        depth("cni.exec host-local") > depth("cni ADD [bridge]"),
        "{tree}"
    );
    assert!(
        depth("cni ADD [host-local]") > depth("cni.exec host-local"),
        "{tree}"
    );
    let tree = run("del");
    assert!(tree.starts_with("cnitool DEL  "), "{tree}");
    assert!(tree.contains("    cni DEL [bridge]  "), "{tree}");
}

/// Sets up a collector for a chain: its endpoint, and the receiver to keep
/// alive (none for a dead endpoint).
type Collector = dyn Fn(&Chain) -> (String, Option<Receiver>);

/// A collector that refuses connections, one that accepts and never
/// answers, and one that answers 64 MB: ADD and DEL of the whole chain
/// succeed with the same result, and each plugin process adds at most its
/// export budget (300 ms here) and a margin of a second to the call.
#[test]
fn bad_collectors_never_fail_a_call() {
    if !cni_testkit::premise::require_root() || !otlp::require() {
        return;
    }
    const BUDGET_MS: u64 = 300;
    // bridge (host-local runs in its process), tuning, portmap.
    const PROCESSES: u32 = 3;
    let run = |endpoint: Option<&Collector>| {
        let c = Chain::new(env!("CARGO_BIN_EXE_tuning"));
        let tuning = json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.forwarding": "1"}});
        let mut list = c.list(false, tuning);
        let _keep = endpoint.map(|make| {
            let (ep, rx) = make(&c);
            let mut v = serde_json::to_value(&list).unwrap();
            for p in v["plugins"].as_array_mut().unwrap() {
                p["otlp"] = json!({"endpoint": ep, "timeoutMs": BUDGET_MS});
            }
            list = NetworkConfigList::from_slice(v.to_string().as_bytes()).unwrap();
            rx
        });
        let rt = c.rt();
        let t = std::time::Instant::now();
        let result = c
            .invoke(false, |cni| cni.add_network_list(&list, &rt))
            .unwrap();
        let add = t.elapsed();
        let t = std::time::Instant::now();
        c.invoke(false, |cni| cni.del_network_list(&list, &rt))
            .unwrap();
        let del = t.elapsed();
        // The addresses (names, MACs and paths differ chain to chain).
        let result = serde_json::to_value(&result).unwrap()["ips"].clone();
        (result, add, del)
    };
    let (base, base_add, base_del) = run(None);
    let dead = |c: &Chain| {
        let port = c
            .node
            .netns()
            .run(|| {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port()
            })
            .unwrap();
        (format!("http://127.0.0.1:{port}"), None)
    };
    let in_node = |mode: Mode| {
        move |c: &Chain| {
            let rx = c
                .node
                .netns()
                .run(|| Receiver::start(mode))
                .unwrap()
                .unwrap();
            (rx.endpoint(), Some(rx))
        }
    };
    let black_hole = in_node(Mode::Blackhole);
    let big = in_node(Mode::Big);
    let cases: [(&str, &Collector); 3] = [
        ("dead", &dead),
        ("black hole", &black_hole),
        ("64 MB reply", &big),
    ];
    // A margin of a second per process: what is proven is a bounded wait
    // (an exporter without one would wait minutes for an unroutable
    // connect, or forever on the black hole), not a time on busy cores.
    let bound = Duration::from_millis((BUDGET_MS + 1000) * u64::from(PROCESSES));
    for (name, make) in cases {
        let (result, add, del) = run(Some(make));
        assert_eq!(result, base, "{name}: the result changed");
        for (op, took, base) in [("ADD", add, base_add), ("DEL", del, base_del)] {
            assert!(
                took < base + bound,
                "{name}: {op} took {took:?}, {base:?} without export (bound {bound:?} more)"
            );
        }
        if name == "black hole" {
            // The premise: every process did wait on the collector.
            assert!(
                add >= Duration::from_millis(BUDGET_MS * u64::from(PROCESSES) * 8 / 10),
                "black hole: ADD took {add:?}: the exporter did not wait"
            );
        }
    }
}
