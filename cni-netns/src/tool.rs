//! Running a system tool (`nft`, `iptables`, `ip`): arguments, optional
//! stdin, output captured. One runner for the `nft` firewall backend, the
//! node-table rules of the firewall plugin, the iptables wrapper and the
//! tap device's `ip tuntap`; a tool for another network namespace is
//! started from a thread inside it (`netns::run_at`).

use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `program args…` (looked up on `PATH` when it has no slash),
/// feeding `stdin` when given. Spawn and I/O failures are the `Err`; the
/// tool's own failure is in the returned status.
pub fn run(program: &Path, args: &[&str], stdin: Option<&[u8]>) -> io::Result<Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input)?;
    }
    child.wait_with_output()
}

/// `nft`'s error message: the first line of its stderr without the
/// location prefix (`internal:0:0-0: Error: ...` means nothing for JSON
/// input); the exit status when stderr is empty.
pub fn nft_error(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().next().unwrap_or("").trim();
    let msg = line.find("Error: ").map_or(line, |i| &line[i..]);
    if msg.is_empty() {
        format!("exited with {}", out.status)
    } else {
        msg.to_owned()
    }
}
