//! Plugin logging: `tracing` to a file or stderr when asked, silent
//! otherwise, never stdout (stdout is the protocol).
//!
//! The plugin config's `logFile` and `logLevel` keys (the convention of
//! Multus and other meta plugins) win over the `CNI_LOG_FILE` and
//! `CNI_LOG_LEVEL` variables. Levels: `panic`/`error`, `warning`/`warn`,
//! `info`, `verbose`/`debug`, `trace`. A file without a level logs at
//! `info`; a level without a file logs to stderr, unless the config says
//! `"logToStderr": false`.
//!
//! A log file is rotated before the plugin opens it once it has reached
//! `logOptions.maxSize` megabytes, with Multus's lumberjack settings and
//! defaults: `maxSize` 100, `maxBackups` 5, `maxAge` 5 days, `compress`
//! true. Rotated files are named like lumberjack's,
//! `<name>-<UTC time>.<ext>[.gz]`.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tracing::Level;

use crate::skel::Env;

/// Parses a level name (Multus' names and tracing's).
pub fn parse_level(s: &str) -> Option<Level> {
    Some(match s.to_ascii_lowercase().as_str() {
        "panic" | "error" => Level::ERROR,
        "warning" | "warn" => Level::WARN,
        "info" => Level::INFO,
        "verbose" | "debug" => Level::DEBUG,
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

    /// Rotates `path` if it has reached `max_size`, then removes rotated
    /// files beyond `max_backups` or older than `max_age`.
    pub fn rotate_if_needed(&self, path: &Path, now: SystemTime) -> io::Result<()> {
        let size = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if size < self.max_size {
            return Ok(());
        }
        let rotated = backup_name(path, now);
        std::fs::rename(path, &rotated)?;
        if self.compress {
            gzip(&rotated)?;
        }
        self.prune(path, now)
    }

    fn prune(&self, path: &Path, now: SystemTime) -> io::Result<()> {
        let (dir, prefix, _) = split_name(path);
        let mut backups: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(&dir)?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        backups.sort_by_key(|b| std::cmp::Reverse(b.0)); // newest first
        for (i, (mtime, p)) in backups.iter().enumerate() {
            let too_many = self.max_backups > 0 && i >= self.max_backups;
            let too_old = !self.max_age.is_zero()
                && now.duration_since(*mtime).unwrap_or_default() > self.max_age;
            if too_many || too_old {
                let _ = std::fs::remove_file(p);
            }
        }
        Ok(())
    }
}

/// `(dir, "<stem>-", ".<ext>")` of a log file path.
fn split_name(path: &Path) -> (PathBuf, String, String) {
    let dir = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    (dir, format!("{stem}-"), ext)
}

/// lumberjack's backup name: `<stem>-2006-01-02T15-04-05.000<ext>` (UTC).
fn backup_name(path: &Path, now: SystemTime) -> PathBuf {
    let (dir, prefix, ext) = split_name(path);
    let d = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let (days, secs) = (d.as_secs() / 86_400, d.as_secs() % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    dir.join(format!(
        "{prefix}{y:04}-{m:02}-{day:02}T{:02}-{:02}-{:02}.{:03}{ext}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        d.subsec_millis()
    ))
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn gzip(path: &Path) -> io::Result<()> {
    let mut gz_name = path.as_os_str().to_owned();
    gz_name.push(".gz");
    let mut input = std::fs::File::open(path)?;
    let out = std::fs::File::create(&gz_name)?;
    let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    io::copy(&mut input, &mut enc)?;
    enc.finish()?;
    std::fs::remove_file(path)
}

/// Installs the global subscriber when the config or env asks for logs.
/// Only the process wrapper calls this: a library never installs one.
pub(crate) fn init_from_config(stdin: &[u8], env: &Env) {
    let Some((file, level)) = settings(stdin, env) else {
        return;
    };
    if let Some(f) = &file {
        // Rotation is best effort: a failure must not fail the plugin.
        let _ = Rotation::from_config(stdin).rotate_if_needed(Path::new(f), SystemTime::now());
    }
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false);
    let file = file.and_then(|f| OpenOptions::new().create(true).append(true).open(f).ok());
    // An unopenable log file falls back to stderr rather than failing the
    // plugin: logging must never change the protocol's outcome.
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
        assert_eq!(parse_level("VERBOSE"), Some(Level::DEBUG));
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

    #[test]
    fn backup_names_like_lumberjack() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_515_045_123);
        assert_eq!(
            backup_name(Path::new("/var/log/multus.log"), t),
            PathBuf::from("/var/log/multus-2025-11-30T15-04-05.123.log")
        );
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn rotates_compresses_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("plugin.log");
        let r = Rotation {
            max_size: 10,
            max_backups: 2,
            max_age: Duration::from_secs(86_400),
            compress: true,
        };
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_515_045);
        // Below the size: nothing happens.
        std::fs::write(&log, b"short").unwrap();
        r.rotate_if_needed(&log, t0).unwrap();
        assert!(log.exists());
        for i in 0..4u64 {
            std::fs::write(&log, b"0123456789abcdef").unwrap();
            r.rotate_if_needed(&log, t0 + Duration::from_secs(i))
                .unwrap();
            assert!(!log.exists(), "rotated away");
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}"); // maxBackups
        assert!(
            names
                .iter()
                .all(|n| n.starts_with("plugin-") && n.ends_with(".log.gz")),
            "{names:?}"
        );
        // The content survives compression.
        let gz = std::fs::File::open(dir.path().join(&names[1])).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).unwrap();
        assert_eq!(text, "0123456789abcdef");
    }
}
