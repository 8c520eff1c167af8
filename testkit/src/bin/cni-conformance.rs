//! `cni-conformance [--config FILE] [--ifname NAME] [--timeout SECS] [--role interface|ipam|chained] PLUGIN_BINARY`
//!
//! Runs a CNI plugin binary through the spec's requirements in network
//! namespaces it creates and removes (see `cni_testkit::conformance`).
//! Prints `ok NAME` or `FAIL NAME: reason` per case and `N passed, M
//! failed`. Exit status: 0 all passed, 1 a case failed, 2 the kit itself
//! could not run (usage, namespaces, unknown type without `--config`).
//!
//! `--config FILE` takes a `.conf` as is, or from a `.conflist` the plugin
//! whose `type` is the binary's name (or the only plugin), with the list's
//! `cniVersion` and `name`; a host-local `dataDir` (and tuning's and
//! flannel's) is replaced by a directory of the kit's.
//!
//! `--role` says what a plugin of a type the kit does not know does:
//! `interface` (creates `CNI_IFNAME`, the default), `ipam` (allocates
//! addresses), or `chained` (works on a `prevResult`).
//!
//! SIGINT, SIGTERM and SIGHUP stop the run after killing the plugin call in
//! progress; the kit's namespaces and files are removed before it exits
//! (status 130).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

use cni_testkit::conformance::{load_config, run, Options, PluginKind, Role};

/// The longest `--timeout` (a day).
const MAX_TIMEOUT_SECS: u64 = 86_400;

const USAGE: &str =
    "usage: cni-conformance [--config FILE] [--ifname NAME] [--timeout SECS] [--role interface|ipam|chained] PLUGIN_BINARY";

struct Args {
    plugin: PathBuf,
    config: Option<PathBuf>,
    ifname: Option<String>,
    timeout: Option<u64>,
    role: Option<Role>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args_os().skip(1);
    let mut plugin = None;
    let mut config = None;
    let mut ifname = None;
    let mut timeout = None;
    let mut role = None;
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
                let secs: u64 = v
                    .to_string_lossy()
                    .parse()
                    .map_err(|_| format!("--timeout: not a number of seconds: {v:?}"))?;
                // A deadline is `now + timeout`: a day is plenty and cannot
                // overflow the clock.
                if !(1..=MAX_TIMEOUT_SECS).contains(&secs) {
                    return Err(format!(
                        "--timeout: {secs} is not a number of seconds from 1 to {MAX_TIMEOUT_SECS}"
                    ));
                }
                timeout = Some(secs);
            }
            "--role" => {
                role = Some(match value("--role")?.to_string_lossy().as_ref() {
                    "interface" => Role::Interface,
                    "ipam" => Role::Ipam,
                    "chained" => Role::Meta,
                    other => return Err(format!("--role: unknown role {other:?}\n{USAGE}")),
                })
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
        role,
    })
}

/// Blocks the termination signals in this thread (and the threads it
/// starts: plugin processes get an empty mask again, set by the sandbox
/// between fork and exec) and
/// turns them into `cancel` on a thread of their own, so that the sandbox
/// is always dropped by the thread that owns it.
fn cancel_on_signals() -> Option<Arc<AtomicBool>> {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(sig);
    }
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).ok()?;
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(sig) = set.wait() {
                if !flag.swap(true, Ordering::SeqCst) {
                    eprintln!("cni-conformance: {sig}: stopping and cleaning up");
                }
            }
        })
        .ok()?;
    Some(cancel)
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
    options.cancel = cancel_on_signals();
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
    if let Some(role) = args.role {
        options = options.with_role(role);
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
        Err(cni_testkit::Error::Interrupted) => {
            eprintln!("cni-conformance: interrupted; its namespaces and files are removed");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("cni-conformance: {e}");
            ExitCode::from(2)
        }
    }
}
