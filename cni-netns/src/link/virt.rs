//! The link kinds of the vlan, vrf and dummy plugins: creation requests
//! (`IFLA_INFO_KIND` `vlan`, `vrf`, `dummy` with their `IFLA_INFO_DATA`),
//! and what CHECK and the vrf plugin read back (VLAN id, VRF table).
//!
//! A kernel without the kind answers "Unknown device type"
//! (`EOPNOTSUPP`): every creation maps it to [`Error::Unsupported`] naming
//! the kind, so that a plugin fails with a message an operator can act on.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVrf, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{info_data, Link};
use crate::error::{Error, Result};
use crate::handle::Handle;

/// A VRF device as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Vrf {
    /// The link.
    pub link: Link,
    /// Its routing table (`IFLA_VRF_TABLE`).
    pub table: u32,
}

pub(crate) fn vrf_message(name: &str, table: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_owned()));
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Vrf),
        LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
    ]));
    m
}

pub(crate) fn dummy_message(name: &str) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_owned()));
    m.attributes
        .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Dummy,
        )]));
    m
}

/// `IFLA_VRF_TABLE` of a link message, when it is a VRF.
fn vrf_table_of(msg: &LinkMessage) -> Option<u32> {
    info_data(msg).find_map(|d| match d {
        InfoData::Vrf(opts) => opts.iter().find_map(|o| match o {
            InfoVrf::TableId(t) => Some(*t),
            _ => None,
        }),
        _ => None,
    })
}

impl Handle {
    /// Creates a dummy link named `name` in this handle's namespace (Go's
    /// dummy plugin creates it from inside the pod, so a host link of the
    /// same name does not clash). A kernel without the dummy driver gives
    /// [`Error::Unsupported`].
    pub fn add_dummy(&self, name: &str) -> Result<Link> {
        let span = cni_types::step_span!("link.create", link.kind = "dummy", link.name = %name);
        cni_types::trace::in_step(span, || {
            let op = || format!("add dummy {name}");
            self.request(
                RouteNetlinkMessage::NewLink(dummy_message(name)),
                NLM_F_CREATE | NLM_F_EXCL,
                op,
            )
            .map_err(|e| self.unsupported(op(), "dummy", e))?;
            self.link_by_name(name)
        })
    }

    /// Creates a VRF device routing through `table` and sets it up (Go's
    /// `createVRF`); a VRF that cannot be set up is deleted. A kernel
    /// without VRF gives [`Error::Unsupported`].
    pub fn add_vrf(&self, name: &str, table: u32) -> Result<Vrf> {
        let span = cni_types::step_span!("link.create", link.kind = "vrf", link.name = %name);
        cni_types::trace::in_step(span, || {
            let op = || format!("add vrf {name} table {table}");
            self.request(
                RouteNetlinkMessage::NewLink(vrf_message(name, table)),
                NLM_F_CREATE | NLM_F_EXCL,
                op,
            )
            .map_err(|e| self.unsupported(op(), "vrf", e))?;
            let link = self.link_by_name(name)?;
            let up = self
                .set_up(link.index)
                .and_then(|()| self.link_by_index(link.index));
            if up.is_err() {
                let _ = self.delete_link(link.index);
            }
            Ok(Vrf { link: up?, table })
        })
    }

    /// The VRF named `name`: `None` when no link has that name,
    /// [`Error::WrongLinkKind`] when the link is not a VRF.
    pub fn vrf_by_name(&self, name: &str) -> Result<Option<Vrf>> {
        let link = match self.link_by_name(name) {
            Ok(l) => l,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        self.vrfs()?
            .into_iter()
            .find(|v| v.link.index == link.index)
            .map(Some)
            .ok_or_else(|| Error::WrongLinkKind {
                op: format!("find vrf {name}"),
                name: name.to_owned(),
                found: link.kind.unwrap_or_else(|| "device".into()),
                expected: "vrf",
                netns: self.netns_name().to_owned(),
            })
    }

    /// Every VRF device in the namespace with its table.
    pub fn vrfs(&self) -> Result<Vec<Vrf>> {
        let r = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()), || {
            "list links".into()
        })?;
        Ok(r.iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(m) => {
                    let link = Link::from_message(m);
                    if link.kind.as_deref() != Some("vrf") {
                        return None;
                    }
                    Some(Vrf {
                        table: vrf_table_of(m).unwrap_or(0),
                        link,
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// The links whose master is `index` (a bridge's ports, a VRF's
    /// members).
    pub fn links_with_master(&self, index: u32) -> Result<Vec<Link>> {
        Ok(self
            .links()?
            .into_iter()
            .filter(|l| l.master == Some(index))
            .collect())
    }
}

/// Go's `findFreeRoutingTableID`: the smallest table id from 1 up that no
/// VRF in `used` routes through (other users of a table do not count).
pub fn free_vrf_table(used: &[u32]) -> Option<u32> {
    (1..u32::MAX).find(|t| !used.contains(t))
}

#[cfg(test)]
mod tests {
    //! The requests byte for byte, against fixtures built here from the
    //! kernel's uapi constants (each commented with its header), so that a
    //! change in the message builder shows as a diff of what the kernel
    //! would receive.

    use netlink_packet_route::RouteNetlinkMessage;

    use super::*;
    use crate::link::stacked::{vlan_message, VlanSpec};
    use crate::netlink::serialize;
    use crate::netns::Netns;
    use std::os::fd::AsRawFd;

    // linux/netlink.h
    const NLM_F_REQUEST: u16 = 0x01;
    const NLM_F_ACK: u16 = 0x04;
    const NLM_F_EXCL: u16 = 0x200;
    const NLM_F_CREATE: u16 = 0x400;
    // linux/rtnetlink.h
    const RTM_NEWLINK: u16 = 16;
    // linux/if_link.h
    const IFLA_IFNAME: u16 = 3;
    const IFLA_MTU: u16 = 4;
    const IFLA_LINK: u16 = 5;
    const IFLA_LINKINFO: u16 = 18;
    const IFLA_NET_NS_FD: u16 = 28;
    const IFLA_INFO_KIND: u16 = 1;
    const IFLA_INFO_DATA: u16 = 2;
    const IFLA_VLAN_ID: u16 = 1; // enum { IFLA_VLAN_UNSPEC, IFLA_VLAN_ID, ... }
    const IFLA_VRF_TABLE: u16 = 1; // enum { IFLA_VRF_UNSPEC, IFLA_VRF_TABLE, ... }

    /// One attribute: `struct nlattr` (len, type) + payload, padded to 4.
    fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
        let len = u16::try_from(4 + payload.len()).unwrap();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    /// A `RTM_NEWLINK` request: `struct nlmsghdr` + a zeroed `struct
    /// ifinfomsg` (AF_UNSPEC, index 0, no flags) + `attrs`. The nested
    /// attributes carry no `NLA_F_NESTED`, as Go's netlink sends them
    /// (rtnetlink parses IFLA_LINKINFO either way).
    fn newlink(seq: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = attrs.concat();
        let len = u32::try_from(16 + 16 + body.len()).unwrap();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
        v.extend_from_slice(&[0u8; 16]); // struct ifinfomsg
        v.extend_from_slice(&body);
        v
    }

    fn request(m: LinkMessage) -> Vec<u8> {
        serialize(
            RouteNetlinkMessage::NewLink(m),
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            9,
        )
    }

    #[test]
    fn vlan_request_bytes() {
        let ns = Netns::open("/proc/self/ns/net").unwrap();
        let fd = ns.as_raw_fd();
        let spec = VlanSpec {
            name: "veth0a1b2c3d".into(),
            parent: 7,
            vlan_id: 42,
            mtu: Some(1400),
            netns: Some(&ns),
        };
        let expected = newlink(
            9,
            &[
                nla(IFLA_IFNAME, b"veth0a1b2c3d\0"),
                nla(IFLA_LINK, &7u32.to_ne_bytes()),
                nla(IFLA_MTU, &1400u32.to_ne_bytes()),
                nla(IFLA_NET_NS_FD, &fd.to_ne_bytes()),
                nla(
                    IFLA_LINKINFO,
                    &[
                        nla(IFLA_INFO_KIND, b"vlan\0"),
                        nla(IFLA_INFO_DATA, &nla(IFLA_VLAN_ID, &42u16.to_ne_bytes())),
                    ]
                    .concat(),
                ),
            ],
        );
        assert_eq!(request(vlan_message(&spec)), expected);

        // Without MTU and namespace: only the name, the parent and the kind.
        let spec = VlanSpec {
            name: "eth1".into(),
            parent: 2,
            vlan_id: 4094,
            ..Default::default()
        };
        let expected = newlink(
            9,
            &[
                nla(IFLA_IFNAME, b"eth1\0"),
                nla(IFLA_LINK, &2u32.to_ne_bytes()),
                nla(
                    IFLA_LINKINFO,
                    &[
                        nla(IFLA_INFO_KIND, b"vlan\0"),
                        nla(IFLA_INFO_DATA, &nla(IFLA_VLAN_ID, &4094u16.to_ne_bytes())),
                    ]
                    .concat(),
                ),
            ],
        );
        assert_eq!(request(vlan_message(&spec)), expected);
    }

    #[test]
    fn vrf_request_bytes() {
        let expected = newlink(
            9,
            &[
                nla(IFLA_IFNAME, b"blue\0"),
                nla(
                    IFLA_LINKINFO,
                    &[
                        nla(IFLA_INFO_KIND, b"vrf\0"),
                        nla(IFLA_INFO_DATA, &nla(IFLA_VRF_TABLE, &1001u32.to_ne_bytes())),
                    ]
                    .concat(),
                ),
            ],
        );
        assert_eq!(request(vrf_message("blue", 1001)), expected);
    }

    #[test]
    fn dummy_request_bytes() {
        let expected = newlink(
            9,
            &[
                nla(IFLA_IFNAME, b"dummy0\0"),
                nla(IFLA_LINKINFO, &nla(IFLA_INFO_KIND, b"dummy\0")),
            ],
        );
        assert_eq!(request(dummy_message("dummy0")), expected);
    }

    #[test]
    fn free_vrf_tables_match_go() {
        // Go's vrf_test.go vectors.
        assert_eq!(free_vrf_table(&[1, 2, 3, 5]), Some(4));
        assert_eq!(free_vrf_table(&[1, 2, 5]), Some(3));
        assert_eq!(free_vrf_table(&[]), Some(1));
        let used: Vec<u32> = (1..1000).collect();
        assert_eq!(free_vrf_table(&used), Some(1000));
    }

    #[test]
    fn vlan_id_out_of_range_is_refused_before_sending() {
        let h = Handle::current().unwrap();
        let e = h
            .add_vlan(&VlanSpec {
                name: "v".into(),
                parent: 1,
                vlan_id: 4095,
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(e.to_string().contains("VLAN id 4095"), "{e}");
    }

    #[test]
    fn vrf_table_is_read_from_link_info() {
        use crate::netlink::serialize;
        use netlink_packet_core::NetlinkMessage;
        use netlink_packet_core::NetlinkPayload::InnerMessage;
        use netlink_packet_route::link::{InfoKind, InfoVrf, LinkAttribute, LinkInfo};
        let mut l = LinkMessage::default();
        l.attributes.push(LinkAttribute::IfName("vrf-blue".into()));
        l.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Vrf),
            LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(1001)])),
        ]));
        // Through the wire format, as the kernel's reply arrives.
        let bytes = serialize(RouteNetlinkMessage::NewLink(l), 0, 1);
        let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes).unwrap();
        let InnerMessage(RouteNetlinkMessage::NewLink(parsed)) = parsed.payload else {
            panic!("not a link message");
        };
        assert_eq!(vrf_table_of(&parsed), Some(1001));
        let mut plain = LinkMessage::default();
        plain
            .attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Veth,
            )]));
        assert_eq!(vrf_table_of(&plain), None);
    }
}
