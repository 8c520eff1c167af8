//! Links: lookup, veth pairs, bridges, bridge ports and VLANs, and the
//! per-link settings (up/down, MTU, MAC, promisc, name, namespace).

use std::fmt;
use std::str::FromStr;

use netlink_packet_core::{DefaultNla, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfo, BridgeVlanInfoFlags, InfoBridge, InfoData, InfoKind,
    InfoMacVlan, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, LinkProtoInfoBridge,
    MacVlanMode,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::os::fd::AsRawFd;

use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::netns::Netns;

// linux/if_link.h: IFLA_BRPORT_*
const IFLA_BRPORT_MODE: u16 = 4;
const IFLA_BRPORT_LEARNING: u16 = 8;
const IFLA_BRPORT_ISOLATED: u16 = 33;

/// How many random host-side veth names are tried, as Go's `SetupVeth`.
pub const VETH_NAME_ATTEMPTS: u32 = 10;

/// An Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<MacAddr> {
        let bad = || Error::InvalidArgument {
            op: format!("parse MAC address {s:?}"),
            reason: "expected six hex octets separated by ':' or '-'".into(),
        };
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in &mut out {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

/// RFC 2863 operational state of a link (`IFLA_OPERSTATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OperState {
    /// `IF_OPER_UNKNOWN` (e.g. loopback, or a driver that does not report).
    Unknown,
    /// `IF_OPER_NOTPRESENT`.
    NotPresent,
    /// `IF_OPER_DOWN`.
    Down,
    /// `IF_OPER_LOWERLAYERDOWN` (e.g. a veth whose peer is down).
    LowerLayerDown,
    /// `IF_OPER_TESTING`.
    Testing,
    /// `IF_OPER_DORMANT`.
    Dormant,
    /// `IF_OPER_UP`.
    Up,
}

impl From<u8> for OperState {
    fn from(v: u8) -> Self {
        match v {
            1 => OperState::NotPresent,
            2 => OperState::Down,
            3 => OperState::LowerLayerDown,
            4 => OperState::Testing,
            5 => OperState::Dormant,
            6 => OperState::Up,
            _ => OperState::Unknown,
        }
    }
}

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// `IFLA_INFO_KIND` (`"veth"`, `"bridge"`, ...); `None` for plain devices.
    pub kind: Option<String>,
    /// MTU.
    pub mtu: u32,
    /// Hardware address, when the link has a 6-byte one.
    pub mac: Option<MacAddr>,
    /// Index of the master (bridge) device.
    pub master: Option<u32>,
    /// Operational state.
    pub oper_state: OperState,
    /// `IFF_*` flags (see [`Link::is_up`], [`Link::is_promisc`]).
    pub flags: u32,
    /// `IFLA_LINK`: for a veth, the peer's index (in the peer's namespace).
    pub parent_index: Option<u32>,
    /// `IFLA_LINK_NETNSID`: set when `parent_index` lives in another namespace.
    pub link_netnsid: Option<i32>,
    /// For a bridge: whether VLAN filtering is on.
    pub vlan_filtering: Option<bool>,
}

impl Link {
    /// `IFF_UP` is set.
    pub fn is_up(&self) -> bool {
        self.flags & libc::IFF_UP as u32 != 0
    }

    /// `IFF_PROMISC` is set.
    pub fn is_promisc(&self) -> bool {
        self.flags & libc::IFF_PROMISC as u32 != 0
    }

    /// `IFF_ALLMULTI` is set.
    pub fn is_allmulti(&self) -> bool {
        self.flags & libc::IFF_ALLMULTI as u32 != 0
    }

    pub(crate) fn from_message(msg: &LinkMessage) -> Link {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            mtu: 0,
            mac: None,
            master: None,
            oper_state: OperState::Unknown,
            flags: msg.header.flags.bits(),
            parent_index: None,
            link_netnsid: None,
            vlan_filtering: None,
        };
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Mtu(m) => link.mtu = *m,
                LinkAttribute::Address(a) => {
                    if let Ok(b) = <[u8; 6]>::try_from(a.as_slice()) {
                        link.mac = Some(MacAddr(b));
                    }
                }
                LinkAttribute::Controller(m) if *m != 0 => link.master = Some(*m),
                LinkAttribute::OperState(s) => link.oper_state = OperState::from(u8::from(*s)),
                LinkAttribute::Link(l) if *l != 0 => link.parent_index = Some(*l),
                LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(*id),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Kind(k) => link.kind = Some(k.to_string()),
                            LinkInfo::Data(InfoData::Bridge(opts)) => {
                                for o in opts {
                                    if let InfoBridge::VlanFiltering(v) = o {
                                        link.vlan_filtering = Some(*v);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }
}

/// A veth pair to create with [`Handle::add_veth`].
#[derive(Debug, Clone, Default)]
pub struct VethSpec<'a> {
    /// Name of the end created in the handle's namespace.
    pub name: String,
    /// Name of the peer end.
    pub peer_name: String,
    /// Namespace the peer is created in directly (by fd); `None` keeps it
    /// next to the first end.
    pub peer_netns: Option<&'a Netns>,
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

/// macvlan modes (`MACVLAN_MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MacvlanMode {
    /// No traffic between macvlans of the same parent.
    Private,
    /// Traffic between macvlans goes through the external switch.
    Vepa,
    /// Macvlans of the same parent talk directly (the CNI default).
    #[default]
    Bridge,
    /// One macvlan takes over the parent.
    Passthru,
}

impl FromStr for MacvlanMode {
    type Err = Error;
    /// Parses the macvlan plugin's `mode` (`""` means bridge, as in Go).
    fn from_str(s: &str) -> Result<MacvlanMode> {
        match s {
            "" | "bridge" => Ok(MacvlanMode::Bridge),
            "private" => Ok(MacvlanMode::Private),
            "vepa" => Ok(MacvlanMode::Vepa),
            "passthru" => Ok(MacvlanMode::Passthru),
            other => Err(Error::InvalidArgument {
                op: "parse macvlan mode".into(),
                reason: format!("unknown mode {other:?}"),
            }),
        }
    }
}

/// A macvlan to create with [`Handle::add_macvlan`].
#[derive(Debug, Clone, Default)]
pub struct MacvlanSpec<'a> {
    /// Name of the new link.
    pub name: String,
    /// Index of the parent (master) link, in the handle's namespace.
    pub parent: u32,
    /// Mode.
    pub mode: MacvlanMode,
    /// MTU.
    pub mtu: Option<u32>,
    /// MAC address.
    pub mac: Option<MacAddr>,
    /// Namespace the link is created in directly (by fd); `None` keeps it
    /// in the handle's namespace.
    pub netns: Option<&'a Netns>,
}

pub(crate) fn macvlan_message(spec: &MacvlanSpec<'_>) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(spec.name.clone()));
    m.attributes.push(LinkAttribute::Link(spec.parent));
    if let Some(mtu) = spec.mtu {
        m.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(mac) = spec.mac {
        m.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
    }
    if let Some(ns) = spec.netns {
        m.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
    }
    let mode = match spec.mode {
        MacvlanMode::Private => MacVlanMode::Private,
        MacvlanMode::Vepa => MacVlanMode::Vepa,
        MacvlanMode::Bridge => MacVlanMode::Bridge,
        MacvlanMode::Passthru => MacVlanMode::Passthrough,
    };
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::MacVlan),
        LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(mode)])),
    ]));
    m
}

/// A bridge to ensure with [`Handle::ensure_bridge`].
#[derive(Debug, Clone, Default)]
pub struct BridgeSpec {
    /// Bridge name.
    pub name: String,
    /// MTU applied when the bridge is created.
    pub mtu: Option<u32>,
    /// Turn promiscuous mode on (bridge plugin's `promiscMode`).
    pub promisc: bool,
    /// Turn VLAN filtering on (needs `CONFIG_BRIDGE_VLAN_FILTERING`).
    pub vlan_filtering: bool,
}

/// Bridge port settings for [`Handle::set_bridge_port`]; `None` leaves a
/// setting unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgePortOptions {
    /// Hairpin mode (`IFLA_BRPORT_MODE`): reflect frames back to the port.
    pub hairpin: Option<bool>,
    /// Port isolation (`IFLA_BRPORT_ISOLATED`).
    pub isolated: Option<bool>,
    /// MAC learning (`IFLA_BRPORT_LEARNING`).
    pub learning: Option<bool>,
}

/// A VLAN or a range of VLANs on a bridge port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeVlan {
    /// First VLAN id.
    pub vid: u16,
    /// Last VLAN id of the range (equal to `vid` for one VLAN).
    pub vid_end: u16,
    /// Untagged ingress frames are put in this VLAN.
    pub pvid: bool,
    /// Frames leave the port untagged.
    pub untagged: bool,
}

impl BridgeVlan {
    /// One tagged VLAN.
    pub fn tagged(vid: u16) -> Self {
        BridgeVlan {
            vid,
            vid_end: vid,
            pvid: false,
            untagged: false,
        }
    }

    /// A range of tagged VLANs (a trunk).
    pub fn range(vid: u16, vid_end: u16) -> Self {
        BridgeVlan {
            vid,
            vid_end,
            pvid: false,
            untagged: false,
        }
    }

    /// The port's native VLAN: PVID and egress untagged.
    pub fn native(vid: u16) -> Self {
        BridgeVlan {
            vid,
            vid_end: vid,
            pvid: true,
            untagged: true,
        }
    }
}

fn link_msg(index: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m
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

pub(crate) fn bridge_port_message(index: u32, opts: &BridgePortOptions) -> LinkMessage {
    let mut m = link_msg(index);
    m.header.interface_family = AddressFamily::Bridge;
    let mut nlas = Vec::new();
    for (kind, value) in [
        (IFLA_BRPORT_MODE, opts.hairpin),
        (IFLA_BRPORT_ISOLATED, opts.isolated),
        (IFLA_BRPORT_LEARNING, opts.learning),
    ] {
        if let Some(v) = value {
            nlas.push(LinkProtoInfoBridge::Other(DefaultNla::new(
                kind,
                vec![u8::from(v)],
            )));
        }
    }
    m.attributes.push(LinkAttribute::ProtoInfoBridge(nlas));
    m
}

pub(crate) fn bridge_vlan_message(
    index: u32,
    vlans: &[BridgeVlan],
    on_bridge: bool,
) -> LinkMessage {
    let mut m = link_msg(index);
    m.header.interface_family = AddressFamily::Bridge;
    let mut spec = Vec::new();
    if on_bridge {
        spec.push(AfSpecBridge::Flags(BridgeFlag::LowerDev));
    }
    for v in vlans {
        let mut flags = BridgeVlanInfoFlags::empty();
        if v.pvid {
            flags |= BridgeVlanInfoFlags::Pvid;
        }
        if v.untagged {
            flags |= BridgeVlanInfoFlags::Untagged;
        }
        if v.vid_end > v.vid {
            spec.push(AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: flags | BridgeVlanInfoFlags::RangeBegin,
                vid: v.vid,
            }));
            spec.push(AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: flags | BridgeVlanInfoFlags::RangeEnd,
                vid: v.vid_end,
            }));
        } else {
            spec.push(AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid: v.vid }));
        }
    }
    m.attributes.push(LinkAttribute::AfSpecBridge(spec));
    m
}

fn fmt_vlans(vlans: &[BridgeVlan]) -> String {
    vlans
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for BridgeVlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.vid)?;
        if self.vid_end > self.vid {
            write!(f, "-{}", self.vid_end)?;
        }
        if self.pvid {
            f.write_str(" pvid")?;
        }
        if self.untagged {
            f.write_str(" untagged")?;
        }
        Ok(())
    }
}

impl fmt::Display for BridgePortOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        for (name, v) in [
            ("hairpin", self.hairpin),
            ("isolated", self.isolated),
            ("learning", self.learning),
        ] {
            if let Some(v) = v {
                parts.push(format!("{name} {}", if v { "on" } else { "off" }));
            }
        }
        f.write_str(&parts.join(" "))
    }
}

fn random_veth_name() -> String {
    format!("veth{:08x}", crate::random_u32())
}

impl Handle {
    fn set_link(&self, msg: LinkMessage, op: impl FnOnce() -> String) -> Result<()> {
        self.request(RouteNetlinkMessage::SetLink(msg), 0, op)
            .map(drop)
    }

    fn single_link(
        &self,
        replies: Vec<RouteNetlinkMessage>,
        op: impl FnOnce() -> String,
    ) -> Result<Link> {
        for r in replies {
            if let RouteNetlinkMessage::NewLink(m) = r {
                return Ok(Link::from_message(&m));
            }
        }
        Err(self.protocol_error(op(), "no link in reply"))
    }

    /// Looks a link up by name; [`Error::LinkNotFound`] when it is missing.
    pub fn link_by_name(&self, name: &str) -> Result<Link> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_owned()));
        let op = || format!("get link {name}");
        match self.request(RouteNetlinkMessage::GetLink(m), 0, op) {
            Ok(r) => self.single_link(r, op),
            Err(e) if e.is_not_found() => Err(Error::LinkNotFound {
                op: op(),
                name: name.to_owned(),
                netns: self.netns_name().to_owned(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Looks a link up by index.
    pub fn link_by_index(&self, index: u32) -> Result<Link> {
        let op = || format!("get link #{index}");
        let r = self.request(RouteNetlinkMessage::GetLink(link_msg(index)), 0, op)?;
        self.single_link(r, op)
    }

    /// Every link in the namespace.
    pub fn links(&self) -> Result<Vec<Link>> {
        let r = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()), || {
            "list links".into()
        })?;
        Ok(r.iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(m) => Some(Link::from_message(m)),
                _ => None,
            })
            .collect())
    }

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
        self.setup_veth_with(&VethSpec {
            peer_name: peer_name.to_owned(),
            peer_netns: Some(peer_netns),
            mtu,
            peer_mac,
            up: true,
            ..Default::default()
        })
    }

    /// [`Handle::setup_veth`] with every [`VethSpec`] option (e.g. `master`
    /// and `up` to do the host side's link work in one request); the
    /// spec's `name` is ignored and replaced by a random `veth%08x`.
    pub fn setup_veth_with(&self, spec: &VethSpec<'_>) -> Result<Link> {
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
                    let key = crate::sysctl::accept_ra(&link.name);
                    match self.run(|| crate::sysctl::set(&key, "0")) {
                        Ok(Err(e)) | Err(e) => tracing::debug!("{e}"),
                        Ok(Ok(_)) => {}
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
    }

    /// Creates a macvlan on `spec.parent`, directly in `spec.netns` when
    /// given (as Go's macvlan plugin does with `IFLA_NET_NS_FD`).
    pub fn add_macvlan(&self, spec: &MacvlanSpec<'_>) -> Result<()> {
        self.add_link_on_parent(
            "macvlan",
            &spec.name,
            spec.netns,
            spec.parent,
            macvlan_message(spec),
        )
    }

    /// Creates a link stacked on `parent` (macvlan, ipvlan) from `message`,
    /// directly in `netns` when given; errors name the kind, the link, the
    /// namespace and the parent.
    pub(crate) fn add_link_on_parent(
        &self,
        kind: &str,
        name: &str,
        netns: Option<&Netns>,
        parent: u32,
        message: LinkMessage,
    ) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
            || self.on_parent_op(kind, name, netns, parent),
        )
        .map(drop)
    }

    /// "add `kind` `name` [in `netns`] on `parent`", for messages.
    pub(crate) fn on_parent_op(
        &self,
        kind: &str,
        name: &str,
        netns: Option<&Netns>,
        parent: u32,
    ) -> String {
        let ns = netns
            .map(|n| format!(" in {}", n.path().display()))
            .unwrap_or_default();
        format!("add {kind} {name}{ns} on {}", self.ifname_for(parent))
    }

    /// Go's bridge plugin `ensureBridge`: creates the bridge if missing
    /// (an existing one is fine), checks that what exists is a bridge,
    /// applies promiscuous mode and VLAN filtering, and sets it up.
    ///
    /// VLAN filtering on a kernel without it gives [`Error::Unsupported`].
    pub fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<Link> {
        let name = &spec.name;
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.clone()));
        if let Some(mtu) = spec.mtu {
            m.attributes.push(LinkAttribute::Mtu(mtu));
        }
        let mut info = vec![LinkInfo::Kind(InfoKind::Bridge)];
        if spec.vlan_filtering {
            info.push(LinkInfo::Data(InfoData::Bridge(vec![
                InfoBridge::VlanFiltering(true),
            ])));
        }
        m.attributes.push(LinkAttribute::LinkInfo(info));
        let op = || format!("add bridge {name}");
        match self.request(
            RouteNetlinkMessage::NewLink(m),
            NLM_F_CREATE | NLM_F_EXCL,
            op,
        ) {
            Ok(_) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(self.unsupported(op(), "bridge vlan_filtering", e)),
        }
        let link = self.link_by_name(name)?;
        if link.kind.as_deref() != Some("bridge") {
            return Err(Error::WrongLinkKind {
                op: op(),
                name: name.clone(),
                found: link.kind.unwrap_or_else(|| "device".into()),
                expected: "bridge",
                netns: self.netns_name().to_owned(),
            });
        }
        if spec.vlan_filtering && link.vlan_filtering != Some(true) {
            self.set_bridge_vlan_filtering(link.index, true)
                .map_err(|e| self.unsupported(op(), "bridge vlan_filtering", e))?;
        }
        if spec.promisc && !link.is_promisc() {
            self.set_promisc(link.index, true)?;
        }
        if !link.is_up() {
            self.set_up(link.index)?;
        }
        self.link_by_index(link.index)
    }

    /// Turns VLAN filtering of an existing bridge on or off.
    pub fn set_bridge_vlan_filtering(&self, index: u32, on: bool) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Bridge),
            LinkInfo::Data(InfoData::Bridge(vec![InfoBridge::VlanFiltering(on)])),
        ]));
        let op = || {
            format!(
                "set vlan_filtering {} on {}",
                u8::from(on),
                self.ifname_for(index)
            )
        };
        self.request(RouteNetlinkMessage::NewLink(m), 0, op)
            .map(drop)
            .map_err(|e| self.unsupported(op(), "bridge vlan_filtering", e))
    }

    /// Enslaves link `index` to the bridge (or bond) `master`.
    pub fn set_master(&self, index: u32, master: u32) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::Controller(master));
        self.set_link(m, || {
            format!(
                "set master of {} to {}",
                self.ifname_for(index),
                self.ifname_for(master)
            )
        })
    }

    /// Releases link `index` from its master.
    pub fn set_nomaster(&self, index: u32) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::Controller(0));
        self.set_link(m, || format!("set nomaster on {}", self.ifname_for(index)))
    }

    /// Sets bridge port flags (hairpin, isolated, learning) on a port.
    pub fn set_bridge_port(&self, index: u32, opts: &BridgePortOptions) -> Result<()> {
        self.set_link(bridge_port_message(index, opts), || {
            format!(
                "set bridge port options {opts} on {}",
                self.ifname_for(index)
            )
        })
    }

    /// Adds VLANs to a bridge port (`bridge vlan add`); `on_bridge` targets
    /// the bridge device itself (`self`).
    pub fn add_bridge_vlans(
        &self,
        index: u32,
        vlans: &[BridgeVlan],
        on_bridge: bool,
    ) -> Result<()> {
        let op = || {
            format!(
                "add bridge vlans {} to {}",
                fmt_vlans(vlans),
                self.ifname_for(index)
            )
        };
        self.set_link(bridge_vlan_message(index, vlans, on_bridge), op)
            .map_err(|e| self.unsupported(op(), "bridge vlan filtering", e))
    }

    /// Removes VLANs from a bridge port (`bridge vlan del`), e.g. the
    /// default VLAN 1.
    pub fn del_bridge_vlans(
        &self,
        index: u32,
        vlans: &[BridgeVlan],
        on_bridge: bool,
    ) -> Result<()> {
        let op = || {
            format!(
                "delete bridge vlans {} from {}",
                fmt_vlans(vlans),
                self.ifname_for(index)
            )
        };
        self.request(
            RouteNetlinkMessage::DelLink(bridge_vlan_message(index, vlans, on_bridge)),
            0,
            op,
        )
        .map(drop)
        .map_err(|e| self.unsupported(op(), "bridge vlan filtering", e))
    }

    fn set_flag(&self, index: u32, flag: LinkFlags, on: bool, what: &str) -> Result<()> {
        let mut m = link_msg(index);
        m.header.change_mask = flag;
        if on {
            m.header.flags = flag;
        }
        self.set_link(m, || format!("set {} {what}", self.ifname_for(index)))
    }

    /// Sets a link administratively up.
    pub fn set_up(&self, index: u32) -> Result<()> {
        self.set_flag(index, LinkFlags::Up, true, "up")
    }

    /// Sets a link administratively down.
    pub fn set_down(&self, index: u32) -> Result<()> {
        self.set_flag(index, LinkFlags::Up, false, "down")
    }

    /// Turns promiscuous mode on or off.
    pub fn set_promisc(&self, index: u32, on: bool) -> Result<()> {
        self.set_flag(
            index,
            LinkFlags::Promisc,
            on,
            if on { "promisc on" } else { "promisc off" },
        )
    }

    /// Turns all-multicast mode on or off (`ip link set ... allmulticast`).
    pub fn set_allmulti(&self, index: u32, on: bool) -> Result<()> {
        self.set_flag(
            index,
            LinkFlags::Allmulti,
            on,
            if on {
                "allmulticast on"
            } else {
                "allmulticast off"
            },
        )
    }

    /// Sets the transmit queue length (`IFLA_TXQLEN`).
    pub fn set_txqlen(&self, index: u32, txqlen: u32) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::TxQueueLen(txqlen));
        self.set_link(m, || {
            format!("set txqueuelen {txqlen} on {}", self.ifname_for(index))
        })
    }

    /// Sets the MTU.
    pub fn set_mtu(&self, index: u32, mtu: u32) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::Mtu(mtu));
        self.set_link(m, || format!("set mtu {mtu} on {}", self.ifname_for(index)))
    }

    /// Sets the hardware address.
    pub fn set_mac(&self, index: u32, mac: MacAddr) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
        self.set_link(m, || {
            format!("set address {mac} on {}", self.ifname_for(index))
        })
    }

    /// Renames a link (the kernel wants it down).
    pub fn rename(&self, index: u32, new_name: &str) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes
            .push(LinkAttribute::IfName(new_name.to_owned()));
        self.set_link(m, || {
            format!("rename {} to {new_name}", self.ifname_for(index))
        })
    }

    /// Moves a link into another namespace.
    pub fn move_to_netns(&self, index: u32, netns: &Netns) -> Result<()> {
        let mut m = link_msg(index);
        m.attributes.push(LinkAttribute::NetNsFd(netns.as_raw_fd()));
        self.set_link(m, || {
            format!(
                "move {} to {}",
                self.ifname_for(index),
                netns.path().display()
            )
        })
    }

    /// Deletes a link by index.
    pub fn delete_link(&self, index: u32) -> Result<()> {
        self.request(RouteNetlinkMessage::DelLink(link_msg(index)), 0, || {
            format!("delete link #{index}")
        })
        .map(drop)
    }

    /// Deletes a link by name; a missing link is not an error. Returns
    /// whether a link was deleted.
    pub fn delete_link_by_name(&self, name: &str) -> Result<bool> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_owned()));
        match self.request(RouteNetlinkMessage::DelLink(m), 0, || {
            format!("delete link {name}")
        }) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Go's `ip.DelLinkByNameAddr`: deletes a link and returns its global
    /// unicast addresses (what a plugin needs to undo masquerading).
    /// [`Error::LinkNotFound`] when the link is missing.
    pub fn delete_link_by_name_addrs(&self, name: &str) -> Result<Vec<ipnetwork::IpNetwork>> {
        let link = self.link_by_name(name)?;
        let addrs = self
            .addresses(Some(link.index), crate::Family::All)?
            .into_iter()
            .map(|a| a.address)
            .filter(|a| crate::addr::is_global_unicast(a.ip()))
            .collect();
        self.delete_link(link.index)?;
        Ok(addrs)
    }

    /// The index of a veth's peer (`IFLA_LINK`), in the peer's namespace.
    pub fn veth_peer_index(&self, index: u32) -> Result<u32> {
        let link = self.link_by_index(index)?;
        if link.kind.as_deref() != Some("veth") {
            return Err(Error::WrongLinkKind {
                op: format!("get veth peer of link #{index}"),
                name: link.name,
                found: link.kind.unwrap_or_else(|| "device".into()),
                expected: "veth",
                netns: self.netns_name().to_owned(),
            });
        }
        link.parent_index.ok_or_else(|| {
            self.protocol_error(format!("get veth peer of link #{index}"), "no IFLA_LINK")
        })
    }
}
