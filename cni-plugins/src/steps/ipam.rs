//! Delegation to the IPAM plugin the config names (`ipam.type`), as Go's
//! `pkg/ipam` `ExecAdd`/`ExecDel`/`ExecCheck`; without an IPAM section DEL,
//! CHECK, STATUS and GC have nothing to delegate.

use cni_exec::{delegate_add, delegate_check, delegate_del, delegate_gc, delegate_status, Request};
use cni_types::CniResult;

use super::{concurrently, fail, Undo};
use crate::{Error, Result};

/// A delegated plugin's failure, passed on as its own error reply.
pub(crate) fn delegate(e: cni_exec::Error) -> Error {
    Error::Delegate(e.into())
}

/// Go's `ipam.ExecAdd` and its deferred `ipam.ExecDel`: the DEL goes on
/// `undo`, then a result without addresses fails the ADD (Go's check).
pub(crate) fn add<'a>(req: &'a Request, undo: &mut Undo<'a>) -> Result<CniResult> {
    let added = delegate_add(req.config.ipam_type(), &req.stdin, req);
    allocated(req, undo, added)
}

/// [`add`] on a thread of its own while `work` runs, for an ADD whose
/// first steps do not need the addresses (bridge: the bridge, the pod's
/// namespace and the veth). No IPAM section: `work` alone, and `None`.
///
/// Measured (BENCHMARKS.md, per-plugin figures, session 2): bridge ADD p50
/// is 3.2 ms with host-local as a process of its own (host-local ADD+DEL
/// alone: 2.21 ms) and 3.3–3.6 ms with it in-process, the same within the
/// noise, because the IPAM process runs while the veth is created; with
/// IPAM started before the bridge and namespace work (and the
/// element-only masquerade) bridge ADD went from 4.2 to 3.3 ms.
///
/// An IPAM plugin that uses the pod's link ([`uses_pod_link`]) runs after
/// `work` has made it (Go's order for every IPAM plugin), and not at all
/// when `work` fails.
pub(crate) fn add_while<'a, T>(
    req: &'a Request,
    undo: &mut Undo<'a>,
    work: impl FnOnce() -> Result<T>,
) -> (Result<T>, Result<Option<CniResult>>) {
    let ipam = req.config.ipam_type();
    if uses_pod_link(ipam) {
        let worked = work();
        let added = match worked {
            Ok(_) => add(req, undo).map(Some),
            // Not asked: the work's error is the ADD's.
            Err(_) => Ok(None),
        };
        return (worked, added);
    }
    let adding = (!ipam.is_empty()).then_some(|| delegate_add(ipam, &req.stdin, req));
    let (added, worked) = concurrently(adding, work);
    let added = added.map(|a| a.and_then(|a| allocated(req, undo, a)));
    (worked, added.transpose())
}

/// True for the IPAM plugins that use the pod interface itself, so that
/// their ADD runs once it exists and their DEL before it is deleted:
/// dhcp runs its client on that interface and sends its DHCPRELEASE from
/// the leased address on it.
pub(crate) fn uses_pod_link(ipam_type: &str) -> bool {
    ipam_type == "dhcp"
}

fn allocated<'a>(
    req: &'a Request,
    undo: &mut Undo<'a>,
    added: std::result::Result<CniResult, cni_exec::Error>,
) -> Result<CniResult> {
    let result = added.map_err(delegate)?;
    undo.push(move || del(req).map_err(|e| format!("IPAM DEL: {e}")));
    if result.ips.is_empty() {
        return Err(fail("IPAM plugin returned missing IP config".into()));
    }
    Ok(result)
}

type Delegate = fn(&str, &[u8], &Request) -> std::result::Result<(), cni_exec::Error>;

fn call(req: &Request, command: Delegate) -> Result<()> {
    match req.config.ipam_type() {
        "" => Ok(()),
        ipam => command(ipam, &req.stdin, req).map_err(delegate),
    }
}

/// The IPAM plugin's DEL.
pub(crate) fn del(req: &Request) -> Result<()> {
    call(req, delegate_del)
}

/// The IPAM plugin's CHECK.
pub(crate) fn check(req: &Request) -> Result<()> {
    call(req, delegate_check)
}

/// STATUS: an interface plugin is ready when its IPAM plugin is (the
/// reference's 1.1 plugins delegate the same way).
pub(crate) fn status(req: &Request) -> Result<()> {
    call(req, delegate_status)
}

/// GC: the pod links die with their pods, so the IPAM plugin's leases of
/// attachments not in the valid list are what is left to collect.
pub(crate) fn gc(req: &Request) -> Result<()> {
    call(req, delegate_gc)
}
