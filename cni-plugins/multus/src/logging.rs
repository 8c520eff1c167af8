//! Logging exactly as Multus logs (multus-cni `pkg/logging`): lines
//! `<RFC 3339 time> [<level>] <message>`, written to stderr when
//! `logToStderr` and to `logFile` when set — both when both are asked
//! for — filtered by one level mapping, rotated while the process runs
//! (lumberjack, [`RotatingFile`]).
//!
//! Levels, from quietest: `panic` (the default: only panics are logged),
//! `error` (errors and warnings: Go's `Errorf` and `Warningf`), `verbose`
//! (plus Go's `Verbosef`, our `info`), `debug` (everything). A `tracing`
//! event is logged at the Multus level of its `tracing` level:
//! ERROR and WARN at `error`, INFO at `verbose`, DEBUG and TRACE at `debug`
//! ([`level_of`]).
//!
//! The sinks are process-wide, as Go's: a binary calls [`install`] once
//! (the `multus`, `multus-shim` and `multus-daemon` binaries do), then the
//! configuration sets them ([`configure_global`]): the thin plugin from
//! its `NetConf` on every command (Go's `LoadNetConf`), the shim from its
//! configuration (Go's `shimConfig`: `logToStderr` off unless set), the
//! daemon from its daemon configuration at start (Go's
//! `LoadDaemonNetConf`). Without [`install`] (a runtime embedding the
//! plugins) nothing is opened or written here.
//!
//! `logOptions` (`maxAge` days, `maxSize` megabytes, `maxBackups`,
//! `compress`) default to Go's 5, 100, 5 and true when the key or the
//! object is absent; a value given is used as lumberjack reads it (0
//! `maxAge`: no age limit; 0 `maxBackups`: keep all; 0 `maxSize`: 100).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use super::conf::{LogConfig, LogLevel, LogOptions};
use super::rotate::{rfc3339_utc, RotatingFile, Rotation};

/// Multus's name of a level (Go's `Level.String`).
pub fn level_name(l: LogLevel) -> &'static str {
    match l {
        LogLevel::Panic => "panic",
        LogLevel::Error => "error",
        LogLevel::Verbose => "verbose",
        LogLevel::Debug => "debug",
    }
}

/// The Multus level a `tracing` event is logged at.
pub fn level_of(l: &tracing::Level) -> LogLevel {
    match *l {
        tracing::Level::ERROR | tracing::Level::WARN => LogLevel::Error,
        tracing::Level::INFO => LogLevel::Verbose,
        _ => LogLevel::Debug,
    }
}

/// lumberjack's settings for `logOptions`, with Go's defaults for what is
/// absent (see the module documentation).
pub fn rotation(options: Option<&LogOptions>) -> Rotation {
    let o = options.copied().unwrap_or_default();
    let d = Rotation::default();
    Rotation {
        max_size: o.max_size.map_or(d.max_size, |mb| u64::from(mb) << 20),
        max_backups: o.max_backups.map_or(d.max_backups, |n| n as usize),
        max_age: o.max_age.map_or(d.max_age, |days| {
            Duration::from_secs(u64::from(days) * 86_400)
        }),
        compress: o.compress.unwrap_or(d.compress),
    }
}

/// The shim's logging (Go's `shimConfig`): `logFile`, `logLevel`,
/// `logToStderr` (default off); rotation with Go's defaults. A key of the
/// wrong type is refused (code 7, naming it), as Go's `shimConfig` fails to
/// unmarshal it; stdin that is not a JSON object gives the defaults (the
/// daemon reports it).
pub fn shim_log_config(stdin: &[u8]) -> Result<LogConfig, super::Error> {
    let m: Map<String, Value> = serde_json::from_slice(stdin).unwrap_or_default();
    Ok(LogConfig {
        file: super::conf::string(&m, "logFile")?.map(PathBuf::from),
        level: super::conf::string(&m, "logLevel")?
            .as_deref()
            .and_then(LogLevel::parse)
            .unwrap_or_default(),
        to_stderr: super::conf::boolean(&m, "logToStderr", false)?,
        options: None,
    })
}

/// The process's log sinks: stderr and a rotating file, and the level.
#[derive(Debug)]
pub struct Sink {
    level: AtomicU8,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    to_stderr: bool,
    file: Option<RotatingFile>,
}

impl Default for Sink {
    /// Go's initial state: stderr on, level `panic`, no file.
    fn default() -> Sink {
        Sink {
            level: AtomicU8::new(LogLevel::Panic as u8),
            state: Mutex::new(State {
                to_stderr: true,
                file: None,
            }),
        }
    }
}

impl Sink {
    /// Applies a configuration: level, stderr, and the file (reopened only
    /// when its path or rotation changed, so a long-running process keeps
    /// rotating the same file).
    pub fn configure(&self, c: &LogConfig) {
        self.level.store(c.level as u8, Ordering::SeqCst);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.to_stderr = c.to_stderr;
        let rot = rotation(c.options.as_ref());
        let same = match (&st.file, &c.file) {
            (Some(f), Some(p)) => f.path() == p && *f.rotation() == rot,
            (None, None) => true,
            _ => false,
        };
        if !same {
            st.file = c.file.as_ref().map(|p| RotatingFile::new(p, rot));
        }
    }

    /// Whether a line at `level` is written.
    pub fn enabled(&self, level: LogLevel) -> bool {
        level as u8 <= self.level.load(Ordering::Relaxed)
    }

    /// Writes one line at `level` to the sinks (if the level is enabled);
    /// write errors are ignored, as Go ignores them.
    pub fn log(&self, level: LogLevel, message: &str) {
        if !self.enabled(level) {
            return;
        }
        let line = format!(
            "{} [{}] {message}\n",
            rfc3339_utc(SystemTime::now()),
            level_name(level)
        );
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.to_stderr {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        if let Some(f) = st.file.as_mut() {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// A `tracing` layer writing events to a [`Sink`].
#[derive(Debug, Clone)]
pub struct MultusLayer(Arc<Sink>);

impl MultusLayer {
    /// A layer over `sink`.
    pub fn new(sink: Arc<Sink>) -> MultusLayer {
        MultusLayer(sink)
    }
}

/// The message, then ` key=value` for the other fields.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.fields.push_str(&format!(" {}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message.push_str(&format!("{value:?}"));
        } else {
            self.fields
                .push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

impl<S: Subscriber> Layer<S> for MultusLayer {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        // The level can change at run time (each configuration).
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        // Spans are not this layer's (it writes events), and a `false` here
        // would disable them for every layer of the subscriber: the span
        // exporter's, and the spans made before the config set the level.
        metadata.is_span() || self.0.enabled(level_of(metadata.level()))
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let level = level_of(event.metadata().level());
        if !self.0.enabled(level) {
            return;
        }
        let mut line = Line::default();
        event.record(&mut line);
        self.0
            .log(level, &format!("{}{}", line.message, line.fields));
    }
}

static GLOBAL: OnceLock<Arc<Sink>> = OnceLock::new();

/// Installs the Multus sinks (and, when the `OTEL_*` variables ask for it,
/// the span exporter: [`cni_exec::logging::env_export_layer`]) as the
/// process's `tracing` subscriber and a
/// panic hook that logs the panic at `panic` level (Go's `Panicf`) before
/// the default report. Only binaries call this; `None` when a subscriber
/// was already set.
pub fn install() -> Option<Arc<Sink>> {
    let sink = Arc::new(Sink::default());
    // Spans are exported as by every plugin of ours, configured from the
    // process's `OTEL_*` variables (this runs before any config is read:
    // the `otlp` config key does not apply to multus's binaries).
    let (otlp, exporter, refused) = cni_exec::logging::env_export_layer();
    let subscriber = tracing_subscriber::registry()
        .with(MultusLayer::new(sink.clone()))
        .with(otlp);
    tracing::subscriber::set_global_default(subscriber).ok()?;
    if let Some(e) = exporter {
        cni_exec::logging::register_exporter(e);
    }
    if let Some(e) = refused {
        tracing::warn!("span export not started: {e}");
    }
    let _ = GLOBAL.set(sink.clone());
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Some(s) = GLOBAL.get() {
            s.log(LogLevel::Panic, &info.to_string());
            s.log(LogLevel::Panic, "========= Stack trace output ========");
            s.log(
                LogLevel::Panic,
                &std::backtrace::Backtrace::force_capture().to_string(),
            );
            s.log(LogLevel::Panic, "========= Stack trace output end ========");
        }
        previous(info);
    }));
    Some(sink)
}

/// Configures the sinks [`install`] set up; nothing without them.
pub fn configure_global(c: &LogConfig) {
    if let Some(s) = GLOBAL.get() {
        s.configure(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_level_mapping() {
        assert_eq!(level_of(&tracing::Level::WARN), LogLevel::Error);
        assert_eq!(level_of(&tracing::Level::INFO), LogLevel::Verbose);
        assert_eq!(level_of(&tracing::Level::TRACE), LogLevel::Debug);
        let s = Sink::default();
        assert!(s.enabled(LogLevel::Panic) && !s.enabled(LogLevel::Error));
        s.configure(&LogConfig {
            file: None,
            level: LogLevel::Verbose,
            to_stderr: false,
            options: None,
        });
        assert!(s.enabled(LogLevel::Verbose) && !s.enabled(LogLevel::Debug));
    }

    #[test]
    fn rotation_defaults_as_go() {
        let d = rotation(None);
        assert_eq!(
            (d.max_size, d.max_backups, d.max_age.as_secs(), d.compress),
            (100 << 20, 5, 5 * 86_400, true)
        );
        let o = LogOptions {
            max_age: Some(0),
            max_size: Some(1),
            max_backups: Some(0),
            compress: Some(false),
        };
        let r = rotation(Some(&o));
        assert_eq!(
            (r.max_size, r.max_backups, r.max_age.as_secs(), r.compress),
            (1 << 20, 0, 0, false)
        );
    }

    #[test]
    fn shim_defaults() {
        let c = shim_log_config(br#"{"logFile":"/x.log","logLevel":"Verbose"}"#).unwrap();
        assert_eq!(c.level, LogLevel::Verbose);
        assert!(!c.to_stderr);
        assert_eq!(shim_log_config(b"[").unwrap().level, LogLevel::Panic);
        for bad in [
            r#"{"logFile": 1}"#,
            r#"{"logLevel": ["debug"]}"#,
            r#"{"logToStderr": "yes"}"#,
        ] {
            let e = shim_log_config(bad.as_bytes()).unwrap_err();
            assert_eq!(
                e.code(),
                cni_types::ErrorCode::InvalidNetworkConfig,
                "{bad}: {e}"
            );
        }
    }
}
