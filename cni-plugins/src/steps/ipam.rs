//! Delegation to the IPAM plugin the config names (`ipam.type`), as Go's
//! `pkg/ipam` `ExecAdd`/`ExecDel`/`ExecCheck`; without an IPAM section DEL,
//! CHECK, STATUS and GC have nothing to delegate.

use cni_exec::{delegate_add, delegate_check, delegate_del, delegate_gc, delegate_status, Request};
use cni_types::CniResult;

use super::{concurrently, Undo};
use crate::{Error, Result};

/// A delegated plugin's failure, passed on as its own error reply.
pub(crate) fn delegate(e: cni_exec::Error) -> Error {
    Error::Delegate(e.into())
}

/// Go's `ipam.ExecAdd` and its deferred `ipam.ExecDel`: the DEL goes on
/// `undo`, then a result without addresses fails the ADD (Go's check).
pub(crate) fn add<'a, E>(req: &'a Request, undo: &mut Undo<'a, E>) -> Result<CniResult>
where
    E: From<Error> + std::fmt::Display,
{
    let added = traced(req, "ADD", || {
        delegate_add(req.config.ipam_type(), &req.stdin, req)
    });
    Ok(Allocation::new(req, added)?.undo_on(undo))
}

/// When an interface plugin's IPAM ADD runs relative to the making of the
/// pod link: decided once from the config, the one place the IPAM plugin's
/// name matters for the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IpamStart {
    /// No IPAM section: the link alone (layer 2), no addresses.
    Without,
    /// The IPAM plugin does not touch the pod link (host-local, static,
    /// ...): its ADD runs on a thread of its own while the link is made.
    ///
    /// Measured (BENCHMARKS.md, per-plugin figures, session 2): bridge ADD
    /// p50 is 3.2 ms with host-local as a process of its own (host-local
    /// ADD+DEL alone: 2.21 ms), the same within the noise as in-process,
    /// because the IPAM process runs while the veth is created; with IPAM
    /// started before the bridge and namespace work bridge ADD went from
    /// 4.2 to 3.3 ms.
    WhileLinking,
    /// The IPAM plugin uses the pod link ([`uses_pod_link`]: dhcp runs its
    /// client on it): its ADD runs once the link exists (Go's order for
    /// every IPAM plugin), and not at all when making the link fails.
    AfterLink,
}

impl IpamStart {
    /// The start the request's IPAM plugin needs.
    pub(crate) fn of(req: &Request) -> IpamStart {
        match req.config.ipam_type() {
            "" => IpamStart::Without,
            ipam if uses_pod_link(ipam) => IpamStart::AfterLink,
            _ => IpamStart::WhileLinking,
        }
    }

    /// Makes the pod link with `link` and runs the IPAM ADD in this order:
    /// both outcomes, the link's first. The [`Allocation`] (none without
    /// IPAM, or when the link failed before an [`IpamStart::AfterLink`]
    /// ADD) releases its addresses when dropped, until its caller hands
    /// it to an [`Undo`] with [`Allocation::undo_on`].
    pub(crate) fn run<'a, T, E>(
        self,
        req: &'a Request,
        link: impl FnOnce() -> std::result::Result<T, E>,
    ) -> (std::result::Result<T, E>, Result<Option<Allocation<'a>>>) {
        let adding = || {
            traced(req, "ADD", || {
                delegate_add(req.config.ipam_type(), &req.stdin, req)
            })
        };
        match self {
            IpamStart::Without => (link(), Ok(None)),
            IpamStart::AfterLink => {
                let linked = link();
                let allocated = match linked {
                    Ok(_) => Allocation::new(req, adding()).map(Some),
                    // Not asked: the link's error is the ADD's.
                    Err(_) => Ok(None),
                };
                (linked, allocated)
            }
            IpamStart::WhileLinking => {
                let (added, linked) = concurrently(Some(adding), link);
                let allocated = added.map(|added| added.and_then(|a| Allocation::new(req, a)));
                (linked, allocated.transpose())
            }
        }
    }
}

/// True for the IPAM plugins that use the pod interface itself, so that
/// their ADD runs once it exists and their DEL before it is deleted:
/// dhcp runs its client on that interface and sends its DHCPRELEASE from
/// the leased address on it.
pub(crate) fn uses_pod_link(ipam_type: &str) -> bool {
    ipam_type == "dhcp"
}

/// The addresses an IPAM ADD allocated, released (the IPAM DEL) when
/// dropped before [`Allocation::undo_on`] hands that DEL to the ADD's
/// [`Undo`].
#[derive(Debug)]
pub(crate) struct Allocation<'a> {
    req: &'a Request,
    /// `Some` until handed over.
    result: Option<CniResult>,
}

impl<'a> Allocation<'a> {
    /// The delegated ADD's outcome: an error is the delegate's; a result
    /// without addresses fails the ADD (Go's check) and is released.
    fn new(
        req: &'a Request,
        added: std::result::Result<CniResult, cni_exec::Error>,
    ) -> Result<Allocation<'a>> {
        let allocation = Allocation {
            req,
            result: Some(added.map_err(delegate)?),
        };
        if allocation.result.as_ref().is_some_and(|r| r.ips.is_empty()) {
            return Err(Error::IpamNoAddresses);
        }
        Ok(allocation)
    }

    /// Puts the IPAM DEL on `undo` (to run before the steps already on
    /// it: what was made before the addresses is taken back after their
    /// release) and returns the IPAM result.
    pub(crate) fn undo_on<E>(mut self, undo: &mut Undo<'a, E>) -> CniResult
    where
        E: From<Error> + std::fmt::Display,
    {
        let req = self.req;
        undo.push(move || del(req));
        self.result.take().unwrap_or_default()
    }
}

impl Drop for Allocation<'_> {
    fn drop(&mut self) {
        if self.result.is_some() {
            if let Err(e) = del(self.req) {
                tracing::warn!("undo ADD: IPAM DEL: {e}");
            }
        }
    }
}

/// Runs the IPAM plugin's `command` (`delegate`) inside an `ipam` span
/// (the plugin's type, the command), marked failed when it fails.
fn traced<T>(
    req: &Request,
    command: &'static str,
    delegate: impl FnOnce() -> std::result::Result<T, cni_exec::Error>,
) -> std::result::Result<T, cni_exec::Error> {
    let span = cni_types::step_span!(
        "ipam",
        "cni.ipam.type" = %req.config.ipam_type(),
        cni.command = command
    );
    cni_types::trace::in_step(span, delegate)
}

type Delegate = fn(&str, &[u8], &Request) -> std::result::Result<(), cni_exec::Error>;

fn call(req: &Request, name: &'static str, command: Delegate) -> Result<()> {
    match req.config.ipam_type() {
        "" => Ok(()),
        ipam => traced(req, name, || command(ipam, &req.stdin, req)).map_err(delegate),
    }
}

/// The IPAM plugin's DEL.
pub(crate) fn del(req: &Request) -> Result<()> {
    call(req, "DEL", delegate_del)
}

/// The IPAM plugin's CHECK.
pub(crate) fn check(req: &Request) -> Result<()> {
    call(req, "CHECK", delegate_check)
}

/// STATUS: an interface plugin is ready when its IPAM plugin is (the
/// reference's 1.1 plugins delegate the same way).
pub(crate) fn status(req: &Request) -> Result<()> {
    call(req, "STATUS", delegate_status)
}

/// GC: the pod links die with their pods, so the IPAM plugin's leases of
/// attachments not in the valid list are what is left to collect.
pub(crate) fn gc(req: &Request) -> Result<()> {
    call(req, "GC", delegate_gc)
}
