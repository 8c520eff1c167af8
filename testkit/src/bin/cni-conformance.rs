//! `cni-conformance [--config FILE] [--ifname NAME] [--timeout SECS] PLUGIN_BINARY`
//!
//! Runs a CNI plugin binary through the spec's requirements in network
//! namespaces it creates and removes (see `cni_testkit::conformance`).
//! Prints `ok NAME` or `FAIL NAME: reason` per case and `N passed, M
//! failed`. Exit status: 0 all passed, 1 a case failed, 2 the kit itself
//! could not run (usage, namespaces, unknown type without `--config`).
//!
//! `--config FILE` takes a `.conf` as is, or from a `.conflist` the plugin
//! whose `type` is the binary's name (or the only plugin), with the list's
//! `cniVersion` and `name`; a host-local `dataDir` is replaced by the kit's
//! own directory.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cni_testkit::conformance::{load_config, run, Options, PluginKind};

const USAGE: &str =
    "usage: cni-conformance [--config FILE] [--ifname NAME] [--timeout SECS] PLUGIN_BINARY";

struct Args {
    plugin: PathBuf,
    config: Option<PathBuf>,
    ifname: Option<String>,
    timeout: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args_os().skip(1);
    let mut plugin = None;
    let mut config = None;
    let mut ifname = None;
    let mut timeout = None;
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy().into_owned();
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--config" => config = Some(PathBuf::from(value("--config")?)),
            "--ifname" => ifname = Some(value("--ifname")?.to_string_lossy().into_owned()),
            "--timeout" => {
                let v = value("--timeout")?;
                let secs = v
                    .to_string_lossy()
                    .parse()
                    .map_err(|_| format!("--timeout: not a number of seconds: {v:?}"))?;
                timeout = Some(secs);
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            flag if flag.starts_with("--") => {
                return Err(format!("unknown option {flag}\n{USAGE}"))
            }
            _ if plugin.is_none() => plugin = Some(PathBuf::from(arg)),
            _ => return Err(format!("more than one plugin binary given\n{USAGE}")),
        }
    }
    Ok(Args {
        plugin: plugin.ok_or_else(|| USAGE.to_owned())?,
        config,
        ifname,
        timeout,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let mut options = Options::new(&args.plugin);
    if let Some(path) = &args.config {
        let kind = PluginKind::from_binary(&args.plugin);
        match load_config(path, kind.type_name()) {
            Ok(conf) => options = options.with_config(conf),
            Err(e) => {
                eprintln!("cni-conformance: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(ifname) = args.ifname {
        options = options.with_ifname(ifname);
    }
    if let Some(secs) = args.timeout {
        options.timeout = Duration::from_secs(secs);
    }
    match run(&options) {
        Ok(report) => {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{report}");
            let _ = out.flush();
            if report.all_passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("cni-conformance: {e}");
            ExitCode::from(2)
        }
    }
}
