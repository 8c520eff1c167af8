//! Sysctls under `/proc/sys`.
//!
//! `/proc/sys/net` shows the network namespace of the thread that opens the
//! file, so these functions must run on a thread inside the target
//! namespace: call them through [`crate::Handle::run`] or
//! [`crate::Netns::run`].
//!
//! Keys are either dotted (`net.ipv4.ip_forward`) or slash separated
//! (`net/ipv6/conf/eth0.100/disable_ipv6`); use slashes whenever an
//! interface name may contain a dot, as Go's `pkg/utils/sysctl` does.

use std::io::ErrorKind;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// `net/ipv4/ip_forward`.
pub const IPV4_FORWARD: &str = "net/ipv4/ip_forward";
/// `net/ipv6/conf/all/forwarding`.
pub const IPV6_FORWARD: &str = "net/ipv6/conf/all/forwarding";

/// `net/ipv6/conf/<ifname>/disable_ipv6`.
pub fn disable_ipv6(ifname: &str) -> String {
    format!("net/ipv6/conf/{ifname}/disable_ipv6")
}
/// `net/ipv6/conf/<ifname>/accept_dad`.
pub fn accept_dad(ifname: &str) -> String {
    format!("net/ipv6/conf/{ifname}/accept_dad")
}
/// `net/ipv6/conf/<ifname>/accept_ra`.
pub fn accept_ra(ifname: &str) -> String {
    format!("net/ipv6/conf/{ifname}/accept_ra")
}
/// `net/ipv6/conf/<ifname>/keep_addr_on_down`.
pub fn keep_addr_on_down(ifname: &str) -> String {
    format!("net/ipv6/conf/{ifname}/keep_addr_on_down")
}
/// `net/ipv4/conf/<ifname>/route_localnet`.
pub fn route_localnet(ifname: &str) -> String {
    format!("net/ipv4/conf/{ifname}/route_localnet")
}
/// `net/ipv4/conf/<ifname>/arp_notify`.
pub fn arp_notify(ifname: &str) -> String {
    format!("net/ipv4/conf/{ifname}/arp_notify")
}

/// The `/proc/sys` path of `key`.
pub fn path(key: &str) -> PathBuf {
    let rel = if key.contains('/') {
        key.trim_start_matches('/').to_owned()
    } else {
        key.replace('.', "/")
    };
    PathBuf::from("/proc/sys").join(rel)
}

fn slash_key(key: &str) -> String {
    if key.contains('/') {
        key.trim_start_matches('/').to_owned()
    } else {
        key.replace('.', "/")
    }
}

/// Reads a sysctl, without the trailing newline.
pub fn get(key: &str) -> Result<String> {
    std::fs::read_to_string(path(key))
        .map(|s| s.trim_end().to_owned())
        .map_err(|source| Error::Sysctl {
            op: "read",
            key: slash_key(key),
            source,
        })
}

/// Writes `value` unless the sysctl already holds it. Returns whether it
/// wrote.
pub fn set(key: &str, value: &str) -> Result<bool> {
    if get(key)? == value {
        return Ok(false);
    }
    std::fs::write(path(key), value).map_err(|source| Error::Sysctl {
        op: "write",
        key: slash_key(key),
        source,
    })?;
    Ok(true)
}

/// [`set`] for several sysctls of one directory (`net/ipv6/conf/eth0`),
/// looking the directory up once: a result per entry, in order (all of them
/// the directory's error when it cannot be opened).
///
/// Why: the kernel's dentries of `/proc/sys/net/ipv4` and `ipv6` are one per
/// network namespace under one parent, so each path lookup through them
/// walks a hash chain as long as the node has namespaces
/// (`proc_sys_compare`; BENCHMARKS.md, "Node scale", has its cost at
/// 1000 pods). The entries are opened relative to the directory (`openat`).
/// [`crate::Handle::sysctl_set_in`] goes further and keeps the family's
/// directory open across calls.
pub fn set_in(dir: &str, entries: &[(&str, &str)]) -> Vec<Result<bool>> {
    set_in_with(&Roots::default(), dir, entries)
}

/// Open directories of `/proc/sys/net/ipv4` and `/proc/sys/net/ipv6` of
/// one namespace, opened on first use from a thread inside it: a path below
/// them is then opened relative to them, and the per-namespace family
/// directory (the lookup that grows with the node's namespaces) is not
/// looked up again. Only used on threads inside that namespace (the
/// kernel shows a namespace's sysctl entries to its own threads only).
#[derive(Default)]
pub(crate) struct Roots {
    dirs: std::sync::Mutex<[Option<std::fs::File>; 2]>,
}

impl Roots {
    /// The open root for `key` (`net/ipv4/...` or `net/ipv6/...`) and the
    /// rest of the key below it; `None` for other keys.
    fn split<'k>(&self, key: &'k str) -> Option<(usize, &'k str)> {
        for (i, family) in ["net/ipv4/", "net/ipv6/"].iter().enumerate() {
            if let Some(rest) = key.strip_prefix(family) {
                return Some((i, rest));
            }
        }
        None
    }

    /// Opens `key` (slash separated) with `flags`, relative to the cached
    /// family directory when there is one.
    fn open(&self, key: &str, flags: libc::c_int) -> std::io::Result<std::fs::File> {
        let Some((i, rest)) = self.split(key) else {
            return open_at(None, &format!("/proc/sys/{key}"), flags);
        };
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if dirs[i].is_none() {
            let family = if i == 0 { "ipv4" } else { "ipv6" };
            dirs[i] = Some(open_at(
                None,
                &format!("/proc/sys/net/{family}"),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )?);
        }
        open_at(dirs[i].as_ref(), rest, flags)
    }
}

/// `openat(dir or AT_FDCWD, path, flags | O_CLOEXEC)`.
fn open_at(
    dir: Option<&std::fs::File>,
    path: &str,
    flags: libc::c_int,
) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let name = std::ffi::CString::new(path)
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `dirfd` is AT_FDCWD or an open directory borrowed for the
    // call, `name` a valid C string for the call's duration; the returned
    // fd is owned by the File.
    let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// [`set_in`] through `roots`.
pub(crate) fn set_in_with(roots: &Roots, dir: &str, entries: &[(&str, &str)]) -> Vec<Result<bool>> {
    use std::io::{Read, Write};
    let dir = slash_key(dir);
    let handle = match roots.open(&dir, libc::O_RDONLY | libc::O_DIRECTORY) {
        Ok(f) => f,
        Err(e) => {
            return entries
                .iter()
                .map(|(k, _)| {
                    Err(Error::Sysctl {
                        op: "open",
                        key: format!("{dir}/{k}"),
                        // The errno kept (ENOENT: no such link).
                        source: e
                            .raw_os_error()
                            .map_or_else(|| e.kind().into(), std::io::Error::from_raw_os_error),
                    })
                })
                .collect();
        }
    };
    entries
        .iter()
        .map(|&(leaf, value)| {
            let key = format!("{dir}/{leaf}");
            let mut current = String::new();
            open_at(Some(&handle), leaf, libc::O_RDONLY | libc::O_NOFOLLOW)
                .and_then(|mut f| f.read_to_string(&mut current))
                .map_err(|source| Error::Sysctl {
                    op: "read",
                    key: key.clone(),
                    source,
                })?;
            if current.trim_end() == value {
                return Ok(false);
            }
            open_at(Some(&handle), leaf, libc::O_WRONLY | libc::O_NOFOLLOW)
                .and_then(|mut f| f.write_all(value.as_bytes()))
                .map_err(|source| Error::Sysctl {
                    op: "write",
                    key,
                    source,
                })?;
            Ok(true)
        })
        .collect()
}

/// Writes `value` to a sysctl whatever it holds (Go's `sysctl.Sysctl`
/// with a value, as tuning writes: a write has effects of its own on some
/// sysctls, e.g. `net/ipv4/route/flush`, even of the value already there).
pub fn write(key: &str, value: &str) -> Result<()> {
    write_with(&Roots::default(), key, value)
}

/// [`write`] through `roots`.
pub(crate) fn write_with(roots: &Roots, key: &str, value: &str) -> Result<()> {
    use std::io::Write;
    let key = slash_key(key);
    roots
        .open(&key, libc::O_WRONLY | libc::O_NOFOLLOW)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|source| Error::Sysctl {
            op: "write",
            key,
            source,
        })
}

/// [`set`] through `roots`.
pub(crate) fn set_with(roots: &Roots, key: &str, value: &str) -> Result<bool> {
    let key = slash_key(key);
    let (dir, leaf) = key.rsplit_once('/').unwrap_or(("", key.as_str()));
    set_in_with(roots, dir, &[(leaf, value)])
        .pop()
        .unwrap_or(Ok(false))
}

/// Reads a sysctl, `None` when it does not exist (e.g. IPv6 disabled).
pub fn get_opt(key: &str) -> Result<Option<String>> {
    match get(key) {
        Ok(v) => Ok(Some(v)),
        Err(Error::Sysctl { source, .. }) if source.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Go's `ip.EnableIP4Forward` / `EnableIP6Forward`: turns forwarding on for
/// the families asked, writing only what is not already `1`.
pub fn enable_forwarding(ipv4: bool, ipv6: bool) -> Result<()> {
    if ipv4 {
        set(IPV4_FORWARD, "1")?;
    }
    if ipv6 {
        set(IPV6_FORWARD, "1")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_and_slashed_keys_map_to_proc_paths() {
        assert_eq!(
            path("net.ipv4.ip_forward"),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            path(&disable_ipv6("eth0.100")),
            PathBuf::from("/proc/sys/net/ipv6/conf/eth0.100/disable_ipv6")
        );
        assert_eq!(
            path("/net/ipv4/ip_forward"),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
    }

    #[test]
    fn missing_sysctl_is_not_found() {
        let err = get("net/ipv4/conf/no-such-if-xyz/arp_notify").unwrap_err();
        assert!(err.is_not_found(), "{err}");
        assert!(err
            .to_string()
            .starts_with("read sysctl net/ipv4/conf/no-such-if-xyz/arp_notify: "));
        assert_eq!(
            get_opt("net/ipv4/conf/no-such-if-xyz/arp_notify").unwrap(),
            None
        );
    }
}
