//! The pod's interface: the link a plugin makes or finds, an IPAM result
//! put on it (Go's `ipam.ConfigureIface`), its entry in the result, and
//! its removal when the namespace may already be gone.

use cni_exec::Request;
use cni_netns::kernel::{NetKernel, NetnsHandle};
use cni_netns::{configure_interface_with, Dad, Ipv4Conf, Link};
use cni_types::{CniResult, Interface};

use super::{all_errors, concurrently, ipam};
use crate::{Error, Failures, Result};

/// A result interface for `link` (`sandbox` empty on the node).
pub(crate) fn interface(link: &Link, sandbox: &str) -> Interface {
    Interface {
        name: link.name.clone(),
        mac: link.mac.map(|m| m.to_string()).unwrap_or_default(),
        sandbox: sandbox.to_owned(),
        ..Default::default()
    }
}

/// Go's `ipam.ConfigureIface` for a result whose addresses all belong to
/// `ifname`: addresses, up, routes (a route's gateway defaults to its
/// family's first gateway).
pub(crate) fn configure(pod: &impl NetnsHandle, ifname: &str, result: &CniResult) -> Result<()> {
    configure_with(pod, ifname, result, Dad::Kernel)
}

/// [`configure`] with the interface's IPv6 DAD `dad`
/// ([`cni_netns::configure_interface_with`]).
pub(crate) fn configure_with(
    pod: &impl NetnsHandle,
    ifname: &str,
    result: &CniResult,
    dad: Dad,
) -> Result<()> {
    let addresses: Vec<_> = result
        .ips
        .iter()
        .map(|ip| (ip.address, ip.gateway))
        .collect();
    let routes: Vec<_> = result
        .routes
        .iter()
        .map(|r| cni_netns::KernelRoute {
            gateway: r.gw,
            priority: r.priority,
            table: r.table,
            scope: r.scope.and_then(|s| u8::try_from(s).ok()),
            ..cni_netns::KernelRoute::new(r.dst)
        })
        .collect();
    configure_interface_with(pod, ifname, &addresses, &routes, dad)?;
    Ok(())
}

/// macvlan's and ipvlan's pod side: announce the new address (ARP and
/// unsolicited neighbour advertisements; either may be missing, as Go
/// ignores), then [`configure_with`] with `dad`.
pub(crate) fn configure_announced(
    pod: &impl NetnsHandle,
    ifname: &str,
    result: &CniResult,
    dad: Dad,
) -> Result<()> {
    if let Ok(link) = pod.link_by_name(ifname) {
        let _ = pod.set_ipv4_conf(link.index, &[(Ipv4Conf::ArpNotify, 1)]);
    }
    let _ = pod.sysctl_set(&format!("net/ipv6/conf/{ifname}/ndisc_notify"), "1");
    configure_with(pod, ifname, result, dad)
}

/// A temporary link name (`veth` + 8 hex digits, as Go's
/// `ip.RandomVethName`): a link created straight into the pod may clash
/// with a host link of the final name, so it is renamed once inside.
fn temp_link_name() -> String {
    format!("veth{:08x}", cni_types::random::random_u32())
}

/// A link stacked on a master (macvlan, ipvlan, vlan; tap reuses it for
/// the rename), created under a temporary name
/// ([`temp_link_name`]) by `create(creator, name, target)`: from the host
/// straight into the pod (`target` is the pod's namespace), or, with
/// `linkInContainer`, inside the pod next to its master; then renamed to
/// `ifname` inside the pod. A failed rename deletes the link.
pub(crate) fn create_stacked_link<H: NetnsHandle>(
    link_in_container: bool,
    host: &H,
    netns: &H::Netns,
    pod: &H,
    ifname: &str,
    create: impl FnOnce(&H, String, Option<&H::Netns>) -> cni_netns::Result<()>,
) -> Result<Link> {
    let tmp = temp_link_name();
    let (creator, target) = if link_in_container {
        (pod, None)
    } else {
        (host, Some(netns))
    };
    create(creator, tmp.clone(), target)?;
    let link = pod.link_by_name(&tmp)?;
    let renamed = pod
        .rename(link.index, ifname)
        .and_then(|()| pod.link_by_index(link.index));
    if renamed.is_err() {
        let _ = pod.delete_link(link.index);
    }
    Ok(renamed?)
}

/// Sets the IPAM result's addresses on the pod's only interface (index
/// 0) and names that interface, as Go's single-interface plugins do.
pub(crate) fn single_interface_result(ipam: CniResult, link: &Link, sandbox: &str) -> CniResult {
    let mut result = ipam;
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    result.interfaces = vec![interface(link, sandbox)];
    result
}

/// The master link: named in the config, else the device of the default
/// route; looked up in the pod's namespace with `linkInContainer`.
pub(crate) fn find_master<H: NetnsHandle>(
    master: &str,
    in_container: bool,
    host: &H,
    pod: &H,
) -> Result<Link> {
    let ns = if in_container { pod } else { host };
    if master.is_empty() {
        return ns.default_route_link()?.ok_or(Error::NoDefaultRouteLink);
    }
    ns.link_by_name(master).map_err(|e| {
        if e.is_not_found() {
            Error::MasterNotFound {
                master: master.to_owned(),
            }
        } else {
            e.into()
        }
    })
}

/// The pod's namespace for DEL: `None` when `CNI_NETNS` is empty or the
/// namespace is gone (nothing to remove inside it).
pub(crate) fn pod_for_del_in<K: NetKernel>(kernel: &K, req: &Request) -> Result<Option<K::Handle>> {
    if req.netns.is_empty() {
        return Ok(None);
    }
    match kernel.open(&req.netns) {
        Ok(pod) => Ok(Some(pod)),
        Err(e) if e.is_netns_gone() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// DEL of a plugin whose state is the pod link and the IPAM lease alone
/// (macvlan, ipvlan, vlan, dummy, tap).
pub(crate) fn del_link_and_lease_in(kernel: &impl NetKernel, req: &Request) -> Result<()> {
    let pod = pod_for_del_in(kernel, req)?;
    delete_pod_link_while(pod.as_ref(), req, || ipam::del(req))
}

/// Deletes the request's pod interface (a missing link is not an error)
/// while `release` runs: deleting a link takes the kernel 10-30 ms (RCU
/// grace periods), enough for the IPAM plugin's process and the firewall.
/// Both run to completion; both failures are reported, the link's first
/// ([`super::all_errors`]). When the IPAM plugin uses the link
/// ([`ipam::uses_pod_link`]: dhcp releases from the leased address on
/// it), `release` runs first and the link is deleted after it.
pub(crate) fn delete_pod_link_while<E>(
    pod: Option<&impl NetnsHandle>,
    req: &Request,
    release: impl FnOnce() -> std::result::Result<(), E>,
) -> std::result::Result<(), E>
where
    E: From<Error> + From<cni_netns::Error> + From<Failures<E>>,
{
    let ifname = &req.ifname;
    let deleting = pod.map(|pod| move || pod.delete_link_by_name(ifname).map(drop));
    if ipam::uses_pod_link(req.config.ipam_type()) {
        let released = release();
        let deleted = deleting.map_or(Ok(()), |delete| delete().map_err(E::from));
        return all_errors([deleted, released]);
    }
    let (deleted, released) = concurrently(deleting, release);
    let deleted = match deleted {
        Some(Ok(deleted)) => deleted.map_err(E::from),
        Some(Err(panicked)) => Err(E::from(panicked)),
        None => Ok(()),
    };
    all_errors([deleted, released])
}
