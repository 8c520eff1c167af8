//! Test helpers for plugins that program a node: fresh "node" and "pod"
//! network namespaces (removed on drop, also on failure), commands and
//! plugin processes run inside a namespace, TCP/UDP endpoints living in a
//! namespace, and a plugin directory with our binaries.
//!
//! Include with `#[path = "common/nodenet.rs"] mod nodenet;`.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cni_netns::Netns;

/// A random hex suffix for names.
pub fn suffix() -> String {
    let mut b = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs a command, returns its output.
pub fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("spawn {args:?}: {e}"))
}

/// Runs a command that must succeed; returns stdout.
pub fn sh_ok(args: &[&str]) -> String {
    let out = sh(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace made by the test (`ip netns add`), deleted on drop.
pub struct Ns {
    /// Its name under /run/netns.
    pub name: String,
}

impl Ns {
    /// Creates `<prefix>-<random>` with `lo` up.
    pub fn new(prefix: &str) -> Ns {
        let name = format!("{prefix}-{}", suffix());
        sh_ok(&["ip", "netns", "add", &name]);
        let ns = Ns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `/run/netns/<name>`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Opens it.
    pub fn netns(&self) -> Netns {
        Netns::open(self.path()).expect("open netns")
    }

    /// `ip -n <name> ARGS` (must succeed); returns stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "-n", &self.name];
        a.extend_from_slice(args);
        sh_ok(&a)
    }

    /// `ip netns exec <name> ARGS`.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut a = vec!["ip", "netns", "exec", &self.name];
        a.extend_from_slice(args);
        sh(&a)
    }

    /// `ip netns exec <name> ARGS` (must succeed); returns stdout.
    pub fn exec_ok(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "netns", "exec", &self.name];
        a.extend_from_slice(args);
        sh_ok(&a)
    }

    /// Wires `client` to this namespace as a host on its uplink: a veth
    /// `up0` here (address `<net>.1/24`) to `eth0` in `client`
    /// (`<net>.2/24`, default route via `<net>.1`). `net` is the /24's
    /// first three octets, e.g. `"10.78.0"`.
    pub fn uplink(&self, client: &Ns, net: &str) {
        self.ip(&[
            "link",
            "add",
            "up0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &client.name,
        ]);
        self.ip(&["addr", "add", &format!("{net}.1/24"), "dev", "up0"]);
        self.ip(&["link", "set", "up0", "up"]);
        client.ip(&["addr", "add", &format!("{net}.2/24"), "dev", "eth0"]);
        client.ip(&["link", "set", "eth0", "up"]);
        client.ip(&["route", "add", "default", "via", &format!("{net}.1")]);
    }

    /// Writes a sysctl inside the namespace.
    pub fn sysctl(&self, key: &str, value: &str) {
        self.exec_ok(&["sysctl", "-qw", &format!("{key}={value}")]);
    }

    /// Reads a sysctl inside the namespace.
    pub fn sysctl_get(&self, key: &str) -> String {
        self.exec_ok(&["sysctl", "-n", key]).trim().to_string()
    }

    /// Spawns `cmd` (already configured) with this namespace as its
    /// network namespace: forked from a thread that entered it, so no
    /// `ip netns exec` (and its mount namespace) sits in between.
    pub fn output(&self, mut cmd: Command, stdin: &[u8]) -> Output {
        let stdin = stdin.to_vec();
        self.netns()
            .run(move || {
                let mut child = cmd
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn");
                let mut si = child.stdin.take().expect("stdin");
                si.write_all(&stdin).expect("write stdin");
                drop(si);
                child.wait_with_output().expect("wait")
            })
            .expect("run in netns")
    }

    /// `nft -j list ruleset` inside the namespace, parsed.
    pub fn nft_ruleset(&self) -> serde_json::Value {
        let out = self.exec_ok(&["nft", "-j", "list", "ruleset"]);
        serde_json::from_str(&out).expect("nft json")
    }

    /// The comments of every rule in the namespace's ruleset.
    pub fn nft_rule_comments(&self) -> Vec<String> {
        let v = self.nft_ruleset();
        v["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o.get("rule")?.get("comment")?.as_str().map(String::from))
            .collect()
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.name]);
    }
}

/// A TCP server in a namespace answering each connection with `reply`
/// then closing; stops on drop.
pub struct TcpServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TcpServer {
    /// Listens on `addr` inside `ns`; each connection gets `reply`, a space,
    /// the peer's address and a newline.
    pub fn start(ns: &Ns, addr: &str, reply: &str) -> TcpServer {
        let addr: SocketAddr = addr.parse().expect("addr");
        let reply = reply.to_string();
        TcpServer::serve(&ns.netns(), addr, move |peer| format!("{reply} {peer}\n"))
    }

    /// Listens on `addr` inside the namespace at `netns`; each connection
    /// gets exactly `reply`.
    pub fn answering(netns: &Path, addr: SocketAddr, reply: &str) -> TcpServer {
        let reply = reply.to_string();
        TcpServer::serve(&Netns::open(netns).expect("open netns"), addr, move |_| {
            reply.clone()
        })
    }

    fn serve(
        netns: &Netns,
        addr: SocketAddr,
        reply: impl Fn(SocketAddr) -> String + Send + 'static,
    ) -> TcpServer {
        let listener = netns
            .run(move || TcpListener::bind(addr))
            .expect("enter")
            .expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut c, peer)) => {
                        let _ = c.set_nonblocking(false);
                        let _ = c.write_all(reply(peer).as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        TcpServer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connects to `addr` from inside `ns` and returns what the server sent
/// (`Err` with the reason when it could not connect or read).
pub fn tcp_get(ns: &Ns, addr: &str) -> Result<String, String> {
    let addr: SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
    let stream = ns
        .netns()
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(2)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut stream = stream;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut s = String::new();
    stream
        .read_to_string(&mut s)
        .map_err(|e| format!("read {addr}: {e}"))?;
    Ok(s)
}

/// A UDP socket bound inside `ns`.
pub fn udp_bind(ns: &Ns, addr: &str) -> UdpSocket {
    let addr: SocketAddr = addr.parse().expect("addr");
    let s = ns
        .netns()
        .run(move || UdpSocket::bind(addr))
        .expect("enter")
        .expect("bind udp");
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    s
}

/// Receives one datagram (None on timeout).
pub fn udp_recv(s: &UdpSocket) -> Option<String> {
    let mut buf = [0u8; 512];
    s.recv_from(&mut buf)
        .ok()
        .map(|(n, _)| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// The directory holding this test run's binaries (`target/<profile>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// A binary of this workspace: built by this run, or built now with cargo
/// (`cnitool` lives in `cni-exec`, which this crate's tests do not build).
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    let path = target_dir().join(bin);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut args = vec!["build", "--quiet", "-p", package, "--bin", bin];
        if target_dir().ends_with("release") {
            args.push("--release");
        }
        let status = Command::new(cargo)
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("spawn cargo");
        assert!(status.success(), "cargo build -p {package} --bin {bin}");
    }
    assert!(path.exists(), "{} missing", path.display());
    path
}

/// A plugin directory (a temp dir of symlinks): our `flannel` and
/// `portmap`; `bridge` and `host-local` ours when this workspace built them,
/// otherwise the Go reference's from /usr/lib/cni.
pub struct PluginDir {
    /// The directory.
    pub dir: tempfile::TempDir,
}

impl PluginDir {
    /// Links `ours` (name, path) and the delegates.
    pub fn new(ours: &[(&str, &str)]) -> PluginDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, path) in ours {
            std::os::unix::fs::symlink(path, dir.path().join(name)).expect("symlink");
        }
        for name in ["bridge", "host-local", "loopback"] {
            let mine = target_dir().join(name);
            let src = if mine.exists() {
                mine
            } else {
                PathBuf::from("/usr/lib/cni").join(name)
            };
            if !dir.path().join(name).exists() {
                std::os::unix::fs::symlink(src, dir.path().join(name)).expect("symlink");
            }
        }
        PluginDir { dir }
    }

    /// The directory path as a string.
    pub fn path(&self) -> String {
        self.dir.path().display().to_string()
    }
}
