//! Running plugins from the runtime side and from a delegating plugin: the
//! in-process executor ([`InProcessExec`]), result decoding, VERSION
//! probing, and delegation (`pkg/invoke` of the Go reference). Processes
//! are [`ProcessExec`]'s business (`process`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cni_types::{CniResult, Version, VersionReply};
use serde_json::Value;

use crate::exec::Command;
pub use crate::exec::{plugin_error, Exec, PluginEnv};
use crate::plugin::{DynPlugin, Request};
pub use crate::process::{find_in_path, ProcessExec, StderrSink};
use crate::skel::{dispatch, Env, NetnsGuard, OwnNetnsGuard};
use crate::Error;

/// Runs registered [`Plugin`](crate::Plugin) values in this process
/// through [`dispatch`]: no fork/exec. Types not registered go to an
/// optional fallback executor (e.g. [`ProcessExec`] for the Go plugins).
///
/// Delegation from a plugin run here stays in this executor.
///
/// ```
/// use std::sync::Arc;
/// use cni_exec::{CniConfig, InProcessExec, Plugin, Request, RuntimeConf};
/// use cni_types::{CniError, CniResult, IpConfig, NetworkConfigList};
///
/// struct Fixed;
/// impl Plugin for Fixed {
///     type Error = CniError;
///     fn name(&self) -> &str { "fixed" }
///     fn add(&self, _req: &Request) -> Result<CniResult, CniError> {
///         let mut r = CniResult::default();
///         r.ips.push(IpConfig::new("10.1.0.5/24".parse().unwrap()));
///         Ok(r)
///     }
///     fn del(&self, _req: &Request) -> Result<(), CniError> { Ok(()) }
/// }
///
/// let exec = InProcessExec::builder().register("fixed", Arc::new(Fixed)).build();
/// let cache = tempfile::tempdir()?;
/// let cni = CniConfig::new(vec!["/opt/cni/bin".into()], Arc::new(exec)).with_cache_dir(cache.path());
/// let list = NetworkConfigList::from_slice(
///     br#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"fixed"}]}"#,
/// )?;
/// let rt = RuntimeConf {
///     container_id: "c1".into(),
///     netns: "/run/netns/c1".into(),
///     ifname: "eth0".into(),
///     ..Default::default()
/// };
/// let added = cni.add_network_list(&list, &rt)?;
/// assert_eq!(added.result.ips[0].address.to_string(), "10.1.0.5/24");
/// cni.del_network_list(&list, &rt)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct InProcessExec {
    inner: Arc<Registry>,
}

struct Registry {
    plugins: HashMap<String, Arc<dyn DynPlugin>>,
    fallback: Option<Arc<dyn Exec>>,
    guard: Arc<dyn NetnsGuard>,
}

impl std::fmt::Debug for InProcessExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.inner.plugins.keys().collect();
        names.sort();
        f.debug_struct("InProcessExec")
            .field("plugins", &names)
            .field("fallback", &self.inner.fallback.is_some())
            .finish()
    }
}

/// Builds an [`InProcessExec`].
#[derive(Default)]
pub struct InProcessExecBuilder {
    plugins: HashMap<String, Arc<dyn DynPlugin>>,
    fallback: Option<Arc<dyn Exec>>,
    guard: Option<Arc<dyn NetnsGuard>>,
}

impl InProcessExecBuilder {
    /// Registers `plugin` under `plugin_type`.
    pub fn register(mut self, plugin_type: impl Into<String>, plugin: Arc<dyn DynPlugin>) -> Self {
        self.plugins.insert(plugin_type.into(), plugin);
        self
    }

    /// Runs unregistered types with `exec` instead of failing.
    pub fn fallback(mut self, exec: Arc<dyn Exec>) -> Self {
        self.fallback = Some(exec);
        self
    }

    /// Replaces the own-netns guard (default [`OwnNetnsGuard`]).
    pub fn netns_guard(mut self, guard: Arc<dyn NetnsGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// The executor.
    pub fn build(self) -> InProcessExec {
        InProcessExec {
            inner: Arc::new(Registry {
                plugins: self.plugins,
                fallback: self.fallback,
                guard: self.guard.unwrap_or_else(|| Arc::new(OwnNetnsGuard)),
            }),
        }
    }
}

impl InProcessExec {
    /// A builder.
    pub fn builder() -> InProcessExecBuilder {
        InProcessExecBuilder::default()
    }

    fn registered(&self, plugin: &Path) -> Option<&Arc<dyn DynPlugin>> {
        // Registered types resolve to a bare name (no directory), which no
        // real plugin path is.
        if plugin.parent().is_some_and(|p| !p.as_os_str().is_empty()) {
            return None;
        }
        self.inner.plugins.get(plugin.to_str()?)
    }
}

impl Exec for InProcessExec {
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, Error> {
        if plugin_type.is_empty() {
            return Err(Error::NoPluginName);
        }
        if plugin_type.contains('/') {
            return Err(Error::InvalidPluginName(plugin_type.to_string()));
        }
        if self.inner.plugins.contains_key(plugin_type) {
            return Ok(PathBuf::from(plugin_type));
        }
        match &self.inner.fallback {
            Some(f) => f.find_plugin(plugin_type, paths),
            None => Err(Error::NotRegistered(plugin_type.to_string())),
        }
    }

    fn exec_plugin(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error> {
        let Some(p) = self.registered(plugin) else {
            return match &self.inner.fallback {
                Some(f) => f.exec_plugin(plugin, stdin, env),
                None => Err(Error::NotRegistered(plugin.display().to_string())),
            };
        };
        crate::exec::traced_exec(plugin, env, |env| {
            let env = Env::new(env.vars())
                .with_netns_guard(self.inner.guard.clone())
                .with_exec(Arc::new(self.clone()));
            run_in_process(p.as_ref(), &env, stdin)
        })
    }
}

/// Runs `plugin` through [`dispatch`] as its binary would run: its stdout
/// on success, its error reply (as [`ProcessExec`] reports a failed
/// process) otherwise.
pub(crate) fn run_in_process(
    plugin: &dyn DynPlugin,
    env: &Env,
    stdin: &[u8],
) -> Result<Vec<u8>, Error> {
    let out = dispatch(plugin, env, stdin);
    if out.exit_code == 0 {
        Ok(out.stdout)
    } else {
        Err(Error::Plugin(plugin_error(
            &format!("exit status {}", out.exit_code),
            &out.stdout,
            &out.stderr,
        )))
    }
}

/// Runs a plugin that returns a result (ADD) and decodes it. A result
/// without `cniVersion` is read in the config's version (Go's
/// `fixupResultVersion`, cni#895); `null` is an empty result.
///
/// Returns the version the plugin answered in and the result.
pub fn exec_plugin_with_result(
    exec: &dyn Exec,
    plugin: &Path,
    netconf: &[u8],
    env: &PluginEnv,
) -> Result<(Version, CniResult), Error> {
    let stdout = exec.exec_plugin(plugin, netconf, env)?;
    decode_result(plugin, netconf, &stdout)
}

fn decode_result(
    plugin: &Path,
    netconf: &[u8],
    stdout: &[u8],
) -> Result<(Version, CniResult), Error> {
    let name = || plugin.display().to_string();
    // One version rule for both ends (Go's `version.ConfigDecoder`).
    let conf_version = cni_types::config_version(netconf)?;
    // Within the result limits, counted as it is parsed.
    let mut value =
        cni_types::limits::result_value_from_slice(stdout, "result").map_err(|source| {
            Error::DecodeResult {
                plugin: name(),
                source,
            }
        })?;
    if value.is_null() {
        value = Value::Object(serde_json::Map::new());
    }
    let default = Version::parse(&conf_version).map_err(|source| Error::DecodeResult {
        plugin: name(),
        source,
    })?;
    CniResult::from_value(&value, default).map_err(|source| Error::DecodeResult {
        plugin: name(),
        source,
    })
}

/// Asks a plugin for its versions (Go's `GetVersionInfo`): stdin
/// `{"cniVersion":"1.1.0"}` and dummy `CNI_NETNS`/`CNI_IFNAME`/`CNI_PATH`
/// for plugins built on an old skel; "unknown CNI_COMMAND: VERSION" means a
/// 0.1.0-only plugin.
pub fn get_version_info(exec: &dyn Exec, plugin: &Path) -> Result<VersionReply, Error> {
    let mut env = PluginEnv::new(Command::Version, "dummy");
    env.netns = "dummy".into();
    env.ifname = "dummy".into();
    let stdin = format!("{{\"cniVersion\":\"{}\"}}", Version::CURRENT);
    let stdout = match exec.exec_plugin(plugin, stdin.as_bytes(), &env) {
        Ok(s) => s,
        Err(Error::Plugin(e)) if e.to_string() == "unknown CNI_COMMAND: VERSION" => {
            return Ok(VersionReply::legacy())
        }
        Err(e) => return Err(e),
    };
    let decode_err = |reason: String| Error::DecodeVersion {
        plugin: plugin.display().to_string(),
        reason,
    };
    let probe: Value = serde_json::from_slice(&stdout).map_err(|e| decode_err(e.to_string()))?;
    if probe
        .get("cniVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        return Err(decode_err("missing field cniVersion".into()));
    }
    VersionReply::from_slice(&stdout).map_err(|e| decode_err(e.to_string()))
}

fn delegate(
    plugin_type: &str,
    stdin: &[u8],
    req: &Request,
    command: Command,
) -> Result<Vec<u8>, Error> {
    delegate_with_env(plugin_type, stdin, req, &req.delegate_env(command))
}

/// Runs the delegate `plugin_type` (found on the request's `CNI_PATH`)
/// through the request's [`Exec`] with an environment of the caller's
/// making — for meta plugins (multus) whose delegates get another ifname or
/// `CNI_ARGS`. Returns the delegate's stdout.
pub fn delegate_with_env(
    plugin_type: &str,
    stdin: &[u8],
    req: &Request,
    env: &PluginEnv,
) -> Result<Vec<u8>, Error> {
    let exec = req.exec();
    let path = exec.find_plugin(plugin_type, &req.path)?;
    exec.exec_plugin(&path, stdin, env)
}

/// Runs the delegate `plugin_type` (found on the request's `CNI_PATH`) for
/// ADD with `stdin`, the request's environment and `CNI_COMMAND=ADD`; how
/// bridge runs its IPAM plugin. Goes through the request's [`Exec`].
pub fn delegate_add(plugin_type: &str, stdin: &[u8], req: &Request) -> Result<CniResult, Error> {
    let exec = req.exec();
    let path = exec.find_plugin(plugin_type, &req.path)?;
    let (_, result) =
        exec_plugin_with_result(exec.as_ref(), &path, stdin, &req.delegate_env(Command::Add))?;
    Ok(result)
}

/// [`delegate_add`] for DEL.
pub fn delegate_del(plugin_type: &str, stdin: &[u8], req: &Request) -> Result<(), Error> {
    delegate(plugin_type, stdin, req, Command::Del).map(|_| ())
}

/// [`delegate_add`] for CHECK.
pub fn delegate_check(plugin_type: &str, stdin: &[u8], req: &Request) -> Result<(), Error> {
    delegate(plugin_type, stdin, req, Command::Check).map(|_| ())
}

/// [`delegate_add`] for STATUS.
pub fn delegate_status(plugin_type: &str, stdin: &[u8], req: &Request) -> Result<(), Error> {
    delegate(plugin_type, stdin, req, Command::Status).map(|_| ())
}

/// [`delegate_add`] for GC.
pub fn delegate_gc(plugin_type: &str, stdin: &[u8], req: &Request) -> Result<(), Error> {
    delegate(plugin_type, stdin, req, Command::Gc).map(|_| ())
}
