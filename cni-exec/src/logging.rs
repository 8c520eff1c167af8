//! Plugin logging: `tracing` to a file or stderr when asked, silent
//! otherwise, never stdout (stdout is the protocol).
//!
//! The plugin config's `logFile` and `logLevel` keys (the convention of
//! Multus and other meta plugins) win over the `CNI_LOG_FILE` and
//! `CNI_LOG_LEVEL` variables. Levels: `panic`/`error`, `warning`/`warn`,
//! `verbose`/`info` (Multus's `verbose` sits between `error` and `debug`),
//! `debug`, `trace`. A file without a level logs at `info`; a level without
//! a file logs to stderr, unless the config says `"logToStderr": false`.
//! A binary that installed its own subscriber first (multus does, to log
//! exactly as Multus) keeps it: nothing is set up here then.
//!
//! The file is appended to, never rotated: rotation (`logOptions`) is
//! Multus's, and lives with it (`cni_multus::rotate`).
//!
//! Spans go to an OTLP/HTTP collector ([`cni_trace`]) when OpenTelemetry's
//! variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, ...) or the config's `otlp`
//! key (which wins, as `logFile` wins over `CNI_LOG_FILE`) name an
//! endpoint. Logs and spans share one subscriber; with neither asked for,
//! none is installed. Log lines are as without spans (the log layer sees
//! events only).

use std::fs::OpenOptions;
use std::sync::Mutex;

use tracing::Level;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

use crate::skel::Env;

/// Parses a level name (Multus' names and tracing's).
pub fn parse_level(s: &str) -> Option<Level> {
    Some(match s.to_ascii_lowercase().as_str() {
        "panic" | "error" => Level::ERROR,
        "warning" | "warn" => Level::WARN,
        "verbose" | "info" => Level::INFO,
        "debug" => Level::DEBUG,
        "trace" => Level::TRACE,
        _ => return None,
    })
}

/// The config's logging keys, read without building the rest of the
/// config: this runs on stdin before the runner's bounded parse, so the
/// other keys (a huge `prevResult`) are skipped, not decoded. The last of
/// duplicate keys wins, as in a JSON object read whole.
#[derive(Default)]
struct LogKeys {
    file: Option<serde_json::Value>,
    level: Option<serde_json::Value>,
    to_stderr: Option<serde_json::Value>,
    otlp: Option<serde_json::Value>,
}

impl<'de> serde::Deserialize<'de> for LogKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = LogKeys;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a network configuration object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<LogKeys, A::Error> {
                let mut keys = LogKeys::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let slot = match key.as_ref() {
                        "logFile" => &mut keys.file,
                        "logLevel" => &mut keys.level,
                        "logToStderr" => &mut keys.to_stderr,
                        "otlp" => &mut keys.otlp,
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(keys)
            }
        }
        d.deserialize_map(Keys)
    }
}

/// Where and how much to log, from the config and the environment; `None`
/// when nothing asks for logging.
pub fn settings(stdin: &[u8], env: &Env) -> Option<(Option<String>, Level)> {
    log_settings(&read_keys(stdin), env)
}

/// The config's logging and export keys, read in one pass (a huge config
/// is walked once, its other values skipped).
fn read_keys(stdin: &[u8]) -> LogKeys {
    serde_json::from_slice(stdin).unwrap_or_default()
}

fn log_settings(conf: &LogKeys, env: &Env) -> Option<(Option<String>, Level)> {
    let pick = |value: &Option<serde_json::Value>, var: &str| {
        value
            .as_ref()
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .or_else(|| Some(env.get(var).to_string()).filter(|s| !s.is_empty()))
    };
    let to_stderr = conf.to_stderr.as_ref().and_then(|v| v.as_bool()) != Some(false);
    let file = pick(&conf.file, "CNI_LOG_FILE");
    let level = pick(&conf.level, "CNI_LOG_LEVEL");
    if file.is_none() && (level.is_none() || !to_stderr) {
        return None;
    }
    let level = level
        .as_deref()
        .and_then(parse_level)
        .unwrap_or(Level::INFO);
    Some((file, level))
}

/// The config's `otlp` key: `{"endpoint": "http://...", "tracesEndpoint":
/// "http://.../v1/traces", "headers": {"k": "v"}, "serviceName": "...",
/// "timeoutMs": 250}`; a member of the wrong type is ignored.
fn overrides_of(otlp: Option<&serde_json::Value>) -> cni_trace::Overrides {
    let Some(o) = otlp.and_then(|v| v.as_object()) else {
        return cni_trace::Overrides::default();
    };
    let text = |k: &str| {
        o.get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    cni_trace::Overrides {
        endpoint: text("endpoint"),
        traces_endpoint: text("tracesEndpoint"),
        headers: o
            .get("headers")
            .and_then(|h| h.as_object())
            .map(|h| {
                h.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default(),
        service_name: text("serviceName"),
        timeout_ms: o.get("timeoutMs").and_then(|v| v.as_u64()),
    }
}

/// The exporter configuration from the config's `otlp` key and the
/// environment; `Ok(None)` when nothing asks for export.
pub fn export_settings(
    stdin: &[u8],
    env: &Env,
) -> Result<Option<cni_trace::ExportConfig>, cni_trace::Error> {
    export_settings_of(&read_keys(stdin), env)
}

fn export_settings_of(
    conf: &LogKeys,
    env: &Env,
) -> Result<Option<cni_trace::ExportConfig>, cni_trace::Error> {
    let service = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "cni-plugin".to_string());
    cni_trace::ExportConfig::resolve(
        |k| Some(env.get(k).to_string()),
        &overrides_of(conf.otlp.as_ref()),
        &service,
    )
}

/// The exporter of a subscriber a binary installed itself (multus does,
/// to log exactly as Multus), registered with [`register_exporter`].
static REGISTERED: std::sync::OnceLock<cni_trace::Exporter> = std::sync::OnceLock::new();

/// For a binary that installs its own subscriber before the process
/// wrapper runs (so the wrapper's own is not installed): the exporting
/// end of the [`cni_trace::layer`] it put in that subscriber. The wrapper
/// flushes it after the reply as it flushes its own; a long-running
/// program flushes it itself ([`registered_exporter`]). The first
/// registration wins.
pub fn register_exporter(exporter: cni_trace::Exporter) {
    let _ = REGISTERED.set(exporter);
}

/// The exporter given to [`register_exporter`], if any.
pub fn registered_exporter() -> Option<&'static cni_trace::Exporter> {
    REGISTERED.get()
}

/// A span-exporting layer (with its [`cni_trace::default_filter`]) and its
/// exporter from this process's environment alone (the `OTEL_*`
/// variables), for a binary that builds its own subscriber before it reads
/// any config; `None` when nothing asks for export or the variables are
/// refused (the refusal's text then).
pub fn env_export_layer<S>() -> (
    Option<impl tracing_subscriber::Layer<S>>,
    Option<cni_trace::Exporter>,
    Option<cni_trace::Error>,
)
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    match export_settings(b"", &Env::from_process()) {
        Ok(Some(c)) => {
            let (layer, exporter) = cni_trace::layer(c);
            (
                Some(layer.with_filter(cni_trace::default_filter())),
                Some(exporter),
                None,
            )
        }
        Ok(None) => (None, None, None),
        Err(e) => (None, None, Some(e)),
    }
}

/// Installs the global subscriber when the config or env asks for logs or
/// spans; the span exporter to flush at the end of the process, if any.
/// Only the process wrapper calls this: a library never installs one.
pub(crate) fn init_from_config(stdin: &[u8], env: &Env) -> Option<cni_trace::Exporter> {
    if tracing::dispatcher::has_been_set() {
        return None;
    }
    let keys = read_keys(stdin);
    let logs = log_settings(&keys, env);
    let (export, refused) = match export_settings_of(&keys, env) {
        Ok(c) => (c, None),
        Err(e) => (None, Some(e)),
    };
    if logs.is_none() && export.is_none() {
        return None;
    }
    let fmt = logs.map(|(file, level)| {
        // An unopenable log file falls back to stderr rather than failing
        // the plugin: logging must never change the protocol's outcome.
        let file = file.and_then(|f| OpenOptions::new().create(true).append(true).open(f).ok());
        let writer = match file {
            Some(f) => BoxMakeWriter::new(Mutex::new(f)),
            None => BoxMakeWriter::new(std::io::stderr),
        };
        let events_only =
            tracing_subscriber::filter::FilterFn::new(move |m: &tracing::Metadata<'_>| {
                m.is_event() && *m.level() <= level
            })
            .with_max_level_hint(level);
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_target(false)
            .with_writer(writer)
            .with_filter(events_only)
    });
    let (otlp, exporter) = match export {
        Some(c) => {
            let (layer, exporter) = cni_trace::layer(c);
            (
                Some(layer.with_filter(cni_trace::default_filter())),
                Some(exporter),
            )
        }
        None => (None, None),
    };
    let subscriber = tracing_subscriber::registry().with(fmt).with(otlp);
    if tracing::subscriber::set_global_default(subscriber).is_err() {
        return None;
    }
    if let Some(e) = refused {
        tracing::warn!("span export not started: {e}");
    }
    exporter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_sources() {
        assert_eq!(parse_level("VERBOSE"), Some(Level::INFO));
        assert_eq!(parse_level("debug"), Some(Level::DEBUG));
        assert_eq!(parse_level("panic"), Some(Level::ERROR));
        assert_eq!(parse_level("nope"), None);
        let quiet = Env::new([("CNI_COMMAND", "ADD")]);
        assert_eq!(settings(br#"{"name":"n"}"#, &quiet), None);
        let conf = br#"{"name":"n","logFile":"/tmp/x.log","logLevel":"debug"}"#;
        assert_eq!(
            settings(conf, &quiet),
            Some((Some("/tmp/x.log".into()), Level::DEBUG))
        );
        let env = Env::new([("CNI_LOG_LEVEL", "warning")]);
        assert_eq!(settings(b"not json", &env), Some((None, Level::WARN)));
        // The config wins over the environment.
        let env = Env::new([("CNI_LOG_FILE", "/a"), ("CNI_LOG_LEVEL", "error")]);
        assert_eq!(
            settings(conf, &env),
            Some((Some("/tmp/x.log".into()), Level::DEBUG))
        );
        // logToStderr false silences a level without a file.
        let no_stderr = br#"{"name":"n","logLevel":"debug","logToStderr":false}"#;
        assert_eq!(settings(no_stderr, &quiet), None);
    }

    #[test]
    fn otlp_key_wins_over_the_environment() {
        let quiet = Env::new([("CNI_COMMAND", "ADD")]);
        assert!(export_settings(br#"{"name":"n"}"#, &quiet)
            .unwrap()
            .is_none());
        let env = Env::new([
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://10.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "k=env"),
        ]);
        let c = export_settings(br#"{"name":"n"}"#, &env).unwrap().unwrap();
        assert_eq!(c.endpoint.authority(), "10.0.0.1:4318");
        let conf = br#"{"name":"n","otlp":{"endpoint":"http://127.0.0.1:9","headers":{"k":"conf","bad":1},"serviceName":"s","timeoutMs":100}}"#;
        let c = export_settings(conf, &env).unwrap().unwrap();
        assert_eq!(c.endpoint.authority(), "127.0.0.1:9");
        assert_eq!(c.endpoint.path, "/v1/traces");
        assert_eq!(c.headers, vec![("k".to_string(), "conf".to_string())]);
        assert_eq!(c.resource[0].1, "s");
        assert_eq!(c.timeout, std::time::Duration::from_millis(100));
        let https = br#"{"name":"n","otlp":{"endpoint":"https://x"}}"#;
        assert!(export_settings(https, &quiet).is_err());
    }
}
