//! Quickstart: a bridge + host-local + portmap network, one pod, real
//! traffic, then teardown — with this workspace's plugins and invoker.
//!
//! Run as root: `./scripts/quickstart.sh` (builds the plugins in release
//! mode, then runs this). Everything happens inside a throwaway "node"
//! network namespace, so the machine's own network (its bridges, firewall
//! rules and sysctls) is never touched; state lives in a temporary
//! directory and nothing is read from /etc.
//!
//! The ADD is traced: the plugins export their spans (the config's `otlp`
//! key) to a small receiver in the node namespace, the invoker records its
//! own, and the call's span tree with durations is printed after the
//! result (docs/observability.md).

// A command-line program: its progress lines go to stdout.
#![allow(clippy::print_stdout)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Duration;

use cni_exec::{CniConfig, ProcessExec, RuntimeConf};
use cni_netns::{AddressFamilyFilter, Handle, OwnedNetns};
use cni_trace::receiver::{render_tree, Receiver};
use cni_types::NetworkConfigList;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

const HOST_PORT: u16 = 8080;
const POD_PORT: u16 = 80;
const PLUGINS: [&str; 3] = ["bridge", "host-local", "portmap"];

type Fallible<T> = Result<T, String>;

fn step(n: usize, what: &str) {
    println!("[{n}/9] {what}");
}

fn main() -> ExitCode {
    match quickstart() {
        Ok(()) => {
            println!("quickstart: all steps passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quickstart FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn plugin_dir() -> Fallible<PathBuf> {
    let dir = match std::env::args().nth(1) {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find own executable: {e}"))?
            .parent()
            .map(Path::to_path_buf)
            .ok_or("executable has no parent directory")?,
    };
    for p in PLUGINS {
        if !dir.join(p).is_file() {
            return Err(format!(
                "plugin {p:?} not found in {} (build them: cargo build --release -p cni-plugins)",
                dir.display()
            ));
        }
    }
    Ok(dir)
}

/// The invoker's own span recorder, exporting to `receiver`; `None` when
/// a subscriber is already installed.
fn invoker_tracing(receiver: &Receiver) -> Fallible<Option<cni_trace::Exporter>> {
    let endpoint = receiver.endpoint();
    let config = cni_trace::ExportConfig::resolve(
        |k| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| endpoint.clone()),
        &cni_trace::Overrides::default(),
        "quickstart",
    )
    .map_err(|e| e.to_string())?
    .ok_or("no span exporter")?;
    let (layer, exporter) = cni_trace::layer(config);
    let subscriber =
        tracing_subscriber::registry().with(layer.with_filter(cni_trace::default_filter()));
    Ok(tracing::subscriber::set_global_default(subscriber)
        .ok()
        .map(|()| exporter))
}

fn quickstart() -> Fallible<()> {
    step(1, "checking root and the plugin binaries");
    if !nix_is_root() {
        return Err("run as root: the quickstart creates network namespaces".into());
    }
    let plugins = plugin_dir()?;
    println!("      plugins from {}", plugins.display());
    let state = tempdir()?;
    let _state_guard = RemoveDir(state.clone());

    step(2, "creating a node namespace and a pod namespace");
    let node = OwnedNetns::new("cni-qs-node").map_err(|e| e.to_string())?;
    let pod = OwnedNetns::new("cni-qs-pod").map_err(|e| e.to_string())?;
    println!("      node: {}  pod: {}", node.name(), pod.name());
    // A fresh namespace starts with `lo` down; a real node has it up.
    let host = Handle::in_netns(node.netns()).map_err(|e| e.to_string())?;
    let lo = host.link_by_name("lo").map_err(|e| e.to_string())?;
    host.set_up(lo.index).map_err(|e| e.to_string())?;

    // Spans go to a receiver on the node's loopback (the plugins run
    // there); the invoker records its own under `quickstart ADD`.
    let receiver = node
        .netns()
        .run(Receiver::start)
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let otlp = serde_json::json!({"endpoint": receiver.endpoint()});
    let exporter = invoker_tracing(&receiver)?;

    step(
        3,
        "writing the network: bridge + host-local + portmap (cniVersion 1.0.0)",
    );
    let mut conflist = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "quickstart",
        "plugins": [
            {"type": "bridge", "bridge": "cniqs0", "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": state.join("ipam"),
                      "ranges": [[{"subnet": "10.99.0.0/24"}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    if let Some(plugins) = conflist["plugins"].as_array_mut() {
        for p in plugins {
            p["otlp"] = otlp.clone();
        }
    }
    let list = NetworkConfigList::from_slice(conflist.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let cni = CniConfig::new(vec![plugins.clone()], Arc::new(ProcessExec::new()))
        .with_cache_dir(state.join("cache"));
    let mut rt = RuntimeConf {
        container_id: format!("quickstart-{}", std::process::id()),
        netns: pod.netns().path().display().to_string(),
        ifname: "eth0".into(),
        ..Default::default()
    };
    rt.capability_args.insert(
        "portMappings".into(),
        serde_json::json!([{"hostPort": HOST_PORT, "containerPort": POD_PORT, "protocol": "tcp"}]),
    );

    step(
        4,
        "ADD through the invoker (plugins exec'd inside the node namespace)",
    );
    // Child processes inherit the namespace of the thread that spawns them.
    let root = tracing::info_span!("quickstart", otel.name = "quickstart ADD");
    let added = root
        .in_scope(|| node.netns().run(|| cni.add_network_list(&list, &rt)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("ADD failed: {e}"))?;
    let json = added.to_json_pretty().map_err(|e| e.to_string())?;
    println!("{}", String::from_utf8_lossy(&json));
    drop(root);
    if let Some(exporter) = exporter {
        // The invoker's spans, sent from the node namespace as well.
        let _ = node.netns().run(|| exporter.flush());
        println!("      the ADD's spans (cni-trace), with durations:");
        for line in render_tree(&receiver.spans()).lines() {
            println!("        {line}");
        }
    }
    let pod_ip = added
        .result
        .ips
        .first()
        .map(|ip| ip.address.ip())
        .ok_or("ADD returned no IP address")?;

    step(5, "the pod's addresses and routes");
    show_pod(&pod)?;

    step(6, "ping the pod from the node");
    let ping = node
        .netns()
        .run(|| {
            Command::new("ping")
                .args(["-c", "1", "-W", "2", &pod_ip.to_string()])
                .output()
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run ping: {e}"))?;
    if !ping.status.success() {
        return Err(format!(
            "ping {pod_ip} failed: {}",
            String::from_utf8_lossy(&ping.stdout)
        ));
    }
    println!("      ping {pod_ip}: ok");

    step(7, "HTTP through the port mapping (listener inside the pod)");
    let listener = pod
        .netns()
        .run(|| TcpListener::bind(("0.0.0.0", POD_PORT)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("listen in the pod: {e}"))?;
    let server = std::thread::spawn(move || serve(listener, 2));
    for target in [IpAddr::from([127, 0, 0, 1]), IpAddr::from([10, 99, 0, 1])] {
        let addr = SocketAddr::new(target, HOST_PORT);
        let reply = node
            .netns()
            .run(|| http_get(addr))
            .map_err(|e| e.to_string())??;
        println!("      GET http://{addr}/ -> {reply:?}");
    }
    server.join().map_err(|_| "HTTP server thread panicked")??;

    step(8, "DEL, then DEL again (idempotent)");
    for _ in 0..2 {
        node.netns()
            .run(|| cni.del_network_list(&list, &rt))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("DEL failed: {e}"))?;
    }
    let left = Handle::in_netns(pod.netns())
        .and_then(|h| h.link_by_name("eth0"))
        .is_ok();
    if left {
        return Err("eth0 is still in the pod after DEL".into());
    }
    println!("      eth0 removed from the pod");

    step(9, "cleaning up (namespaces and temporary state)");
    drop(pod);
    drop(node);
    Ok(())
}

fn show_pod(pod: &OwnedNetns) -> Fallible<()> {
    let h = Handle::in_netns(pod.netns()).map_err(|e| e.to_string())?;
    for a in h
        .addresses(None, AddressFamilyFilter::All)
        .map_err(|e| e.to_string())?
    {
        let name = h.link_by_index(a.index).map(|l| l.name).unwrap_or_default();
        println!("      addr  {name}: {}", a.address);
    }
    for r in h
        .routes(AddressFamilyFilter::V4)
        .map_err(|e| e.to_string())?
    {
        if r.table != Some(cni_netns::TABLE_MAIN) {
            continue; // the kernel's local table: not interesting here
        }
        let dst = if r.dst.prefix() == 0 {
            "default".to_string()
        } else {
            r.dst.to_string()
        };
        let via = r.gateway.map(|g| format!(" via {g}")).unwrap_or_default();
        let dev = r
            .oif
            .and_then(|i| h.link_by_index(i).ok())
            .map(|l| format!(" dev {}", l.name))
            .unwrap_or_default();
        println!("      route {dst}{via}{dev}");
    }
    Ok(())
}

fn serve(listener: TcpListener, n: usize) -> Fallible<()> {
    for _ in 0..n {
        let (mut s, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\n\r\nhello, pod!\n")
            .map_err(|e| format!("write: {e}"))?;
    }
    Ok(())
}

fn http_get(addr: SocketAddr) -> Fallible<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    let status = body.lines().next().unwrap_or_default().to_string();
    if !status.contains("200") {
        return Err(format!("unexpected reply from {addr}: {status:?}"));
    }
    Ok(body.lines().last().unwrap_or_default().to_string())
}

fn nix_is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn tempdir() -> Fallible<PathBuf> {
    let dir = std::env::temp_dir().join(format!("cni-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
