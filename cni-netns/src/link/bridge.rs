//! Bridges, their ports (hairpin, learning, isolation) and port VLANs.

use std::fmt;

use netlink_packet_core::{DefaultNla, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfo, BridgeVlanInfoFlags, InfoBridge, InfoData, InfoKind,
    LinkAttribute, LinkInfo, LinkMessage, LinkProtoInfoBridge,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{link_msg, Link};
use crate::error::{Error, Result};
use crate::handle::Handle;

// linux/if_link.h: IFLA_BRPORT_*
const IFLA_BRPORT_MODE: u16 = 4;

const IFLA_BRPORT_LEARNING: u16 = 8;

const IFLA_BRPORT_ISOLATED: u16 = 33;

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

impl Handle {
    /// Go's bridge plugin `ensureBridge`: creates the bridge if missing
    /// (an existing one is fine), checks that what exists is a bridge,
    /// applies promiscuous mode and VLAN filtering, and sets it up.
    ///
    /// VLAN filtering on a kernel without it gives [`Error::Unsupported`].
    pub fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<Link> {
        let span =
            cni_types::step_span!("link.create", link.kind = "bridge", link.name = %spec.name);
        cni_types::trace::in_step(span, || {
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
            // Looked up first: on a node every ADD after the first finds it,
            // and each request waits for the kernel's RTNL lock, which the
            // asynchronous work of a bridge of many ports holds for long.
            let link = match self.link_by_name(name) {
                Ok(link) => link,
                Err(e) if e.is_not_found() => {
                    match self.request(
                        RouteNetlinkMessage::NewLink(m),
                        NLM_F_CREATE | NLM_F_EXCL,
                        op,
                    ) {
                        Ok(_) => {}
                        Err(e) if e.is_exists() => {}
                        Err(e) => return Err(self.unsupported(op(), "bridge vlan_filtering", e)),
                    }
                    self.link_by_name(name)?
                }
                Err(e) => return Err(e),
            };
            if link.kind.as_deref() != Some("bridge") {
                return Err(Error::WrongLinkKind {
                    op: op(),
                    name: name.clone(),
                    found: link.kind.unwrap_or_else(|| "device".into()),
                    expected: "bridge",
                    netns: self.netns_name().to_owned(),
                });
            }
            let mut changed = false;
            if spec.vlan_filtering && link.vlan_filtering != Some(true) {
                self.set_bridge_vlan_filtering(link.index, true)
                    .map_err(|e| self.unsupported(op(), "bridge vlan_filtering", e))?;
                changed = true;
            }
            if spec.promisc && !link.is_promisc() {
                self.set_promisc(link.index, true)?;
                changed = true;
            }
            if !link.is_up() {
                self.set_up(link.index)?;
                changed = true;
            }
            if changed {
                self.link_by_index(link.index)
            } else {
                Ok(link)
            }
        })
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
        self.bridge_vlans(index, vlans, on_bridge, true)
    }

    /// Removes VLANs from a bridge port (`bridge vlan del`), e.g. the
    /// default VLAN 1.
    pub fn del_bridge_vlans(
        &self,
        index: u32,
        vlans: &[BridgeVlan],
        on_bridge: bool,
    ) -> Result<()> {
        self.bridge_vlans(index, vlans, on_bridge, false)
    }

    /// `bridge vlan add` (a SETLINK) or `bridge vlan del` (a DELLINK).
    fn bridge_vlans(
        &self,
        index: u32,
        vlans: &[BridgeVlan],
        on_bridge: bool,
        add: bool,
    ) -> Result<()> {
        let op = || {
            let (verb, prep) = if add {
                ("add", "to")
            } else {
                ("delete", "from")
            };
            format!(
                "{verb} bridge vlans {} {prep} {}",
                fmt_vlans(vlans),
                self.ifname_for(index)
            )
        };
        let m = bridge_vlan_message(index, vlans, on_bridge);
        let m = if add {
            RouteNetlinkMessage::SetLink(m)
        } else {
            RouteNetlinkMessage::DelLink(m)
        };
        self.request(m, 0, op)
            .map(drop)
            .map_err(|e| self.unsupported(op(), "bridge vlan filtering", e))
    }
}
