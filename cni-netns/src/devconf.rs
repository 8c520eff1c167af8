//! Per-interface IP settings over netlink instead of `/proc/sys`.
//!
//! `net.ipv4.conf.<if>.*` can be written with `RTM_SETLINK`
//! (`IFLA_AF_SPEC` / `AF_INET` / `IFLA_INET_CONF`) and the forwarding
//! switches read with `RTM_GETNETCONF`, both in constant time. A path
//! lookup under `/proc/sys/net/ipv4` or `ipv6` walks one dentry per network
//! namespace on the node (see [`crate::sysctl::set_in`]), which with 1000
//! pods costs more than the whole netlink request.

use netlink_packet_core::{DefaultNla, Emitable, NLA_F_NESTED};
use netlink_packet_route::link::{AfSpecInet, AfSpecUnspec, LinkAttribute};

use nix::errno::Errno;

use crate::error::Result;
use crate::handle::Handle;
use crate::link::link_msg;
use crate::netlink::attr;

/// An IPv4 per-interface setting (`net.ipv4.conf.<if>.<name>`) that
/// [`Handle::set_ipv4_conf`] writes over netlink. The value is the
/// kernel's `IPV4_DEVCONF_*` number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Ipv4Conf {
    /// `forwarding`.
    Forwarding = 1,
    /// `proxy_arp`.
    ProxyArp = 3,
    /// `rp_filter`.
    RpFilter = 8,
    /// `arp_notify`: gratuitous ARP when the link comes up or its address
    /// changes.
    ArpNotify = 22,
    /// `accept_local`.
    AcceptLocal = 23,
    /// `route_localnet`: 127.0.0.0/8 may be routed to and from this link.
    RouteLocalnet = 26,
}

impl Ipv4Conf {
    /// The sysctl's name under `net/ipv4/conf/<if>/`.
    pub fn name(self) -> &'static str {
        match self {
            Ipv4Conf::Forwarding => "forwarding",
            Ipv4Conf::ProxyArp => "proxy_arp",
            Ipv4Conf::RpFilter => "rp_filter",
            Ipv4Conf::ArpNotify => "arp_notify",
            Ipv4Conf::AcceptLocal => "accept_local",
            Ipv4Conf::RouteLocalnet => "route_localnet",
        }
    }
}

// linux/netconf.h
const RTM_NEWNETCONF: u16 = 80;
const RTM_GETNETCONF: u16 = 82;
const NETCONFA_IFINDEX: u16 = 1;
const NETCONFA_FORWARDING: u16 = 2;
const NETCONFA_IFINDEX_ALL: i32 = -1;
// linux/if_link.h
const IFLA_INET_CONF: u16 = 1;

/// The `IFLA_INET_CONF` nest of `settings`: one u32 attribute each, typed
/// by the setting's number.
fn inet_conf_nest(settings: &[(Ipv4Conf, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(conf, value) in settings {
        let nla = DefaultNla::new(conf as u16, value.to_ne_bytes().to_vec());
        let mut buf = vec![0; nla.buffer_len()];
        nla.emit(&mut buf);
        out.extend_from_slice(&buf);
    }
    out
}

impl Handle {
    /// Writes IPv4 settings of link `index` in one `RTM_SETLINK`, as
    /// writing `net/ipv4/conf/<if>/<name>` would (the kernel marks each as
    /// set on the link, so later changes of `conf/default` no longer reach
    /// it, as after a sysctl write).
    pub fn set_ipv4_conf(&self, index: u32, settings: &[(Ipv4Conf, u32)]) -> Result<()> {
        let span = cni_types::step_span!(
            "sysctl.write",
            link.index = index,
            sysctl.count = settings.len()
        );
        cni_types::trace::in_step(span, || {
            if settings.is_empty() {
                return Ok(());
            }
            let mut m = link_msg(index);
            m.attributes
                .push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet(vec![
                    AfSpecInet::Other(DefaultNla::new(
                        IFLA_INET_CONF | NLA_F_NESTED,
                        inet_conf_nest(settings),
                    )),
                ])]));
            let names: Vec<String> = settings
                .iter()
                .map(|(c, v)| format!("{}={v}", c.name()))
                .collect();
            self.set_link(m, || {
                format!("set IPv4 {} of {}", names.join(" "), self.ifname_for(index))
            })
        })
    }

    /// Whether forwarding is on for the whole namespace: IPv4's
    /// `net/ipv4/ip_forward`, IPv6's `net/ipv6/conf/all/forwarding`, read
    /// with `RTM_GETNETCONF`. `None` when the family is not there (IPv6
    /// disabled at boot).
    pub fn forwarding(&self, ipv6: bool) -> Result<Option<bool>> {
        let family = if ipv6 { libc::AF_INET6 } else { libc::AF_INET } as u8;
        // struct netconfmsg (one byte, aligned to 4), then NETCONFA_IFINDEX.
        let mut req = vec![family, 0, 0, 0];
        req.extend_from_slice(&8u16.to_ne_bytes());
        req.extend_from_slice(&NETCONFA_IFINDEX.to_ne_bytes());
        req.extend_from_slice(&NETCONFA_IFINDEX_ALL.to_ne_bytes());
        let what = if ipv6 { "IPv6" } else { "IPv4" };
        let op = || format!("read {what} forwarding");
        let replies = match self.request_raw(RTM_GETNETCONF, &req) {
            Ok(r) => r,
            // No handler for the family: IPv6 disabled at boot.
            Err(e)
                if ipv6 && (e.is_errno(Errno::EOPNOTSUPP) || e.is_errno(Errno::EAFNOSUPPORT)) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(self.error(e, op)),
        };
        for (ty, body) in replies {
            // After the netconfmsg (family and padding, 4 bytes).
            let Some(attrs) = body.get(4..).filter(|_| ty == RTM_NEWNETCONF) else {
                continue;
            };
            if let Some(v) = attr(attrs, NETCONFA_FORWARDING) {
                let v: [u8; 4] = v
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| self.protocol_error(op(), "short NETCONFA_FORWARDING"))?;
                return Ok(Some(i32::from_ne_bytes(v) != 0));
            }
        }
        Err(self.protocol_error(op(), "no NETCONFA_FORWARDING in the answer"))
    }

    /// Go's `ip.EnableIP4Forward` / `EnableIP6Forward` in this handle's
    /// namespace: reads the switches over netlink ([`Handle::forwarding`])
    /// and writes the sysctl ([`crate::sysctl::enable_forwarding`]) only for
    /// a family whose forwarding is off.
    pub fn enable_forwarding(&self, ipv4: bool, ipv6: bool) -> Result<()> {
        let span = cni_types::step_span!(
            "sysctl.write",
            sysctl.key = "forwarding",
            sysctl.ipv4 = ipv4,
            sysctl.ipv6 = ipv6
        );
        cni_types::trace::in_step(span, || {
            let off = |asked: bool, v6: bool| -> Result<bool> {
                Ok(asked && self.forwarding(v6)? != Some(true))
            };
            let (v4, v6) = (off(ipv4, false)?, off(ipv6, true)?);
            if v4 || v6 {
                self.run(|| crate::sysctl::enable_forwarding(v4, v6))??;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inet_conf_nest_is_one_u32_attribute_per_setting() {
        let nest = inet_conf_nest(&[(Ipv4Conf::ArpNotify, 1), (Ipv4Conf::RouteLocalnet, 0)]);
        assert_eq!(nest.len(), 16);
        assert_eq!(attr(&nest, 22), Some(&1u32.to_ne_bytes()[..]));
        assert_eq!(attr(&nest, 26), Some(&0u32.to_ne_bytes()[..]));
        assert_eq!(attr(&nest, 8), None);
        // Truncated or malformed attributes end the walk, never panic.
        assert_eq!(attr(&nest[..6], 26), None);
        assert_eq!(attr(&[0, 0, 22, 0], 22), None);
    }

    #[test]
    fn setting_names_are_the_sysctl_names() {
        assert_eq!(Ipv4Conf::ArpNotify.name(), "arp_notify");
        assert_eq!(Ipv4Conf::RouteLocalnet as u16, 26);
    }
}
