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
//! It never guesses: it would rather leave a leak than take something
//! alive. Nothing is collected (a refusal, [`Error::CollectRefused`]) when
//! the runtime cannot be asked; when the cache has no `results/` directory
//! (a wrong cache path: every live attachment would look unknown); when the
//! runtime lists no sandbox while cached attachments are younger than
//! `min_age`; and, unless [`Policy::delete_unlisted`] says otherwise, when
//! the runtime lists none of the containers cached on some network (a
//! runtime that lost its state, or another runtime's socket: every
//! attachment of that network would be DELeted). An attachment cached
//! less than `min_age` ago is never DELeted: a sandbox being started is
//! cached before the runtime lists it. Phase 2 waits while a network
//! namespace younger than `min_age` has no cached attachment (a sandbox may
//! be in the middle of its ADD, which a GC would undo); for a network while
//! a ready sandbox that does not use the node's network has no cache record
//! on it (its attachment cannot be put on the valid list), and while an
//! unreadable cache file may be one of its attachments.
//! Networks with `disableGC`, and attachments of networks that are not in
//! the conf dir, are left alone (a network shared with another runtime must
//! set `disableGC`, as the spec says).
//!
//! [`plan`] is the decision, pure; [`Collector::observe`] reads the node
//! and [`Collector::execute`] acts, reporting one [`Action`] at a time.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use cni_gc::collector::{plan, Observation, Policy, RuntimeSandbox};
//!
//! // The runtime lists one ready sandbox and nothing is cached: nothing to do.
//! let obs = Observation {
//!     now: SystemTime::now(),
//!     sandboxes: vec![RuntimeSandbox { id: "abc".into(), ready: true, node_network: false }],
//!     cache: Vec::new(),
//!     networks: Vec::new(),
//!     netns: Vec::new(),
//! };
//! let p = plan(&obs, &Policy::new(Duration::from_secs(3600)))?;
//! assert!(p.dels.is_empty() && p.gcs.is_empty());
//! # Ok::<(), cni_gc::Error>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use cni_types::{GcAttachment, NetworkConfigList};

use cni_exec::cache::{CachedAttachment, CachedFile};
use cni_exec::{conf, CniConfig};

use crate::{Error, Refusal};

/// A pod sandbox as the runtime reports it (CRI `PodSandbox`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeSandbox {
    /// The sandbox id: the container id of its CNI attachments.
    pub id: String,
    /// `SANDBOX_READY`: its network is in use. A sandbox that is not ready
    /// was stopped, and its network torn down (or meant to be).
    pub ready: bool,
    /// It shares the node's network namespace (Kubernetes `hostNetwork`,
    /// CRI namespace mode `NODE`): CNI never attached it, so it has no
    /// cache record. [`Collector::observe`] asks the runtime
    /// ([`SandboxLister::uses_node_network`]) only for ready sandboxes
    /// without a cache record on some configured network; `false` when not
    /// known.
    pub node_network: bool,
}

/// Where the collector learns which sandboxes are alive.
pub trait SandboxLister {
    /// Every sandbox the runtime knows, or why it cannot say
    /// ([`Error::Cri`], or [`Error::runtime`] of the runtime's own error).
    fn list_sandboxes(&self) -> Result<Vec<RuntimeSandbox>, Error>;
    /// Whether sandbox `id` shares the node's network namespace (no CNI
    /// attachment). The default answers `false`: a runtime that cannot
    /// tell makes every ready sandbox without a cache record on a network
    /// postpone that network's GC, which is safe.
    fn uses_node_network(&self, id: &str) -> Result<bool, Error> {
        let _ = id;
        Ok(false)
    }
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
    /// The cache file it was read from. A DEL removes the file its content
    /// names (`<network>-<container>-<ifname>`); when this one has another
    /// name (a copied backup), [`Collector::execute`] removes it too after
    /// the DEL succeeded, or every pass would DEL it again.
    pub file: PathBuf,
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
    /// The network it belongs to, when it is known (not for an unreadable
    /// file).
    pub network: Option<String>,
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

/// How careful [`plan`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Attachments and network namespaces younger than this are never
    /// judged dead.
    pub min_age: Duration,
    /// DEL the cached attachments of a network even when the runtime lists
    /// none of their containers, ready or not (`cni-gc
    /// --delete-unlisted-networks`). Off, such a pass is refused: it is
    /// what a runtime that lost its state, or another runtime's socket,
    /// looks like, and it would DEL every attachment of the network. On,
    /// for a node whose pods on a network are all known to be gone.
    pub delete_unlisted: bool,
}

impl Policy {
    /// `min_age`, and the refusals on (`delete_unlisted` off).
    pub fn new(min_age: Duration) -> Policy {
        Policy {
            min_age,
            delete_unlisted: false,
        }
    }
}

/// `net/container/ifname`.
fn attachment_name(a: &CachedAttachment) -> String {
    format!("{}/{}/{}", a.network, a.container_id, a.ifname)
}

/// The collector's decision on `obs`: see the [module](self) for the rules.
/// Fails, collecting nothing, when the runtime lists no sandbox while
/// attachments younger than `min_age` are cached, and (unless
/// [`Policy::delete_unlisted`]) when it lists none of the containers cached
/// on a network that may be collected.
pub fn plan(obs: &Observation, policy: &Policy) -> Result<Plan, Error> {
    let min_age = policy.min_age;
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
    let live: BTreeSet<&str> = obs
        .sandboxes
        .iter()
        .filter(|s| s.ready)
        .map(|s| s.id.as_str())
        .collect();
    let mut out = Plan::default();
    let mut skip = |network: Option<&str>, what: String, why: String| {
        out.skipped.push(Skipped {
            what,
            why,
            network: network.map(str::to_string),
        });
    };

    // The networks, by name: the first file of a name wins (libcni's order).
    let mut networks: BTreeMap<&str, &NetworkConfigList> = BTreeMap::new();
    for n in &obs.networks {
        match &n.list {
            Ok(list) => {
                if networks.contains_key(list.name.as_str()) {
                    skip(
                        Some(&list.name),
                        n.file.display().to_string(),
                        format!("network {:?} is configured by an earlier file", list.name),
                    );
                } else {
                    networks.insert(&list.name, list);
                }
            }
            Err(e) => skip(
                None,
                n.file.display().to_string(),
                format!("unreadable config: {e}"),
            ),
        }
    }

    // Only the attachments of networks that may be collected count: the
    // others are left alone whatever the runtime says (and other
    // runtimes write theirs at any moment).
    if obs.sandboxes.is_empty() {
        let recent = cached
            .iter()
            .filter(|(_, a)| {
                networks
                    .get(a.network.as_str())
                    .is_some_and(|l| !l.disable_gc)
            })
            .filter(|(f, _)| young(f.modified))
            .count();
        if recent > 0 {
            return Err(Error::CollectRefused {
                kind: Refusal::NoSandboxes,
                reason: format!(
                    "the runtime lists no sandbox, but {recent} cached attachment(s) are younger \
                     than {min_age:?}: a runtime that lost its state, or the wrong runtime socket"
                ),
            });
        }
    }
    if !policy.delete_unlisted {
        refuse_unlisted(obs, &cached, &networks)?;
    }
    // A ready sandbox on the pod network with no cache record on a
    // network: its attachment there (if any) cannot be put on that
    // network's valid list.
    let mut records: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (_, a) in &cached {
        records
            .entry(a.network.as_str())
            .or_default()
            .insert(a.container_id.as_str());
    }
    let unknown_on = |network: &str| {
        obs.sandboxes.iter().find(|s| {
            s.ready
                && !s.node_network
                && !records
                    .get(network)
                    .is_some_and(|ids| ids.contains(s.id.as_str()))
        })
    };

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
                    Some(&a.network),
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
                skip(
                    Some(&a.network),
                    attachment_name(a),
                    "its cached config has disableGC".into(),
                );
            }
            Ok(cached) => out.dels.push(StaleAttachment {
                attachment: (*a).clone(),
                file: file.path.clone(),
                list: cached,
            }),
            Err(e) => skip(
                Some(&a.network),
                attachment_name(a),
                format!("cached config unreadable ({e}); cache kept"),
            ),
        }
    }
    for (network, n) in unconfigured {
        skip(
            Some(network),
            format!("network {network:?}"),
            format!("not in the conf dir: {n} cached attachment(s) left alone"),
        );
    }
    for f in obs.cache.iter().filter(|f| f.attachment.is_err()) {
        let why = f.attachment.as_ref().err().cloned().unwrap_or_default();
        skip(None, f.path.display().to_string(), format!("{why}; kept"));
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
            skip(Some(name), what, "disableGC".into());
            continue;
        }
        if !list.version().is_ok_and(|v| v.supports_status_and_gc()) {
            skip(
                Some(name),
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
                Some(name),
                what,
                format!(
                    "cache file {} is unreadable and may be a live attachment (postponed)",
                    f.path.display()
                ),
            );
            continue;
        }
        if let Some(sb) = unknown_on(name) {
            skip(
                Some(name),
                what,
                format!(
                    "sandbox {} is ready but has no cache record on this network: its \
                     attachment cannot be put on the valid list (postponed)",
                    sb.id
                ),
            );
            continue;
        }
        if let Some(ns) = starting {
            skip(
                Some(name),
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

/// Refuses when the runtime lists (in any state) none of the containers
/// cached on a configured network that may be collected: a runtime that
/// lost its state, or another runtime's socket, would get every one of
/// them DELeted.
fn refuse_unlisted(
    obs: &Observation,
    cached: &[(&CachedFile, &CachedAttachment)],
    networks: &BTreeMap<&str, &NetworkConfigList>,
) -> Result<(), Error> {
    let listed: BTreeSet<&str> = obs.sandboxes.iter().map(|s| s.id.as_str()).collect();
    // Per network: how many containers are cached, and whether the
    // runtime lists any of them.
    let mut per_network: BTreeMap<&str, (BTreeSet<&str>, bool)> = BTreeMap::new();
    for (_, a) in cached {
        if networks
            .get(a.network.as_str())
            .is_none_or(|l| l.disable_gc)
        {
            continue;
        }
        let entry = per_network.entry(&a.network).or_default();
        entry.0.insert(&a.container_id);
        entry.1 |= listed.contains(a.container_id.as_str());
    }
    let unlisted: Vec<String> = per_network
        .iter()
        .filter(|(_, (_, any))| !any)
        .map(|(name, (containers, _))| format!("{name:?} ({} container(s))", containers.len()))
        .collect();
    if unlisted.is_empty() {
        return Ok(());
    }
    let hint = "a runtime that lost its state, or another runtime's socket; if every pod of \
                it is known to be gone, ask for it explicitly (cni-gc --delete-unlisted-networks)";
    let containers: BTreeSet<&str> = per_network
        .values()
        .flat_map(|(c, _)| c.iter().copied())
        .collect();
    let reason = if unlisted.len() == per_network.len() {
        format!(
            "the runtime ({} sandbox(es)) lists none of the {} container(s) cached on this \
             node's networks, whatever their age: {hint}",
            obs.sandboxes.len(),
            containers.len()
        )
    } else {
        format!(
            "the runtime lists none of the containers cached on network(s) {}: every \
             attachment of it would be DELeted: {hint}",
            unlisted.join(", ")
        )
    };
    Err(Error::CollectRefused {
        kind: Refusal::UnlistedNetwork,
        reason,
    })
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
    /// The network it was done on.
    pub network: String,
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
    /// The same counts per network (what was skipped without belonging to
    /// a network, an unreadable file, is only in [`Summary::skipped`]).
    pub networks: BTreeMap<String, NetworkCounts>,
}

/// What a run did on one network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkCounts {
    /// Attachments DELeted.
    pub deleted: usize,
    /// GCs done (0 or 1 a run).
    pub collected: usize,
    /// DELs that failed.
    pub failed_dels: usize,
    /// GCs that failed.
    pub failed_gcs: usize,
    /// Things left alone.
    pub skipped: usize,
    /// Actions a dry run would have taken.
    pub dry: usize,
}

impl Summary {
    /// Counts one action's outcome, `gc` or a DEL.
    fn count(&mut self, action: &Action, gc: bool) {
        let n = self.networks.entry(action.network.clone()).or_default();
        match (&action.outcome, gc) {
            (Outcome::Ok, false) => {
                self.deleted += 1;
                n.deleted += 1;
            }
            (Outcome::Ok, true) => {
                self.collected += 1;
                n.collected += 1;
            }
            (Outcome::DryRun, _) => {
                self.dry += 1;
                n.dry += 1;
            }
            (Outcome::Failed(_), false) => {
                self.failed += 1;
                n.failed_dels += 1;
            }
            (Outcome::Failed(_), true) => {
                self.failed += 1;
                n.failed_gcs += 1;
            }
        }
    }

    /// Counts something left alone.
    pub(crate) fn count_skipped(&mut self, skipped: &Skipped) {
        self.skipped += 1;
        if let Some(network) = &skipped.network {
            self.networks.entry(network.clone()).or_default().skipped += 1;
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
    /// How careful the plan is ([`Collector::plan`]).
    pub policy: Policy,
    /// How many DELs run at once (0 and 1: one at a time). The attachments
    /// are independent, as the pods a kubelet stops together; a DEL spends
    /// most of its time waiting (a process start, the kernel's deletion of
    /// a veth), so a few at once take a fraction of the time.
    pub in_flight: usize,
}

impl Collector {
    /// Reads the runtime's sandboxes, the cache, the configs and the
    /// node's network namespaces. Fails when the runtime cannot say which
    /// sandboxes are alive, or the cache cannot be listed: a cache
    /// directory without `results/` is a refusal (a wrong path, a missing
    /// mount, a runtime that caches elsewhere: every live attachment would
    /// look unknown to phase 2). The runtime is asked which of the ready
    /// sandboxes without a cache record on some configured network use the
    /// node's network.
    pub fn observe(&self, runtime: &dyn SandboxLister) -> Result<Observation, Error> {
        let now = SystemTime::now();
        let mut sandboxes = runtime
            .list_sandboxes()
            .map_err(|reason| Error::CollectRefused {
                kind: Refusal::RuntimeUnavailable,
                reason: format!("{}: {reason}", runtime.describe()),
            })?;
        let results = self.cni.cache().dir().join("results");
        if !results.is_dir() {
            return Err(Error::CollectRefused {
                kind: Refusal::NoResultsDir,
                reason: format!(
                    "cache directory {} has no results/ directory: a wrong cache path, a \
                     missing mount, or a runtime that caches elsewhere (every live attachment \
                     would look unknown)",
                    self.cni.cache().dir().display()
                ),
            });
        }
        let cache = self.cni.cache().scan()?;
        let networks = configured_networks(&self.conf_dir)?;
        // The networks each container has a cache record on.
        let mut records: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for a in cache.iter().filter_map(|f| f.attachment.as_ref().ok()) {
            records
                .entry(a.container_id.as_str())
                .or_default()
                .insert(a.network.as_str());
        }
        let configured: BTreeSet<&str> = networks
            .iter()
            .filter_map(|n| n.list.as_ref().ok())
            .map(|l| l.name.as_str())
            .collect();
        for s in sandboxes.iter_mut().filter(|s| s.ready && !s.node_network) {
            let on = records.get(s.id.as_str());
            if configured
                .iter()
                .any(|n| !on.is_some_and(|on| on.contains(n)))
            {
                // Unknown (an error) stays `false`: phase 2 waits.
                s.node_network = runtime.uses_node_network(&s.id).unwrap_or(false);
            }
        }
        Ok(Observation {
            now,
            sandboxes,
            cache,
            networks,
            netns: network_namespaces(),
        })
    }

    /// [`plan`] with this collector's [`Collector::policy`].
    pub fn plan(&self, observation: &Observation) -> Result<Plan, Error> {
        plan(observation, &self.policy)
    }

    /// Carries out `plan` (its DELs, [`Collector::in_flight`] at a time,
    /// then its GCs), calling `report` after each action, on the calling
    /// thread; with `dry_run` only reports.
    pub fn execute(&self, plan: &Plan, dry_run: bool, mut report: impl FnMut(&Action)) -> Summary {
        let start = Instant::now();
        let mut summary = Summary::default();
        for s in &plan.skipped {
            summary.count_skipped(s);
        }
        let act = |target: String, network: &str, run: &dyn Fn() -> Result<(), Error>| {
            let outcome = if dry_run {
                Outcome::DryRun
            } else {
                match run() {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            };
            Action {
                target,
                network: network.to_string(),
                outcome,
            }
        };
        let workers = self.in_flight.clamp(1, plan.dels.len().max(1));
        let next = AtomicUsize::new(0);
        let (done, actions) = mpsc::channel::<Action>();
        // The DELs' spans are the pass's children on the workers too.
        let parent = cni_types::trace::Parent::current();
        std::thread::scope(|s| {
            for _ in 0..workers {
                let (done, next, act, parent) = (done.clone(), &next, &act, &parent);
                s.spawn(move || {
                    parent.run(|| {
                        while let Some(d) = plan.dels.get(next.fetch_add(1, Ordering::Relaxed)) {
                            let action = act(
                                format!("del {}", attachment_name(&d.attachment)),
                                &d.attachment.network,
                                &|| self.del_stale(d),
                            );
                            if done.send(action).is_err() {
                                return;
                            }
                        }
                    })
                });
            }
            drop(done);
            for action in actions {
                summary.count(&action, false);
                report(&action);
            }
        });
        for g in &plan.gcs {
            let action = act(format!("gc {}", g.list.name), &g.list.name, &|| {
                Ok(self.cni.gc_plugins(&g.list, Some(&g.valid))?)
            });
            summary.count(&action, true);
            report(&action);
        }
        summary.elapsed = start.elapsed();
        summary
    }
}

impl Collector {
    /// DEL of a stale attachment; then the cache file it was read from
    /// goes too, when its name is not the one the DEL removed.
    fn del_stale(&self, d: &StaleAttachment) -> Result<(), Error> {
        let rt = d.attachment.runtime_conf();
        self.cni.del_network_list(&d.list, &rt)?;
        let named = self.cni.cache().file_path(&d.attachment.network, &rt).ok();
        if named.as_deref() != Some(d.file.as_path()) {
            match std::fs::remove_file(&d.file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::Io {
                        op: "remove cache file",
                        path: d.file.clone(),
                        source: e,
                    })
                }
                _ => {}
            }
        }
        Ok(())
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
            node_network: false,
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
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
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
        let e = plan(&o, &Policy::new(HOUR)).unwrap_err();
        assert!(
            matches!(&e, Error::CollectRefused { kind: Refusal::NoSandboxes, reason } if reason.contains("lists no sandbox")),
            "{e}"
        );
        // Young attachments of a network left alone (not configured, or
        // disableGC) count for nothing: even asked, only b goes.
        let asked = Policy {
            delete_unlisted: true,
            ..Policy::new(HOUR)
        };
        let mut elsewhere = o.clone();
        elsewhere.cache[0] = cached("elsewhere", "a", at.ago(10));
        assert_eq!(dels(&plan(&elsewhere, &asked).unwrap()), ["pods/b/eth0"]);
        elsewhere
            .networks
            .push(net("elsewhere", "1.1.0", r#","disableGC":true"#));
        assert_eq!(dels(&plan(&elsewhere, &asked).unwrap()), ["pods/b/eth0"]);
        // Only old attachments: still refused (the runtime lists none of
        // them), unless the operator asks for it.
        o.cache.remove(0);
        let e = plan(&o, &Policy::new(HOUR)).unwrap_err();
        assert!(
            e.to_string().contains("lists none of the 1 container(s)"),
            "{e}"
        );
        let asked = Policy {
            delete_unlisted: true,
            ..Policy::new(HOUR)
        };
        assert_eq!(dels(&plan(&o, &asked).unwrap()), ["pods/b/eth0"]);
    }

    #[test]
    fn unconfigured_disabled_and_old_networks_are_left_to_del_or_alone() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.sandboxes = vec![
            sandbox("a", false),
            sandbox("b", false),
            sandbox("c", false),
        ];
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
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
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
        o.cache.push(cached("other", "x", at.ago(7200)));
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
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
        assert_eq!(plan(&o, &Policy::new(HOUR)).unwrap().gcs.len(), 1);
        o.netns
            .push((PathBuf::from("/run/netns/cni-starting"), at.ago(1)));
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
        assert!(p.gcs.is_empty());
        assert!(p.skipped.iter().any(|s| s.what == "gc pods"
            && s.why.contains("/run/netns/cni-starting")
            && s.why.contains("postponed")));
        // Cached (its ADD is done): no longer a reason to wait.
        o.cache.push(cached("pods", "starting", at.ago(7200)));
        o.sandboxes.push(sandbox("starting", true));
        assert_eq!(plan(&o, &Policy::new(HOUR)).unwrap().gcs.len(), 1);
    }

    #[test]
    fn a_cached_config_that_names_another_network_is_not_used() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.sandboxes = vec![sandbox("a", false)];
        o.networks = vec![net("pods", "1.0.0", "")];
        let mut f = cached("pods", "a", at.ago(7200));
        if let Ok(a) = &mut f.attachment {
            a.config = list("other", "1.0.0", "").to_bytes();
        }
        o.cache = vec![f];
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
        assert!(p.dels.is_empty());
        assert!(p.skipped.iter().any(|s| s.what == "pods/a/eth0"
            && s.why.contains("cache kept")
            && s.network.as_deref() == Some("pods")));
    }

    #[test]
    fn a_runtime_that_lists_none_of_a_networks_containers_is_refused() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.networks = vec![net("pods", "1.1.0", ""), net("other", "1.1.0", "")];
        o.cache = vec![
            cached("pods", "p1", at.ago(7200)),
            cached("pods", "p2", at.ago(7200)),
            cached("other", "o1", at.ago(7200)),
        ];
        // Another runtime's socket: it lists sandboxes, none of ours.
        o.sandboxes = vec![sandbox("foreign", true), sandbox("foreign2", false)];
        let e = plan(&o, &Policy::new(HOUR)).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::UnlistedNetwork));
        assert!(
            e.to_string().contains(
                "the runtime (2 sandbox(es)) lists none of the 3 container(s) cached on this \
                 node's networks, whatever their age"
            ),
            "{e}"
        );
        assert!(e.to_string().contains("--delete-unlisted-networks"), "{e}");
        // Young ones too: whatever their age.
        for f in &mut o.cache {
            f.modified = at.ago(5);
        }
        assert!(plan(&o, &Policy::new(HOUR)).is_err());
        for f in &mut o.cache {
            f.modified = at.ago(7200);
        }
        // One network's pods listed (even stopped), the other's not: every
        // attachment of "other" would go: refused, naming it.
        o.sandboxes.push(sandbox("p1", false));
        let e = plan(&o, &Policy::new(HOUR)).unwrap_err();
        assert!(
            e.to_string().contains(
                "lists none of the containers cached on network(s) \"other\" (1 container(s))"
            ),
            "{e}"
        );
        // Listed (in any state) on both: collected as usual.
        o.sandboxes.push(sandbox("o1", false));
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
        assert_eq!(dels(&p), ["pods/p1/eth0", "pods/p2/eth0", "other/o1/eth0"]);
        // A network with disableGC, or one not configured, counts for
        // nothing: nothing of it is DELeted.
        o.sandboxes.truncate(2);
        o.networks = vec![net("pods", "1.1.0", r#","disableGC":true"#)];
        assert!(plan(&o, &Policy::new(HOUR)).unwrap().dels.is_empty());
        // Asked for explicitly: DELeted.
        o.networks = vec![net("pods", "1.1.0", ""), net("other", "1.1.0", "")];
        let asked = Policy {
            delete_unlisted: true,
            ..Policy::new(HOUR)
        };
        assert_eq!(dels(&plan(&o, &asked).unwrap()).len(), 3);
    }

    #[test]
    fn a_ready_sandbox_without_a_record_on_a_network_postpones_its_gc() {
        let at = At(SystemTime::now());
        let mut o = obs(&at);
        o.networks = vec![net("pods", "1.1.0", ""), net("other", "1.1.0", "")];
        o.sandboxes = vec![sandbox("a", true), sandbox("lost", true)];
        o.cache = vec![
            cached("pods", "a", at.ago(7200)),
            cached("other", "a", at.ago(7200)),
            // A record of a network not configured (go-cni's loopback)
            // says nothing of the others.
            cached("cni-loopback", "lost", at.ago(7200)),
        ];
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
        assert!(p.gcs.is_empty(), "{:?}", p.gcs);
        for net in ["pods", "other"] {
            assert!(
                p.skipped.iter().any(|s| s.what == format!("gc {net}")
                    && s.why
                        .contains("sandbox lost is ready but has no cache record on this network")),
                "{:#?}",
                p.skipped
            );
        }
        // A record on one network: that one is collected.
        o.cache.push(cached("pods", "lost", at.ago(7200)));
        let p = plan(&o, &Policy::new(HOUR)).unwrap();
        assert_eq!(valid(&p, "pods"), ["a", "lost"]);
        assert!(valid(&p, "other").is_empty() && p.gcs.len() == 1);
        o.cache.pop();
        // Stopped: its network is gone (or meant to be): no reason to wait.
        o.sandboxes[1].ready = false;
        assert_eq!(plan(&o, &Policy::new(HOUR)).unwrap().gcs.len(), 2);
        // On the node's network (hostNetwork): CNI never attached it.
        o.sandboxes[1].ready = true;
        o.sandboxes[1].node_network = true;
        assert_eq!(plan(&o, &Policy::new(HOUR)).unwrap().gcs.len(), 2);
    }

    /// A runtime listing fixed sandboxes, `node` of them on the node's
    /// network.
    struct Listed(Vec<RuntimeSandbox>, Vec<&'static str>);
    impl SandboxLister for Listed {
        fn list_sandboxes(&self) -> Result<Vec<RuntimeSandbox>, Error> {
            Ok(self.0.clone())
        }
        fn uses_node_network(&self, id: &str) -> Result<bool, Error> {
            Ok(self.1.contains(&id))
        }
        fn describe(&self) -> String {
            "a test runtime".into()
        }
    }

    fn collector(dir: &Path) -> Collector {
        let exec = cni_exec::InProcessExec::builder()
            .netns_guard(std::sync::Arc::new(cni_exec::NoNetnsGuard))
            .build();
        Collector {
            conf_dir: dir.into(),
            cni: CniConfig::new(vec!["/nonexistent".into()], std::sync::Arc::new(exec))
                .with_cache_dir(dir.join("cache")),
            policy: Policy::new(HOUR),
            in_flight: 1,
        }
    }

    #[test]
    fn a_cache_directory_without_results_is_a_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let c = collector(dir.path());
        let runtime = Listed(vec![sandbox("a", true)], Vec::new());
        for _ in 0..2 {
            let e = c.observe(&runtime).unwrap_err();
            assert!(
                matches!(&e, Error::CollectRefused { kind: Refusal::NoResultsDir, reason } if reason.contains("has no results/ directory")),
                "{e}"
            );
            // The cache directory without its results/: the same.
            std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("cache/results")).unwrap();
        assert!(c.observe(&runtime).is_ok());
    }

    #[test]
    fn observe_asks_which_uncached_ready_sandboxes_use_the_node_network() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cache/results")).unwrap();
        std::fs::write(
            dir.path().join("10-pods.conflist"),
            list("pods", "1.1.0", "").to_bytes(),
        )
        .unwrap();
        let c = collector(dir.path());
        let runtime = Listed(
            vec![
                sandbox("host", true),
                sandbox("pod", true),
                sandbox("off", false),
            ],
            vec!["host", "off"],
        );
        let o = c.observe(&runtime).unwrap();
        let node: Vec<(&str, bool)> = o
            .sandboxes
            .iter()
            .map(|s| (s.id.as_str(), s.node_network))
            .collect();
        // Not asked for a sandbox that is not ready.
        assert_eq!(node, [("host", true), ("pod", false), ("off", false)]);
        // Nor for one with a record on every configured network.
        let record = serde_json::json!({
            "kind": "cniCacheV1", "containerId": "host", "ifName": "eth0",
            "networkName": "pods", "config": "e30=",
        });
        std::fs::write(
            dir.path().join("cache/results/pods-host-eth0"),
            record.to_string(),
        )
        .unwrap();
        let o = c.observe(&runtime).unwrap();
        assert!(!o.sandboxes[0].node_network);
    }

    #[test]
    fn a_del_removes_the_scanned_cache_file_when_its_name_is_another() {
        use std::sync::Arc;
        struct Ok_;
        impl cni_exec::Plugin for Ok_ {
            type Error = cni_types::CniError;
            fn name(&self) -> &str {
                "okdel"
            }
            fn add(&self, _: &cni_exec::Request) -> Result<cni_types::CniResult, Self::Error> {
                Ok(cni_types::CniResult::default())
            }
            fn del(&self, _: &cni_exec::Request) -> Result<(), Self::Error> {
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let exec = cni_exec::InProcessExec::builder()
            .register("okdel", Arc::new(Ok_))
            .netns_guard(Arc::new(cni_exec::NoNetnsGuard))
            .build();
        let c = Collector {
            cni: CniConfig::new(vec!["/nonexistent".into()], Arc::new(exec))
                .with_cache_dir(dir.path().join("cache")),
            ..collector(dir.path())
        };
        let list = NetworkConfigList::from_slice(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"okdel"}]}"#,
        )
        .unwrap();
        let results = dir.path().join("cache/results");
        std::fs::create_dir_all(&results).unwrap();
        let copy = results.join("n-c1-eth0.backup");
        std::fs::write(&copy, b"a copy").unwrap();
        let plan = Plan {
            dels: vec![StaleAttachment {
                attachment: CachedAttachment {
                    container_id: "c1".into(),
                    network: "n".into(),
                    ifname: "eth0".into(),
                    config: list.to_bytes(),
                    netns: String::new(),
                    cni_args: Vec::new(),
                    capability_args: Default::default(),
                },
                file: copy.clone(),
                list,
            }],
            ..Plan::default()
        };
        let summary = c.execute(&plan, false, |a| assert_eq!(a.outcome, Outcome::Ok, "{a}"));
        assert_eq!(summary.deleted, 1);
        assert_eq!(summary.networks["n"].deleted, 1, "counted on its network");
        assert!(!copy.exists(), "the scanned copy is still there");
        // Gone already (a second pass, another collector): still a success.
        assert_eq!(c.execute(&plan, false, |_| {}).failed, 0);
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
        impl cni_exec::Plugin for Slow {
            type Error = cni_types::CniError;
            fn name(&self) -> &str {
                "slow"
            }
            fn add(&self, _: &cni_exec::Request) -> Result<cni_types::CniResult, Self::Error> {
                Ok(cni_types::CniResult::default())
            }
            fn del(&self, _: &cni_exec::Request) -> Result<(), Self::Error> {
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
        let exec = cni_exec::InProcessExec::builder()
            .register("slow", slow.clone())
            .netns_guard(Arc::new(cni_exec::NoNetnsGuard))
            .build();
        let cache = tempfile::tempdir().unwrap();
        let collector = Collector {
            conf_dir: cache.path().into(),
            cni: CniConfig::new(vec!["/nonexistent".into()], Arc::new(exec))
                .with_cache_dir(cache.path()),
            policy: Policy::new(Duration::ZERO),
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
                    file: cache.path().join("results").join(format!("n-c{i}-eth0")),
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
            network: "pods".into(),
            outcome: Outcome::Failed("plugin bridge: not found".into()),
        };
        assert_eq!(
            a.to_string(),
            "del pods/a/eth0: error plugin bridge: not found (cache kept)"
        );
        let g = Action {
            target: "gc pods".into(),
            network: "pods".into(),
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
