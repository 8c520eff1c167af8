//! The plugin runner: the Go skel's protocol as a pure function
//! ([`dispatch`]): environment and stdin in, stdout and exit code out. It
//! starts no process and reads no process state; [`run`](crate::run), the
//! binary's entry point, lives in `process`.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cni_types::{CniError, ErrorCode, NetworkConfig, Version, VersionReply};
use serde_json::Value;

/// Splits `CNI_PATH` (defined in [`exec`](crate::exec), beside the executor
/// that searches it; also reachable here).
pub use crate::exec::split_path;
use crate::exec::{Command, Exec, NoExec};
use crate::plugin::{DynPlugin, RequestVars};

/// Tells whether `CNI_NETNS` is the plugin's own network namespace.
///
/// A runtime that passes a stale pid-based path (`/proc/<pid>/ns/net` after
/// the pid was reused by a host process) would make a plugin configure the
/// host. The Go skel checks this after ADD and DEL; we check before.
pub trait NetnsGuard: Send + Sync {
    /// True when `netns_path` is the caller's own namespace. A path that
    /// cannot be opened is not an error (DEL of a gone namespace).
    fn is_own_netns(&self, netns_path: &str) -> Result<bool, CniError>;
}

/// A guard that never objects (tests, and runtimes that check themselves).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNetnsGuard;

impl NetnsGuard for NoNetnsGuard {
    fn is_own_netns(&self, _netns_path: &str) -> Result<bool, CniError> {
        Ok(false)
    }
}

/// The real guard: compares the device and inode of `CNI_NETNS` with the
/// calling thread's `/proc/thread-self/ns/net` (Go's `ns.CheckNetNS`).
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnNetnsGuard;

impl NetnsGuard for OwnNetnsGuard {
    fn is_own_netns(&self, netns_path: &str) -> Result<bool, CniError> {
        let Ok(target) = std::fs::metadata(netns_path) else {
            return Ok(false);
        };
        let own = std::fs::metadata("/proc/thread-self/ns/net")
            .map_err(|_| CniError::new(ErrorCode::InvalidNetns, "get plugin's netns failed", ""))?;
        Ok(own.dev() == target.dev() && own.ino() == target.ino())
    }
}

/// The environment of one plugin invocation: the variables, the own-netns
/// guard and the [`Exec`] that delegation goes through.
#[derive(Clone)]
pub struct Env {
    vars: HashMap<String, String>,
    guard: Arc<dyn NetnsGuard>,
    exec: Arc<dyn Exec>,
}

impl Env {
    /// An environment with these variables, no own-netns guard
    /// ([`NoNetnsGuard`]) and no executor ([`NoExec`]): delegation fails
    /// until [`Env::with_exec`] gives one (a
    /// [`ProcessExec`](crate::ProcessExec) to run delegates as processes, an
    /// [`InProcessExec`](crate::InProcessExec) to run them here).
    pub fn new<I, K, V>(vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Env {
            vars: vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            guard: Arc::new(NoNetnsGuard),
            exec: Arc::new(NoExec),
        }
    }

    /// Replaces the own-netns guard.
    pub fn with_netns_guard(mut self, guard: Arc<dyn NetnsGuard>) -> Self {
        self.guard = guard;
        self
    }

    /// Replaces the executor delegation uses.
    pub fn with_exec(mut self, exec: Arc<dyn Exec>) -> Self {
        self.exec = exec;
        self
    }

    /// Sets one variable.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.vars.insert(key.into(), value.into());
    }

    /// A variable's value; unset reads as "" (as Go's `os.Getenv`).
    pub fn get(&self, key: &str) -> &str {
        self.vars.get(key).map(String::as_str).unwrap_or("")
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("vars", &self.vars)
            .finish_non_exhaustive()
    }
}

/// What a plugin process prints and its exit code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// Stdout: the result, the VERSION reply, or the error reply.
    pub stdout: Vec<u8>,
    /// Stderr: the about text, or a panic note.
    pub stderr: Vec<u8>,
    /// 0 on success, 1 on error.
    pub exit_code: i32,
}

impl Output {
    /// The error reply of a failed run, parsed back (for tests and the
    /// in-process executor); `None` on success.
    pub fn error(&self) -> Option<CniError> {
        if self.exit_code == 0 {
            return None;
        }
        Some(
            serde_json::from_slice(&self.stdout)
                .unwrap_or_else(|_| CniError::internal(String::from_utf8_lossy(&self.stdout))),
        )
    }
}

const VARS: [&str; 6] = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
];

/// Which variables a command requires (the Go skel's matrix; `CNI_PATH` is
/// required although the spec says optional).
fn required(var: &str, cmd: &str) -> bool {
    use Command::*;
    let cmd = Command::parse(cmd);
    match var {
        "CNI_COMMAND" => true,
        "CNI_CONTAINERID" | "CNI_IFNAME" => matches!(cmd, Some(Add | Check | Del)),
        "CNI_NETNS" => matches!(cmd, Some(Add | Check)),
        "CNI_PATH" => matches!(cmd, Some(Add | Check | Del | Gc | Status)),
        _ => false,
    }
}

fn validate_var(var: &str, cmd: &str, value: &str) -> Result<(), CniError> {
    // Validation applies only where the command requires the variable; a
    // DEL's container id and ifname are validated, a GC's are not.
    let validated = match (var, Command::parse(cmd)) {
        ("CNI_CONTAINERID", Some(Command::Add | Command::Check | Command::Del)) => {
            cni_types::validate::container_id(value)
        }
        ("CNI_IFNAME", Some(Command::Add | Command::Check | Command::Del)) => {
            cni_types::validate::interface_name(value)
        }
        _ => Ok(()),
    };
    validated.map_err(|e| e.to_cni_error())
}

/// Looks a key up as Go's `encoding/json` matches struct fields: exact
/// match first, then case-insensitive.
fn json_key<'a>(map: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

/// Go's `validateConfig`: stdin must decode as an object with a valid name.
fn validate_config(stdin: &[u8]) -> Result<serde_json::Map<String, Value>, CniError> {
    let decode_err = |reason: String| {
        CniError::new(
            ErrorCode::DecodingFailure,
            format!("error unmarshall network config: {reason}"),
            "",
        )
    };
    // `prevResult` is read within the result limits, counted as it is
    // parsed: a huge one costs an error, not memory.
    let value = cni_types::limits::config_value_from_slice(stdin).map_err(|e| match e {
        cni_types::Error::Decode { reason, .. } => decode_err(reason),
        other => other.to_cni_error(),
    })?;
    let map = match value {
        Value::Object(m) => m,
        Value::Null => serde_json::Map::new(),
        other => return Err(decode_err(format!("expected an object, got {other}"))),
    };
    let name = match json_key(&map, "name") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(decode_err(format!("name must be a string, got {other}"))),
    };
    if name.is_empty() {
        return Err(CniError::invalid_config("missing network name"));
    }
    cni_types::validate::network_name(name).map_err(|e| e.to_cni_error())?;
    Ok(map)
}

/// The config's version by the one rule both ends use
/// ([`cni_types::config_version_in`], Go's `version.ConfigDecoder`).
fn decode_version(map: &serde_json::Map<String, Value>) -> Result<String, CniError> {
    cni_types::config_version_in(map).map_err(|e| e.to_cni_error())
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

struct Parsed {
    cmd: String,
    vars: RequestVars,
}

fn env_args(env: &Env) -> Result<Parsed, CniError> {
    let cmd = env.get("CNI_COMMAND");
    let mut missing = Vec::new();
    for var in VARS {
        let value = env.get(var);
        if value.is_empty() {
            if required(var, cmd) {
                missing.push(var);
            }
        } else if required(var, cmd) {
            validate_var(var, cmd, value)?;
        }
    }
    if !missing.is_empty() {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironmentVariables,
            format!("required env variables [{}] missing", missing.join(",")),
            "",
        ));
    }
    Ok(Parsed {
        cmd: cmd.to_string(),
        vars: RequestVars {
            container_id: env.get("CNI_CONTAINERID").to_string(),
            netns: env.get("CNI_NETNS").to_string(),
            ifname: env.get("CNI_IFNAME").to_string(),
            args: env.get("CNI_ARGS").to_string(),
            path: env.get("CNI_PATH").to_string(),
            netns_override: env.get("CNI_NETNS_OVERRIDE").to_string(),
        },
    })
}

pub(crate) fn error_output(mut e: CniError, version: Option<&str>) -> Output {
    if e.cni_version.is_none() {
        e.cni_version = version.map(str::to_string);
    }
    Output {
        // Go prints error replies with `json.MarshalIndent(e, "", "    ")`.
        stdout: cni_types::json::to_vec_pretty(&e).unwrap_or_else(|_| e.to_json()),
        stderr: Vec::new(),
        exit_code: 1,
    }
}

/// Runs one plugin invocation: the whole Go skel protocol, in memory.
///
/// `env` carries `CNI_*`; `stdin` is the network config. The result (or the
/// error reply, exit 1) is in [`Output::stdout`]. Nothing here touches the
/// process: the own-netns check goes through the env's [`NetnsGuard`].
pub fn dispatch(plugin: &dyn DynPlugin, env: &Env, stdin: &[u8]) -> Output {
    dispatch_with(plugin, env, || Ok(stdin.to_vec()))
}

/// [`dispatch`] with stdin read on demand: VERSION, a missing variable and
/// the about text never read it (as the Go skel), so a plugin run by hand in
/// a terminal does not wait for input.
pub fn dispatch_with(
    plugin: &dyn DynPlugin,
    env: &Env,
    read_stdin: impl FnOnce() -> Result<Vec<u8>, CniError>,
) -> Output {
    let args = match env_args(env) {
        Ok(a) => a,
        Err(e) => {
            let about = plugin.about();
            if e.code == ErrorCode::InvalidEnvironmentVariables
                && env.get("CNI_COMMAND").is_empty()
                && !about.is_empty()
            {
                let versions: Vec<String> = plugin
                    .supported_versions()
                    .iter()
                    .map(Version::to_string)
                    .collect();
                let text = format!(
                    "{about}\nCNI protocol versions supported: {}\n",
                    versions.join(", ")
                );
                return Output {
                    stdout: Vec::new(),
                    stderr: text.into_bytes(),
                    exit_code: 0,
                };
            }
            return error_output(e, None);
        }
    };
    if args.cmd == "VERSION" {
        let reply = VersionReply::new(&plugin.supported_versions());
        // Go's `json.NewEncoder(w).Encode`: compact, with a newline.
        let mut stdout = serde_json::to_vec(&reply).unwrap_or_default();
        stdout.push(b'\n');
        return Output {
            stdout,
            stderr: Vec::new(),
            exit_code: 0,
        };
    }
    let stdin = match read_stdin() {
        Ok(s) => s,
        Err(e) => return error_output(e, None),
    };
    // The call's span starts once stdin is read: the process wrapper sets
    // up the recorder from the config's keys as it reads it.
    let span = call_span(&args.cmd, env);
    let out = span.in_scope(|| run_config(plugin, env, args, stdin, &span));
    if out.exit_code != 0 && !span.is_disabled() {
        if let Some(e) = out.error() {
            span.record("cni.error.code", u64::from(e.code.as_u32()));
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_message", e.msg.as_str());
        }
    }
    out
}

/// The span of one CNI call, `cni <COMMAND>` (`otel.kind=server`), a child
/// of the caller's `TRACEPARENT` when the environment carries a valid one
/// (an invalid one is ignored). The config's fields are recorded as it is
/// read (`cni.plugin` is the running plugin's name, else the config's
/// `type`), the error's code and message when the call fails.
fn call_span(cmd: &str, env: &Env) -> tracing::Span {
    let empty = tracing::field::Empty;
    let span = tracing::info_span!(
        "cni",
        otel.name = %format_args!("cni {cmd}"),
        otel.kind = "server",
        cni.command = cmd,
        cni.plugin = empty,
        cni.network.name = empty,
        cni.container.id = env.get("CNI_CONTAINERID"),
        cni.ifname = env.get("CNI_IFNAME"),
        cni.version = empty,
        cni.netns = env.get("CNI_NETNS"),
        cni.error.code = empty,
        otel.status_code = empty,
        otel.status_message = empty,
    );
    if !span.is_disabled() {
        let get = |k: &str| Some(env.get(k)).filter(|v| !v.is_empty());
        if let Some(parent) = cni_trace::TraceContext::from_lookup(get) {
            cni_trace::set_remote_parent(&span, &parent);
        }
    }
    span
}

fn run_config(
    plugin: &dyn DynPlugin,
    env: &Env,
    args: Parsed,
    stdin: Vec<u8>,
    span: &tracing::Span,
) -> Output {
    let map = match validate_config(&stdin) {
        Ok(m) => m,
        Err(e) => return error_output(e, None),
    };
    if !span.is_disabled() {
        let text = |k: &str| json_key(&map, k).and_then(Value::as_str).unwrap_or("");
        // The plugin running (an IPAM delegate gets its caller's config,
        // whose `type` names the caller); a nameless one by the type.
        let name = Some(plugin.name()).filter(|n| !n.is_empty());
        span.record("cni.plugin", name.unwrap_or_else(|| text("type")));
        span.record("cni.network.name", text("name"));
    }
    let config_version = match decode_version(&map) {
        Ok(v) => v,
        Err(e) => return error_output(e, None),
    };
    span.record("cni.version", config_version.as_str());
    match run_command(plugin, env, args, stdin, map, &config_version) {
        Ok(stdout) => Output {
            stdout,
            stderr: Vec::new(),
            exit_code: 0,
        },
        Err(e) => error_output(e, Some(&config_version)),
    }
}

fn run_command(
    plugin: &dyn DynPlugin,
    env: &Env,
    args: Parsed,
    stdin: Vec<u8>,
    map: serde_json::Map<String, Value>,
    config_version: &str,
) -> Result<Vec<u8>, CniError> {
    let Some(cmd) = Command::parse(&args.cmd) else {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironmentVariables,
            format!("unknown CNI_COMMAND: {}", args.cmd),
            "",
        ));
    };
    let supported = plugin.supported_versions();
    let gate = match cmd {
        Command::Check => Some(Version::V0_4_0),
        Command::Gc | Command::Status => Some(Version::V1_1_0),
        _ => None,
    };
    if let Some(min) = gate {
        let parsed = Version::parse(config_version)
            .map_err(|e| CniError::new(ErrorCode::DecodingFailure, e.to_string(), ""))?;
        if parsed < min {
            return Err(CniError::new(
                ErrorCode::IncompatibleCniVersion,
                format!("config version does not allow {cmd}"),
                "",
            ));
        }
        if !supported.iter().any(|v| *v >= parsed) {
            return Err(CniError::new(
                ErrorCode::IncompatibleCniVersion,
                format!("plugin version does not allow {cmd}"),
                "",
            ));
        }
    }
    // Go's reconciler compares strings: "1.0" is not "1.0.0".
    let supported_strings: Vec<String> = supported.iter().map(Version::to_string).collect();
    if !supported_strings.iter().any(|v| v == config_version) {
        return Err(CniError::new(
            ErrorCode::IncompatibleCniVersion,
            "incompatible CNI versions",
            format!(
                "config is {config_version:?}, plugin supports {}",
                go_quote_list(&supported_strings)
            ),
        ));
    }
    let version = Version::parse(config_version)
        .map_err(|e| CniError::new(ErrorCode::DecodingFailure, e.to_string(), ""))?;
    let config = NetworkConfig::from_map(map).map_err(|e| e.to_cni_error())?;
    if cmd == Command::Gc && plugin.gc_needs_valid_attachments() {
        require_valid_attachments(&config)?;
    }

    // The own-netns guard runs before the plugin acts (Go checks after ADD
    // and DEL, when a plugin may already have configured the host).
    if matches!(cmd, Command::Add | Command::Del)
        && !args.vars.netns_override.eq_ignore_ascii_case("true")
        && args.vars.netns_override != "1"
        && env.guard.is_own_netns(&args.vars.netns)?
    {
        return Err(CniError::new(
            ErrorCode::InvalidNetns,
            "plugin's netns and netns from CNI_NETNS should not be the same",
            "",
        ));
    }

    let req = args
        .vars
        .into_request(cmd, config, version, stdin, env.exec.clone());
    let outcome = catch_unwind(AssertUnwindSafe(|| match cmd {
        Command::Add => plugin.add(&req).and_then(|r| {
            r.to_json_pretty(version)
                .map_err(|e| CniError::internal(e.to_string()))
        }),
        Command::Del => plugin.del(&req).map(|()| Vec::new()),
        Command::Check => plugin.check(&req).map(|()| Vec::new()),
        Command::Gc => plugin.gc(&req).map(|()| Vec::new()),
        Command::Status => plugin.status(&req).map(|()| Vec::new()),
        Command::Version => Ok(Vec::new()),
    }));
    match outcome {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(CniError::internal(format!(
                "plugin panicked during {cmd}: {what}"
            )))
        }
    }
}

/// One rule for every plugin's GC: without `cni.dev/valid-attachments`
/// (absent or `null`) nothing is known to be alive, so the request is
/// refused (code 7) rather than read as "every attachment is stale".
fn require_valid_attachments(config: &NetworkConfig) -> Result<(), CniError> {
    match config.valid_attachments() {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(CniError::invalid_config(format!(
            "GC needs the list of valid attachments ({}): without it every attachment would look stale",
            cni_types::config::VALID_ATTACHMENTS_KEY
        ))),
        Err(e) => Err(e.to_cni_error()),
    }
}
