//! The kit's own namespaces and directories, and running a process inside
//! the "host" namespace with a timeout.
//!
//! Everything a plugin touches is here: the plugin process runs in a host
//! namespace the kit created (bridges, masquerade rules and host ports land
//! there), the container namespaces are created per case, and state
//! directories live in one temporary directory. Dropping the [`Sandbox`]
//! (also while a panic unwinds) removes all of it; links and firewall
//! tables go away with their namespaces.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cni_netns::{AddressFamilyFilter, Handle, IpNetwork, Netns, OwnedNetns, VethSpec};
use serde_json::{json, Value};

use super::kind::{prev_address, SandboxNames};
use crate::error::{io_err, Error};

/// What a process did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reply {
    /// Exit code; `None` when killed (timeout or signal).
    pub(crate) code: Option<i32>,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) timed_out: bool,
    /// The stream (`"stdout"`, `"stderr"`) the plugin wrote more than
    /// [`MAX_OUTPUT`] bytes to; it was killed then.
    pub(crate) overflow: Option<&'static str>,
}

/// The most a plugin may write to each of its stdout and stderr, as for a
/// runtime ([`cni_exec::process::MAX_OUTPUT`]): past it the plugin is
/// killed and the call fails, so a plugin printing without end cannot take
/// the kit's memory.
pub(crate) const MAX_OUTPUT: usize = cni_exec::process::MAX_OUTPUT;

impl Reply {
    pub(crate) fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// A one-line account of a failed call for a case's reason.
    pub(crate) fn describe(&self) -> String {
        let status = match (self.timed_out, self.code) {
            _ if self.overflow.is_some() => format!(
                "killed: wrote more than {MAX_OUTPUT} bytes to {}",
                self.overflow.unwrap_or_default()
            ),
            (true, _) => "timed out (killed)".to_owned(),
            (false, Some(c)) => format!("exit {c}"),
            (false, None) => "killed by a signal".to_owned(),
        };
        // JSON on one line, anything else quoted as it came.
        let out = match serde_json::from_slice::<Value>(&self.stdout) {
            Ok(v) => v.to_string(),
            Err(_) => format!("{:?}", String::from_utf8_lossy(&self.stdout).trim()),
        };
        let err = String::from_utf8_lossy(&self.stderr);
        let mut s = format!("{status}, stdout {out}");
        if !err.trim().is_empty() {
            s.push_str(&format!(", stderr {:?}", shorten(err.trim(), 300)));
        }
        s
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Environment variables of the protocol, never inherited from the kit's
/// own environment.
const PROTOCOL_VARS: [&str; 7] = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
    "CNI_NETNS_OVERRIDE",
];

pub(crate) struct Sandbox {
    pub(crate) names: SandboxNames,
    // Field order is drop order: processes never outlive a call, so the
    // host namespace can go first, the directories last.
    host: OwnedNetns,
    host_handle: Handle,
    _dir: tempfile::TempDir,
    counter: std::cell::Cell<u32>,
    cancel: Option<Arc<AtomicBool>>,
    /// Every container namespace path handed out, removed again on drop
    /// in case a plugin created a file there after the namespace was gone.
    container_paths: std::cell::RefCell<Vec<PathBuf>>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for path in self.container_paths.borrow().iter() {
            if path.exists() {
                let _ = Netns::remove(path);
            }
        }
    }
}

fn kernel(op: impl Into<String>) -> impl FnOnce(cni_netns::Error) -> Error {
    let op = op.into();
    move |source| Error::Kernel {
        op,
        source: Box::new(source),
    }
}

pub(crate) fn random_suffix() -> String {
    format!("{:08x}", cni_types::random::random_u32())
}

impl Sandbox {
    pub(crate) fn new(cancel: Option<Arc<AtomicBool>>) -> Result<Sandbox, Error> {
        let host = OwnedNetns::new("cnik-host").map_err(kernel("create the host namespace"))?;
        let host_handle =
            Handle::in_netns(&host).map_err(kernel("open netlink in the host namespace"))?;
        let lo = host_handle
            .link_by_name("lo")
            .map_err(kernel("find lo in the host namespace"))?;
        host_handle
            .set_up(lo.index)
            .map_err(kernel("set lo up in the host namespace"))?;
        let dir = tempfile::Builder::new()
            .prefix("cni-conformance-")
            .tempdir()
            .map_err(io_err("create the state directory"))?;
        let suffix = random_suffix();
        let names = SandboxNames::new(&suffix, dir.path());
        Ok(Sandbox {
            names,
            host,
            host_handle,
            _dir: dir,
            counter: std::cell::Cell::new(0),
            cancel,
            container_paths: Default::default(),
        })
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    pub(crate) fn host(&self) -> &Netns {
        &self.host
    }

    /// A number unique within this run (container ids, addresses).
    pub(crate) fn next(&self) -> u32 {
        let n = self.counter.get() + 1;
        self.counter.set(n);
        n
    }

    pub(crate) fn new_container(&self) -> Result<OwnedNetns, Error> {
        let ns = OwnedNetns::new("cnik-ctr").map_err(kernel("create a container namespace"))?;
        self.container_paths.borrow_mut().push(ns.path().to_owned());
        Ok(ns)
    }

    /// `(index, name, kind)` of every link in the host namespace.
    pub(crate) fn host_links(&self) -> Result<Vec<(u32, String, Option<String>)>, Error> {
        let mut links: Vec<_> = self
            .host_handle
            .links()
            .map_err(kernel("list links in the host namespace"))?
            .into_iter()
            .map(|l| (l.index, l.name, l.kind))
            .collect();
        links.sort();
        Ok(links)
    }

    /// Makes sure a link called `name` exists and is up in the host
    /// namespace (a veth whose peer stays there too), for plugins that need
    /// a master or a device to take.
    pub(crate) fn ensure_host_link(&self, name: &str) -> Result<(), Error> {
        if self.host_handle.link_by_name(name).is_ok() {
            return Ok(());
        }
        let peer = format!("cnikp{}", random_suffix());
        let op = format!("create veth {name} in the host namespace");
        let link = self
            .host_handle
            .add_veth(&VethSpec {
                name: name.to_owned(),
                peer_name: peer.clone(),
                up: true,
                ..Default::default()
            })
            .map_err(kernel(op.clone()))?;
        let peer = self
            .host_handle
            .link_by_name(&peer)
            .map_err(kernel(op.clone()))?;
        self.host_handle
            .set_up(peer.index)
            .map_err(kernel(op.clone()))?;
        self.host_handle.set_up(link.index).map_err(kernel(op))
    }

    /// Plays the plugin before a meta plugin: a veth with `ifname` in
    /// `container` and the other end in the host namespace; with `address`
    /// the container end gets attachment `n`'s address. Returns the 1.0.0
    /// result describing it.
    pub(crate) fn add_container_veth(
        &self,
        container: &Netns,
        ifname: &str,
        n: u32,
        address: bool,
    ) -> Result<Value, Error> {
        let host_name = format!("cnikv{}", random_suffix());
        let op = format!("create veth {host_name} / {ifname} for the container");
        self.host_handle
            .add_veth(&VethSpec {
                name: host_name.clone(),
                peer_name: ifname.to_owned(),
                peer_netns: Some(container),
                up: true,
                ..Default::default()
            })
            .map_err(kernel(op.clone()))?;
        let host_link = self
            .host_handle
            .link_by_name(&host_name)
            .map_err(kernel(op.clone()))?;
        let pod = Handle::in_netns(container).map_err(kernel(op.clone()))?;
        let pod_link = pod.link_by_name(ifname).map_err(kernel(op.clone()))?;
        pod.set_up(pod_link.index).map_err(kernel(op.clone()))?;
        let (ip, gw) = prev_address(n);
        let mut result = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": host_name, "mac": host_link.mac.map(|m| m.to_string()).unwrap_or_default()},
                {"name": ifname, "mac": pod_link.mac.map(|m| m.to_string()).unwrap_or_default(),
                 "sandbox": container.path()},
            ],
            "ips": [],
            "routes": [],
        });
        if address {
            let net = IpNetwork::new(ip.into(), 24).map_err(|e| Error::Setup {
                op: op.clone(),
                reason: e.to_string(),
            })?;
            pod.add_address(pod_link.index, net, Default::default())
                .map_err(kernel(op.clone()))?;
            result["ips"] =
                json!([{"address": format!("{ip}/24"), "gateway": gw.to_string(), "interface": 1}]);
            result["routes"] = json!([{"dst": "0.0.0.0/0", "gw": gw.to_string()}]);
        }
        Ok(result)
    }

    /// Configures `addresses` on `ifname` in `container` (the kit playing
    /// the interface plugin after an IPAM ADD).
    pub(crate) fn configure_addresses(
        &self,
        container: &Netns,
        ifname: &str,
        addresses: &[IpNetwork],
    ) -> Result<(), Error> {
        let op = format!("configure the IPAM result on {ifname} in the container");
        let pod = Handle::in_netns(container).map_err(kernel(op.clone()))?;
        let link = pod.link_by_name(ifname).map_err(kernel(op.clone()))?;
        let present = pod
            .addresses(Some(link.index), AddressFamilyFilter::All)
            .map_err(kernel(op.clone()))?;
        for addr in addresses {
            if present.iter().any(|a| a.address.ip() == addr.ip()) {
                continue;
            }
            let opts = cni_netns::AddressOptions {
                nodad: true,
                ..Default::default()
            };
            pod.add_address(link.index, *addr, opts)
                .map_err(kernel(op.clone()))?;
        }
        Ok(())
    }

    /// True when `ifname` exists in `container`.
    pub(crate) fn container_has_link(
        &self,
        container: &Netns,
        ifname: &str,
    ) -> Result<bool, Error> {
        let pod = Handle::in_netns(container).map_err(kernel("open the container namespace"))?;
        match pod.link_by_name(ifname) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(kernel(format!("look up {ifname} in the container"))(e)),
        }
    }

    /// State naming container `cid` under the kit's state directory: any
    /// file whose name contains it (tuning's backups, ...), and host-local
    /// reservations (`<dataDir>/<network>/<ip>` holding the container id
    /// on its first line). Private files of an implementation that only
    /// keep old content (a pool of released files) do not count.
    pub(crate) fn files_naming(&self, cid: &str) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut stack = vec![self.names.data_dir.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                match entry.file_type() {
                    Ok(t) if t.is_dir() => stack.push(path),
                    Ok(t)
                        if t.is_file()
                            && (entry.file_name().to_string_lossy().contains(cid)
                                || self.is_reservation_of(&path, cid)) =>
                    {
                        found.push(path);
                    }
                    _ => {}
                }
            }
        }
        found
    }

    /// host-local reservations held by container `cid`.
    pub(crate) fn reservations_of(&self, cid: &str) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let Ok(networks) = std::fs::read_dir(self.names.ipam_dir()) else {
            return found;
        };
        for net in networks.flatten() {
            let Ok(files) = std::fs::read_dir(net.path()) else {
                continue;
            };
            for f in files.flatten() {
                if self.is_reservation_of(&f.path(), cid) {
                    found.push(f.path());
                }
            }
        }
        found
    }

    fn is_reservation_of(&self, path: &Path, cid: &str) -> bool {
        let in_network_dir = path
            .parent()
            .and_then(Path::parent)
            .is_some_and(|d| d == self.names.ipam_dir());
        in_network_dir
            && std::fs::read(path).is_ok_and(|c| {
                String::from_utf8_lossy(&c)
                    .lines()
                    .next()
                    .is_some_and(|l| l.trim() == cid)
            })
    }

    /// Runs `program` in the host namespace with the protocol variables
    /// `env` (others inherited, protocol ones removed), `stdin` on its
    /// standard input, killed with its process group after `timeout`.
    pub(crate) fn exec(
        &self,
        program: &Path,
        args: &[&str],
        env: &[(&str, String)],
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<Reply, Error> {
        if self.cancelled() {
            return Err(Error::Interrupted);
        }
        let mut cmd = Command::new(program);
        cmd.args(args);
        for var in PROTOCOL_VARS {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let fd = self.host.as_raw_fd();
        // SAFETY: between fork and exec the closure only makes the setns
        // and sigprocmask system calls (async-signal-safe), setns on a
        // descriptor the parent keeps open for the whole call, and
        // allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The kit blocks SIGINT, SIGTERM and SIGHUP for its own
                // handling; the plugin starts with none blocked, whatever
                // the standard library does (sigprocmask(2) is
                // async-signal-safe; the set is on this stack).
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                if libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let what = program.display().to_string();
        let mut child = cmd.spawn().map_err(io_err(format!("run {what}")))?;
        let pgid = child.id() as i32;
        let (tx, rx) = mpsc::channel();
        let mut readers = 0;
        let pipes: [(bool, Option<Box<dyn Read + Send>>); 2] = [
            (true, child.stdout.take().map(|p| Box::new(p) as _)),
            (false, child.stderr.take().map(|p| Box::new(p) as _)),
        ];
        for (is_stdout, pipe) in pipes {
            let Some(pipe) = pipe else { continue };
            let tx = tx.clone();
            readers += 1;
            std::thread::spawn(move || {
                let read = match cni_files::capped::read_to_end(pipe, MAX_OUTPUT as u64) {
                    Ok(buf) => Some(buf),
                    // Past the cap: nothing more is read, so end the
                    // writer now rather than at the timeout.
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                        // SAFETY: kill(2) on the process group we created.
                        unsafe { libc::kill(-pgid, libc::SIGKILL) };
                        None
                    }
                    Err(_) => Some(Vec::new()),
                };
                let _ = tx.send((is_stdout, read));
            });
        }
        drop(tx);
        if let Some(mut input) = child.stdin.take() {
            let data = stdin.to_vec();
            // A plugin that never reads stdin must not block us.
            std::thread::spawn(move || {
                let _ = input.write_all(&data);
            });
        }
        let deadline = Instant::now() + timeout;
        let mut reply = Reply::default();
        let status = loop {
            match child
                .try_wait()
                .map_err(io_err(format!("wait for {what}")))?
            {
                Some(status) => break Some(status),
                None if Instant::now() >= deadline || self.cancelled() => break None,
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        let status = match status {
            Some(s) => s,
            None => {
                reply.timed_out = true;
                // SAFETY: kill(2) on the process group we created.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                child.wait().map_err(io_err(format!("wait for {what}")))?
            }
        };
        if self.cancelled() {
            return Err(Error::Interrupted);
        }
        reply.code = status.code();
        if status.signal().is_some() {
            reply.code = None;
        }
        for _ in 0..readers {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            match rx.recv_timeout(left) {
                Ok((true, Some(buf))) => reply.stdout = buf,
                Ok((false, Some(buf))) => reply.stderr = buf,
                Ok((is_stdout, None)) => {
                    reply.overflow = Some(if is_stdout { "stdout" } else { "stderr" });
                    reply.code = None;
                }
                Err(_) => {
                    // A leftover child holds the pipe open: end the group.
                    reply.timed_out = true;
                    // SAFETY: kill(2) on the process group we created.
                    unsafe { libc::kill(-pgid, libc::SIGKILL) };
                    break;
                }
            }
        }
        Ok(reply)
    }

    /// Runs a tool (`nft`, `iptables-save`) in the host namespace; `None`
    /// when it is not installed or fails.
    pub(crate) fn tool_output(&self, program: &str, args: &[&str]) -> Option<String> {
        let path = find_in_path(program)?;
        let reply = self
            .exec(&path, args, &[], b"", Duration::from_secs(30))
            .ok()?;
        reply
            .success()
            .then(|| String::from_utf8_lossy(&reply.stdout).into_owned())
    }
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
