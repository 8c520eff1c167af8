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
//! A log file is rotated while the plugin writes, as lumberjack does
//! ([`RotatingFile`]), with Multus's settings and defaults:
//! `logOptions.maxSize` 100 (megabytes), `maxBackups` 5, `maxAge` 5 days,
//! `compress` true. Rotated files are named like lumberjack's,
//! `<name>-<UTC time>.<ext>[.gz]`.

mod rotate;

pub use rotate::{rfc3339_utc, RotatingFile};

use std::fs::OpenOptions;
use std::sync::Mutex;
use std::time::Duration;

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

/// Where and how much to log, from the config and the environment; `None`
/// when nothing asks for logging.
pub fn settings(stdin: &[u8], env: &Env) -> Option<(Option<String>, Level)> {
    let conf: serde_json::Value = serde_json::from_slice(stdin).unwrap_or_default();
    let pick = |key: &str, var: &str| {
        conf.get(key)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .or_else(|| Some(env.get(var).to_string()).filter(|s| !s.is_empty()))
    };
    let file = pick("logFile", "CNI_LOG_FILE");
    let level = pick("logLevel", "CNI_LOG_LEVEL");
    let to_stderr = conf.get("logToStderr").and_then(|v| v.as_bool()) != Some(false);
    if file.is_none() && (level.is_none() || !to_stderr) {
        return None;
    }
    let level = level
        .as_deref()
        .and_then(parse_level)
        .unwrap_or(Level::INFO);
    Some((file, level))
}

/// Log file rotation (`logOptions`, lumberjack's settings as Multus uses
/// them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate once the file has this many bytes (`maxSize`, in megabytes).
    pub max_size: u64,
    /// Keep at most this many rotated files (`maxBackups`; 0 keeps all).
    pub max_backups: usize,
    /// Remove rotated files older than this (`maxAge`, in days; zero keeps them).
    pub max_age: Duration,
    /// Gzip rotated files (`compress`).
    pub compress: bool,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_size: 100 << 20,
            max_backups: 5,
            max_age: Duration::from_secs(5 * 86_400),
            compress: true,
        }
    }
}

impl Rotation {
    /// The rotation a plugin config asks for: its `logOptions`, each
    /// missing (or zero) value taking Multus's default.
    pub fn from_config(stdin: &[u8]) -> Rotation {
        let conf: serde_json::Value = serde_json::from_slice(stdin).unwrap_or_default();
        let opts = conf.get("logOptions");
        let num = |k: &str| {
            opts.and_then(|o| o.get(k))
                .and_then(|v| v.as_u64())
                .filter(|n| *n > 0)
        };
        let d = Rotation::default();
        Rotation {
            max_size: num("maxSize").map_or(d.max_size, |mb| mb << 20),
            max_backups: num("maxBackups").map_or(d.max_backups, |n| n as usize),
            max_age: num("maxAge").map_or(d.max_age, |days| Duration::from_secs(days * 86_400)),
            compress: opts
                .and_then(|o| o.get("compress"))
                .and_then(|v| v.as_bool())
                .unwrap_or(d.compress),
        }
    }
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
    let file = file.filter(|f| OpenOptions::new().create(true).append(true).open(f).is_ok());
    let _ = match file {
        Some(f) => builder
            .with_writer(Mutex::new(RotatingFile::new(
                f,
                Rotation::from_config(stdin),
            )))
            .try_init(),
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

    #[test]
    fn rotation_options_and_defaults() {
        assert_eq!(Rotation::from_config(b"{}"), Rotation::default());
        let r = Rotation::from_config(
            br#"{"logOptions":{"maxSize":1,"maxBackups":2,"maxAge":0,"compress":false}}"#,
        );
        assert_eq!(r.max_size, 1 << 20);
        assert_eq!(r.max_backups, 2);
        assert_eq!(r.max_age, Rotation::default().max_age); // 0 takes the default, as lumberjack
        assert!(!r.compress);
    }
}
