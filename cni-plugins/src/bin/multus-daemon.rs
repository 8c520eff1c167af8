//! The multus daemon: `multus-daemon [--config PATH]` (default
//! `/etc/cni/net.d/multus.d/daemon-config.json`), serving until killed.

use std::path::PathBuf;

use cni_multus::thick::{config::DEFAULT_CONFIG_PATH, start, DaemonConfig};

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

/// Multus's logging from the daemon configuration (Go's
/// `LoadDaemonNetConf`): both sinks, rotated while the daemon runs.
fn init_logging(c: &DaemonConfig) {
    use cni_multus::logging;
    if let Some(sink) = logging::install() {
        sink.configure(&c.log_config());
    }
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
