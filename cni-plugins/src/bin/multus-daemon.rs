//! The multus daemon: `multus-daemon [--config PATH]` (default
//! `/etc/cni/net.d/multus.d/daemon-config.json`), serving until killed.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::Mutex;

use cni_plugins::multus::thick::{config::DEFAULT_CONFIG_PATH, start, DaemonConfig};

fn config_path() -> Result<PathBuf, String> {
    let mut args = std::env::args().skip(1);
    let mut path = PathBuf::from(DEFAULT_CONFIG_PATH);
    while let Some(a) = args.next() {
        if let Some(p) = a.strip_prefix("--config=") {
            path = PathBuf::from(p);
        } else if a == "--config" || a == "-config" {
            path = PathBuf::from(args.next().ok_or("--config needs a path")?);
        } else {
            return Err(format!(
                "unknown argument {a:?}; usage: multus-daemon [--config PATH]"
            ));
        }
    }
    Ok(path)
}

fn init_logging(c: &DaemonConfig) {
    let level = c
        .log_level
        .as_deref()
        .and_then(cni_exec::logging::parse_level)
        .unwrap_or(tracing::Level::INFO);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false);
    let file = c
        .log_file
        .as_ref()
        .and_then(|f| OpenOptions::new().create(true).append(true).open(f).ok());
    let _ = match file {
        Some(f) => builder.with_writer(Mutex::new(f)).try_init(),
        None if c.log_to_stderr || c.log_file.is_some() => {
            builder.with_writer(std::io::stderr).try_init()
        }
        None => Ok(()),
    };
}

fn main() {
    let config = config_path().and_then(|p| DaemonConfig::from_file(&p).map_err(|e| e.to_string()));
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("multus-daemon: {e}");
            std::process::exit(2);
        }
    };
    init_logging(&config);
    match start(config) {
        Ok(handle) => handle.wait(),
        Err(e) => {
            eprintln!("multus-daemon: {e}");
            std::process::exit(1);
        }
    }
}
