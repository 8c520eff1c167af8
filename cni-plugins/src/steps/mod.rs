//! Steps the interface plugins (bridge, ptp, macvlan, ipvlan, host-device,
//! vlan, dummy, tap, vrf) share: IPAM delegation whose ADD is undone when
//! a later step fails ([`ipam`]), the pod interface ([`iface`]), CHECK's
//! comparisons of a previous result with the kernel ([`check`]), config
//! keys read alike ([`conf`]), the [`Undo`] list an ADD rolls back with,
//! running two steps at once ([`concurrently`]), the attachment a
//! pod's firewall rules are tagged with and its masquerade.

pub(crate) mod check;
pub(crate) mod conf;
pub(crate) mod iface;
pub(crate) mod ipam;
mod undo;

pub(crate) use undo::Undo;

use cni_exec::Request;
use cni_firewall::{AttachmentId, MasqueradeSpec, RuleSpec};
use cni_netns::IpNetwork;
use cni_types::CniResult;

use crate::{Error, Failures, Result};

/// The outcome of teardown steps that all ran (a DEL or GC that stopped at
/// its first failure would leak what the later steps clean up, e.g. an
/// address when a firewall step fails): every failure, in the order of
/// the steps ([`Failures`]: the first one's code, all of their texts); a
/// single failure as itself.
pub(crate) fn all_errors<E: From<Failures<E>>>(
    results: impl IntoIterator<Item = std::result::Result<(), E>>,
) -> std::result::Result<(), E> {
    Failures::collect(results, E::from)
}

/// Runs `background`, when there is one, on a thread of its own while
/// `foreground` runs on this one; both run to completion. A panic of the
/// background step is an error. Both steps' spans are children of the
/// caller's current span.
pub(crate) fn concurrently<A: Send, B>(
    background: Option<impl FnOnce() -> A + Send>,
    foreground: impl FnOnce() -> B,
) -> (Option<Result<A>>, B) {
    let parent = cni_types::trace::Parent::current();
    std::thread::scope(|s| {
        let background = background.map(|step| s.spawn(move || parent.run(step)));
        let foreground = foreground();
        let background = background.map(|b| b.join().map_err(|_| Error::StepPanicked));
        (background, foreground)
    })
}

/// The attachment of a request (network, container, interface): what its
/// firewall rules are tagged with.
pub(crate) fn attachment(req: &Request) -> AttachmentId {
    AttachmentId::new(
        req.config.name.clone(),
        req.container_id.clone(),
        req.ifname.clone(),
    )
}

/// GC's valid attachments (`cni.dev/attachments`) of the request's
/// network; `None` without the list, when nothing is known to be dead.
pub(crate) fn valid_attachments(req: &Request) -> Result<Option<Vec<AttachmentId>>> {
    let network = &req.config.name;
    Ok(req.config.valid_attachments()?.map(|valid| {
        valid
            .into_iter()
            .map(|a| AttachmentId::new(network.clone(), a.container_id, a.ifname))
            .collect()
    }))
}

/// A result's addresses (what a masquerade is keyed by).
pub(crate) fn addresses(result: &CniResult) -> Vec<IpNetwork> {
    result.ips.iter().map(|ip| ip.address).collect()
}

/// The masquerade of `id`'s `addresses` (none in a DEL that cannot read
/// them: the attachment's rules are then found by its tag).
pub(crate) fn masquerade(id: &AttachmentId, addresses: Vec<IpNetwork>) -> RuleSpec {
    RuleSpec::Masquerade(MasqueradeSpec {
        attachment: id.clone(),
        addresses,
    })
}
