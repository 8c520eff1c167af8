//! The crate's single error type.
//!
//! Every variant names the operation and the object it was applied to, and
//! the namespace when one is involved, so that a plugin can pass the message
//! straight to the runtime:
//! `add address 10.1.0.5/24 to eth0 in /run/netns/x: File exists`.

use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- namespaces, netlink, links, addresses, routes, sysctls ----
    /// The namespace path does not exist (Go: `NSPathNotExistErr`).
    #[error("open network namespace {path}: does not exist")]
    NetnsNotFound {
        /// The path that was opened.
        path: PathBuf,
    },
    /// The path exists but is not a namespace file (Go: `NSPathNotNSErr`).
    #[error("open network namespace {path}: not a network namespace")]
    NotANetns {
        /// The path that was opened.
        path: PathBuf,
    },
    /// A namespace operation (open, create, enter, delete) failed.
    #[error("{op} network namespace {path}: {}", .errno.desc())]
    Netns {
        /// What was being done (`"create"`, `"enter"`, ...).
        op: &'static str,
        /// The namespace path.
        path: PathBuf,
        /// The system error.
        errno: Errno,
    },
    /// The kernel refused a netlink request.
    #[error("{op} in {netns}: {}{}", errno_text(*.errno), fmt_ext(.message))]
    Netlink {
        /// The operation and its object (`"add address 10.1.0.5/24 to eth0"`).
        op: String,
        /// The namespace the socket belongs to.
        netns: String,
        /// The errno the kernel answered with, as it sent it: kernel-internal
        /// codes that are no `Errno` (`ENOTSUPP`, 524) are kept. Compare with
        /// [`Error::errno`] or [`Error::is_errno`].
        errno: i32,
        /// The kernel's extended ack message, when it sent one.
        message: Option<String>,
    },
    /// A link looked up by name does not exist.
    #[error("{op} in {netns}: link {name} not found")]
    LinkNotFound {
        /// The operation that needed the link.
        op: String,
        /// The link name.
        name: String,
        /// The namespace that was searched.
        netns: String,
    },
    /// A link exists but is not of the expected kind.
    #[error("{op} in {netns}: {name} already exists but is a {found}, not a {expected}")]
    WrongLinkKind {
        /// The operation.
        op: String,
        /// The link name.
        name: String,
        /// The kind found (`"veth"`, `"device"` when none).
        found: String,
        /// The kind expected.
        expected: &'static str,
        /// The namespace.
        netns: String,
    },
    /// The kernel does not support a feature the caller asked for
    /// (e.g. bridge VLAN filtering on a kernel built without it).
    #[error("{op} in {netns}: {feature} is not supported by this kernel{}", fmt_ext(.message))]
    Unsupported {
        /// The operation.
        op: String,
        /// The feature (`"bridge vlan_filtering"`).
        feature: &'static str,
        /// The namespace.
        netns: String,
        /// The kernel's extended ack message, when it sent one.
        message: Option<String>,
    },
    /// A netlink reply could not be parsed or broke the protocol.
    #[error("{op} in {netns}: bad netlink reply: {detail}")]
    Protocol {
        /// The operation.
        op: String,
        /// The namespace.
        netns: String,
        /// What was wrong.
        detail: String,
    },
    /// A dump stayed inconsistent (`NLM_F_DUMP_INTR`) after every retry.
    #[error("{op} in {netns}: dump interrupted {attempts} times in a row")]
    DumpInterrupted {
        /// The operation.
        op: String,
        /// The namespace.
        netns: String,
        /// How many dumps were tried.
        attempts: u32,
    },
    /// The kernel did not answer a netlink request in time (the reply was
    /// lost): the socket waits this long for each part of a reply.
    #[error("{op} in {netns}: no netlink reply within {timeout:?}")]
    NetlinkTimeout {
        /// The operation.
        op: String,
        /// The namespace.
        netns: String,
        /// How long the socket waited.
        timeout: Duration,
    },
    /// The socket itself failed (open, send, receive).
    #[error("{op} in {netns}: netlink socket: {source}")]
    Socket {
        /// The operation.
        op: String,
        /// The namespace.
        netns: String,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// IPv6 duplicate address detection failed for an address.
    #[error("address {address} on {ifname} in {netns} failed duplicate address detection")]
    DadFailed {
        /// The address.
        address: String,
        /// The interface.
        ifname: String,
        /// The namespace.
        netns: String,
    },
    /// An IPv6 address cannot go on an interface: the kernel keeps no IPv6
    /// on it (IPv6 off in the kernel, an MTU below 1280, `disable_ipv6`).
    #[error(
        "add address {address} to {ifname} in {netns}: IPv6 is unavailable on {ifname}: {reason}"
    )]
    Ipv6Unavailable {
        /// The IPv6 address.
        address: String,
        /// The interface.
        ifname: String,
        /// The namespace.
        netns: String,
        /// Why, as far as the kernel tells.
        reason: String,
    },
    /// Addresses stayed tentative past the timeout.
    #[error("{ifname} in {netns} still has tentative addresses after {timeout:?}")]
    DadTimeout {
        /// The interface.
        ifname: String,
        /// The namespace.
        netns: String,
        /// How long we waited.
        timeout: Duration,
    },
    /// No free random veth name was found.
    #[error("create veth pair in {netns}: no free host-side name after {attempts} attempts")]
    VethNameExhausted {
        /// The namespace.
        netns: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The container-side veth name is already taken in the peer namespace.
    #[error("create veth pair in {netns}: container veth name {name} already exists")]
    VethPeerExists {
        /// The taken name.
        name: String,
        /// The namespace where the pair was created.
        netns: String,
    },
    /// Reading or writing a sysctl failed.
    #[error("{op} sysctl {key}: {source}")]
    Sysctl {
        /// `"read"` or `"write"`.
        op: &'static str,
        /// The key, slash separated.
        key: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The caller passed something that cannot be applied.
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A helper thread could not be started.
    #[error("{op}: spawn thread: {source}")]
    Thread {
        /// The operation.
        op: String,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// Creating a tun/tap device (`/dev/net/tun` ioctls, or `ip tuntap`
    /// under an SELinux context) failed.
    #[error("{op} in {netns}: {reason}")]
    Tun {
        /// The operation and the device.
        op: String,
        /// The namespace.
        netns: String,
        /// What failed.
        reason: String,
    },
    // ---- end of namespaces/netlink block ----
}

/// The kernel's codes above the C library's range (`include/linux/errno.h`:
/// never meant to reach user space, but some netlink paths return them).
const KERNEL_ERRNOS: [(i32, &str, &str); 19] = [
    (512, "ERESTARTSYS", "restart system call"),
    (513, "ERESTARTNOINTR", "restart system call"),
    (514, "ERESTARTNOHAND", "restart if no handler"),
    (515, "ENOIOCTLCMD", "no ioctl command"),
    (
        516,
        "ERESTART_RESTARTBLOCK",
        "restart by calling sys_restart_syscall",
    ),
    (517, "EPROBE_DEFER", "driver requests probe retry"),
    (518, "EOPENSTALE", "open found a stale dentry"),
    (519, "ENOPARAM", "parameter not supported"),
    (521, "EBADHANDLE", "illegal NFS file handle"),
    (522, "ENOTSYNC", "update synchronization mismatch"),
    (523, "EBADCOOKIE", "cookie is stale"),
    (524, "ENOTSUPP", "operation is not supported"),
    (525, "ETOOSMALL", "buffer or request is too small"),
    (526, "ESERVERFAULT", "an untranslatable error occurred"),
    (527, "EBADTYPE", "type not supported by server"),
    (
        528,
        "EJUKEBOX",
        "request initiated, but will not complete before timeout",
    ),
    (529, "EIOCBQUEUED", "iocb queued, will get completion event"),
    (530, "ERECALLCONFLICT", "conflict with recalled state"),
    (531, "ENOGRACE", "NFS file lock reclaim refused"),
];

/// An errno as a message: the C library's description for the codes it
/// knows (`File exists`), otherwise the number with the kernel's name for
/// it when it has one (`error 524 (ENOTSUPP: operation is not supported)`).
pub(crate) fn errno_text(errno: i32) -> String {
    let known = Errno::from_raw(errno);
    if known != Errno::UnknownErrno {
        return known.desc().to_string();
    }
    match KERNEL_ERRNOS.iter().find(|(n, _, _)| *n == errno) {
        Some((_, name, desc)) => format!("error {errno} ({name}: {desc})"),
        None => format!("unknown error {errno}"),
    }
}

fn fmt_ext(message: &Option<String>) -> String {
    match message {
        Some(m) if !m.is_empty() => format!(" ({m})"),
        _ => String::new(),
    }
}

impl Error {
    /// The errno behind this error, when there is one and the C library
    /// knows it (see [`Error::raw_errno`] for the others).
    pub fn errno(&self) -> Option<Errno> {
        self.raw_errno()
            .map(Errno::from_raw)
            .filter(|e| *e != Errno::UnknownErrno)
    }

    /// The errno behind this error as a number, when there is one,
    /// kernel-internal codes (`ENOTSUPP`, 524) included.
    pub fn raw_errno(&self) -> Option<i32> {
        match self {
            Error::Netlink { errno, .. } => Some(*errno),
            Error::Netns { errno, .. } => Some(*errno as i32),
            Error::Socket { source, .. }
            | Error::Sysctl { source, .. }
            | Error::Thread { source, .. } => source.raw_os_error(),
            Error::NetnsNotFound { .. } | Error::LinkNotFound { .. } => Some(libc::ENOENT),
            Error::Unsupported { .. } => Some(libc::EOPNOTSUPP),
            _ => None,
        }
    }

    /// True when the errno behind this error is `errno`.
    pub fn is_errno(&self, errno: Errno) -> bool {
        self.raw_errno() == Some(errno as i32)
    }

    /// True when the object the operation needed is missing: a link,
    /// address, route, neighbour, namespace or sysctl that does not exist.
    /// DEL paths treat this as success.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::NetnsNotFound { .. } | Error::LinkNotFound { .. } => true,
            Error::Sysctl { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::Netlink { errno, .. } => matches!(
                *errno,
                libc::ENODEV | libc::ENOENT | libc::ESRCH | libc::EADDRNOTAVAIL
            ),
            Error::Netns { errno, .. } => *errno == Errno::ENOENT,
            _ => false,
        }
    }

    /// True when the object the operation would create already exists.
    pub fn is_exists(&self) -> bool {
        matches!(self.errno(), Some(Errno::EEXIST)) || matches!(self, Error::VethPeerExists { .. })
    }

    /// True when the kernel lacks the requested feature: `EOPNOTSUPP`, or
    /// the kernel-internal `ENOTSUPP` (524) some netlink paths return.
    pub fn is_unsupported(&self) -> bool {
        /// `ENOTSUPP` (`include/linux/errno.h`): no C library name.
        const ENOTSUPP: i32 = 524;
        matches!(self, Error::Unsupported { .. })
            || matches!(self.errno(), Some(Errno::EOPNOTSUPP))
            || self.raw_errno() == Some(ENOTSUPP)
    }

    /// True when the network namespace opened is gone: its path does not
    /// exist, or its bind mount was removed and left a plain file. A DEL
    /// has nothing left to remove inside it (Go forgives only the first,
    /// `NSPathNotExistErr`).
    pub fn is_netns_gone(&self) -> bool {
        matches!(self, Error::NetnsNotFound { .. } | Error::NotANetns { .. })
    }
}
