//! Helpers for the plugins' root integration tests: fresh namespaces, plugin
//! processes run inside a "node" namespace, and the independent `ip -j` /
//! `bridge -j` / `nft -j` oracles.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cni_netns::OwnedNetns;
use serde_json::Value;

/// Where Debian's containernetworking-plugins installs the Go reference.
pub(crate) use cni_testkit::premise::GO_PLUGINS;

/// Six random hex digits.
pub(crate) fn hex6() -> String {
    let mut b = [0u8; 3];
    getrandom_fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn getrandom_fill(b: &mut [u8]) {
    use std::io::Read;
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(b));
}

/// A unique test bridge name (`tb` + 6 hex digits): never `cni0`.
pub(crate) fn bridge_name() -> String {
    format!("tb{}", hex6())
}

/// A fresh namespace (deleted on drop) with `lo` up.
pub(crate) fn netns(prefix: &str) -> OwnedNetns {
    let ns = OwnedNetns::new(prefix).expect("create test netns");
    sh(&["ip", "-n", ns.name(), "link", "set", "lo", "up"]);
    ns
}

/// Runs a command, panicking with its stderr when it fails; returns stdout.
pub(crate) fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command, returning whether it succeeded.
pub(crate) fn sh_ok(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn json_of(args: &[&str]) -> Value {
    let text = sh(args);
    if text.trim().is_empty() {
        return Value::Array(vec![]);
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

/// `ip -j -n <ns> <args>`.
pub(crate) fn ip(ns: &OwnedNetns, args: &[&str]) -> Value {
    let mut a = vec!["ip", "-j", "-n", ns.name()];
    a.extend_from_slice(args);
    json_of(&a)
}

/// `bridge -j -n <ns> <args>`.
pub(crate) fn bridge(ns: &OwnedNetns, args: &[&str]) -> Value {
    let mut a = vec!["bridge", "-j", "-n", ns.name()];
    a.extend_from_slice(args);
    json_of(&a)
}

/// A command's text output run inside `ns` (`ip netns exec`).
pub(crate) fn exec_in(ns: &OwnedNetns, args: &[&str]) -> String {
    let mut a = vec!["ip", "netns", "exec", ns.name()];
    a.extend_from_slice(args);
    sh(&a)
}

/// A sysctl read inside `ns`.
pub(crate) fn sysctl(ns: &OwnedNetns, key: &str) -> String {
    exec_in(ns, &["sysctl", "-n", key]).trim().to_owned()
}

/// A counter of `/proc/net/snmp6` inside `ns` (per namespace), e.g.
/// `Icmp6OutNeighborSolicits`: the DAD probes (and neighbour lookups)
/// the namespace sent.
pub(crate) fn snmp6(ns: &OwnedNetns, counter: &str) -> u64 {
    exec_in(ns, &["cat", "/proc/net/snmp6"])
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(char::is_whitespace)?;
            (name == counter).then(|| value.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {counter} in /proc/net/snmp6"))
}

/// The names of the links in `ns`, `lo` excepted.
pub(crate) fn link_names(ns: &OwnedNetns) -> Vec<String> {
    ip(ns, &["link", "show"])
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str())
        .filter(|n| *n != "lo")
        .map(str::to_owned)
        .collect()
}

/// A directory for `CNI_PATH` holding symlinks to plugin binaries.
pub(crate) struct CniPath {
    pub(crate) dir: tempfile::TempDir,
}

impl CniPath {
    /// `plugins`: (type name, binary).
    pub(crate) fn new(plugins: &[(&str, &Path)]) -> CniPath {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, bin) in plugins {
            std::os::unix::fs::symlink(bin, dir.path().join(name)).expect("symlink");
        }
        CniPath { dir }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// One plugin invocation's outcome.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) ok: bool,
    pub(crate) json: Value,
    pub(crate) stderr: String,
}

impl Reply {
    /// The error message (`msg`) of a failed call.
    pub(crate) fn msg(&self) -> String {
        self.json["msg"].as_str().unwrap_or_default().to_owned()
    }
}

/// A plugin invocation: command, container, netns path, ifname.
pub(crate) struct Call<'a> {
    pub(crate) plugin: &'a Path,
    pub(crate) cni_path: &'a Path,
    pub(crate) command: &'a str,
    pub(crate) container_id: &'a str,
    pub(crate) netns: &'a str,
    pub(crate) ifname: &'a str,
    pub(crate) args: &'a str,
}

/// Runs `call` as a process started from a thread inside `node` (so the
/// plugin's "host" is the node namespace), with `stdin`.
pub(crate) fn run(node: &OwnedNetns, call: &Call<'_>, stdin: &Value) -> Reply {
    let input = serde_json::to_vec(stdin).expect("encode config");
    let out = node
        .run(|| {
            let mut child = Command::new(call.plugin)
                .env_clear()
                .env("CNI_COMMAND", call.command)
                .env("CNI_CONTAINERID", call.container_id)
                .env("CNI_NETNS", call.netns)
                .env("CNI_IFNAME", call.ifname)
                .env("CNI_PATH", call.cni_path)
                .env("CNI_ARGS", call.args)
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn plugin");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(&input)
                .expect("write stdin");
            child.wait_with_output().expect("wait plugin")
        })
        .expect("enter node netns");
    let text = String::from_utf8_lossy(&out.stdout);
    Reply {
        ok: out.status.success(),
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The netns path of a test namespace, as `CNI_NETNS`.
pub(crate) fn netns_path(ns: &OwnedNetns) -> String {
    ns.path().display().to_string()
}

/// The IPs host-local has reserved for `network` in `data_dir`.
pub(crate) fn reserved_ips(data_dir: &Path, network: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data_dir.join(network))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
        .collect();
    v.sort();
    v
}

/// Our built plugin binary of `name` next to the test binaries.
pub(crate) fn our_bin(env_path: &str) -> PathBuf {
    PathBuf::from(env_path)
}

/// Runs `cmd` (stdin closed, stdout and stderr captured) for at most
/// `limit`; a process still running then is killed and `None` returned
/// with what it printed (a daemon that should have refused to start).
pub(crate) fn run_for(
    mut cmd: Command,
    limit: std::time::Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("out");
    let file = std::fs::File::create(&log).expect("log");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("dup"))
        .stderr(file)
        .spawn()
        .expect("spawn");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

/// A pids cgroup of its own (cgroup v1's `pids` hierarchy, or v2 where its
/// `pids` controller is enabled) capping the tasks (threads) of the
/// processes moved into it: how a test makes thread creation fail
/// (`EAGAIN`) for a daemon, as a node's `pids.max` does. Root ignores
/// `RLIMIT_NPROC`; a cgroup holds for root too. Removed on drop (its
/// processes moved back to the root group first).
pub(crate) struct PidsCgroup {
    dir: PathBuf,
    root: PathBuf,
}

impl PidsCgroup {
    /// A new group, or why no pids controller can be used here.
    pub(crate) fn new() -> Result<PidsCgroup, String> {
        let v1 = Path::new("/sys/fs/cgroup/pids");
        let v2 = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .iter()
            .map(Path::new)
            .find(|p| {
                std::fs::read_to_string(p.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|w| w == "pids"))
            });
        let root = if v1.join("cgroup.procs").is_file() {
            v1.to_path_buf()
        } else if let Some(root) = v2 {
            // The controller must be on for the root's children.
            std::fs::write(root.join("cgroup.subtree_control"), "+pids")
                .map_err(|e| format!("enable pids in {}: {e}", root.display()))?;
            root.to_path_buf()
        } else {
            return Err("no pids cgroup controller (v1 /sys/fs/cgroup/pids or v2)".into());
        };
        let dir = root.join(format!("cni-rs-test-{}", hex6()));
        std::fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(PidsCgroup { dir, root })
    }

    /// Moves process `pid` (all its threads) into the group.
    pub(crate) fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", self.dir.display()));
    }

    /// Caps the group at `max` tasks.
    pub(crate) fn set_max(&self, max: usize) {
        std::fs::write(self.dir.join("pids.max"), max.to_string())
            .unwrap_or_else(|e| panic!("pids.max of {}: {e}", self.dir.display()));
    }

    /// Tasks in the group now.
    pub(crate) fn current(&self) -> usize {
        std::fs::read_to_string(self.dir.join("pids.current"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("pids.current of {}", self.dir.display()))
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
