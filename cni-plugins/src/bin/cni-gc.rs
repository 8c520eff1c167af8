//! `cni-gc [--cri-socket PATH] [--conf-dir DIR] [--cache-dir DIR]
//! [--bin-dir DIRS] [--min-age D] [--dry-run] [--interval D] [--timeout D]`:
//! collects the attachments the node's container runtime leaked (see
//! [`cni_gc`] and docs/cni-gc.md). Prints one line per action
//! or thing left alone and a summary per pass; exits 0 when every action
//! succeeded, 1 when one failed, 2 when it refused to act or the command
//! line is wrong. Metrics ([`cni_gc::metrics`]): served with
//! `--interval --metrics-address ADDR`, written after each pass with
//! `--textfile-dir DIR`.
#![allow(clippy::print_stdout)] // the report is the program's output

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use cni_gc::cli::{
    exit_status, jittered, parse_args, run_pass, Command, Options, EXIT_OK, EXIT_REFUSED, USAGE,
};
use cni_gc::metrics::GcMetrics;
use nix::sys::signal::{SigSet, Signal};

/// The passes' metrics, shared with the scrape endpoint's thread.
type Metrics = Arc<Mutex<GcMetrics>>;

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(opts)) => opts,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!(
                "cni-gc {} (build {})",
                env!("CARGO_PKG_VERSION"),
                cni_plugins::binary::BUILD
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("cni-gc: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let metrics = Arc::new(Mutex::new(GcMetrics::new(
        env!("CARGO_PKG_VERSION"),
        cni_plugins::binary::BUILD,
    )));
    match opts.interval {
        None => ExitCode::from(pass(&opts, &metrics)),
        Some(period) => agent(&opts, period, metrics),
    }
}

/// One pass, printed and counted in `metrics` (written to the textfile
/// when asked: a failure to is reported and does not change the exit
/// status); its exit status.
fn pass(opts: &Options, metrics: &Metrics) -> u8 {
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    let result = run_pass(opts, &mut |l| {
        let _ = writeln!(out, "{l}");
    });
    match &result {
        Ok(summary) => {
            let _ = writeln!(out, "{summary}");
        }
        Err(e @ cni_gc::Error::CollectRefused { .. }) => {
            let _ = out.flush();
            eprintln!("cni-gc: {e}");
        }
        Err(e) => {
            let _ = out.flush();
            eprintln!("cni-gc: nothing done: {e}");
        }
    }
    let _ = out.flush();
    if let Ok(mut m) = metrics.lock() {
        m.record(&result, started.elapsed(), SystemTime::now());
        if let Some(dir) = &opts.textfile_dir {
            if let Err(e) = cni_gc::metrics::write_textfile(dir, &m) {
                eprintln!("cni-gc: metrics textfile: {e}");
            }
        }
    }
    exit_status(&result)
}

/// `--interval`: a pass at once, then one every `period` (jittered) until
/// SIGTERM or SIGINT, which end it between passes (a pass in progress
/// finishes: a DEL is never cut in half). A failed or refused pass is
/// reported and the next one comes at its time.
fn agent(opts: &Options, period: Duration, metrics: Metrics) -> ExitCode {
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    // Blocked, they stay pending during a pass and end the wait after it.
    // The plugins start with an empty mask (std resets it on spawn).
    if let Err(e) = stop.thread_block() {
        eprintln!("cni-gc: block SIGTERM: {e}");
        return ExitCode::from(EXIT_REFUSED);
    }
    // After the mask: the endpoint's thread inherits it, so SIGTERM never
    // lands there (its default action would end the process mid-pass).
    if let Some(addr) = opts.metrics_address {
        match cni_gc::metrics::serve(addr, metrics.clone()) {
            Ok(bound) => eprintln!("cni-gc: metrics at http://{bound}/metrics"),
            Err(e) => {
                eprintln!("cni-gc: {e}");
                return ExitCode::from(EXIT_REFUSED);
            }
        }
    }
    loop {
        pass(opts, &metrics);
        // The workspace's one random source (cni_types::random).
        let unit = (cni_types::random::random_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if let Some(signal) = wait_for(&stop, jittered(period, unit)) {
            eprintln!("cni-gc: {signal}: stopping");
            return ExitCode::from(EXIT_OK);
        }
    }
}

/// Sleeps `timeout`, or less when a signal of `set` (blocked) arrives:
/// that signal.
fn wait_for(set: &SigSet, timeout: Duration) -> Option<Signal> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits any c_long.
            tv_nsec: i32::try_from(left.subsec_nanos()).map_or(0, libc::c_long::from),
        };
        // SAFETY: `set` is an initialized sigset_t and `ts` a valid
        // timespec; a null siginfo pointer is allowed.
        let r = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if r > 0 {
            return Signal::try_from(r).ok();
        }
        // EAGAIN (the time is up) or EINTR (another signal): look again.
    }
}
