//! IP addresses on links, and waiting for IPv6 duplicate address detection.

use std::net::IpAddr;
use std::time::Duration;

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::AddressFamilyFilter;

/// How long [`Handle::wait_for_dad`] waits by default (Go's
/// `SettleAddresses` timeout in `ConfigureIface`).
pub const DAD_TIMEOUT: Duration = Duration::from_secs(5);

/// An address assigned to a link.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Address {
    /// Index of the link.
    pub index: u32,
    /// The address with its prefix length (host bits kept).
    pub address: IpNetwork,
    /// `IFA_F_*` flags.
    pub flags: u32,
    /// Scope (`RT_SCOPE_*`).
    pub scope: u8,
    /// The label (IPv4 only).
    pub label: Option<String>,
}

impl Address {
    /// Still doing IPv6 DAD (an optimistic address is tentative too).
    pub fn is_tentative(&self) -> bool {
        self.flags & AddressFlags::Tentative.bits() != 0
    }

    /// Optimistic (RFC 4429): usable while its IPv6 DAD runs.
    pub fn is_optimistic(&self) -> bool {
        self.flags & AddressFlags::Optimistic.bits() != 0
    }

    /// Usable by the pod's traffic: not waiting for DAD (not tentative,
    /// or optimistic) and not found a duplicate.
    pub fn is_usable(&self) -> bool {
        !self.is_dad_failed() && (!self.is_tentative() || self.is_optimistic())
    }

    /// IPv6 DAD found a duplicate.
    pub fn is_dad_failed(&self) -> bool {
        self.flags & AddressFlags::Dadfailed.bits() != 0
    }

    fn from_message(m: &AddressMessage) -> Option<Address> {
        let mut local = None;
        let mut address = None;
        let mut flags = u32::from(m.header.flags.bits());
        let mut label = None;
        for a in &m.attributes {
            match a {
                AddressAttribute::Local(ip) => local = Some(*ip),
                AddressAttribute::Address(ip) => address = Some(*ip),
                AddressAttribute::Flags(f) => flags = f.bits(),
                AddressAttribute::Label(l) => label = Some(l.clone()),
                _ => {}
            }
        }
        // IFA_LOCAL is the interface's own address on point-to-point links,
        // IFA_ADDRESS the peer's; elsewhere both are equal.
        let ip = local.or(address)?;
        Some(Address {
            index: m.header.index,
            address: IpNetwork::new(ip, m.header.prefix_len).ok()?,
            flags,
            scope: u8::from(m.header.scope),
            label,
        })
    }
}

/// Options for [`Handle::add_address`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressOptions {
    /// `IFA_F_NODAD`: skip IPv6 duplicate address detection.
    pub nodad: bool,
    /// `IFA_F_NOPREFIXROUTE`: do not add the prefix route.
    pub noprefixroute: bool,
    /// `IFA_F_OPTIMISTIC`: optimistic IPv6 DAD (RFC 4429), the address
    /// usable while DAD runs. The kernel honours it only where the link's
    /// `optimistic_dad` sysctl is on (and drops it, leaving a plain
    /// tentative address, elsewhere).
    pub optimistic: bool,
}

pub(crate) fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_link_local())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

fn family_of(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

pub(crate) fn address_message(index: u32, addr: IpNetwork, opts: AddressOptions) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = family_of(addr.ip());
    m.header.prefix_len = addr.prefix();
    m.header.index = index;
    let mut flags = AddressFlags::empty();
    if opts.nodad {
        flags |= AddressFlags::Nodad;
    }
    if opts.noprefixroute {
        flags |= AddressFlags::Noprefixroute;
    }
    if opts.optimistic {
        flags |= AddressFlags::Optimistic;
    }
    m.header.flags = AddressHeaderFlags::from_bits_truncate(flags.bits() as u8);
    m.attributes.push(AddressAttribute::Local(addr.ip()));
    m.attributes.push(AddressAttribute::Address(addr.ip()));
    if let IpNetwork::V4(v4) = addr {
        // Go's netlink.AddrAdd fills in the broadcast address for prefixes
        // shorter than /31; match it so `ip addr` shows the same `brd`.
        if v4.prefix() < 31 {
            m.attributes
                .push(AddressAttribute::Broadcast(v4.broadcast()));
        }
    }
    if !flags.is_empty() {
        m.attributes.push(AddressAttribute::Flags(flags));
    }
    m
}

impl Handle {
    /// Adds an address (v4 or v6) to link `index`.
    pub fn add_address(&self, index: u32, addr: IpNetwork, opts: AddressOptions) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewAddress(address_message(index, addr, opts)),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add address {addr} to {}", self.ifname_for(index)),
        )
        .map(drop)
    }

    /// Removes an address from link `index`.
    pub fn del_address(&self, index: u32, addr: IpNetwork) -> Result<()> {
        self.request(
            RouteNetlinkMessage::DelAddress(address_message(
                index,
                addr,
                AddressOptions::default(),
            )),
            0,
            || format!("delete address {addr} from {}", self.ifname_for(index)),
        )
        .map(drop)
    }

    /// Addresses in the namespace, optionally only those of one link.
    pub fn addresses(
        &self,
        index: Option<u32>,
        family: AddressFamilyFilter,
    ) -> Result<Vec<Address>> {
        let mut m = AddressMessage::default();
        m.header.family = family.address_family();
        let replies = self.dump(RouteNetlinkMessage::GetAddress(m), || match index {
            Some(i) => format!("list addresses of {}", self.ifname_for(i)),
            None => "list addresses".into(),
        })?;
        Ok(replies
            .iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewAddress(m) => Address::from_message(m),
                _ => None,
            })
            .filter(|a| index.is_none_or(|i| a.index == i))
            .filter(|a| family.matches(a.address.ip()))
            .collect())
    }

    /// Waits until no address of link `index` is tentative (Go's
    /// `ip.SettleAddresses`); the same as [`Handle::settle_addresses`]
    /// with no address named.
    pub fn wait_for_dad(&self, index: u32, timeout: Duration) -> Result<()> {
        self.settle_addresses(index, &[], timeout)
    }

    /// Waits until none of `addresses` on link `index` is tentative (all of
    /// the link's addresses when `addresses` is empty; an optimistic
    /// address, usable while DAD runs, does not count), looking on the
    /// crate's poll schedule (every 200 µs for the first 10 ms, then less
    /// often): a link whose IPv6 `accept_dad` is 0 settles within a
    /// millisecond, one doing DAD after the kernel's timers (1-2 s). One of
    /// them failing DAD gives [`Error::DadFailed`]; still tentative after
    /// `timeout` gives [`Error::DadTimeout`].
    ///
    /// Go's `ip.SettleAddresses` looks at every address of the link,
    /// including the IPv6 link-local one the kernel made; plugins wait for
    /// the addresses they assigned (what their routes and the pod's traffic
    /// use), never longer than Go does.
    pub fn settle_addresses(
        &self,
        index: u32,
        addresses: &[IpAddr],
        timeout: Duration,
    ) -> Result<()> {
        let named = |a: &Address| addresses.is_empty() || addresses.contains(&a.address.ip());
        let (settled, ()) = crate::poll::until(timeout, || {
            // Only IPv6 addresses do DAD.
            let addrs = self.addresses(Some(index), AddressFamilyFilter::V6)?;
            if let Some(bad) = addrs.iter().find(|a| named(a) && a.is_dad_failed()) {
                return Err(Error::DadFailed {
                    address: bad.address.to_string(),
                    ifname: self.ifname_for(index),
                    netns: self.netns_name().to_owned(),
                });
            }
            Ok((!addrs.iter().any(|a| named(a) && !a.is_usable()), ()))
        })?;
        if settled {
            Ok(())
        } else {
            Err(Error::DadTimeout {
                ifname: self.ifname_for(index),
                netns: self.netns_name().to_owned(),
                timeout,
            })
        }
    }

    /// The name of link `index` for an error message (`#index` if unknown).
    pub(crate) fn ifname_for(&self, index: u32) -> String {
        self.link_by_index(index)
            .map(|l| l.name)
            .unwrap_or_else(|_| format!("#{index}"))
    }
}
