//! The daemon's view of a pod: its interface, looked up inside its
//! namespace, and the client's sockets opened there.

use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

use cni_ipam::dhcp::client::{ClientLink, Sockets};
use cni_ipam::dhcp::socket::{bound_udp, PacketSocket};
use cni_netns::{Handle, Netns};

use super::error::{Error, Result};

/// How long ADD waits for the carrier of a link it brought up.
const CARRIER_WAIT: Duration = Duration::from_secs(1);

/// The pod interface's index and MAC, looked up inside the pod's
/// namespace; `set_up` brings a down link up (as Go does before DORA).
pub(crate) fn pod_link(ns: &Netns, ifname: &str, set_up: bool) -> Result<ClientLink> {
    let handle = Handle::in_netns(ns)?;
    let link = handle.link_by_name(ifname)?;
    let mac = link.mac.ok_or_else(|| Error::LinkWithoutMac {
        ifname: ifname.to_owned(),
        netns: ns.path().to_owned(),
    })?;
    if set_up {
        if !link.is_up() {
            handle.set_up(link.index)?;
        }
        // A DISCOVER sent before the carrier is up is lost and costs a
        // whole retry period: give the link a moment (a veth whose peer is
        // down stays lower-layer-down: then go on and let retries work, so
        // the state after the wait is not checked).
        handle.wait_oper_up(link.index, CARRIER_WAIT)?;
    }
    Ok(ClientLink {
        ifindex: link.index,
        mac: mac.0,
    })
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
