//! The step spans (docs/observability.md, "Step spans") of a real in-process
//! bridge + host-local + portmap ADD and DEL, dual-stack, in a throwaway
//! node namespace: a capturing `tracing_subscriber` layer, set for the
//! test's thread only, records every span's name, parent, fields and the
//! thread it was made on. Every step span must hang under the test's root
//! (across the threads `cni_netns::Netns::run` and the plugins' parallel
//! steps start), and a failed step's span carries `otel.status_code =
//! ERROR`. Also multus's delegate and API server spans (in-process multus,
//! the test API server) and cni-gc's CRI call span (a runtime socket that
//! never answers).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cni_exec::{CniConfig, InProcessExec, RuntimeConf};
use cni_netns::OwnedNetns;
use cni_plugins::{bridge::Bridge, host_local::HostLocal, portmap::Portmap};
use cni_types::NetworkConfigList;
use serde_json::{json, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::common::{bridge_name, netns};

/// One span as the layer saw it.
#[derive(Debug, Clone)]
struct Captured {
    name: &'static str,
    /// Index of the parent in the capture.
    parent: Option<usize>,
    fields: BTreeMap<String, String>,
    thread: String,
}

/// A layer recording every span (indices, not span ids: the registry
/// reuses the ids of closed spans).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

/// The capture index of a span, in its extensions.
struct Index(usize);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Index>().map(|i| i.0));
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let thread = std::thread::current().name().unwrap_or("?").to_owned();
        let mut spans = self.0.lock().unwrap();
        spans.push(Captured {
            name: attrs.metadata().name(),
            parent,
            fields,
            thread,
        });
        span.extensions_mut().insert(Index(spans.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(index) = ctx
            .span(id)
            .and_then(|s| s.extensions().get::<Index>().map(|i| i.0))
        else {
            return;
        };
        let mut spans = self.0.lock().unwrap();
        values.record(&mut Fields(&mut spans[index].fields));
    }
}

impl Capture {
    /// Runs `f` with this layer as the thread's subscriber, inside a span
    /// `test.root`; returns `f`'s value and what was captured.
    fn around<T>(f: impl FnOnce() -> T) -> (T, Spans) {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        let value = tracing::subscriber::with_default(subscriber, || {
            tracing::info_span!("test.root").in_scope(f)
        });
        let spans = capture.0.lock().unwrap().clone();
        (value, Spans(spans))
    }
}

struct Spans(Vec<Captured>);

impl Spans {
    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (usize, &'a Captured)> + 'a {
        self.0
            .iter()
            .enumerate()
            .filter(move |(_, s)| s.name == name)
    }

    fn ancestors(&self, mut index: usize) -> Vec<&'static str> {
        let mut names = Vec::new();
        while let Some(p) = self.0[index].parent {
            names.push(self.0[p].name);
            index = p;
        }
        names
    }

    fn field(&self, index: usize, key: &str) -> Option<&str> {
        self.0[index].fields.get(key).map(String::as_str)
    }

    fn parent_name(&self, index: usize) -> Option<&'static str> {
        self.0[index].parent.map(|p| self.0[p].name)
    }

    /// The spans as an indented tree, children in the order they were made.
    fn tree(&self) -> String {
        let mut out = String::new();
        let mut stack: Vec<usize> = (0..self.0.len())
            .filter(|&i| self.0[i].parent.is_none())
            .rev()
            .collect();
        while let Some(i) = stack.pop() {
            let s = &self.0[i];
            out.push_str(&format!(
                "{}{} [{}] {:?}\n",
                "  ".repeat(self.ancestors(i).len()),
                s.name,
                s.thread,
                s.fields
            ));
            stack.extend(
                (0..self.0.len())
                    .rev()
                    .filter(|&c| self.0[c].parent == Some(i)),
            );
        }
        out
    }
}

/// A node namespace, a pod namespace, the in-process plugins and a
/// dual-stack bridge + host-local + portmap network.
struct Setup {
    node: OwnedNetns,
    pod: OwnedNetns,
    _state: tempfile::TempDir,
    cni: CniConfig,
    list: NetworkConfigList,
    rt: RuntimeConf,
}

impl Setup {
    fn new(extra_routes: Value) -> Setup {
        let node = netns("spann");
        let pod = netns("spanp");
        let state = tempfile::tempdir().unwrap();
        let exec = InProcessExec::builder()
            .register("bridge", Arc::new(Bridge::new()))
            .register("host-local", Arc::new(HostLocal))
            .register("portmap", Arc::new(Portmap::new()))
            .build();
        let cni = CniConfig::new(vec![state.path().join("bin")], Arc::new(exec))
            .with_cache_dir(state.path().join("cache"));
        let mut routes = vec![json!({"dst": "0.0.0.0/0"}), json!({"dst": "::/0"})];
        routes.extend(extra_routes.as_array().cloned().unwrap_or_default());
        let list = json!({
            "cniVersion": "1.1.0",
            "name": "spans",
            "plugins": [
                {"type": "bridge", "bridge": bridge_name(), "isGateway": true, "ipMasq": true,
                 "enabledad": true,
                 "ipam": {"type": "host-local", "dataDir": state.path().join("ipam"),
                          "ranges": [[{"subnet": "10.97.0.0/24"}], [{"subnet": "fd00:97::/64"}]],
                          "routes": routes}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        });
        let list = NetworkConfigList::from_slice(list.to_string().as_bytes()).unwrap();
        let mut rt = RuntimeConf {
            container_id: format!("spans-{}", crate::common::hex6()),
            netns: pod.netns().path().display().to_string(),
            ifname: "eth0".into(),
            ..Default::default()
        };
        rt.capability_args.insert(
            "portMappings".into(),
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        Setup {
            node,
            pod,
            _state: state,
            cni,
            list,
            rt,
        }
    }
}

#[test]
fn bridge_add_and_del_steps_nest_under_one_root() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let s = Setup::new(json!([]));
    let test_thread = std::thread::current().name().unwrap_or("?").to_owned();
    let ((), spans) = Capture::around(|| {
        let added = s
            .node
            .netns()
            .run(|| s.cni.add_network_list(&s.list, &s.rt));
        added.unwrap().unwrap();
        let deleted = s
            .node
            .netns()
            .run(|| s.cni.del_network_list(&s.list, &s.rt));
        deleted.unwrap().unwrap();
    });
    let tree = spans.tree();

    // One root: every span but the root hangs under it.
    assert_eq!(spans.0[0].name, "test.root", "{tree}");
    for (i, span) in spans.0.iter().enumerate().skip(1) {
        assert_eq!(
            spans.ancestors(i).last(),
            Some(&"test.root"),
            "{} is not under the root:\n{tree}",
            span.name
        );
    }
    // The steps of a bridge + host-local + portmap ADD and DEL.
    for name in [
        "netns.enter",
        "link.create",
        "link.delete",
        "address.add",
        "route.add",
        "sysctl.write",
        "dad.settle",
        "firewall.batch",
        "ipam",
        "ipam.lock",
        "ipam.store",
        "portmap.apply",
    ] {
        assert!(
            spans.named(name).next().is_some(),
            "no {name} span:\n{tree}"
        );
    }
    // No step failed.
    for (i, span) in spans.0.iter().enumerate() {
        assert_eq!(
            spans.field(i, "otel.status_code"),
            None,
            "{}:\n{tree}",
            span.name
        );
    }

    // The thread hop: the node's `netns.enter` is made on the test's thread
    // under the root; what runs in the namespace is made on the hop's
    // thread, as its children.
    let (enter, _) = spans
        .named("netns.enter")
        .find(|(i, _)| spans.parent_name(*i) == Some("test.root"))
        .expect("netns.enter under the root");
    assert_eq!(spans.0[enter].thread, test_thread, "{tree}");
    assert_eq!(
        spans.field(enter, "netns.path"),
        Some(s.node.netns().path().to_str().unwrap())
    );
    let hopped: Vec<_> = spans.0.iter().filter(|c| c.parent == Some(enter)).collect();
    assert!(hopped.iter().any(|c| c.thread == "cni-netns"), "{tree}");
    assert!(hopped.iter().all(|c| c.thread != test_thread), "{tree}");
    // A sysctl of the pod is written from a thread in the pod: its
    // `netns.enter` is the sysctl's child, and that one a descendant of
    // the node's.
    let pod_path = s.pod.netns().path().to_str().unwrap().to_owned();
    let (pod_enter, _) = spans
        .named("netns.enter")
        .find(|(i, _)| {
            spans.field(*i, "netns.path") == Some(pod_path.as_str())
                && spans.parent_name(*i) == Some("sysctl.write")
        })
        .unwrap_or_else(|| panic!("no sysctl.write > netns.enter in the pod:\n{tree}"));
    assert!(
        spans.ancestors(pod_enter).contains(&"netns.enter"),
        "{tree}"
    );

    // The IPAM ADD runs on a thread of its own while the veth is made;
    // host-local's lock and store are its children.
    let (ipam_add, _) = spans
        .named("ipam")
        .find(|(i, _)| spans.field(*i, "cni.command") == Some("ADD"))
        .expect("ipam ADD");
    assert_eq!(spans.field(ipam_add, "cni.ipam.type"), Some("host-local"));
    assert_ne!(spans.0[ipam_add].thread, "cni-netns", "{tree}");
    assert!(spans
        .named("ipam")
        .any(|(i, _)| spans.field(i, "cni.command") == Some("DEL")));
    for name in ["ipam.lock", "ipam.store"] {
        for (i, _) in spans.named(name) {
            assert!(spans.ancestors(i).contains(&"ipam"), "{name}:\n{tree}");
        }
    }

    // Attributes.
    let kinds: Vec<_> = spans
        .named("link.create")
        .map(|(i, _)| {
            (
                spans.field(i, "link.kind").unwrap_or_default(),
                spans.field(i, "link.name").unwrap_or_default(),
            )
        })
        .collect();
    assert!(kinds.iter().any(|(k, _)| *k == "bridge"), "{kinds:?}");
    assert!(kinds.contains(&("veth", "eth0")), "{kinds:?}");
    let pod_addresses = spans
        .named("address.add")
        .find(|(i, _)| spans.field(*i, "link.name") == Some("eth0"))
        .map(|(i, _)| spans.field(i, "address.count"));
    assert_eq!(pod_addresses, Some(Some("2")), "{tree}");
    let routes = spans
        .named("route.add")
        .find(|(i, _)| spans.field(*i, "link.name") == Some("eth0"))
        .map(|(i, _)| spans.field(i, "route.count"));
    assert_eq!(routes, Some(Some("2")), "{tree}");
    let (dad, _) = spans.named("dad.settle").next().unwrap();
    assert!(spans.field(dad, "dad.mode").is_some(), "{tree}");
    assert!(spans.named("firewall.batch").all(|(i, _)| {
        spans.field(i, "firewall.backend") == Some("netlink")
            && spans.field(i, "firewall.op").is_some()
    }));
    // portmap's batches are its step's children.
    let (portmap, _) = spans.named("portmap.apply").next().unwrap();
    assert_eq!(spans.field(portmap, "portmap.count"), Some("1"));
    let port_batches: Vec<_> = spans
        .named("firewall.batch")
        .filter(|(i, _)| spans.field(*i, "firewall.op") == Some("add port mappings"))
        .map(|(i, _)| i)
        .collect();
    assert!(!port_batches.is_empty(), "{tree}");
    assert!(
        port_batches
            .iter()
            .all(|&i| spans.parent_name(i) == Some("portmap.apply")),
        "{tree}"
    );
}

#[test]
fn a_failed_step_s_span_carries_the_error() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    // A gateway no address of the pod reaches: the route's ADD fails.
    let s = Setup::new(json!([{"dst": "10.200.0.0/16", "gw": "192.0.2.1"}]));
    let (added, spans) = Capture::around(|| {
        s.node
            .netns()
            .run(|| s.cni.add_network_list(&s.list, &s.rt))
    });
    let tree = spans.tree();
    let e = added.unwrap().unwrap_err();
    let (route, _) = spans
        .named("route.add")
        .find(|(i, _)| spans.field(*i, "link.name") == Some("eth0"))
        .unwrap_or_else(|| panic!("no route.add:\n{tree}"));
    assert_eq!(
        spans.field(route, "otel.status_code"),
        Some("ERROR"),
        "{tree}"
    );
    let message = spans
        .field(route, "otel.status_message")
        .unwrap_or_default();
    assert!(
        message.contains("unreachable") && e.to_string().contains(message),
        "span: {message}; ADD: {e}"
    );
    // The rollback's deletion of the veth is a step of its own, not failed.
    assert!(
        spans
            .named("link.delete")
            .any(|(i, _)| spans.field(i, "otel.status_code").is_none()),
        "{tree}"
    );
    let _ = s
        .node
        .netns()
        .run(|| s.cni.del_network_list(&s.list, &s.rt));
}

/// A delegate of multus that answers ADD with one interface and address.
struct FakeDelegate;

impl cni_exec::Plugin for FakeDelegate {
    type Error = cni_types::CniError;

    fn name(&self) -> &str {
        "fake"
    }

    fn add(&self, req: &cni_exec::Request) -> Result<cni_types::CniResult, Self::Error> {
        Ok(cni_types::CniResult {
            interfaces: vec![cni_types::Interface {
                name: req.ifname.clone(),
                sandbox: req.netns.clone(),
                ..Default::default()
            }],
            ips: vec![cni_types::IpConfig {
                interface: Some(0),
                address: "10.77.0.2/24".parse().unwrap(),
                gateway: None,
            }],
            ..Default::default()
        })
    }

    fn del(&self, _req: &cni_exec::Request) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[test]
fn multus_delegates_and_api_requests_have_spans() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let pod = netns("spanm");
    let server = cni_testkit::KubeApiServer::start().unwrap();
    server.add_nad(
        "kube-system",
        "cluster",
        r#"{"cniVersion":"1.1.0","type":"fake-cluster"}"#,
    );
    server.add_nad("ns1", "net-a", r#"{"cniVersion":"1.0.0","type":"fake-a"}"#);
    server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a")],
    );
    let dir = tempfile::tempdir().unwrap();
    let exec = InProcessExec::builder()
        .register("multus", Arc::new(cni_multus::Multus))
        .register("fake-cluster", Arc::new(FakeDelegate))
        .register("fake-a", Arc::new(FakeDelegate))
        .build();
    let cni = CniConfig::new(vec![dir.path().join("bin")], Arc::new(exec))
        .with_cache_dir(dir.path().join("runtime"));
    let list = json!({"cniVersion": "1.1.0", "name": "multus-net", "plugins": [{
        "type": "multus", "kubeconfig": server.kubeconfig_path(), "clusterNetwork": "cluster",
        "binDir": dir.path().join("bin"), "cniDir": dir.path().join("multus"),
        "confDir": dir.path().join("conf")}]});
    let list = NetworkConfigList::from_slice(list.to_string().as_bytes()).unwrap();
    let rt = RuntimeConf {
        container_id: format!("spans-{}", crate::common::hex6()),
        netns: pod.netns().path().display().to_string(),
        ifname: "eth0".into(),
        args: vec![
            ("K8S_POD_NAMESPACE".into(), "ns1".into()),
            ("K8S_POD_NAME".into(), "web".into()),
            ("K8S_POD_UID".into(), "uid-1".into()),
        ],
        ..Default::default()
    };
    let (added, spans) = Capture::around(|| cni.add_network_list(&list, &rt));
    added.unwrap();
    let tree = spans.tree();
    for (i, span) in spans.0.iter().enumerate().skip(1) {
        assert_eq!(
            spans.ancestors(i).last(),
            Some(&"test.root"),
            "{} is not under the root:\n{tree}",
            span.name
        );
    }
    // One span per delegate, with its network, interface and plugin.
    let delegates: Vec<_> = spans
        .named("multus.delegate")
        .map(|(i, _)| {
            assert_eq!(spans.field(i, "cni.command"), Some("ADD"), "{tree}");
            assert_eq!(spans.field(i, "otel.status_code"), None, "{tree}");
            (
                spans.field(i, "cni.ifname").unwrap_or_default(),
                spans.field(i, "cni.plugin").unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        delegates,
        [("eth0", "fake-cluster"), ("net1", "fake-a")],
        "{tree}"
    );
    // The pod's read from the API server, answered 200.
    let pod_read = spans.named("k8s.request").find(|(i, _)| {
        spans.field(*i, "http.request.method") == Some("GET")
            && spans.field(*i, "url.path") == Some("/api/v1/namespaces/ns1/pods/web")
    });
    let (pod_read, _) = pod_read.unwrap_or_else(|| panic!("no pod GET:\n{tree}"));
    assert_eq!(
        spans.field(pod_read, "http.response.status_code"),
        Some("200"),
        "{tree}"
    );
    let _ = cni.del_network_list(&list, &rt);
}

#[test]
fn a_failed_cri_call_s_span_carries_the_error() {
    // A runtime socket nobody answers on: the call times out.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cri.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let client = cni_cri::RuntimeClient::new(&socket)
        .unwrap()
        .with_timeout(std::time::Duration::from_millis(200));
    let runtime = cni_gc::CriSandboxes::new(client);
    let (listed, spans) = Capture::around(|| cni_gc::SandboxLister::list_sandboxes(&runtime));
    let tree = spans.tree();
    let e = listed.unwrap_err();
    let (call, _) = spans
        .named("cri.request")
        .next()
        .unwrap_or_else(|| panic!("no cri.request:\n{tree}"));
    assert_eq!(spans.parent_name(call), Some("test.root"), "{tree}");
    assert_eq!(spans.field(call, "rpc.method"), Some("ListPodSandbox"));
    assert_eq!(spans.field(call, "rpc.system"), Some("grpc"));
    assert_eq!(
        spans.field(call, "otel.status_code"),
        Some("ERROR"),
        "{tree}"
    );
    let message = spans.field(call, "otel.status_message").unwrap_or_default();
    assert!(
        !message.is_empty() && e.to_string().contains(message),
        "span: {message}; call: {e}"
    );
}
