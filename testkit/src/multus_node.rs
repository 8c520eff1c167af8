//! A multus "node" in real namespaces (feature `kube-server`, root): a
//! fresh node network namespace holding the test API server, a pod
//! namespace, a temporary directory, bridge + host-local NADs, and the
//! runs of multus binaries (thin plugin, shim, daemon) inside the node
//! namespace. Shared by the multus end-to-end tests and the
//! `multus-timings` measurement program.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cni_netns::OwnedNetns;
use serde_json::{json, Value};

use crate::error::io_err;
use crate::{Error, KubeApiServer};

/// Where the Go reference plugins are installed (Debian's
/// `containernetworking-plugins`).
pub const GO_PLUGINS: &str = "/usr/lib/cni";

/// A bridge + host-local NAD: its namespace and name, the bridge, the
/// subnet, and whether it declares the `ips` capability.
#[derive(Debug, Clone, Copy)]
pub struct BridgeNad<'a> {
    /// The NAD's Kubernetes namespace.
    pub namespace: &'a str,
    /// The NAD's name.
    pub name: &'a str,
    /// The bridge the delegate creates in the node namespace.
    pub bridge: &'a str,
    /// host-local's subnet.
    pub subnet: &'a str,
    /// Declare `"capabilities": {"ips": true}`.
    pub ips_capability: bool,
}

impl<'a> BridgeNad<'a> {
    /// The NAD `namespace/name`: `bridge`, host-local over `subnet`, no
    /// `ips` capability.
    pub fn new(namespace: &'a str, name: &'a str, bridge: &'a str, subnet: &'a str) -> Self {
        BridgeNad {
            namespace,
            name,
            bridge,
            subnet,
            ips_capability: false,
        }
    }
}

/// A Go-bridge delegate config with `isGateway`, host-local over `subnet`
/// (reservations under `ipam_dir`) and a default route.
pub fn bridge_nad(bridge: &str, subnet: &str, ipam_dir: &Path, ips_capability: bool) -> String {
    let mut v = json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge, "isGateway": true,
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir,
                 "routes": [{"dst": "0.0.0.0/0"}]}});
    if ips_capability {
        v["capabilities"] = json!({"ips": true});
    }
    v.to_string()
}

/// One run of a plugin binary: whether it succeeded, its stdout as JSON
/// (`null` when not JSON), its stderr and its wall time.
#[derive(Debug)]
pub struct PluginRun {
    /// The exit status was 0.
    pub success: bool,
    /// Stdout parsed as JSON, `null` when it is not.
    pub stdout: Value,
    /// Stderr, lossily decoded.
    pub stderr: String,
    /// Spawn to exit.
    pub took: Duration,
}

/// What a plugin run is asked: the CNI command, container id, pod name (in
/// namespace `ns1`, uid `uid-<pod>`), interface and network namespace.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// `CNI_COMMAND`.
    pub command: &'a str,
    /// `CNI_CONTAINERID`.
    pub cid: &'a str,
    /// The pod's name in `CNI_ARGS`.
    pub pod: &'a str,
    /// `CNI_IFNAME`.
    pub ifname: &'a str,
    /// `CNI_NETNS`.
    pub netns: &'a Path,
}

/// The node: its namespace, the pod's, the API server (listening inside
/// the node namespace) and the temporary directory (IPAM, caches, configs).
#[allow(missing_debug_implementations)]
pub struct MultusNode {
    /// The node namespace (`lo` up).
    pub node: OwnedNetns,
    /// The pod namespace (`lo` up).
    pub pod: OwnedNetns,
    /// The test API server, serving the NADs.
    pub server: KubeApiServer,
    /// Everything on disk.
    pub dir: tempfile::TempDir,
    /// Variables set on every plugin run and daemon started (e.g. the
    /// `OTEL_*` exporter variables and a `TRACEPARENT`); empty by default.
    pub env: Vec<(String, String)>,
}

/// Creates `<prefix>-<random>` under `/run/netns` with `lo` up.
pub fn netns_with_lo(prefix: &str) -> Result<OwnedNetns, Error> {
    let ns = OwnedNetns::new(prefix).map_err(|e| Error::Kernel {
        op: format!("create network namespace {prefix}-*"),
        source: Box::new(e),
    })?;
    let out = Command::new("ip")
        .args(["-n", ns.name(), "link", "set", "lo", "up"])
        .output()
        .map_err(io_err("run ip"))?;
    if !out.status.success() {
        return Err(Error::Setup {
            op: format!("set lo up in {}", ns.name()),
            reason: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(ns)
}

impl MultusNode {
    /// Node and pod namespaces named `<prefix>node-*` and `<prefix>pod-*`,
    /// the API server in the node namespace, and `nads` added to it (their
    /// host-local reservations under [`MultusNode::ipam_dir`]).
    pub fn start(prefix: &str, nads: &[BridgeNad<'_>]) -> Result<MultusNode, Error> {
        let node = netns_with_lo(&format!("{prefix}node"))?;
        let pod = netns_with_lo(&format!("{prefix}pod"))?;
        let server = KubeApiServer::start_in_netns(node.path())?;
        let dir = tempfile::tempdir().map_err(io_err("create temporary directory"))?;
        let ipam = dir.path().join("ipam");
        for n in nads {
            server.add_nad(
                n.namespace,
                n.name,
                &bridge_nad(n.bridge, n.subnet, &ipam, n.ips_capability),
            );
        }
        Ok(MultusNode {
            node,
            pod,
            server,
            dir,
            env: Vec::new(),
        })
    }

    /// host-local's data directory of the NADs.
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam")
    }

    /// The host-local reservations under [`MultusNode::ipam_dir`], as
    /// `<network>/<address>`, sorted.
    pub fn ipam_reservations(&self) -> Vec<String> {
        let mut out = Vec::new();
        for net in std::fs::read_dir(self.ipam_dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in std::fs::read_dir(net.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let n = f.file_name().to_string_lossy().into_owned();
                if n.parse::<std::net::IpAddr>().is_ok() {
                    out.push(format!("{}/{n}", net.file_name().to_string_lossy()));
                }
            }
        }
        out.sort();
        out
    }

    /// The regular files in `<dir>/<sub>` (multus's cache is `cni`).
    pub fn files_in(&self, sub: &str) -> Vec<String> {
        std::fs::read_dir(self.dir.path().join(sub))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// A thin multus config over the NADs (cluster network `cluster`,
    /// namespace isolation, the Go plugins as delegates, cache in `cni`).
    pub fn multus_conf(&self) -> Value {
        json!({"cniVersion": "1.0.0", "name": "multus-net", "type": "multus",
            "kubeconfig": self.server.kubeconfig_path(), "clusterNetwork": "cluster",
            "namespaceIsolation": true, "binDir": GO_PLUGINS,
            "cniDir": self.dir.path().join("cni"), "confDir": self.dir.path().join("conf")})
    }

    /// The thick daemon's socket directory.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("run/multus")
    }

    /// The daemon's configuration: everything multus needs lives here, the
    /// shim's own configuration only names the socket (and the cache, for
    /// the DEL fallback).
    pub fn daemon_config(&self) -> Value {
        json!({"socketDir": self.socket_dir(), "kubeconfig": self.server.kubeconfig_path(),
            "clusterNetwork": "cluster", "namespaceIsolation": true, "binDir": GO_PLUGINS,
            "cniDir": self.dir.path().join("cni"), "confDir": self.dir.path().join("conf"),
            "logFile": self.dir.path().join("daemon.log"), "logLevel": "debug"})
    }

    /// The shim's config for [`MultusNode::daemon_config`]'s daemon.
    pub fn shim_conf(&self) -> Value {
        json!({"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus-shim",
            "socketDir": self.socket_dir(), "cniDir": self.dir.path().join("cni"), "binDir": GO_PLUGINS})
    }

    /// The thin plugin configured as the daemon is (its own cache,
    /// `cni-thin`): the same pod through either.
    pub fn thin_conf(&self) -> Value {
        let mut c = self.daemon_config();
        c["cniVersion"] = json!("1.0.0");
        c["name"] = json!("multus-cni-network");
        c["type"] = json!("multus");
        c["cniDir"] = json!(self.dir.path().join("cni-thin"));
        c
    }

    /// `/run/netns/<pod>`.
    pub fn pod_path(&self) -> &Path {
        self.pod.path()
    }

    /// Runs `bin` inside the node namespace with `conf` on stdin, the
    /// Go plugins as `CNI_PATH`.
    pub fn run(&self, bin: &Path, conf: &Value, call: Call<'_>) -> Result<PluginRun, Error> {
        let start = Instant::now();
        let mut child = Command::new("ip")
            .args(["netns", "exec", self.node.name()])
            .arg(bin)
            .env("CNI_COMMAND", call.command)
            .env("CNI_CONTAINERID", call.cid)
            .env("CNI_NETNS", call.netns)
            .env("CNI_IFNAME", call.ifname)
            .env("CNI_PATH", GO_PLUGINS)
            .env(
                "CNI_ARGS",
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME={0};K8S_POD_UID=uid-{0}",
                    call.pod
                ),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("spawn {}", bin.display())))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(conf.to_string().as_bytes())
                .map_err(io_err(format!("write the config to {}", bin.display())))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err(format!("wait for {}", bin.display())))?;
        Ok(PluginRun {
            success: out.status.success(),
            stdout: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            took: start.elapsed(),
        })
    }

    /// Starts `multus-daemon` (`bin`) inside the node namespace with
    /// `config` written to `daemon-config.json`, and waits (10 s at most)
    /// until `socket` accepts connections.
    pub fn start_daemon(
        &self,
        bin: &Path,
        config: &Value,
        socket: &Path,
    ) -> Result<DaemonProcess, Error> {
        let path = self.dir.path().join("daemon-config.json");
        std::fs::write(&path, config.to_string())
            .map_err(io_err(format!("write {}", path.display())))?;
        let child = Command::new("ip")
            .args(["netns", "exec", self.node.name()])
            .arg(bin)
            .arg("--config")
            .arg(&path)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io_err(format!("spawn {}", bin.display())))?;
        let d = DaemonProcess(Some(child));
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(socket).is_err() {
            if Instant::now() >= deadline {
                return Err(Error::Setup {
                    op: format!("start {}", bin.display()),
                    reason: format!("the daemon did not open {} in 10 s", socket.display()),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(d)
    }
}

/// A daemon process, killed on drop.
#[derive(Debug)]
pub struct DaemonProcess(Option<Child>);

impl DaemonProcess {
    /// Kills it and waits for it (once).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The NADs of the in-process multus tests: a cluster network and three
/// NADs whose delegates are plugin types nobody installs (`cluster-plugin`,
/// `plugin-a`, `plugin-b` + `tuning` as a list, `plugin-c` in namespace
/// `other`): for a recording or no-op delegate executor.
pub fn add_fake_delegate_nads(server: &KubeApiServer) {
    server.add_nad(
        "kube-system",
        "cluster",
        r#"{"cniVersion":"1.0.0","type":"cluster-plugin"}"#,
    );
    server.add_nad(
        "ns1",
        "net-a",
        r#"{"cniVersion":"1.0.0","type":"plugin-a"}"#,
    );
    server.add_nad(
        "ns1",
        "net-b",
        r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"plugin-b"},{"type":"tuning"}]}"#,
    );
    server.add_nad(
        "other",
        "net-c",
        r#"{"cniVersion":"1.0.0","type":"plugin-c"}"#,
    );
}

fn ip_json(netns: &OwnedNetns, args: &[&str]) -> Value {
    let out = Command::new("ip")
        .args(["-n", netns.name(), "-j"])
        .args(args)
        .output();
    out.ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or(json!([]))
}

/// `ip -j addr` in `netns`: each interface's name and IPv4 CIDRs (empty
/// when `ip` fails).
pub fn ipv4_addrs(netns: &OwnedNetns) -> Vec<(String, Vec<String>)> {
    ip_json(netns, &["addr", "show"])
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            let name = l["ifname"].as_str().unwrap_or("").to_string();
            let ips = l["addr_info"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| a["family"] == "inet")
                .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
                .collect();
            (name, ips)
        })
        .collect()
}

/// The interface names in `netns`.
pub fn links(netns: &OwnedNetns) -> Vec<String> {
    ipv4_addrs(netns).into_iter().map(|(n, _)| n).collect()
}

/// The default routes in `netns`: (gateway, device).
pub fn default_routes(netns: &OwnedNetns) -> Vec<(String, String)> {
    ip_json(netns, &["route", "show", "default"])
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["gateway"].as_str().unwrap_or("").to_string(),
                r["dev"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}
