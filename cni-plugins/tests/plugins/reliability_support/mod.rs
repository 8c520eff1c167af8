//! Shared pieces of the reliability tests: a seeded RNG, an [`Exec`] that
//! SIGKILLs a chosen plugin call (and its delegates) after a chosen delay,
//! and independent oracles over a node namespace (`ip -j link`,
//! `bridge -j link`, `nft -j list ruleset`, the files of the state
//! directories) with a diff against a baseline.
//!
//! Include with `#[path = "reliability_support/mod.rs"] mod support;` next
//! to `#[path = "common/nodenet.rs"] mod nodenet;`.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cni_exec::invoke::{find_in_path, plugin_error, Exec, PluginEnv};
use cni_exec::Error;
use serde_json::Value;

use crate::nodenet::{sh, Ns};

/// splitmix64: small, seedable, good enough to pick kill points.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// `RELIABILITY_SEED` if set, else a fresh seed; printed so a failing
    /// run can be replayed.
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("RELIABILITY_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let mut b = [0u8; 8];
                if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
                    let _ = f.read_exact(&mut b);
                }
                u64::from_le_bytes(b)
            });
        eprintln!("{what}: RELIABILITY_SEED={seed}");
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Kills, with SIGKILL to its process group, the `call`-th plugin call
/// (0-based, counted from [`KillingExec::arm`]) once it has run `delay`.
#[derive(Clone, Copy, Debug)]
pub struct KillPlan {
    /// Which call of the armed operation.
    pub call: usize,
    /// How long after its spawn.
    pub delay: Duration,
    /// SIGKILL the whole process group (the plugin and the delegates it
    /// exec'd); otherwise the plugin alone, as a runtime's own timeout
    /// does (its delegates run on, orphaned, and are waited for before the
    /// call returns, so recovery sees what they finished).
    pub group: bool,
}

/// One plugin call as the runtime made it.
#[derive(Clone, Debug)]
pub struct CallRecord {
    /// The plugin's file name.
    pub plugin: String,
    /// `CNI_COMMAND`.
    pub command: String,
    /// From spawn to exit.
    pub took: Duration,
    /// Whether our SIGKILL ended it.
    pub killed: bool,
}

#[derive(Default)]
struct State {
    plan: Option<KillPlan>,
    calls: Vec<CallRecord>,
    exec_delegates: bool,
}

/// [`cni_exec::ProcessExec`]'s fork/exec, with every plugin in its own
/// process group so a SIGKILL reaches the delegates it exec'd too (what a
/// node losing a runtime's cgroup, or the OOM killer taking a process
/// tree, does). The runtime code above it is the real [`CniConfig`].
///
/// [`CniConfig`]: cni_exec::CniConfig
#[derive(Default)]
pub struct KillingExec {
    state: Mutex<State>,
}

impl KillingExec {
    /// Forgets the previous calls and arms `plan` (or none).
    pub fn arm(&self, plan: Option<KillPlan>) {
        let mut s = self.state.lock().unwrap();
        s.plan = plan;
        s.calls.clear();
    }

    /// Whether plugins exec their delegates (`CNI_RS_EXEC_DELEGATES=1`)
    /// instead of running same-build delegates in-process.
    pub fn set_exec_delegates(&self, on: bool) {
        self.state.lock().unwrap().exec_delegates = on;
    }

    /// The calls since the last [`KillingExec::arm`].
    pub fn calls(&self) -> Vec<CallRecord> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The call our SIGKILL ended, if any.
    pub fn killed(&self) -> Option<CallRecord> {
        self.calls().into_iter().find(|c| c.killed)
    }
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

impl Exec for KillingExec {
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, Error> {
        find_in_path(plugin_type, paths)
    }

    fn exec_plugin(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error> {
        let (plan, exec_delegates) = {
            let s = self.state.lock().unwrap();
            let index = s.calls.len();
            (s.plan.filter(|p| p.call == index), s.exec_delegates)
        };
        let kill_after = plan.map(|p| p.delay);
        let group = plan.is_none_or(|p| p.group);
        let io_err = |source| Error::Io {
            op: "run plugin",
            path: plugin.to_path_buf(),
            source,
        };
        let start = Instant::now();
        let mut cmd = std::process::Command::new(plugin);
        if exec_delegates {
            cmd.env("CNI_RS_EXEC_DELEGATES", "1");
        } else {
            cmd.env_remove("CNI_RS_EXEC_DELEGATES");
        }
        let mut child = cmd
            .envs(env.vars())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Spawn {
                path: plugin.to_path_buf(),
                source,
            })?;
        let pid = child.id() as libc::pid_t;
        let mut w = child.stdin.take().expect("stdin");
        let data = stdin.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
        let out = reader(child.stdout.take().expect("stdout"));
        let err = reader(child.stderr.take().expect("stderr"));
        // Polled, not waited: the group leader is never reaped before the
        // kill, so the process group id cannot have been reused.
        let status = loop {
            if let Some(status) = child.try_wait().map_err(io_err)? {
                break status;
            }
            if kill_after.is_some_and(|d| start.elapsed() >= d) {
                // SAFETY: kill(2) on a process group we created and have
                // not reaped; no memory is involved.
                unsafe { libc::kill(if group { -pid } else { pid }, libc::SIGKILL) };
                let status = child.wait().map_err(io_err)?;
                // Orphaned delegates finish (or fail) on their own.
                let deadline = Instant::now() + Duration::from_secs(20);
                // SAFETY: signal 0 only checks that the group exists.
                while unsafe { libc::kill(-pid, 0) } == 0 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(2));
                }
                break status;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let took = start.elapsed();
        let _ = writer.join();
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        let killed = status.signal() == Some(libc::SIGKILL);
        self.state.lock().unwrap().calls.push(CallRecord {
            plugin: plugin
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            command: env.command.as_str().to_string(),
            took,
            killed,
        });
        if status.success() {
            Ok(stdout)
        } else {
            let text = if killed {
                "signal: killed".to_string()
            } else {
                format!("{status}")
            };
            Err(Error::Plugin(plugin_error(&text, &stdout, &stderr)))
        }
    }
}

/// What the oracles see of a node: links, bridge ports, the nft ruleset
/// (handles dropped) and the files under the state directories.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeState {
    /// Link names in the node namespace.
    pub links: BTreeSet<String>,
    /// (port, master) pairs from `bridge -j link`.
    pub ports: BTreeSet<(String, String)>,
    /// `nft -j list ruleset` without `handle`, `metainfo` and `expires`.
    pub nft: Value,
    /// Every file under the state directories with its content (`None`
    /// for files whose content changes by design: `last_reserved_ip.*`).
    pub files: BTreeMap<PathBuf, Option<Vec<u8>>>,
}

/// Drops what an `nft -j` listing changes without a change of the rules:
/// handles, the metainfo object, element countdowns; a set's elements
/// sorted.
pub fn strip_handles(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("handle");
            m.remove("metainfo");
            // Elements carry a long timeout whose countdown moves.
            m.remove("expires");
            m.values_mut().for_each(strip_handles);
            // A hash set lists its elements in bucket order, which a
            // rehash may change: compare them as a set.
            if let Some(Value::Array(elems)) = m.get_mut("elem") {
                elems.sort_by_key(|e| e.to_string());
            }
        }
        Value::Array(a) => {
            a.retain(|x| x.get("metainfo").is_none());
            a.iter_mut().for_each(strip_handles);
        }
        _ => {}
    }
}

/// A command's JSON output (`[]` when it printed nothing); the command
/// must succeed.
pub fn json_out(args: &[&str]) -> Value {
    let out = sh(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        return Value::Array(Vec::new());
    }
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Every file under `dir`, recursively.
pub fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut dirs = Vec::new();
    walk_with_dirs(dir, out, &mut dirs);
}

/// Every file under `dir` into `files` and every directory below it into
/// `dirs`, recursively.
pub fn walk_with_dirs(dir: &Path, files: &mut Vec<PathBuf>, dirs: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk_with_dirs(&p, files, dirs);
            dirs.push(p);
        } else {
            files.push(p);
        }
    }
}

impl NodeState {
    /// Reads the state of `node` and of `dirs`.
    pub fn read(node: &Ns, dirs: &[PathBuf]) -> NodeState {
        let links = json_out(&["ip", "-n", &node.name, "-j", "link", "show"]);
        let links = links
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["ifname"].as_str().map(String::from))
            .collect();
        let ports = json_out(&[
            "ip", "netns", "exec", &node.name, "bridge", "-j", "link", "show",
        ]);
        let ports = ports
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["ifname"].as_str()?.to_string(),
                    p["master"].as_str().unwrap_or("").to_string(),
                ))
            })
            .collect();
        let mut nft = json_out(&[
            "ip", "netns", "exec", &node.name, "nft", "-j", "list", "ruleset",
        ]);
        strip_handles(&mut nft);
        let mut paths = Vec::new();
        for d in dirs {
            walk(d, &mut paths);
        }
        // host-local's index and inode pool (cni-ipam `store/disk.rs`) hold
        // released files for reuse and hints verified before use: not
        // reservations, and they change on every call.
        let files = paths
            .into_iter()
            .filter(|p| !p.components().any(|c| c.as_os_str() == ".cni-ipam-index"))
            .map(|p| {
                let volatile = p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("last_reserved_ip"));
                let content = if volatile {
                    None
                } else {
                    Some(std::fs::read(&p).unwrap_or_default())
                };
                (p, content)
            })
            .collect();
        NodeState {
            links,
            ports,
            nft,
            files,
        }
    }

    /// What differs from `base`, one line each (empty: identical).
    pub fn diff(&self, base: &NodeState) -> Vec<String> {
        let mut out = Vec::new();
        for l in self.links.difference(&base.links) {
            out.push(format!("extra link {l}"));
        }
        for l in base.links.difference(&self.links) {
            out.push(format!("missing link {l}"));
        }
        for p in self.ports.difference(&base.ports) {
            out.push(format!("extra bridge port {p:?}"));
        }
        for p in base.ports.difference(&self.ports) {
            out.push(format!("missing bridge port {p:?}"));
        }
        if self.nft != base.nft {
            out.push(format!(
                "nft ruleset differs:\n  now  {}\n  base {}",
                self.nft, base.nft
            ));
        }
        for (p, c) in &self.files {
            match base.files.get(p) {
                None => out.push(format!(
                    "extra file {} ({:?})",
                    p.display(),
                    c.as_deref().map(String::from_utf8_lossy)
                )),
                Some(b) if b != c => out.push(format!("changed file {}", p.display())),
                _ => {}
            }
        }
        for p in base.files.keys() {
            if !self.files.contains_key(p) {
                out.push(format!("missing file {}", p.display()));
            }
        }
        out
    }

    /// Where `needle` (a container id) still appears: nft ruleset, file
    /// names, file contents.
    pub fn mentions(&self, needle: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.nft.to_string().contains(needle) {
            out.push(format!("nft ruleset mentions {needle}"));
        }
        for (p, c) in &self.files {
            let in_name = p.to_string_lossy().contains(needle);
            let in_content = c
                .as_deref()
                .is_some_and(|c| String::from_utf8_lossy(c).contains(needle));
            if in_name || in_content {
                out.push(format!("file {} mentions {needle}", p.display()));
            }
        }
        out
    }
}

/// The link names in a pod namespace other than `lo`.
pub fn pod_links(pod: &Ns) -> Vec<String> {
    let v = json_out(&["ip", "-n", &pod.name, "-j", "link", "show"]);
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(String::from))
        .filter(|n| n != "lo")
        .collect()
}

/// Whether `ip` answers one ping from inside `from`.
pub fn pings(from: &Ns, ip: &str) -> bool {
    // Three tries: one lost echo on a loaded 2-core CI box is not a fault.
    (0..3).any(|_| {
        from.exec(&["ping", "-c1", "-W1", "-q", ip])
            .status
            .success()
    })
}

/// A tiny tmpfs mounted on a fresh temp dir, unmounted on drop.
pub struct Tmpfs {
    /// The mount point.
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount(8) syntax, e.g. "64k").
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().to_string_lossy().into_owned();
        crate::nodenet::sh_ok(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size}"),
            "tmpfs",
            &p,
        ]);
        Tmpfs { dir }
    }

    /// Fills it until a write fails with ENOSPC.
    pub fn fill(&self) {
        let mut f = std::fs::File::create(self.dir.path().join("filler")).expect("create filler");
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        // Small files need inodes and blocks of their own: take them too.
        for i in 0.. {
            let p = self.dir.path().join(format!("small{i}"));
            match std::fs::write(&p, b"x") {
                Ok(()) => {}
                Err(_) => {
                    let _ = std::fs::remove_file(&p);
                    break;
                }
            }
            if i > 100_000 {
                break;
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = sh(&["umount", "-l", &self.dir.path().to_string_lossy()]);
    }
}
