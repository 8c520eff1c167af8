//! Kernel network state for CNI plugins: network namespaces, links,
//! addresses, routes, neighbours and sysctls over a small synchronous
//! rtnetlink socket (no async runtime), plus the firewall.
//!
//! * [`Netns`] opens, creates (like `ip netns add`) and deletes namespaces;
//!   [`Netns::run`] runs a closure on a fresh thread inside one.
//! * [`Handle`] is one rtnetlink socket bound to one namespace; every verb
//!   is a method on it ([`Handle::setup_veth`], [`Handle::ensure_bridge`],
//!   [`Handle::add_address`], [`Handle::add_route`], ...).
//! * [`sysctl`] reads and writes `/proc/sys` from inside a namespace.
//! * [`configure_interface`] is Go's `ipam.ConfigureIface`.
//! * [`tc`] programs traffic control (TBF and ingress qdiscs, mirred
//!   redirect filters, IFB devices) for the bandwidth plugin.
//! * [`firewall`] programs masquerade, port mappings and the bridge MAC
//!   spoof check through the [`firewall::Firewall`] trait (nftables), every
//!   rule tagged with the attachment that owns it; [`conntrack`] flushes
//!   stale UDP conntrack entries.
//! * [`Rule`] routing policy rules (`ip rule`) on the same [`Handle`];
//!   [`FileLock`] an exclusive `flock`.
//! * [`Iptables`] runs the system `iptables`/`ip6tables`, and
//!   [`NftForeignTable`] puts rules of ours into an nftables table another
//!   program owns: for the firewall plugin, which opens the node's own
//!   firewall.
//!
//! Errors name the operation, the object and the namespace:
//! `add address 10.1.0.5/24 to eth0 in /run/netns/x: File exists`.
//!
//! ```
//! use cni_netns::{Family, Handle};
//!
//! # fn main() -> cni_netns::Result<()> {
//! let host = Handle::current()?;
//! let lo = host.link_by_name("lo")?;
//! assert_eq!(lo.index, 1);
//! let addrs = host.addresses(Some(lo.index), Family::V4)?;
//! assert!(addrs.iter().all(|a| a.index == lo.index));
//! # Ok(())
//! # }
//! ```

mod addr;
mod configure;
pub mod conntrack;
mod device;
mod error;
mod file_lock;
pub mod firewall;
mod handle;
mod iptables;
mod link;
mod link_kinds;
mod neigh;
mod netlink;
mod netns;
mod nft_foreign;
mod route;
mod rule;
pub mod sysctl;
pub mod tc;
mod tun;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

use netlink_packet_route::AddressFamily;

pub use addr::{Address, AddressOptions, DAD_POLL, DAD_TIMEOUT};
pub use configure::configure_interface;
pub use device::{IpvlanMode, IpvlanSpec, LinkDetails};
pub use error::{Error, Result};
pub use file_lock::FileLock;
pub use handle::Handle;
/// The CIDR type used throughout the API (re-exported so callers match versions).
pub use ipnetwork::IpNetwork;
pub use iptables::Iptables;
pub use link::{
    BridgePortOptions, BridgeSpec, BridgeVlan, Link, MacAddr, MacvlanMode, MacvlanSpec, OperState,
    VethSpec, VETH_NAME_ATTEMPTS,
};
pub use link_kinds::{free_vrf_table, VlanSpec, Vrf, VLAN_ID_MAX};
pub use neigh::Neighbour;
pub use netns::{Netns, OwnedNetns, NETNS_RUN_DIR};
pub use nft_foreign::{NftForeignTable, NftListedRule};
pub use route::{NextHop, Route, SCOPE_HOST, SCOPE_LINK, SCOPE_UNIVERSE, TABLE_MAIN};
pub use rule::Rule;
pub use tun::{TapSpec, IFF_MULTI_QUEUE, IFF_NO_PI, IFF_TAP, IFF_VNET_HDR};

/// Which address family a listing covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// IPv4 and IPv6.
    #[default]
    All,
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
}

impl Family {
    fn address_family(self) -> AddressFamily {
        match self {
            Family::All => AddressFamily::Unspec,
            Family::V4 => AddressFamily::Inet,
            Family::V6 => AddressFamily::Inet6,
        }
    }

    fn matches(self, ip: IpAddr) -> bool {
        match self {
            Family::All => true,
            Family::V4 => ip.is_ipv4(),
            Family::V6 => ip.is_ipv6(),
        }
    }
}

/// A random u32 for names; falls back to time and pid if the kernel's
/// random source is unavailable (names only need to differ, not be secret).
pub(crate) fn random_u32() -> u32 {
    getrandom::u32().unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        t ^ std::process::id().rotate_left(16)
    })
}
