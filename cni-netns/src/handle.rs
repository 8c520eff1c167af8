//! [`Handle`]: one rtnetlink socket bound to one network namespace.

use std::fmt;

use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use crate::error::{Error, Result};
use crate::netlink::{NlError, Socket};
use crate::netns::Netns;

/// An rtnetlink socket inside one network namespace, usable from any thread.
///
/// The socket is opened on a short-lived thread that entered the namespace
/// (sockets stay bound to the namespace they were created in), so the
/// calling thread never changes namespace. All verbs (links, addresses,
/// routes, neighbours) are methods on this type.
pub struct Handle {
    sock: Socket,
    netns: Netns,
    name: String,
    sysctl_roots: crate::sysctl::Roots,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle").field("netns", &self.name).finish()
    }
}

impl Handle {
    /// A handle on the calling thread's namespace.
    pub fn current() -> Result<Handle> {
        let netns = Netns::current()?;
        let sock = Socket::open();
        Handle::with_socket(netns, sock)
    }

    /// A handle on `netns`, opened from a fresh thread inside it.
    pub fn in_netns(netns: &Netns) -> Result<Handle> {
        let sock = netns.run(Socket::open)?;
        Handle::with_socket(netns.try_clone()?, sock)
    }

    /// The handle on `netns` over `sock`, a socket opened inside it.
    fn with_socket(netns: Netns, sock: std::io::Result<Socket>) -> Result<Handle> {
        let name = netns.path().display().to_string();
        let sock = sock.map_err(|source| Error::Socket {
            op: "open rtnetlink socket".into(),
            netns: name.clone(),
            source,
        })?;
        Ok(Handle {
            sock,
            netns,
            name,
            sysctl_roots: Default::default(),
        })
    }

    /// The namespace this handle works in.
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// The namespace's path, as used in error messages.
    pub fn netns_name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a thread inside this handle's namespace: the calling
    /// thread when it already is there, a fresh thread otherwise (see
    /// [`Netns::run`]). Use it for [`crate::sysctl`] calls.
    pub fn run<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        if self.netns.is_current()? {
            Ok(f())
        } else {
            self.netns.run(f)
        }
    }

    /// [`crate::sysctl::set`] in this handle's namespace: writes `value`
    /// unless the sysctl already holds it; returns whether it wrote.
    ///
    /// The handle keeps `/proc/sys/net/ipv4` and `/proc/sys/net/ipv6` open
    /// after their first use and opens what is below them relative to
    /// them: the kernel's lookup of those two directories walks one entry
    /// per network namespace on the node (1000 pods, 1000 entries), and a
    /// plugin sets several sysctls of one family. Keys are slash separated
    /// or dotted, as in [`crate::sysctl`].
    pub fn sysctl_set(&self, key: &str, value: &str) -> Result<bool> {
        let span = cni_types::step_span!("sysctl.write", sysctl.key = %key);
        cni_types::trace::in_step(span, || {
            self.run(|| crate::sysctl::set_with(&self.sysctl_roots, key, value))?
        })
    }

    /// [`crate::sysctl::write`] in this handle's namespace: writes `value`
    /// even when the sysctl already holds it, through the directories
    /// [`Handle::sysctl_set`] keeps open.
    pub fn sysctl_write(&self, key: &str, value: &str) -> Result<()> {
        let span = cni_types::step_span!("sysctl.write", sysctl.key = %key);
        cni_types::trace::in_step(span, || {
            self.run(|| crate::sysctl::write_with(&self.sysctl_roots, key, value))?
        })
    }

    /// [`crate::sysctl::set_in`] in this handle's namespace, through the
    /// directories [`Handle::sysctl_set`] keeps open: a result per entry.
    pub fn sysctl_set_in(&self, dir: &str, entries: &[(&str, &str)]) -> Result<Vec<Result<bool>>> {
        let span =
            cni_types::step_span!("sysctl.write", sysctl.key = %dir, sysctl.count = entries.len());
        cni_types::trace::in_step(span, || {
            self.run(|| crate::sysctl::set_in_with(&self.sysctl_roots, dir, entries))
        })
    }

    pub(crate) fn request(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
        op: impl FnOnce() -> String,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.sock.request(msg, flags).map_err(|e| self.error(e, op))
    }

    /// A request of a type the route crate does not know (see
    /// `Socket::request_raw`); the caller names the error.
    pub(crate) fn request_raw(
        &self,
        msg_type: u16,
        payload: &[u8],
    ) -> std::result::Result<Vec<(u16, Vec<u8>)>, NlError> {
        self.sock.request_raw(msg_type, 0, payload)
    }

    pub(crate) fn dump(
        &self,
        msg: RouteNetlinkMessage,
        op: impl FnOnce() -> String,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.sock.dump(msg).map_err(|e| self.error(e, op))
    }

    pub(crate) fn error(&self, e: NlError, op: impl FnOnce() -> String) -> Error {
        let op = op();
        let netns = self.name.clone();
        match e {
            NlError::Kernel { errno, message } => Error::Netlink {
                op,
                netns,
                errno,
                message,
            },
            NlError::Io(source) => Error::Socket { op, netns, source },
            NlError::Decode(detail) => Error::Protocol { op, netns, detail },
            NlError::Interrupted(attempts) => Error::DumpInterrupted {
                op,
                netns,
                attempts,
            },
            NlError::Timeout(timeout) => Error::NetlinkTimeout { op, netns, timeout },
        }
    }

    pub(crate) fn protocol_error(&self, op: String, detail: &str) -> Error {
        Error::Protocol {
            op,
            netns: self.name.clone(),
            detail: detail.into(),
        }
    }

    pub(crate) fn unsupported(&self, op: String, feature: &'static str, e: Error) -> Error {
        match e {
            Error::Netlink { errno, message, .. } if errno == Errno::EOPNOTSUPP as i32 => {
                Error::Unsupported {
                    op,
                    feature,
                    netns: self.name.clone(),
                    message,
                }
            }
            other => other,
        }
    }
}
