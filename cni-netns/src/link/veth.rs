//! veth pairs: created with the peer directly in the pod's namespace, as
//! Go's `SetupVeth`, under a random host-side name.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use std::os::fd::AsRawFd;

use super::{Link, MacAddr};
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::netns::Netns;

/// How many random host-side veth names are tried, as Go's `SetupVeth`.
pub const VETH_NAME_ATTEMPTS: u32 = 10;

/// A veth pair to create with [`Handle::add_veth`].
///
/// `N` is what names the target namespace: a [`Netns`] for [`Handle`];
/// another [`NetnsHandle`](crate::kernel::NetnsHandle) has its own.
#[derive(Debug)]
pub struct VethSpec<'a, N = Netns> {
    /// Name of the end created in the handle's namespace.
    pub name: String,
    /// Name of the peer end.
    pub peer_name: String,
    /// Namespace the peer is created in directly (by fd); `None` keeps it
    /// next to the first end.
    pub peer_netns: Option<&'a N>,
    /// MTU for both ends.
    pub mtu: Option<u32>,
    /// MAC of the first end.
    pub mac: Option<MacAddr>,
    /// MAC of the peer end (the container side, in CNI terms).
    pub peer_mac: Option<MacAddr>,
    /// Create the first end administratively up.
    pub up: bool,
    /// Enslave the first end to this bridge at creation (`IFLA_MASTER`).
    pub master: Option<u32>,
}

impl<N> Clone for VethSpec<'_, N> {
    fn clone(&self) -> Self {
        VethSpec {
            name: self.name.clone(),
            peer_name: self.peer_name.clone(),
            peer_netns: self.peer_netns,
            mtu: self.mtu,
            mac: self.mac,
            peer_mac: self.peer_mac,
            up: self.up,
            master: self.master,
        }
    }
}

impl<'a, N> VethSpec<'a, N> {
    /// The spec of Go's `ip.SetupVeth` ([`Handle::setup_veth`]): the peer
    /// `peer_name` created directly in `peer_netns`, the end here up.
    pub fn setup(
        peer_name: &str,
        peer_netns: &'a N,
        mtu: Option<u32>,
        peer_mac: Option<MacAddr>,
    ) -> Self {
        VethSpec {
            peer_name: peer_name.to_owned(),
            peer_netns: Some(peer_netns),
            mtu,
            peer_mac,
            up: true,
            ..Default::default()
        }
    }
}

impl<N> Default for VethSpec<'_, N> {
    fn default() -> Self {
        VethSpec {
            name: Default::default(),
            peer_name: Default::default(),
            peer_netns: None,
            mtu: Default::default(),
            mac: Default::default(),
            peer_mac: Default::default(),
            up: Default::default(),
            master: Default::default(),
        }
    }
}

pub(crate) fn veth_message(spec: &VethSpec<'_>) -> LinkMessage {
    let mut peer = LinkMessage::default();
    peer.attributes
        .push(LinkAttribute::IfName(spec.peer_name.clone()));
    if let Some(mtu) = spec.mtu {
        peer.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(mac) = spec.peer_mac {
        peer.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
    }
    if let Some(ns) = spec.peer_netns {
        peer.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
    }
    // No IFF_UP on the peer: veth_newlink opens the peer before the first
    // end is registered and veth_open then fails with ENOTCONN.
    let mut m = LinkMessage::default();
    if spec.up {
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
    }
    if let Some(master) = spec.master {
        m.attributes.push(LinkAttribute::Controller(master));
    }
    m.attributes.push(LinkAttribute::IfName(spec.name.clone()));
    if let Some(mtu) = spec.mtu {
        m.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(mac) = spec.mac {
        m.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
    }
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
    ]));
    m
}

fn random_veth_name() -> String {
    format!("veth{:08x}", crate::random_u32())
}

impl Handle {
    /// Creates a veth pair and returns the first end. With `peer_netns` the
    /// peer is created directly in that namespace (`IFLA_NET_NS_FD`), never
    /// passing through this one.
    pub fn add_veth(&self, spec: &VethSpec<'_>) -> Result<Link> {
        let op = || {
            let peer_ns = spec
                .peer_netns
                .map(|n| format!(" in {}", n.path().display()))
                .unwrap_or_default();
            format!(
                "add veth {} with peer {}{peer_ns}",
                spec.name, spec.peer_name
            )
        };
        // No NLM_F_ECHO: the echo reflects the link before IFLA_MASTER is
        // applied, and with a peer created up in another namespace the
        // kernel fails the whole request with ENOTCONN (kernel 6.18).
        self.request(
            RouteNetlinkMessage::NewLink(veth_message(spec)),
            NLM_F_CREATE | NLM_F_EXCL,
            op,
        )?;
        self.link_by_name(&spec.name)
    }

    /// Go's `ip.SetupVeth`: creates a veth whose host end, in this
    /// namespace, is named `veth` + 8 random hex digits (retried on a name
    /// collision up to [`VETH_NAME_ATTEMPTS`] times) and whose peer
    /// `peer_name` is created directly in `peer_netns`; the host end is up
    /// and has `accept_ra=0`. Returns the host end ([`Link::parent_index`] is the peer's index).
    pub fn setup_veth(
        &self,
        peer_name: &str,
        peer_netns: &Netns,
        mtu: Option<u32>,
        peer_mac: Option<MacAddr>,
    ) -> Result<Link> {
        self.setup_veth_with(&VethSpec::setup(peer_name, peer_netns, mtu, peer_mac))
    }

    /// [`Handle::setup_veth`] with every [`VethSpec`] option (e.g. `master`
    /// and `up` to do the host side's link work in one request); the
    /// spec's `name` is ignored and replaced by a random `veth%08x`.
    pub fn setup_veth_with(&self, spec: &VethSpec<'_>) -> Result<Link> {
        let span =
            cni_types::step_span!("link.create", link.kind = "veth", link.name = %spec.peer_name);
        cni_types::trace::in_step(span, || {
            let peer_name = spec.peer_name.as_str();
            for _ in 0..VETH_NAME_ATTEMPTS {
                let name = random_veth_name();
                let spec = VethSpec {
                    name: name.clone(),
                    ..spec.clone()
                };
                match self.add_veth(&spec) {
                    Ok(link) => {
                        // Go's SetupVethWithName: "we want to own the routes for
                        // this interface"; like Go, a failure here is ignored.
                        // Through the handle's open `/proc/sys/net/ipv6` (see
                        // `Handle::sysctl_set`).
                        let dir = format!("net/ipv6/conf/{}", link.name);
                        match self.sysctl_set_in(&dir, &[("accept_ra", "0")]) {
                            Ok(r) => {
                                for e in r.into_iter().filter_map(|r| r.err()) {
                                    tracing::debug!("{e}");
                                }
                            }
                            Err(e) => tracing::debug!("{e}"),
                        }
                        return Ok(link);
                    }
                    Err(e) if e.is_exists() => match self.link_by_name(&name) {
                        Ok(_) => continue,
                        Err(le) if le.is_not_found() => {
                            return Err(Error::VethPeerExists {
                                name: peer_name.to_owned(),
                                netns: self.netns_name().to_owned(),
                            })
                        }
                        Err(le) => return Err(le),
                    },
                    Err(e) => return Err(e),
                }
            }
            Err(Error::VethNameExhausted {
                netns: self.netns_name().to_owned(),
                attempts: VETH_NAME_ATTEMPTS,
            })
        })
    }
}
