//! multus logs as Multus does (`cni_multus::logging`): rotation
//! by size while writing, driven by enough log lines through the logger
//! (backups named as lumberjack names them, gzipped with `compress`, the
//! oldest pruned past `maxBackups`, no line lost), for the thin plugin's
//! `logOptions` and the daemon's; both sinks and the default level
//! (`panic`: nothing) from the `multus`, `multus-shim` and `multus-daemon`
//! binaries' stderr and log files.
#![cfg(feature = "multus")]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_multus::conf::{LogConfig, LogLevel, LogOptions};
use cni_multus::logging::{MultusLayer, Sink};
use cni_multus::thick::DaemonConfig;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

/// `2006-01-02T15:04:05Z [level] ` at the start of a line.
fn is_multus_line(line: &str, level: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 21
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'Z'
        && line[..19]
            .bytes()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10 | 13 | 16) || c.is_ascii_digit())
        && line[21..].starts_with(&format!("[{level}] "))
}

/// lumberjack's backup name of `multus.log`: `multus-<stamp>.log[.gz]`.
fn is_backup(name: &str, gz: bool) -> bool {
    let Some(rest) = name.strip_prefix("multus-") else {
        return false;
    };
    let Some(stamp) = rest.strip_suffix(if gz { ".log.gz" } else { ".log" }) else {
        return false;
    };
    let b = stamp.as_bytes();
    b.len() == 23 && b[10] == b'T' && b[13] == b'-' && b[16] == b'-' && b[19] == b'.'
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A log file's text; a `.gz` backup through `gzip -dc` (an independent
/// decoder: the file is real gzip).
fn read_log(p: &Path) -> String {
    if p.to_string_lossy().ends_with(".gz") {
        let out = Command::new("gzip").arg("-dc").arg(p).output().unwrap();
        assert!(out.status.success(), "gzip -dc {}", p.display());
        String::from_utf8(out.stdout).unwrap()
    } else {
        std::fs::read_to_string(p).unwrap()
    }
}

/// Logs `n` numbered lines (about 100 bytes each) at INFO, and some at
/// DEBUG, through a `tracing` subscriber over `sink` (this thread only).
fn log_lines(sink: &Arc<Sink>, n: usize) {
    let subscriber = tracing_subscriber::registry().with(MultusLayer::new(sink.clone()));
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..n {
            tracing::info!(n = i, "line {i:08} {}", "x".repeat(60));
            if i % 1000 == 0 {
                tracing::debug!("debug {i}");
            }
        }
    });
}

/// Every numbered line once, in order, across the backups and the file.
fn check_no_line_lost(dir: &Path, n: usize, gz: bool) {
    let mut files: Vec<String> = names(dir);
    // Backups sort by their timestamp; the live file last.
    files.retain(|f| f != "multus.log");
    assert!(files.iter().all(|f| is_backup(f, gz)), "{files:?}");
    files.push("multus.log".into());
    let mut seen = Vec::new();
    for f in &files {
        for l in read_log(&dir.join(f)).lines() {
            assert!(is_multus_line(l, "verbose"), "{f}: {l}");
            assert!(!l.contains("debug"), "{l}");
            let num: usize = l[36..44].parse().unwrap();
            assert!(l.ends_with(&format!(" n={num}")), "{l}");
            seen.push(num);
        }
    }
    assert!(
        seen.windows(2).all(|w| w[1] == w[0] + 1),
        "lines out of order or lost"
    );
    assert_eq!(seen.last(), Some(&(n - 1)));
}

#[test]
fn rotation_by_size_compresses_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("multus.log");
    let sink = Arc::new(Sink::default());
    sink.configure(&LogConfig {
        file: Some(log.clone()),
        level: LogLevel::Verbose,
        to_stderr: false,
        options: Some(LogOptions {
            max_size: Some(1),
            max_backups: Some(2),
            max_age: None,
            compress: Some(true),
        }),
    });
    // About 4.5 MB: four rotations at 1 MB.
    let n = 45_000;
    log_lines(&sink, n);
    let files = names(dir.path());
    assert_eq!(files.len(), 3, "maxBackups 2 and the live file: {files:?}");
    for f in files.iter().filter(|f| *f != "multus.log") {
        assert!(is_backup(f, true), "{f}");
        let size = std::fs::metadata(dir.path().join(f)).unwrap().len();
        assert!(size < 200_000, "{f} is compressed ({size} bytes)");
        let text = read_log(&dir.path().join(f));
        assert!(
            text.len() <= 1 << 20 && text.len() > 1_000_000 - 200,
            "{}",
            text.len()
        );
    }
    assert!(std::fs::metadata(&log).unwrap().len() <= 1 << 20);
    // The newest backup ends where the live file starts.
    let newest = &files[1];
    let last = read_log(&dir.path().join(newest))
        .lines()
        .last()
        .unwrap()
        .to_string();
    let first = read_log(&log).lines().next().unwrap().to_string();
    let num = |l: &str| l[36..44].parse::<usize>().unwrap();
    assert_eq!(num(&last) + 1, num(&first));
}

#[test]
fn rotation_without_compress_keeps_every_line() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Sink::default());
    sink.configure(&LogConfig {
        file: Some(dir.path().join("multus.log")),
        level: LogLevel::Verbose,
        to_stderr: false,
        options: Some(LogOptions {
            max_size: Some(1),
            max_backups: Some(0),
            max_age: Some(0),
            compress: Some(false),
        }),
    });
    let n = 25_000;
    log_lines(&sink, n);
    assert_eq!(names(dir.path()).len(), 3, "{:?}", names(dir.path()));
    check_no_line_lost(dir.path(), n, false);
}

#[test]
fn daemon_rotates_with_its_log_options_while_running() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("multus.log");
    let c = DaemonConfig::from_slice(
        json!({"logFile": log, "logLevel": "verbose",
            "logOptions": {"maxSize": 1, "maxBackups": 1, "compress": true}})
        .to_string()
        .as_bytes(),
        Path::new("test"),
    )
    .unwrap();
    let lc = c.log_config();
    assert_eq!(lc.level, LogLevel::Verbose);
    assert!(!lc.to_stderr, "the daemon's logToStderr defaults to off");
    let sink = Arc::new(Sink::default());
    sink.configure(&lc);
    log_lines(&sink, 12_000);
    // Reconfiguring with the same settings (a long run) keeps the file.
    sink.configure(&lc);
    log_lines(&sink, 12_000);
    let files = names(dir.path());
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(is_backup(&files[0], true), "{files:?}");
}

fn run_plugin(bin: &str, stdin: &[u8], command: &str) -> (i32, String, String) {
    let mut child = Command::new(bin)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", "c1")
        .env("CNI_NETNS", "/run/netns/none-such")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn multus_del(dir: &Path, extra: serde_json::Value) -> (String, Option<String>) {
    let log = dir.join("m.log");
    let _ = std::fs::remove_file(&log);
    let mut conf = json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus",
        "cniDir": dir.join("cni"), "logFile": log,
        "delegates": [{"name": "d", "type": "none-such"}]});
    for (k, v) in extra.as_object().unwrap() {
        conf[k] = v.clone();
    }
    // DEL without a cache and without the API: success, one error line.
    let (code, stdout, stderr) = run_plugin(
        env!("CARGO_BIN_EXE_multus"),
        conf.to_string().as_bytes(),
        "DEL",
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    (stderr, std::fs::read_to_string(&log).ok())
}

#[test]
fn thin_plugin_writes_both_sinks_and_defaults_to_panic() {
    let dir = tempfile::tempdir().unwrap();
    let want = "[error] no delegate cache for c1/eth0";
    // logFile + logToStderr (its default, true) + error: both sinks.
    let (stderr, file) = multus_del(dir.path(), json!({"logLevel": "error"}));
    let file = file.expect("log file written");
    for (sink, text) in [("stderr", &stderr), ("file", &file)] {
        let l = text
            .lines()
            .find(|l| l.contains(want))
            .unwrap_or_else(|| panic!("{sink}: {text}"));
        assert!(is_multus_line(l, "error"), "{sink}: {l}");
    }
    // logToStderr false: the file only.
    let (stderr, file) = multus_del(
        dir.path(),
        json!({"logLevel": "error", "logToStderr": false}),
    );
    assert!(!stderr.contains(want), "{stderr}");
    assert!(file.unwrap().contains(want));
    // A log file without a level: Multus's default, panic (nothing here).
    let (stderr, file) = multus_del(dir.path(), json!({}));
    assert!(!stderr.contains("[error]"), "{stderr}");
    assert!(file.unwrap_or_default().is_empty());
    // An unknown level is ignored as Go ignores it (still panic).
    let (stderr, file) = multus_del(dir.path(), json!({"logLevel": "info"}));
    assert!(!stderr.contains(want) && file.unwrap_or_default().is_empty());
}

#[test]
fn shim_logs_to_stderr_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shim.log");
    let conf = |stderr: bool| {
        json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus-shim",
            "socketDir": dir.path().join("no-daemon"), "cniDir": dir.path().join("cni"),
            "logFile": log, "logLevel": "verbose", "logToStderr": stderr})
        .to_string()
    };
    // DEL with no daemon: the in-process fallback, logged at error level.
    for to_stderr in [false, true] {
        let _ = std::fs::remove_file(&log);
        let (code, out, err) = run_plugin(
            env!("CARGO_BIN_EXE_multus-shim"),
            conf(to_stderr).as_bytes(),
            "DEL",
        );
        assert_eq!(code, 0, "{out} {err}");
        let file = std::fs::read_to_string(&log).unwrap();
        let l = file
            .lines()
            .find(|l| l.contains("in-process"))
            .unwrap_or_else(|| panic!("{file}"));
        assert!(is_multus_line(l, "error"), "{l}");
        assert_eq!(err.contains("in-process"), to_stderr, "{err}");
    }
}

/// The daemon process, killed on drop.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn daemon_writes_both_sinks() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let config: PathBuf = dir.path().join("daemon-config.json");
    std::fs::write(
        &config,
        json!({"socketDir": dir.path().join("sock"), "cniDir": dir.path().join("cni"),
            "logFile": log, "logLevel": "verbose", "logToStderr": true})
        .to_string(),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_multus-daemon"))
        .arg("--config")
        .arg(&config)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut d = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let serving = |t: &str| t.lines().any(|l| l.contains("multus daemon serving"));
    while !std::fs::read_to_string(&log).is_ok_and(|t| serving(&t)) {
        assert!(Instant::now() < deadline, "no log line from the daemon");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = d.0.kill();
    let mut err = String::new();
    d.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let file = std::fs::read_to_string(&log).unwrap();
    for text in [&err, &file] {
        let l = text
            .lines()
            .find(|l| serving(l))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(is_multus_line(l, "verbose"), "{l}");
    }
}
