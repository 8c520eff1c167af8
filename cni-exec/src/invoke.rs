//! Running plugins: discovery on `CNI_PATH`, the [`Exec`] abstraction with
//! its process ([`ProcessExec`]) and in-process ([`InProcessExec`])
//! implementations, result decoding, VERSION probing, and delegation for
//! plugins (`pkg/invoke` of the Go reference).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni_types::{CniError, CniResult, Version, VersionReply};
use serde_json::Value;

use crate::plugin::{Command, Plugin, Request};
use crate::skel::{dispatch, Env, NetnsGuard, OwnNetnsGuard};
use crate::Error;

/// The `CNI_*` variables of one invocation (what Go's `invoke.Args` turns
/// into an environment). Every variable is set, empty when unused, as
/// libcni does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginEnv {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS`.
    pub netns: String,
    /// `CNI_ARGS` (`K=V;K=V`).
    pub args: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_PATH` (`:`-separated).
    pub path: String,
    /// Further variables (set after the `CNI_*` ones, so they win).
    pub extra: Vec<(String, String)>,
}

impl PluginEnv {
    /// An environment with only the command and `CNI_PATH` set (GC, STATUS).
    pub fn new(command: Command, path: impl Into<String>) -> Self {
        PluginEnv {
            command,
            container_id: String::new(),
            netns: String::new(),
            args: String::new(),
            ifname: String::new(),
            path: path.into(),
            extra: Vec::new(),
        }
    }

    /// The environment a plugin's delegate gets: the request's own `CNI_*`
    /// with the command replaced (Go's `DelegateArgs`).
    pub fn delegate(req: &Request, command: Command) -> Self {
        let mut extra = Vec::new();
        if !req.netns_override.is_empty() {
            extra.push(("CNI_NETNS_OVERRIDE".into(), req.netns_override.clone()));
        }
        PluginEnv {
            command,
            container_id: req.container_id.clone(),
            netns: req.netns.clone(),
            args: req.args_raw.clone(),
            ifname: req.ifname.clone(),
            path: req.path_raw.clone(),
            extra,
        }
    }

    /// The variables as `(name, value)` pairs, `CNI_*` first.
    pub fn vars(&self) -> Vec<(&str, &str)> {
        let mut v = vec![
            ("CNI_COMMAND", self.command.as_str()),
            ("CNI_CONTAINERID", self.container_id.as_str()),
            ("CNI_NETNS", self.netns.as_str()),
            ("CNI_ARGS", self.args.as_str()),
            ("CNI_IFNAME", self.ifname.as_str()),
            ("CNI_PATH", self.path.as_str()),
        ];
        v.extend(self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        v
    }
}

/// Runs plugins. Two implementations: [`ProcessExec`] (fork/exec, the
/// reference behaviour) and [`InProcessExec`] (a registry of [`Plugin`]
/// values called through [`dispatch`]).
pub trait Exec: Send + Sync {
    /// Resolves a plugin type to what [`Exec::exec_plugin`] runs.
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, Error>;

    /// Runs the plugin with `stdin` and `env`; returns its stdout on
    /// success, its error reply ([`Error::Plugin`]) on failure.
    fn exec_plugin(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error>;
}

/// Finds `plugin` in `paths` as Go's `invoke.FindInPath`: the first
/// directory holding a *regular file* of that name (symlinks followed); a
/// name with a path separator is refused.
pub fn find_in_path(plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, Error> {
    if plugin.is_empty() {
        return Err(Error::NoPluginName);
    }
    if plugin.contains('/') {
        return Err(Error::InvalidPluginName(plugin.to_string()));
    }
    if paths.is_empty() {
        return Err(Error::NoPaths);
    }
    for dir in paths {
        let full = dir.join(plugin);
        if std::fs::metadata(&full).is_ok_and(|m| m.is_file()) {
            return Ok(full);
        }
    }
    Err(Error::PluginNotFound {
        plugin: plugin.to_string(),
        paths: paths.to_vec(),
    })
}

/// Where a plugin process's stderr goes.
#[derive(Clone, Debug, Default)]
pub enum StderrSink {
    /// Copied to this process's stderr (Go's `RawExec{Stderr: os.Stderr}`).
    #[default]
    Inherit,
    /// Appended to a buffer.
    Buffer(Arc<Mutex<Vec<u8>>>),
    /// Dropped.
    Discard,
}

/// Runs plugins as processes: environment + stdin in, stdout captured,
/// stderr captured and passed on, an optional timeout that kills the plugin,
/// and the "text file busy" retry.
#[derive(Clone, Debug)]
pub struct ProcessExec {
    timeout: Option<Duration>,
    stderr: StderrSink,
    busy_retries: u32,
    busy_delay: Duration,
}

impl Default for ProcessExec {
    fn default() -> Self {
        ProcessExec::new()
    }
}

/// Go's `ProcessState.String()` for a finished process.
fn exit_text(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(libc::SIGKILL) => "signal: killed".into(),
        Some(libc::SIGTERM) => "signal: terminated".into(),
        Some(libc::SIGINT) => "signal: interrupt".into(),
        Some(libc::SIGABRT) => "signal: aborted".into(),
        Some(libc::SIGSEGV) => "signal: segmentation fault".into(),
        Some(s) => format!("signal: {s}"),
        None => format!("{status}"),
    }
}

/// Go's `RawExec.pluginErr`: the plugin's error reply, or one built from
/// its stderr or its unparsable stdout.
pub fn plugin_error(status_text: &str, stdout: &[u8], stderr: &[u8]) -> CniError {
    let msg = |m: String| CniError::new(cni_types::ErrorCode::Unknown, m, "");
    if stdout.is_empty() {
        if stderr.is_empty() {
            msg(format!(
                "netplugin failed with no error message: {status_text}"
            ))
        } else {
            msg(format!(
                "netplugin failed: {:?}: {status_text}",
                String::from_utf8_lossy(stderr)
            ))
        }
    } else {
        match serde_json::from_slice::<CniError>(stdout) {
            Ok(e) => e,
            Err(e) => msg(format!(
                "netplugin failed but error parsing its diagnostic message {:?}: {e}",
                String::from_utf8_lossy(stdout)
            )),
        }
    }
}

impl ProcessExec {
    /// No timeout, stderr passed on, 6 tries 1 s apart on "text file busy".
    pub fn new() -> Self {
        ProcessExec {
            timeout: None,
            stderr: StderrSink::Inherit,
            busy_retries: 6,
            busy_delay: Duration::from_secs(1),
        }
    }

    /// Kills a plugin still running after `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Where plugin stderr goes.
    pub fn with_stderr(mut self, sink: StderrSink) -> Self {
        self.stderr = sink;
        self
    }

    /// How often and how far apart to retry a spawn that fails with
    /// "text file busy" (a binary being replaced while we start it).
    pub fn with_busy_retry(mut self, tries: u32, delay: Duration) -> Self {
        self.busy_retries = tries.max(1);
        self.busy_delay = delay;
        self
    }

    fn spawn(&self, plugin: &Path, env: &PluginEnv) -> Result<std::process::Child, Error> {
        let mut tries = 0;
        loop {
            let mut cmd = std::process::Command::new(plugin);
            cmd.envs(env.vars())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            match cmd.spawn() {
                Ok(child) => return Ok(child),
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    tries += 1;
                    if tries >= self.busy_retries {
                        return Err(Error::Spawn {
                            path: plugin.to_path_buf(),
                            source: e,
                        });
                    }
                    tracing::debug!(plugin = %plugin.display(), "text file busy, retrying");
                    std::thread::sleep(self.busy_delay);
                }
                Err(e) => {
                    return Err(Error::Spawn {
                        path: plugin.to_path_buf(),
                        source: e,
                    })
                }
            }
        }
    }

    fn pass_on_stderr(&self, stderr: &[u8]) {
        if stderr.is_empty() {
            return;
        }
        match &self.stderr {
            StderrSink::Inherit => {
                let _ = std::io::stderr().lock().write_all(stderr);
            }
            StderrSink::Buffer(buf) => {
                if let Ok(mut b) = buf.lock() {
                    b.extend_from_slice(stderr);
                }
            }
            StderrSink::Discard => {}
        }
    }
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

impl Exec for ProcessExec {
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, Error> {
        find_in_path(plugin_type, paths)
    }

    fn exec_plugin(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error> {
        let mut child = self.spawn(plugin, env)?;
        let io_err = |source| Error::Io {
            op: "run plugin",
            path: plugin.to_path_buf(),
            source,
        };
        // Stdin is written from its own thread: a plugin that prints before
        // reading (or never reads) must not deadlock us on a full pipe.
        let writer = child.stdin.take().map(|mut w| {
            let data = stdin.to_vec();
            std::thread::spawn(move || {
                let _ = w.write_all(&data);
            })
        });
        let out = child.stdout.take().map(reader);
        let err = child.stderr.take().map(reader);
        let status = match self.timeout {
            None => child.wait().map_err(io_err)?,
            Some(timeout) => {
                let deadline = Instant::now() + timeout;
                let mut pause = Duration::from_micros(100);
                loop {
                    if let Some(status) = child.try_wait().map_err(io_err)? {
                        break status;
                    }
                    if Instant::now() >= deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        // The reader threads are left to finish on their
                        // own: a grandchild may still hold the pipes.
                        return Err(Error::Timeout {
                            path: plugin.to_path_buf(),
                            timeout,
                        });
                    }
                    std::thread::sleep(
                        pause.min(deadline.saturating_duration_since(Instant::now())),
                    );
                    pause = (pause * 2).min(Duration::from_millis(10));
                }
            }
        };
        if let Some(w) = writer {
            let _ = w.join();
        }
        let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
        let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
        self.pass_on_stderr(&stderr);
        if status.success() {
            Ok(stdout)
        } else {
            Err(Error::Plugin(plugin_error(
                &exit_text(status),
                &stdout,
                &stderr,
            )))
        }
    }
}

/// Runs registered [`Plugin`] values in this process through [`dispatch`]:
/// no fork/exec. Types not registered go to an optional fallback executor
/// (e.g. [`ProcessExec`] for the Go plugins).
///
/// Delegation from a plugin run here stays in this executor.
#[derive(Clone)]
pub struct InProcessExec {
    inner: Arc<Registry>,
}

struct Registry {
    plugins: HashMap<String, Arc<dyn Plugin>>,
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
    plugins: HashMap<String, Arc<dyn Plugin>>,
    fallback: Option<Arc<dyn Exec>>,
    guard: Option<Arc<dyn NetnsGuard>>,
}

impl InProcessExecBuilder {
    /// Registers `plugin` under `plugin_type`.
    pub fn register(mut self, plugin_type: impl Into<String>, plugin: Arc<dyn Plugin>) -> Self {
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

    fn registered(&self, plugin: &Path) -> Option<&Arc<dyn Plugin>> {
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
        let env = Env::new(env.vars())
            .with_netns_guard(self.inner.guard.clone())
            .with_exec(Arc::new(self.clone()));
        run_in_process(p.as_ref(), &env, stdin)
    }
}

/// Runs `plugin` through [`dispatch`] as its binary would run: its stdout
/// on success, its error reply (as [`ProcessExec`] reports a failed
/// process) otherwise.
pub(crate) fn run_in_process(
    plugin: &dyn Plugin,
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

/// Go's `create.DecodeVersion` on a config: `cniVersion`, "" meaning 0.1.0.
fn config_version(netconf: &[u8]) -> Result<String, Error> {
    let v: Value = serde_json::from_slice(netconf).map_err(|e| {
        Error::Types(cni_types::Error::Decode {
            what: "version from network config".into(),
            reason: e.to_string(),
        })
    })?;
    Ok(match v.get("cniVersion") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => "0.1.0".into(),
    })
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
    let conf_version = config_version(netconf)?;
    let mut value: Value = serde_json::from_slice(stdout).map_err(|e| Error::DecodeResult {
        plugin: name(),
        source: cni_types::Error::Decode {
            what: "raw result".into(),
            reason: e.to_string(),
        },
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
    delegate_with_env(plugin_type, stdin, req, &PluginEnv::delegate(req, command))
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
    let (_, result) = exec_plugin_with_result(
        exec.as_ref(),
        &path,
        stdin,
        &PluginEnv::delegate(req, Command::Add),
    )?;
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
