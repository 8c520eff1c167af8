//! The daemon's view of a pod: its interface, looked up inside its
//! namespace, and the client's sockets opened there.

use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

use cni_ipam::dhcp::client::{ClientLink, Sockets};
use cni_ipam::dhcp::socket::{bound_udp, PacketSocket};
use cni_netns::kernel::NetnsHandle;
use cni_netns::{AddressFamilyFilter, IpNetwork, Link};
use cni_netns::{Handle, Netns};

use super::error::{Error, Result};

/// How long ADD waits for the carrier of a link it brought up.
const CARRIER_WAIT: Duration = Duration::from_secs(1);

/// The pod interface as ADD's link step left it: what the DHCP client
/// needs of it, and whether the step brought it up (so that a failed ADD
/// puts it down again, [`PodLink::undo`]).
#[derive(Debug, Clone, Copy)]
pub struct PodLink {
    /// The interface's index and MAC.
    pub link: ClientLink,
    /// ADD brought it up (it was down).
    pub brought_up: bool,
}

impl PodLink {
    /// Undoes ADD's link step: the interface goes down again when ADD
    /// brought it up (failures are logged: the main plugin's rollback
    /// usually removes the interface anyway).
    pub fn undo<H: NetnsHandle>(&self, handle: &H) {
        if self.brought_up {
            if let Err(e) = handle.set_down(self.link.ifindex) {
                tracing::warn!("rollback: set link #{} down: {e}", self.link.ifindex);
            }
        }
    }
}

/// The pod interface's index and MAC, looked up through `handle` (in the
/// pod's namespace): what DEL, GC and the renewals need.
pub fn find_link<H: NetnsHandle>(handle: &H, ifname: &str) -> Result<ClientLink> {
    let link = handle.link_by_name(ifname)?;
    client_link(handle, &link, ifname)
}

fn client_link<H: NetnsHandle>(handle: &H, link: &Link, ifname: &str) -> Result<ClientLink> {
    let mac = link.mac.ok_or_else(|| Error::LinkWithoutMac {
        ifname: ifname.to_owned(),
        netns: handle.netns_name().into(),
    })?;
    Ok(ClientLink {
        ifindex: link.index,
        mac: mac.0,
    })
}

/// ADD's link step: [`find_link`], and a down link brought up (as Go does
/// before DORA), with a moment for its carrier. When the wait fails the
/// link goes down again (the step leaves nothing).
pub fn prepare_link<H: NetnsHandle>(handle: &H, ifname: &str) -> Result<PodLink> {
    let found = handle.link_by_name(ifname)?;
    let prepared = PodLink {
        link: client_link(handle, &found, ifname)?,
        brought_up: !found.is_up(),
    };
    if prepared.brought_up {
        handle.set_up(found.index)?;
    }
    // A DISCOVER sent before the carrier is up is lost and costs a whole
    // retry period: give the link a moment (a veth whose peer is down
    // stays lower-layer-down: then go on and let retries work, so the
    // state after the wait is not checked).
    if let Err(e) = handle.wait_oper_up(found.index, CARRIER_WAIT) {
        prepared.undo(handle);
        return Err(e.into());
    }
    Ok(prepared)
}

/// Whether `address` is on the pod interface `ifname` (CHECK).
pub fn holds_address<H: NetnsHandle>(handle: &H, ifname: &str, address: Ipv4Addr) -> Result<bool> {
    let link = handle.link_by_name(ifname)?;
    Ok(handle
        .addresses(Some(link.index), AddressFamilyFilter::V4)?
        .iter()
        .any(|a| matches!(a.address, IpNetwork::V4(n) if n.ip() == address)))
}

/// [`find_link`] in the namespace `ns`.
pub(crate) fn pod_link(ns: &Netns, ifname: &str) -> Result<ClientLink> {
    find_link(&Handle::in_netns(ns)?, ifname)
}

/// Opens the client's sockets in the pod's namespace, through the handle
/// the daemon keeps open for the lease's life (so that DEL and GC still
/// reach the pod after the runtime removed its namespace's path).
pub(crate) struct PodSockets<'a> {
    netns: &'a Netns,
    link: ClientLink,
}

impl<'a> PodSockets<'a> {
    pub(crate) fn new(netns: &'a Netns, link: ClientLink) -> PodSockets<'a> {
        PodSockets { netns, link }
    }

    fn in_pod<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        self.netns.run(f).map_err(io::Error::other)?
    }
}

impl Sockets for PodSockets<'_> {
    fn packet(&self, xid: u32) -> io::Result<PacketSocket> {
        self.in_pod(|| PacketSocket::open(self.link.ifindex, xid, self.link.mac))
    }

    fn udp(&self, addr: Ipv4Addr) -> io::Result<UdpSocket> {
        self.in_pod(|| bound_udp(addr))
    }
}
