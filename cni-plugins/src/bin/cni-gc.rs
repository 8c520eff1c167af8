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
    let exporter = init_tracing();
    let metrics = Arc::new(Mutex::new(GcMetrics::new(
        env!("CARGO_PKG_VERSION"),
        cni_plugins::binary::BUILD,
    )));
    let exporter = exporter.as_ref();
    match opts.interval {
        None => ExitCode::from(pass(&opts, &metrics, exporter)),
        Some(period) => agent(&opts, period, metrics, exporter),
    }
}

/// Span export from the `OTEL_*` variables (docs/observability.md), when
/// they ask for it: the exporter to flush after each pass. cni-gc logs by
/// printing, so no other subscriber is installed.
fn init_tracing() -> Option<cni_trace::Exporter> {
    use tracing_subscriber::layer::SubscriberExt;
    let (layer, exporter, refused) = cni_exec::logging::env_export_layer();
    if let Some(e) = refused {
        eprintln!("cni-gc: span export not started: {e}");
    }
    let layer = layer?;
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).ok()?;
    exporter
}

/// One pass, printed and counted in `metrics` (written to the textfile
/// when asked: a failure to is reported and does not change the exit
/// status); its exit status.
fn pass(opts: &Options, metrics: &Metrics, exporter: Option<&cni_trace::Exporter>) -> u8 {
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    // One trace per pass: its CRI requests and the plugins' DEL and GC
    // calls under it, a child of cni-gc's own TRACEPARENT when it has one.
    let span = tracing::info_span!(
        "cni-gc.pass",
        otel.kind = "internal",
        cni.gc.dry_run = opts.dry_run,
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
    );
    if let Some(parent) = cni_exec::exec::inbound_trace_context() {
        cni_trace::set_remote_parent(&span, parent);
    }
    let result = span.in_scope(|| {
        run_pass(opts, &mut |l| {
            let _ = writeln!(out, "{l}");
        })
    });
    if let Err(e) = &result {
        cni_types::trace::record_error(&span, e);
    }
    drop(span);
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
    if let Some(exporter) = exporter {
        // Within the export's budget; a failed export changes nothing.
        let _ = exporter.flush();
    }
    exit_status(&result)
}

/// `--interval`: a pass at once, then one every `period` (jittered) until
/// SIGTERM or SIGINT, which end it between passes (a pass in progress
/// finishes: a DEL is never cut in half). A failed or refused pass is
/// reported and the next one comes at its time.
fn agent(
    opts: &Options,
    period: Duration,
    metrics: Metrics,
    exporter: Option<&cni_trace::Exporter>,
) -> ExitCode {
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
        pass(opts, &metrics, exporter);
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
