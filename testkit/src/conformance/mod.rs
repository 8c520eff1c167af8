//! A conformance kit for CNI plugin binaries: runs any plugin (ours, the Go
//! reference plugins, a third party's) through the spec's requirements and
//! reports one result per case.
//!
//! Everything happens in namespaces the kit creates and removes: the plugin
//! process runs inside a "host" namespace of the kit's (so bridges,
//! masquerade rules and host ports land there, never on the real node) and
//! each case gets fresh "container" namespaces as `CNI_NETNS`. Bridge
//! names, data directories and container ids carry a random suffix; all of
//! it is removed when [`run`] returns, also on failure or panic.
//!
//! Without a config the kit builds one for the types it knows
//! ([`PluginKind::config`]), detecting the type from the binary's file
//! name. For IPAM plugins it plays the interface plugin, for meta plugins
//! (`tuning`, `portmap`, `bandwidth`, ...) the previous plugin of the chain
//! (a veth it creates, passed as `prevResult`).
//!
//! The cases (see [`run`] for the list) follow SPEC.md of
//! containernetworking/cni; a case that the spec says does not apply to a
//! plugin passes with the reason shown.
//!
//! ```no_run
//! use cni_testkit::conformance::{run, Options};
//!
//! let report = run(&Options::new("target/debug/bridge"))?;
//! print!("{report}");
//! assert!(report.all_passed(), "{report}");
//! # Ok::<(), cni_testkit::Error>(())
//! ```

mod cases;
mod kind;
mod sandbox;
mod shape;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::error::{io_err, Error};

pub use kind::{PluginKind, Role, SandboxNames};

/// What to test and how.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// The plugin binary.
    pub plugin: PathBuf,
    /// The plugin's config (one plugin, as it gets it on stdin); `None`
    /// builds one from the binary's type ([`PluginKind::config`]).
    pub config: Option<Value>,
    /// `CNI_IFNAME`; `None` is the type's default (`eth0`, `lo` for
    /// loopback).
    pub ifname: Option<String>,
    /// The plugin's role; `None` takes it from its type (a type the kit does
    /// not know is taken as an interface plugin).
    pub role: Option<Role>,
    /// How long one plugin call may take before it is killed (30 s).
    pub timeout: Duration,
    /// Extra directories for `CNI_PATH`, after the plugin's own directory
    /// (where delegated IPAM plugins are looked up).
    pub cni_path: Vec<PathBuf>,
    /// When set to true (e.g. from a SIGINT handler), the run kills the
    /// plugin call in progress, removes everything it created and returns
    /// [`Error::Interrupted`].
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Options {
    /// Options testing `plugin` with the built-in config for its type.
    pub fn new(plugin: impl Into<PathBuf>) -> Options {
        Options {
            plugin: plugin.into(),
            config: None,
            ifname: None,
            role: None,
            timeout: Duration::from_secs(30),
            cni_path: Vec::new(),
            cancel: None,
        }
    }

    /// Uses `config` instead of the built-in one.
    pub fn with_config(mut self, config: Value) -> Options {
        self.config = Some(config);
        self
    }

    /// Tests the plugin in `role` (for a type the kit does not know, e.g.
    /// [`Role::Meta`] for a chained plugin of your own).
    pub fn with_role(mut self, role: Role) -> Options {
        self.role = Some(role);
        self
    }

    /// Uses `ifname` as `CNI_IFNAME`.
    pub fn with_ifname(mut self, ifname: impl Into<String>) -> Options {
        self.ifname = Some(ifname.into());
        self
    }
}

/// Reads a config file for [`Options::config`]: a `.conf` (one plugin) as
/// is, or from a `.conflist` the plugin whose `type` is `plugin_type` (or
/// the only plugin), with the list's `cniVersion` and `name`.
///
/// [`run`] then points a host-local `dataDir` (and tuning's and flannel's
/// `dataDir`) at its own directory and creates the links named by `master`
/// and `device` in its host namespace.
pub fn load_config(path: &Path, plugin_type: &str) -> Result<Value, Error> {
    let text = cni_files::capped::read_file(path, cni_files::capped::MAX_ADMIN_FILE)
        .map_err(io_err(format!("read {}", path.display())))?;
    let value: Value = serde_json::from_slice(&text).map_err(|e| Error::Config {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let Some(plugins) = value.get("plugins") else {
        return Ok(value);
    };
    let bad = |reason: String| Error::Config {
        path: path.to_owned(),
        reason,
    };
    let list = plugins
        .as_array()
        .ok_or_else(|| bad("`plugins` is not an array".into()))?;
    let chosen = list
        .iter()
        .find(|p| p.get("type").and_then(Value::as_str) == Some(plugin_type))
        .or(if list.len() == 1 { list.first() } else { None })
        .ok_or_else(|| {
            bad(format!(
                "no plugin of type {plugin_type:?} in the list (and more than one plugin)"
            ))
        })?;
    let mut conf = chosen.clone();
    let obj = conf
        .as_object_mut()
        .ok_or_else(|| bad("the plugin entry is not an object".into()))?;
    for key in ["cniVersion", "name"] {
        if let Some(v) = value.get(key) {
            obj.insert(key.to_owned(), v.clone());
        }
    }
    Ok(conf)
}

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The plugin did what the spec requires.
    Passed,
    /// Passed with a remark (e.g. a part the spec does not require of this
    /// kind of plugin, or of this version).
    PassedWithNote(String),
    /// The plugin did not; the reason says what was expected and seen.
    Failed(String),
}

/// One case's name and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseResult {
    /// Case name (`add-check-del-del`, `add-result-0.3.1`, ...).
    pub name: String,
    /// How it ended.
    pub outcome: Outcome,
}

impl CaseResult {
    /// True unless the case failed.
    pub fn passed(&self) -> bool {
        !matches!(self.outcome, Outcome::Failed(_))
    }
}

impl fmt::Display for CaseResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Passed => write!(f, "ok {}", self.name),
            Outcome::PassedWithNote(note) => write!(f, "ok {} ({note})", self.name),
            Outcome::Failed(reason) => write!(f, "FAIL {}: {reason}", self.name),
        }
    }
}

/// All case results of one run. `Display` prints one line per case and a
/// last line `N passed, M failed`.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The cases in the order they ran.
    pub cases: Vec<CaseResult>,
}

impl Report {
    /// Number of cases that passed.
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.passed()).count()
    }

    /// Number of cases that failed.
    pub fn failed(&self) -> usize {
        self.cases.len() - self.passed()
    }

    /// True when no case failed.
    pub fn all_passed(&self) -> bool {
        self.failed() == 0
    }

    /// The result of the case called `name`.
    pub fn case(&self, name: &str) -> Option<&CaseResult> {
        self.cases.iter().find(|c| c.name == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for case in &self.cases {
            writeln!(f, "{case}")?;
        }
        writeln!(f, "{} passed, {} failed", self.passed(), self.failed())
    }
}

/// Runs every case against `options.plugin` and returns the results.
///
/// The cases:
/// - `version`: VERSION prints `{cniVersion, supportedVersions}`.
/// - `add-check-del-del`: ADD, CHECK (config version >= 0.4.0), DEL and DEL
///   again succeed; ADD's result is well-formed; an interface plugin's
///   interface exists after ADD and is gone after DEL; no file in the
///   state directory names the container afterwards.
/// - `del-without-add`: DEL of an attachment never added succeeds.
/// - `del-without-netns`: DEL without `CNI_NETNS` (optional for DEL)
///   succeeds and releases the attachment's state.
/// - `del-after-netns-deleted`: DEL with `CNI_NETNS` naming a deleted
///   namespace succeeds, releases the attachment's state and creates
///   nothing at that path.
/// - `add-result-<version>` for every version the plugin claims: the result
///   has the shape of that version (0.1.0/0.2.0 `ip4`/`ip6`; later
///   `interfaces`/`ips` with `interface` indexes into `interfaces`) and its
///   `cniVersion` is the config's; IPAM results carry no `interfaces` and
///   no `ips[].interface`; a chained plugin keeps `prevResult`'s addresses.
/// - `error-unsupported-version`, `error-missing-ifname`: a JSON error
///   object (`code`, `msg`) on stdout and a non-zero exit (codes 1 and 4).
/// - `unknown-command`: error code 4.
/// - `add-ifname-exists`: ADD when `CNI_IFNAME` already exists in the
///   container fails and leaves that interface alone (interface plugins;
///   IPAM and chained plugins create no interface).
/// - `host-netns-refused`: ADD with `CNI_NETNS` naming the plugin's own
///   namespace is refused and changes no link there.
/// - for plugins claiming 1.1.0: `status` (exit 0, or a well-formed error)
///   and `gc-empty-valid-attachments` (after ADD, GC with an empty
///   `cni.dev/valid-attachments` leaves no state of the attachment: no
///   file naming it, no nftables element or rule added for it, no
///   iptables rule naming it).
///
/// Errors are only for the kit itself (namespaces it cannot create, a
/// type it has no config for); a misbehaving plugin gives failed cases.
pub fn run(options: &Options) -> Result<Report, Error> {
    cases::run(options)
}
