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
        let name = netns.path().display().to_string();
        let sock = Socket::open().map_err(|source| Error::Socket {
            op: "open rtnetlink socket".into(),
            netns: name.clone(),
            source,
        })?;
        Ok(Handle { sock, netns, name })
    }

    /// A handle on `netns`, opened from a fresh thread inside it.
    pub fn in_netns(netns: &Netns) -> Result<Handle> {
        let name = netns.path().display().to_string();
        let sock = netns.run(Socket::open)?.map_err(|source| Error::Socket {
            op: "open rtnetlink socket".into(),
            netns: name.clone(),
            source,
        })?;
        Ok(Handle {
            sock,
            netns: netns.try_clone()?,
            name,
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

    pub(crate) fn request(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
        op: impl FnOnce() -> String,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.sock.request(msg, flags).map_err(|e| self.error(e, op))
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
            Error::Netlink {
                errno: Errno::EOPNOTSUPP,
                message,
                ..
            } => Error::Unsupported {
                op,
                feature,
                netns: self.name.clone(),
                message,
            },
            other => other,
        }
    }
}
