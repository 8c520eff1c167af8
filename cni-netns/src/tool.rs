//! Running a system tool (`nft`, `iptables`): arguments, optional stdin,
//! optionally inside a network namespace, output captured. One runner for
//! the `nft` firewall backend, the node-table rules of the firewall plugin
//! and the iptables wrapper.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `program args…`, feeding `stdin` when given, inside the network
/// namespace `netns` when given (entered by `setns` between fork and exec).
/// Spawn and I/O failures are the `Err`; the tool's own failure is in the
/// returned status.
pub(crate) fn run(
    program: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    netns: Option<&File>,
) -> io::Result<Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ns) = netns {
        let fd = ns.as_raw_fd();
        // SAFETY: between fork and exec only the async-signal-safe setns
        // syscall runs; `fd` stays open in the child until exec (the caller
        // owns `netns` for the whole call).
        unsafe {
            cmd.pre_exec(move || {
                let ns = std::os::fd::BorrowedFd::borrow_raw(fd);
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
            });
        }
    }
    let mut child = cmd.spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input)?;
    }
    child.wait_with_output()
}

/// `nft`'s error message: the first line of its stderr without the
/// location prefix (`internal:0:0-0: Error: ...` means nothing for JSON
/// input); the exit status when stderr is empty.
pub(crate) fn nft_error(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().next().unwrap_or("").trim();
    let msg = line.find("Error: ").map_or(line, |i| &line[i..]);
    if msg.is_empty() {
        format!("exited with {}", out.status)
    } else {
        msg.to_owned()
    }
}
