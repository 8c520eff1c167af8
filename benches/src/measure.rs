//! What the measurement programs in `src/bin` share: medians, milliseconds,
//! the root premise and a `main` that reports errors.

use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A measurement's error: what failed, in words.
pub type Fallible<T> = Result<T, Box<dyn std::error::Error>>;

/// The median of `v` (zero when empty).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `f` and returns how long it took.
pub fn time<T>(f: impl FnOnce() -> Fallible<T>) -> Fallible<Duration> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

/// Fails unless the program runs as root (the measurements create network
/// namespaces).
pub fn require_root(program: &str) -> Fallible<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!("{program}: run as root (it creates network namespaces)").into());
    }
    Ok(())
}

/// Runs a measurement program's `main`, printing its error and failing.
pub fn run(program: &str, main: impl FnOnce() -> Fallible<()>) -> ExitCode {
    match main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One exec'd plugin call: its wall time, or an error naming the plugin,
/// the command and what it printed.
///
/// The environment is cleared but for `PATH` and the `CNI_*` variables
/// given; `stdin` is the network configuration.
pub fn exec_plugin(
    plugin: &std::path::Path,
    env: &[(&str, &str)],
    stdin: &[u8],
) -> Fallible<Duration> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(plugin);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = cmd.spawn()?;
    child.stdin.take().ok_or("no stdin")?.write_all(stdin)?;
    let out = child.wait_with_output()?;
    let took = t.elapsed();
    if !out.status.success() {
        let command = env
            .iter()
            .find(|(k, _)| *k == "CNI_COMMAND")
            .map_or("", |(_, v)| v);
        return Err(format!(
            "{} {command}: {} {}{}",
            plugin.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(took)
}
