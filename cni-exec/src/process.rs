//! Process concerns, apart from the pure protocol: the plugin binary's
//! entry point ([`run`]), the process environment ([`Env::from_process`]),
//! and running plugins as processes ([`ProcessExec`]: fork/exec, timeouts,
//! the "text file busy" retry) found on `CNI_PATH` ([`find_in_path`]).

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni_types::{CniError, ErrorCode};

use crate::exec::{plugin_error, traced_exec, Exec, PluginEnv};
use crate::skel::{dispatch_with, error_output, Env, OwnNetnsGuard};
use crate::{DynPlugin, Error};

/// The most stdin [`run`] reads; a bigger config is refused with code 5.
pub const MAX_STDIN: usize = 16 << 20;

/// The most a plugin run by [`ProcessExec`] may write to its stdout, and
/// to its stderr: as much as a plugin may read. Past it the plugin is
/// killed ([`Error::OutputTooLarge`]).
pub const MAX_OUTPUT: usize = MAX_STDIN;

impl Env {
    /// The process's environment with the real guard ([`OwnNetnsGuard`]).
    pub fn from_process() -> Self {
        Env::new(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
        .with_netns_guard(Arc::new(OwnNetnsGuard))
    }
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
/// stderr captured and passed on (each at most [`MAX_OUTPUT`] bytes, past
/// which the plugin is killed), an optional timeout that kills the plugin,
/// and the "text file busy" retry.
#[derive(Clone, Debug)]
pub struct ProcessExec {
    timeout: Option<Duration>,
    max_output: usize,
    launcher: Option<(PathBuf, Vec<std::ffi::OsString>)>,
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

impl ProcessExec {
    /// No timeout, stderr passed on, 6 tries 1 s apart on "text file busy".
    pub fn new() -> Self {
        ProcessExec {
            timeout: None,
            max_output: MAX_OUTPUT,
            launcher: None,
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

    /// Kills a plugin that writes more than `bytes` to its stdout or its
    /// stderr (default [`MAX_OUTPUT`]).
    pub fn with_max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }

    /// Starts every plugin through `program` (`program args... plugin`),
    /// as chroot(8) runs a command inside another root.
    pub fn with_launcher(
        mut self,
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString>>,
    ) -> Self {
        self.launcher = Some((program.into(), args.into_iter().map(Into::into).collect()));
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
            let mut cmd = match &self.launcher {
                None => std::process::Command::new(plugin),
                Some((program, args)) => {
                    let mut c = std::process::Command::new(program);
                    c.args(args).arg(plugin);
                    c
                }
            };
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

/// What a pipe reader tells the waiting thread.
enum Piped {
    /// The pipe reached its end.
    Done(&'static str, Vec<u8>),
    /// The plugin wrote more than [`MAX_OUTPUT`] bytes to it.
    TooLarge(&'static str),
}

/// Reads a plugin's `stream` (stdout or stderr) to its end on a thread of
/// its own, at most `cap` bytes, and reports to `done`.
fn reader(
    stream: &'static str,
    mut r: impl Read + Send + 'static,
    cap: usize,
    done: std::sync::mpsc::Sender<Piped>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("cni-exec-{stream}"))
        .spawn(move || {
            let mut buf = Vec::new();
            let _ = (&mut r).take(cap as u64 + 1).read_to_end(&mut buf);
            let msg = if buf.len() > cap {
                Piped::TooLarge(stream)
            } else {
                Piped::Done(stream, buf)
            };
            let _ = done.send(msg);
        })
        .map(drop)
}

impl Exec for ProcessExec {
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, Error> {
        find_in_path(plugin_type, paths)
    }

    fn exec_plugin(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error> {
        traced_exec(plugin, env, |env| self.run_process(plugin, stdin, env))
    }
}

impl ProcessExec {
    fn run_process(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error> {
        let mut child = self.spawn(plugin, env)?;
        let io_err = |source| Error::Io {
            op: "run plugin",
            path: plugin.to_path_buf(),
            source,
        };
        let kill = |child: &mut std::process::Child| {
            let _ = child.kill();
            let _ = child.wait();
        };
        let deadline = self.timeout.map(|t| Instant::now() + t);
        // Stdin is written from its own thread: a plugin that prints before
        // reading (or never reads) must not deadlock us on a full pipe.
        let (done, events) = std::sync::mpsc::channel();
        let mut started = Ok(());
        if let Some(mut w) = child.stdin.take() {
            let data = stdin.to_vec();
            started = std::thread::Builder::new()
                .name("cni-exec-stdin".into())
                .spawn(move || {
                    let _ = w.write_all(&data);
                })
                .map(drop);
        }
        let mut pipes = 0;
        for (name, pipe) in [
            (
                "stdout",
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
            (
                "stderr",
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
        ] {
            if let (Ok(()), Some(p)) = (&started, pipe) {
                started = reader(name, p, self.max_output, done.clone());
                pipes += 1;
            }
        }
        drop(done);
        // No thread for a pipe (the system refused one): nothing would
        // drain it, so the plugin cannot run.
        if let Err(source) = started {
            kill(&mut child);
            return Err(Error::Spawn {
                path: plugin.to_path_buf(),
                source,
            });
        }
        // The output, read as the plugin writes it; a stream past the cap
        // kills the plugin at once, before its end is waited for.
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while pipes > 0 {
            let event = match deadline {
                None => events.recv().ok(),
                Some(d) => match events.recv_timeout(d.saturating_duration_since(Instant::now())) {
                    Ok(e) => Some(e),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        // The reader threads are left to finish on their
                        // own: a grandchild may still hold the pipes.
                        kill(&mut child);
                        return Err(Error::Timeout {
                            path: plugin.to_path_buf(),
                            timeout: self.timeout.unwrap_or_default(),
                        });
                    }
                    Err(_) => None,
                },
            };
            match event {
                Some(Piped::Done(name, bytes)) => {
                    if name == "stdout" {
                        stdout = bytes;
                    } else {
                        stderr = bytes;
                    }
                    pipes -= 1;
                }
                Some(Piped::TooLarge(stream)) => {
                    kill(&mut child);
                    return Err(Error::OutputTooLarge {
                        path: plugin.to_path_buf(),
                        stream,
                        limit: self.max_output,
                    });
                }
                None => break,
            }
        }
        let status = match deadline {
            None => child.wait().map_err(io_err)?,
            Some(deadline) => {
                let mut pause = Duration::from_micros(100);
                loop {
                    if let Some(status) = child.try_wait().map_err(io_err)? {
                        break status;
                    }
                    if Instant::now() >= deadline {
                        kill(&mut child);
                        return Err(Error::Timeout {
                            path: plugin.to_path_buf(),
                            timeout: self.timeout.unwrap_or_default(),
                        });
                    }
                    std::thread::sleep(
                        pause.min(deadline.saturating_duration_since(Instant::now())),
                    );
                    pause = (pause * 2).min(Duration::from_millis(10));
                }
            }
        };
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

/// Reads stdin up to [`MAX_STDIN`] bytes; more is an error (code 5).
fn read_stdin_capped(input: impl Read) -> Result<Vec<u8>, CniError> {
    cni_files::capped::read_to_end(input, MAX_STDIN as u64).map_err(|e| {
        let reason = if e.kind() == std::io::ErrorKind::InvalidData {
            format!("network config larger than {MAX_STDIN} bytes")
        } else {
            e.to_string()
        };
        CniError::new(
            ErrorCode::IoFailure,
            format!("error reading from stdin: {reason}"),
            "",
        )
    })
}

/// The plugin binary's `main`: reads the environment and stdin, runs
/// [`dispatch`](crate::dispatch), writes stdout and stderr and exits with its code. Logging
/// is set up from the config's `logFile`/`logLevel` or the `CNI_LOG_FILE`
/// and `CNI_LOG_LEVEL` variables, span export from the config's `otlp` key
/// or OpenTelemetry's variables (see [`crate::logging`]); spans are
/// exported after the reply is written, within the export's budget.
///
/// ```no_run
/// # struct MyPlugin;
/// # impl cni_exec::Plugin for MyPlugin {
/// #   type Error = cni_types::CniError;
/// #   fn name(&self) -> &str { "my-plugin" }
/// #   fn add(&self, _: &cni_exec::Request) -> Result<cni_types::CniResult, cni_types::CniError> { Ok(Default::default()) }
/// #   fn del(&self, _: &cni_exec::Request) -> Result<(), cni_types::CniError> { Ok(()) }
/// # }
/// fn main() { cni_exec::run(&MyPlugin) }
/// ```
pub fn run(plugin: &dyn DynPlugin) -> ! {
    run_with_exec(plugin, Arc::new(ProcessExec::new()))
}

/// [`run`] with delegates run by `exec` (e.g. a
/// [`SameBuildExec`](crate::same_build::SameBuildExec)) instead of
/// [`ProcessExec`].
pub fn run_with_exec(plugin: &dyn DynPlugin, exec: Arc<dyn Exec>) -> ! {
    let env = Env::from_process().with_exec(exec);
    let mut exporter = None;
    // dispatch already turns a plugin panic into code 999; this catches a
    // panic anywhere else so stdout still gets one whole error reply.
    let out = catch_unwind(AssertUnwindSafe(|| {
        dispatch_with(plugin, &env, || {
            let data = read_stdin_capped(std::io::stdin().lock())?;
            exporter = crate::logging::init_from_config(&data, &env);
            Ok(data)
        })
    }))
    .unwrap_or_else(|_| error_output(CniError::internal("plugin runner panicked"), None));
    if let Some(e) = out.error() {
        tracing::error!(code = e.code.as_u32(), msg = %e.msg, details = %e.details, "plugin failed");
    }
    // One write of the whole reply: a plugin never leaves half a result.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&out.stdout);
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(&out.stderr);
    drop(stderr);
    // The spans go out after the reply, within the export's budget; a
    // failed export changes nothing but a debug log line.
    if let Some(exporter) = exporter
        .as_ref()
        .or_else(|| crate::logging::registered_exporter())
    {
        if let Err(e) = exporter.flush() {
            tracing::debug!("span export failed: {e}");
        }
    }
    std::process::exit(out.exit_code)
}
