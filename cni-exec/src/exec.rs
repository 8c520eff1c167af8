//! The executor vocabulary, shared by both ends of the protocol and
//! depending on nothing else in this crate: the [`Command`], the `CNI_*`
//! environment of one invocation ([`PluginEnv`]), the [`Exec`] trait that
//! runs a plugin, and [`NoExec`], the executor that runs nothing.

use std::fmt;
use std::path::{Path, PathBuf};

use cni_trace::context::{BAGGAGE, TRACEPARENT, TRACESTATE};
use cni_trace::TraceContext;
use cni_types::CniError;

use crate::Error;

/// A CNI command (`CNI_COMMAND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// `ADD`: attach the container to the network.
    Add,
    /// `CHECK`: verify an attachment (spec 0.4.0 on).
    Check,
    /// `DEL`: detach; must succeed when already detached.
    Del,
    /// `GC`: release resources of attachments not in the valid list (1.1.0).
    Gc,
    /// `STATUS`: can the plugin service ADD requests (1.1.0).
    Status,
    /// `VERSION`: report the supported spec versions.
    Version,
}

impl Command {
    /// The wire name (`ADD`, `DEL`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Check => "CHECK",
            Command::Del => "DEL",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// Parses a wire name (exact, upper case, as the Go skel matches).
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "CHECK" => Command::Check,
            "DEL" => Command::Del,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// Runs plugins. Two implementations: [`ProcessExec`](crate::ProcessExec) (fork/exec, the
/// reference behaviour) and [`InProcessExec`](crate::InProcessExec) (a registry of [`Plugin`](crate::Plugin)
/// values called through [`dispatch`](crate::dispatch)).
pub trait Exec: Send + Sync {
    /// Resolves a plugin type to what [`Exec::exec_plugin`] runs.
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, Error>;

    /// Runs the plugin with `stdin` and `env`; returns its stdout on
    /// success, its error reply ([`Error::Plugin`]) on failure.
    fn exec_plugin(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error>;
}

/// An executor that runs nothing: delegation through it fails with
/// [`Error::NoExecutor`]. What [`Env::new`](crate::Env::new) starts with, so
/// a pure [`dispatch`](crate::dispatch)(crate::dispatch) never starts a process unless the
/// caller hands it an executor that does.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExec;

impl Exec for NoExec {
    fn find_plugin(&self, plugin_type: &str, _paths: &[PathBuf]) -> Result<PathBuf, Error> {
        Err(Error::NoExecutor(plugin_type.to_string()))
    }

    fn exec_plugin(
        &self,
        plugin: &Path,
        _stdin: &[u8],
        _env: &PluginEnv,
    ) -> Result<Vec<u8>, Error> {
        Err(Error::NoExecutor(plugin.display().to_string()))
    }
}

/// The trace context this process was started with (its own
/// `TRACEPARENT`, `TRACESTATE`, `BAGGAGE`), read once.
pub fn inbound_trace_context() -> Option<&'static TraceContext> {
    static INBOUND: std::sync::OnceLock<Option<TraceContext>> = std::sync::OnceLock::new();
    INBOUND.get_or_init(TraceContext::from_process_env).as_ref()
}

/// Runs one plugin execution (`run`) as the span `cni.exec <type>`
/// (`otel.kind=client`, `cni.plugin`, `cni.command`) with the trace
/// context it hands the plugin set in the environment: that span's when it
/// is recorded; otherwise, unchanged, the one the caller put in `env`
/// (`TRACEPARENT` in [`PluginEnv::extra`], e.g.
/// [`CniConfig::with_trace_context`](crate::CniConfig::with_trace_context))
/// or this process's own ([`inbound_trace_context`]); otherwise none. A
/// caller's `TRACEPARENT` is the span's remote parent, and is replaced, not
/// duplicated. Every executor of this crate runs plugins through this.
pub fn traced_exec<T>(plugin: &Path, env: &PluginEnv, run: impl FnOnce(&PluginEnv) -> T) -> T {
    let explicit = TraceContext::from_lookup(|k| {
        env.extra
            .iter()
            .rev()
            .find(|(n, v)| n == k && !v.is_empty())
            .map(|(_, v)| v.as_str())
    });
    let plugin_type = plugin
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "cni.exec",
        otel.name = %format_args!("cni.exec {plugin_type}"),
        otel.kind = "client",
        cni.plugin = %plugin_type,
        cni.command = env.command.as_str(),
    );
    if let Some(parent) = &explicit {
        cni_trace::set_remote_parent(&span, parent);
    }
    let ctx = cni_trace::context_of(&span)
        .or(explicit)
        .or_else(|| inbound_trace_context().cloned());
    let _entered = span.enter();
    match ctx {
        None => run(env),
        Some(ctx) => {
            let mut env = env.clone();
            env.extra
                .retain(|(k, _)| ![TRACEPARENT, TRACESTATE, BAGGAGE].contains(&k.as_str()));
            env.extra
                .extend(ctx.env_vars().into_iter().map(|(k, v)| (k.to_string(), v)));
            run(&env)
        }
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

/// Splits a `CNI_PATH`-style list on `:`, dropping empty entries (Go's
/// `filepath.SplitList` keeps them, but an empty directory finds nothing).
pub fn split_path(s: &str) -> Vec<PathBuf> {
    s.split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn env_with(extra: &[(&str, &str)]) -> PluginEnv {
        let mut env = PluginEnv::new(Command::Add, "/opt/cni/bin");
        env.extra = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env
    }

    fn trace_vars(env: &PluginEnv) -> Vec<(String, String)> {
        env.extra
            .iter()
            .filter(|(k, _)| k.starts_with("TRACE") || k == "BAGGAGE")
            .cloned()
            .collect()
    }

    #[test]
    fn not_recording_passes_the_callers_context_unchanged_once() {
        let env = env_with(&[
            ("CNI_NETNS_OVERRIDE", "1"),
            ("TRACEPARENT", CALLER),
            ("TRACESTATE", "a=b"),
        ]);
        let seen = traced_exec(Path::new("/bin/bridge"), &env, trace_vars);
        assert_eq!(
            seen,
            vec![
                ("TRACEPARENT".to_string(), CALLER.to_string()),
                ("TRACESTATE".to_string(), "a=b".to_string())
            ]
        );
    }

    #[test]
    fn recording_hands_on_the_client_span_under_the_callers() {
        let config = cni_trace::ExportConfig::resolve(
            |k| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://127.0.0.1:9".into()),
            &cni_trace::Overrides::default(),
            "test",
        )
        .unwrap()
        .unwrap();
        let (layer, exporter) = cni_trace::layer(config);
        let env = env_with(&[("TRACEPARENT", CALLER), ("TRACEPARENT", CALLER)]);
        let seen =
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
                traced_exec(Path::new("/opt/cni/bin/portmap"), &env, trace_vars)
            });
        let spans = exporter.drain().spans;
        assert_eq!(spans.len(), 1);
        let exec = &spans[0];
        assert_eq!(exec.name, "cni.exec portmap");
        assert_eq!(exec.kind, cni_trace::proto::SpanKind::Client);
        let caller = TraceContext::parse_traceparent(CALLER).unwrap();
        assert_eq!(exec.trace_id, caller.trace_id());
        assert_eq!(exec.parent_span_id, Some(caller.span_id()));
        // One TRACEPARENT, the client span's.
        assert_eq!(
            seen,
            vec![(
                "TRACEPARENT".to_string(),
                caller.with_span_id(exec.span_id).traceparent()
            )]
        );
    }
}
