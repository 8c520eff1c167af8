//! A runtime-side collector of leaked attachments: what `cni-gc` runs, for
//! nodes whose runtime never sends CNI GC (containerd through go-cni sends
//! none; CRI-O only at start-up; a 1.0.0 config cannot receive one).
//!
//! It reads what the runtime says is alive (its pod sandboxes, through a
//! [`SandboxLister`]: CRI `ListPodSandbox` in `cni-gc`), libcni's result
//! cache (what the runtime attached: containerd and CRI-O write it through
//! libcni) and the network configs, then does libcni's two GC phases for
//! every configured network:
//!
//! 1. every cached attachment whose container is not a ready sandbox is
//!    DELeted with its cached config and result (the cache file goes only
//!    when the DEL succeeds);
//! 2. networks at cniVersion 1.1.0 get a GC with `cni.dev/valid-attachments`
//!    = the attachments that are alive, so plugins reclaim what has no cache
//!    file at all.
//!
//! It never guesses. Nothing is collected when the runtime cannot be asked,
//! or lists no sandbox while cached attachments are younger than
//! `min_age` (a runtime that lost its state, or the wrong socket). An
//! attachment cached less than `min_age` ago is never DELeted: a sandbox
//! being started is cached before the runtime lists it. Phase 2 waits while
//! a network namespace younger than `min_age` has no cached attachment (a
//! sandbox may be in the middle of its ADD, which a GC would undo), and for
//! a network while an unreadable cache file may be one of its attachments.
//! Networks with `disableGC`, and attachments of networks that are not in
//! the conf dir, are left alone (a network shared with another runtime must
//! set `disableGC`, as the spec says).
//!
//! [`plan`] is the decision, pure; [`Collector::observe`] reads the node
//! and [`Collector::execute`] acts, reporting one [`Action`] at a time.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use cni_exec::collector::{plan, Observation, RuntimeSandbox};
//!
//! // The runtime lists one ready sandbox and nothing is cached: nothing to do.
//! let obs = Observation {
//!     now: SystemTime::now(),
//!     sandboxes: vec![RuntimeSandbox { id: "abc".into(), ready: true }],
//!     cache: Vec::new(),
//!     networks: Vec::new(),
//!     netns: Vec::new(),
//! };
//! let p = plan(&obs, Duration::from_secs(3600))?;
//! assert!(p.dels.is_empty() && p.gcs.is_empty());
//! # Ok::<(), cni_exec::Error>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use cni_types::{GcAttachment, NetworkConfigList};

use crate::cache::{CachedAttachment, CachedFile};
use crate::conf;
use crate::{CniConfig, Error};

/// A pod sandbox as the runtime reports it (CRI `PodSandbox`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeSandbox {
    /// The sandbox id: the container id of its CNI attachments.
    pub id: String,
    /// `SANDBOX_READY`: its network is in use. A sandbox that is not ready
    /// was stopped, and its network torn down (or meant to be).
    pub ready: bool,
}

/// Where the collector learns which sandboxes are alive.
pub trait SandboxLister {
    /// Every sandbox the runtime knows, or why it cannot say.
    fn list_sandboxes(&self) -> Result<Vec<RuntimeSandbox>, String>;
    /// The runtime, for messages (`"containerd at /run/containerd/containerd.sock"`).
    fn describe(&self) -> String;
}

/// A network config file of the conf dir.
#[derive(Clone, Debug)]
pub struct ConfiguredNetwork {
    /// The file.
    pub file: PathBuf,
    /// The network it configures (a `.conf` upgraded to a one-plugin
    /// list), or why it could not be read.
    pub list: Result<NetworkConfigList, String>,
}

/// What the collector decides on.
#[derive(Clone, Debug)]
pub struct Observation {
    /// When it was read.
    pub now: SystemTime,
    /// The runtime's sandboxes.
    pub sandboxes: Vec<RuntimeSandbox>,
    /// The result cache's files.
    pub cache: Vec<CachedFile>,
    /// The conf dir's network configs, in libcni's loading order.
    pub networks: Vec<ConfiguredNetwork>,
    /// The node's network namespace mount points and when each was made.
    pub netns: Vec<(PathBuf, Option<SystemTime>)>,
}

/// A cached attachment to DEL (phase 1).
#[derive(Clone, Debug)]
pub struct StaleAttachment {
    /// The attachment, as cached.
    pub attachment: CachedAttachment,
    /// The config it was made with (from the cache).
    pub list: NetworkConfigList,
}

/// A network to GC (phase 2).
#[derive(Clone, Debug)]
pub struct NetworkGc {
    /// The network's config (from the conf dir).
    pub list: NetworkConfigList,
    /// Its attachments that are alive (or too young to judge).
    pub valid: Vec<GcAttachment>,
}

/// Something left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// What (`net/cid/eth0`, `gc net`, a file).
    pub what: String,
    /// Why.
    pub why: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skip {}: {}", self.what, self.why)
    }
}

/// The collector's decision.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Phase 1: cached attachments of dead containers.
    pub dels: Vec<StaleAttachment>,
    /// Phase 2: networks whose plugins get a GC.
    pub gcs: Vec<NetworkGc>,
    /// What is left alone.
    pub skipped: Vec<Skipped>,
}

/// `net/container/ifname`.
fn attachment_name(a: &CachedAttachment) -> String {
    format!("{}/{}/{}", a.network, a.container_id, a.ifname)
}

/// The collector's decision on `obs`: see the [module](self) for the rules.
/// Fails, collecting nothing, when the runtime lists no sandbox while
/// attachments younger than `min_age` are cached.
pub fn plan(obs: &Observation, min_age: Duration) -> Result<Plan, Error> {
    let young = |t: Option<SystemTime>| match t {
        // A clock step or an unknown time: too young to judge.
        Some(t) => obs.now.duration_since(t).map_or(true, |age| age < min_age),
        None => true,
    };
    let cached: Vec<(&CachedFile, &CachedAttachment)> = obs
        .cache
        .iter()
        .filter_map(|f| f.attachment.as_ref().ok().map(|a| (f, a)))
        .collect();
    if obs.sandboxes.is_empty() {
        let recent = cached.iter().filter(|(f, _)| young(f.modified)).count();
        if recent > 0 {
            return Err(Error::CollectRefused {
                reason: format!(
                    "the runtime lists no sandbox, but {recent} cached attachment(s) are younger \
                     than {min_age:?}: a runtime that lost its state, or the wrong runtime socket"
                ),
            });
        }
    }
    let live: BTreeSet<&str> = obs
        .sandboxes
        .iter()
        .filter(|s| s.ready)
        .map(|s| s.id.as_str())
        .collect();
    let mut out = Plan::default();
    let mut skip = |what: String, why: String| out.skipped.push(Skipped { what, why });

    // The networks, by name: the first file of a name wins (libcni's order).
    let mut networks: BTreeMap<&str, &NetworkConfigList> = BTreeMap::new();
    for n in &obs.networks {
        match &n.list {
            Ok(list) => {
                if networks.contains_key(list.name.as_str()) {
                    skip(
                        n.file.display().to_string(),
                        format!("network {:?} is configured by an earlier file", list.name),
                    );
                } else {
                    networks.insert(&list.name, list);
                }
            }
            Err(e) => skip(
                n.file.display().to_string(),
                format!("unreadable config: {e}"),
            ),
        }
    }

    // Phase 1, and what phase 2 must keep.
    let mut valid: BTreeMap<&str, Vec<GcAttachment>> = BTreeMap::new();
    let mut unconfigured: BTreeMap<&str, usize> = BTreeMap::new();
    for (file, a) in &cached {
        let Some(list) = networks.get(a.network.as_str()) else {
            *unconfigured.entry(&a.network).or_default() += 1;
            continue;
        };
        if list.disable_gc {
            continue;
        }
        let alive = live.contains(a.container_id.as_str());
        if alive || young(file.modified) {
            if !alive {
                skip(
                    attachment_name(a),
                    format!("cached less than {min_age:?} ago: a sandbox may be starting"),
                );
            }
            valid.entry(&a.network).or_default().push(GcAttachment {
                container_id: a.container_id.clone(),
                ifname: a.ifname.clone(),
            });
            continue;
        }
        match cached_list(a) {
            Ok(cached) if cached.disable_gc => {
                skip(attachment_name(a), "its cached config has disableGC".into());
            }
            Ok(cached) => out.dels.push(StaleAttachment {
                attachment: (*a).clone(),
                list: cached,
            }),
            Err(e) => skip(
                attachment_name(a),
                format!("cached config unreadable ({e}); cache kept"),
            ),
        }
    }
    for (network, n) in unconfigured {
        skip(
            format!("network {network:?}"),
            format!("not in the conf dir: {n} cached attachment(s) left alone"),
        );
    }
    for f in obs.cache.iter().filter(|f| f.attachment.is_err()) {
        let why = f.attachment.as_ref().err().cloned().unwrap_or_default();
        skip(f.path.display().to_string(), format!("{why}; kept"));
    }

    // Phase 2. A sandbox in the middle of its ADD has a network namespace
    // but no cached attachment yet: a GC would take what its ADD made.
    let cached_netns: BTreeSet<PathBuf> = cached
        .iter()
        .filter(|(_, a)| !a.netns.is_empty())
        .map(|(_, a)| canonical(Path::new(&a.netns)))
        .collect();
    let starting: Option<&PathBuf> = obs
        .netns
        .iter()
        .filter(|(_, made)| young(*made))
        .map(|(p, _)| p)
        .find(|p| !cached_netns.contains(&canonical(p)));
    for (name, list) in &networks {
        let what = format!("gc {name}");
        if list.disable_gc {
            skip(what, "disableGC".into());
            continue;
        }
        if !list.version().is_ok_and(|v| v.supports_status_and_gc()) {
            skip(
                what,
                format!(
                    "cniVersion {:?} has no GC: DEL of cached attachments only",
                    list.cni_version
                ),
            );
            continue;
        }
        // The network's own reason first (it lasts until the file is
        // mended), then the node-wide, passing one.
        let prefix = format!("{name}-");
        if let Some(f) = obs.cache.iter().find(|f| {
            f.attachment.is_err()
                && f.path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
        }) {
            skip(
                what,
                format!(
                    "cache file {} is unreadable and may be a live attachment (postponed)",
                    f.path.display()
                ),
            );
            continue;
        }
        if let Some(ns) = starting {
            skip(
                what,
                format!(
                    "network namespace {} is younger than {min_age:?} and nothing is cached for \
                     it: a sandbox may be starting (postponed)",
                    ns.display()
                ),
            );
            continue;
        }
        out.gcs.push(NetworkGc {
            list: (*list).clone(),
            valid: valid.remove(name).unwrap_or_default(),
        });
    }
    Ok(out)
}

/// The config a cached attachment was made with, as a list (libcni caches
/// the list's bytes, or a single config's for `AddNetwork`).
fn cached_list(a: &CachedAttachment) -> Result<NetworkConfigList, String> {
    let value: serde_json::Value =
        serde_json::from_slice(&a.config).map_err(|e| format!("not JSON: {e}"))?;
    let list = if value.get("plugins").is_some() {
        NetworkConfigList::from_slice(&a.config)
    } else {
        NetworkConfigList::from_single_conf(&a.config)
    }
    .map_err(|e| e.to_string())?;
    if list.name != a.network {
        return Err(format!(
            "it names network {:?}, the cache file {:?}",
            list.name, a.network
        ));
    }
    Ok(list)
}

/// `path` with its symlinks resolved (`/var/run` is `/run`), or as it is.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// What the collector did with one attachment or network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// `del net/cid/ifname` or `gc net`.
    pub target: String,
    /// How it went.
    pub outcome: Outcome,
}

/// How an [`Action`] went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Ok,
    /// Not done: a dry run.
    DryRun,
    /// Failed; for a DEL the cache file is kept, so a later run tries again.
    Failed(String),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Ok => write!(f, "{}: ok", self.target),
            Outcome::DryRun => write!(f, "{}: would run (dry run)", self.target),
            Outcome::Failed(e) if self.target.starts_with("del ") => {
                write!(f, "{}: error {e} (cache kept)", self.target)
            }
            Outcome::Failed(e) => write!(f, "{}: error {e}", self.target),
        }
    }
}

/// The counts of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Attachments DELeted.
    pub deleted: usize,
    /// Networks GCed.
    pub collected: usize,
    /// Actions that failed.
    pub failed: usize,
    /// Things left alone.
    pub skipped: usize,
    /// Actions a dry run would have taken.
    pub dry: usize,
    /// How long the run took.
    pub elapsed: Duration,
}

impl Summary {
    /// Counts one action's outcome; `done` counts a success.
    fn count(&mut self, outcome: &Outcome, done: fn(&mut Summary)) {
        match outcome {
            Outcome::Ok => done(self),
            Outcome::DryRun => self.dry += 1,
            Outcome::Failed(_) => self.failed += 1,
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} deleted, {} network(s) collected, {} failed, {} skipped",
            self.deleted, self.collected, self.failed, self.skipped
        )?;
        if self.dry > 0 {
            write!(f, ", {} left to a real run (dry run)", self.dry)?;
        }
        write!(f, ", in {:.3} s", self.elapsed.as_secs_f64())
    }
}

/// Where the collector finds the node's state, and how careful it is.
#[derive(Clone, Debug)]
pub struct Collector {
    /// The network configs (`/etc/cni/net.d`).
    pub conf_dir: PathBuf,
    /// Runs the plugins; its cache is the runtime's (`/var/lib/cni`).
    pub cni: CniConfig,
    /// Attachments and network namespaces younger than this are never
    /// judged dead.
    pub min_age: Duration,
    /// How many DELs run at once (0 and 1: one at a time). The attachments
    /// are independent, as the pods a kubelet stops together; a DEL spends
    /// most of its time waiting (a process start, the kernel's deletion of
    /// a veth), so a few at once take a fraction of the time.
    pub in_flight: usize,
}

impl Collector {
    /// Reads the runtime's sandboxes, the cache, the configs and the
    /// node's network namespaces. Fails when the runtime cannot say which
    /// sandboxes are alive, or the cache cannot be listed.
    pub fn observe(&self, runtime: &dyn SandboxLister) -> Result<Observation, Error> {
        let now = SystemTime::now();
        let sandboxes = runtime
            .list_sandboxes()
            .map_err(|reason| Error::CollectRefused {
                reason: format!("{}: {reason}", runtime.describe()),
            })?;
        Ok(Observation {
            now,
            sandboxes,
            cache: self.cni.cache().scan()?,
            networks: configured_networks(&self.conf_dir)?,
            netns: network_namespaces(),
        })
    }

    /// Carries out `plan` (its DELs, [`Collector::in_flight`] at a time,
    /// then its GCs), calling `report` after each action, on the calling
    /// thread; with `dry_run` only reports.
    pub fn execute(&self, plan: &Plan, dry_run: bool, mut report: impl FnMut(&Action)) -> Summary {
        let start = Instant::now();
        let mut summary = Summary {
            skipped: plan.skipped.len(),
            ..Summary::default()
        };
        let act = |target: String, run: &dyn Fn() -> Result<(), Error>| {
            let outcome = if dry_run {
                Outcome::DryRun
            } else {
                match run() {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            };
            Action { target, outcome }
        };
        let workers = self.in_flight.clamp(1, plan.dels.len().max(1));
        let next = AtomicUsize::new(0);
        let (done, actions) = mpsc::channel::<Action>();
        std::thread::scope(|s| {
            for _ in 0..workers {
                let (done, next, act) = (done.clone(), &next, &act);
                s.spawn(move || {
                    while let Some(d) = plan.dels.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let rt = d.attachment.runtime_conf();
                        let action =
                            act(format!("del {}", attachment_name(&d.attachment)), &|| {
                                self.cni.del_network_list(&d.list, &rt)
                            });
                        if done.send(action).is_err() {
                            return;
                        }
                    }
                });
            }
            drop(done);
            for action in actions {
                summary.count(&action.outcome, |s| s.deleted += 1);
                report(&action);
            }
        });
        for g in &plan.gcs {
            let action = act(format!("gc {}", g.list.name), &|| {
                self.cni.gc_plugins(&g.list, Some(&g.valid))
            });
            summary.count(&action.outcome, |s| s.collected += 1);
            report(&action);
        }
        summary.elapsed = start.elapsed();
        summary
    }
}

/// The network configs of `dir` in libcni's loading order (`.conflist`,
/// then `.conf` and `.json`, each by name), each parsed or with the reason
/// it could not be.
pub fn configured_networks(dir: &Path) -> Result<Vec<ConfiguredNetwork>, Error> {
    let mut out = Vec::new();
    for file in conf::conf_files(dir, &[".conflist"])? {
        let list = conf::conf_list_from_file(&file).map_err(|e| e.to_string());
        out.push(ConfiguredNetwork { file, list });
    }
    for file in conf::conf_files(dir, &[".conf", ".json"])? {
        let list = conf::conf_list_from_conf_file(&file).map_err(|e| e.to_string());
        out.push(ConfiguredNetwork { file, list });
    }
    Ok(out)
}

/// The node's network namespace bind mounts (`nsfs` mounts of a `net:`
/// namespace in this process's mount table) with the time each was made.
pub fn network_namespaces() -> Vec<(PathBuf, Option<SystemTime>)> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    parse_netns_mounts(&table)
        .into_iter()
        .map(|p| {
            let made = std::fs::metadata(&p).and_then(|m| m.modified()).ok();
            (p, made)
        })
        .collect()
}

/// The mount points of `net:` namespaces in a `mountinfo` table.
fn parse_netns_mounts(table: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in table.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.get(dash + 1) != Some(&"nsfs") {
            continue;
        }
        let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        if root.starts_with("net:") {
            out.push(PathBuf::from(unescape_mount_path(point)));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `\040`-style octal escapes of a mountinfo path.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|_| b[i] == b'\\')
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn list(name: &str, version: &str, extra: &str) -> NetworkConfigList {
        NetworkConfigList::from_slice(
            format!(
                r#"{{"cniVersion":"{version}","name":"{name}"{extra},"plugins":[{{"type":"bridge"}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    fn net(name: &str, version: &str, extra: &str) -> ConfiguredNetwork {
        ConfiguredNetwork {
            file: PathBuf::from(format!("/etc/cni/net.d/{name}.conflist")),
            list: Ok(list(name, version, extra)),
        }
    }

    struct At(SystemTime);
    impl At {
        fn ago(&self, secs: u64) -> Option<SystemTime> {
            Some(self.0 - Duration::from_secs(secs))
        }
    }

    fn cached(network: &str, cid: &str, made: Option<SystemTime>) -> CachedFile {
        CachedFile {
            path: PathBuf::from(format!("/var/lib/cni/results/{network}-{cid}-eth0")),
            modified: made,
            attachment: Ok(CachedAttachment {
                container_id: cid.into(),
                network: network.into(),
                ifname: "eth0".into(),
                config: list(network, "1.1.0", "").to_bytes(),
                netns: format!("/run/netns/cni-{cid}"),
                cni_args: Vec::new(),
                capability_args: Default::default(),
            }),
        }
    }

    fn sandbox(id: &str, ready: bool) -> RuntimeSandbox {
        RuntimeSandbox {
            id: id.into(),
            ready,
        }
    }

    fn obs(at: &At) -> Observation {
        Observation {
            now: at.0,
            sandboxes: Vec::new(),
            cache: Vec::new(),
            networks: Vec::new(),
            netns: Vec::new(),
        }
    }

    fn dels(p: &Plan) -> Vec<String> {
        p.dels
            .iter()
            .map(|d| attachment_name(&d.attachment))
            .collect()
    }

    fn valid(p: &Plan, network: &str) -> Vec<String> {
        p.gcs
            .iter()
            .filter(|g| g.list.name == network)
            .flat_map(|g| g.valid.iter().map(|a| a.container_id.clone()))
            .collect()
    }

    #[test]
    fn dead_old_attachments_go_live_and_young_ones_stay() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.networks = vec![net("pods", "1.1.0", "")];
        o.sandboxes = vec![sandbox("live", true), sandbox("stopped", false)];
        o.cache = vec![
            cached("pods", "live", at.ago(7200)),
            cached("pods", "stopped", at.ago(7200)),
            cached("pods", "gone", at.ago(7200)),
            cached("pods", "new", at.ago(5)),
        ];
        let p = plan(&o, HOUR).unwrap();
        assert_eq!(dels(&p), ["pods/stopped/eth0", "pods/gone/eth0"]);
        assert_eq!(valid(&p, "pods"), ["live", "new"]);
        assert!(p
            .skipped
            .iter()
            .any(|s| s.what == "pods/new/eth0" && s.why.contains("may be starting")));
    }

    #[test]
    fn an_empty_runtime_with_young_attachments_is_refused() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.networks = vec![net("pods", "1.1.0", "")];
        o.cache = vec![
            cached("pods", "a", at.ago(10)),
            cached("pods", "b", at.ago(7200)),
        ];
        let e = plan(&o, HOUR).unwrap_err();
        assert!(
            matches!(&e, Error::CollectRefused { reason } if reason.contains("lists no sandbox")),
            "{e}"
        );
        // Only old attachments: an empty node is collected.
        o.cache.remove(0);
        assert_eq!(dels(&plan(&o, HOUR).unwrap()), ["pods/b/eth0"]);
    }

    #[test]
    fn unconfigured_disabled_and_old_networks_are_left_to_del_or_alone() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.sandboxes = vec![sandbox("x", true)];
        o.networks = vec![
            net("old", "1.0.0", ""),
            net("off", "1.1.0", r#","disableGC":true"#),
            ConfiguredNetwork {
                file: PathBuf::from("/etc/cni/net.d/10-broken.conflist"),
                list: Err("expected value at line 1".into()),
            },
        ];
        o.cache = vec![
            cached("old", "a", at.ago(7200)),
            cached("off", "b", at.ago(7200)),
            cached("elsewhere", "c", at.ago(7200)),
        ];
        let p = plan(&o, HOUR).unwrap();
        // 1.0.0: DEL only; disableGC: nothing; not configured: nothing.
        assert_eq!(dels(&p), ["old/a/eth0"]);
        assert!(p.gcs.is_empty());
        let skipped: Vec<String> = p.skipped.iter().map(ToString::to_string).collect();
        for want in [
            "skip gc old: cniVersion \"1.0.0\" has no GC",
            "skip gc off: disableGC",
            "skip network \"elsewhere\": not in the conf dir",
            "skip /etc/cni/net.d/10-broken.conflist: unreadable config",
        ] {
            assert!(
                skipped.iter().any(|s| s.starts_with(want)),
                "{want:?} not in {skipped:#?}"
            );
        }
    }

    #[test]
    fn an_unreadable_cache_file_is_kept_and_postpones_its_networks_gc() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.sandboxes = vec![sandbox("x", true)];
        o.networks = vec![net("pods", "1.1.0", ""), net("other", "1.1.0", "")];
        o.cache = vec![CachedFile {
            path: PathBuf::from("/var/lib/cni/results/pods-zzz-eth0"),
            modified: at.ago(7200),
            attachment: Err("not a cache record: EOF".into()),
        }];
        let p = plan(&o, HOUR).unwrap();
        assert!(p.dels.is_empty());
        assert_eq!(p.gcs.len(), 1);
        assert_eq!(p.gcs[0].list.name, "other");
        let skipped: Vec<String> = p.skipped.iter().map(ToString::to_string).collect();
        assert!(skipped
            .iter()
            .any(|s| s.contains("pods-zzz-eth0: not a cache record: EOF; kept")));
        assert!(skipped
            .iter()
            .any(|s| s.starts_with("skip gc pods: cache file") && s.contains("postponed")));
    }

    #[test]
    fn a_young_namespace_without_cached_attachment_postpones_gc() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.sandboxes = vec![sandbox("a", true)];
        o.networks = vec![net("pods", "1.1.0", "")];
        o.cache = vec![cached("pods", "a", at.ago(7200))];
        o.netns = vec![
            (PathBuf::from("/run/netns/cni-a"), at.ago(7200)),
            (PathBuf::from("/run/netns/admin"), at.ago(86400)),
        ];
        assert_eq!(plan(&o, HOUR).unwrap().gcs.len(), 1);
        o.netns
            .push((PathBuf::from("/run/netns/cni-starting"), at.ago(1)));
        let p = plan(&o, HOUR).unwrap();
        assert!(p.gcs.is_empty());
        assert!(p.skipped.iter().any(|s| s.what == "gc pods"
            && s.why.contains("/run/netns/cni-starting")
            && s.why.contains("postponed")));
        // Cached (its ADD is done): no longer a reason to wait.
        o.cache.push(cached("pods", "starting", at.ago(7200)));
        o.sandboxes.push(sandbox("starting", true));
        assert_eq!(plan(&o, HOUR).unwrap().gcs.len(), 1);
    }

    #[test]
    fn a_cached_config_that_names_another_network_is_not_used() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.sandboxes = vec![sandbox("x", true)];
        o.networks = vec![net("pods", "1.0.0", "")];
        let mut f = cached("pods", "a", at.ago(7200));
        if let Ok(a) = &mut f.attachment {
            a.config = list("other", "1.0.0", "").to_bytes();
        }
        o.cache = vec![f];
        let p = plan(&o, HOUR).unwrap();
        assert!(p.dels.is_empty());
        assert!(p
            .skipped
            .iter()
            .any(|s| s.what == "pods/a/eth0" && s.why.contains("cache kept")));
    }

    #[test]
    fn mountinfo_network_namespaces() {
        let table = "\
55 45 0:4 net:[4026532647] /run/netns/a rw shared:11 - nsfs nsfs rw
56 45 0:4 mnt:[4026532648] /run/mntns/b rw - nsfs nsfs rw
57 45 0:4 net:[4026532649] /run/netns/with\\040space rw - nsfs nsfs rw
30 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
";
        assert_eq!(
            parse_netns_mounts(table),
            [
                PathBuf::from("/run/netns/a"),
                PathBuf::from("/run/netns/with space")
            ]
        );
        assert_eq!(unescape_mount_path("a\\134b\\0"), "a\\b\\0");
    }

    #[test]
    fn dels_run_in_flight_and_are_reported_on_the_calling_thread() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        /// A plugin whose DELs count how many run at once; with `meet`, the
        /// first `meet` DELs wait for each other (a rendezvous, bounded by
        /// 30 s: no timing window decides the count on busy cores).
        #[derive(Default)]
        struct Slow {
            now: AtomicUsize,
            most: AtomicUsize,
            started: AtomicUsize,
            meet: AtomicUsize,
        }
        impl crate::Plugin for Slow {
            type Error = cni_types::CniError;
            fn name(&self) -> &str {
                "slow"
            }
            fn add(&self, _: &crate::Request) -> Result<cni_types::CniResult, Self::Error> {
                Ok(cni_types::CniResult::default())
            }
            fn del(&self, _: &crate::Request) -> Result<(), Self::Error> {
                let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(n, Ordering::SeqCst);
                let meet = self.meet.load(Ordering::SeqCst);
                if self.started.fetch_add(1, Ordering::SeqCst) < meet {
                    let deadline = std::time::Instant::now() + Duration::from_secs(30);
                    while self.most.load(Ordering::SeqCst) < meet
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
                self.now.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        }
        let slow = Arc::new(Slow::default());
        slow.meet.store(4, Ordering::SeqCst);
        let exec = crate::InProcessExec::builder()
            .register("slow", slow.clone())
            .netns_guard(Arc::new(crate::NoNetnsGuard))
            .build();
        let cache = tempfile::tempdir().unwrap();
        let collector = Collector {
            conf_dir: cache.path().into(),
            cni: CniConfig::new(vec!["/nonexistent".into()], Arc::new(exec))
                .with_cache_dir(cache.path()),
            min_age: Duration::ZERO,
            in_flight: 4,
        };
        let stale = NetworkConfigList::from_slice(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"slow"}]}"#,
        )
        .unwrap();
        let plan = Plan {
            dels: (0..10)
                .map(|i| StaleAttachment {
                    attachment: CachedAttachment {
                        container_id: format!("c{i}"),
                        network: "n".into(),
                        ifname: "eth0".into(),
                        config: stale.to_bytes(),
                        netns: String::new(),
                        cni_args: Vec::new(),
                        capability_args: Default::default(),
                    },
                    list: stale.clone(),
                })
                .collect(),
            ..Plan::default()
        };
        let caller = std::thread::current().id();
        let mut reported = BTreeSet::new();
        let summary = collector.execute(&plan, false, |a| {
            assert_eq!(std::thread::current().id(), caller);
            assert_eq!(a.outcome, Outcome::Ok, "{a}");
            reported.insert(a.target.clone());
        });
        assert_eq!((summary.deleted, summary.failed), (10, 0));
        assert_eq!(reported.len(), 10);
        assert_eq!(slow.most.load(Ordering::SeqCst), 4);
        // One at a time when asked.
        let one = Collector {
            in_flight: 0,
            ..collector
        };
        slow.most.store(0, Ordering::SeqCst);
        assert_eq!(one.execute(&plan, false, |_| {}).deleted, 10);
        assert_eq!(slow.most.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn actions_and_summary_read_as_one_line_each() {
        let a = Action {
            target: "del pods/a/eth0".into(),
            outcome: Outcome::Failed("plugin bridge: not found".into()),
        };
        assert_eq!(
            a.to_string(),
            "del pods/a/eth0: error plugin bridge: not found (cache kept)"
        );
        let g = Action {
            target: "gc pods".into(),
            outcome: Outcome::Ok,
        };
        assert_eq!(g.to_string(), "gc pods: ok");
        let s = Summary {
            deleted: 2,
            collected: 1,
            elapsed: Duration::from_millis(1500),
            ..Summary::default()
        };
        assert_eq!(
            s.to_string(),
            "2 deleted, 1 network(s) collected, 0 failed, 0 skipped, in 1.500 s"
        );
    }
}
