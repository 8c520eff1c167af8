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

use std::fs::OpenOptions;
use std::sync::Mutex;

use tracing::Level;

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
    let conf: LogKeys = serde_json::from_slice(stdin).unwrap_or_default();
    let pick = |value: Option<serde_json::Value>, var: &str| {
        value
            .as_ref()
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .or_else(|| Some(env.get(var).to_string()).filter(|s| !s.is_empty()))
    };
    let to_stderr = conf.to_stderr.as_ref().and_then(|v| v.as_bool()) != Some(false);
    let file = pick(conf.file, "CNI_LOG_FILE");
    let level = pick(conf.level, "CNI_LOG_LEVEL");
    if file.is_none() && (level.is_none() || !to_stderr) {
        return None;
    }
    let level = level
        .as_deref()
        .and_then(parse_level)
        .unwrap_or(Level::INFO);
    Some((file, level))
}

/// Installs the global subscriber when the config or env asks for logs.
/// Only the process wrapper calls this: a library never installs one.
pub(crate) fn init_from_config(stdin: &[u8], env: &Env) {
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let Some((file, level)) = settings(stdin, env) else {
        return;
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false);
    // An unopenable log file falls back to stderr rather than failing the
    // plugin: logging must never change the protocol's outcome.
    let file = file.and_then(|f| OpenOptions::new().create(true).append(true).open(f).ok());
    let _ = match file {
        Some(f) => builder.with_writer(Mutex::new(f)).try_init(),
        None => builder.with_writer(std::io::stderr).try_init(),
    };
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
}
