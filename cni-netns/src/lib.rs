#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The API
//!
//! * [`Netns`] opens, creates (like `ip netns add`) and deletes namespaces;
//!   [`Netns::run`] runs a closure on a fresh thread inside one.
//! * [`Handle`] is one rtnetlink socket bound to one namespace; every verb
//!   is a method on it ([`Handle::setup_veth`], [`Handle::ensure_bridge`],
//!   [`Handle::add_address`], [`Handle::add_route`], ...). Links are
//!   organised by kind (`link/`: veth, bridge, stacked on a parent —
//!   macvlan, ipvlan, vlan —, virtual — vrf, dummy —, tap); a kernel
//!   route is a [`KernelRoute`] (the spec's route is `cni_types::Route`).
//! * [`sysctl`] reads and writes `/proc/sys` from inside a namespace;
//!   [`Handle::sysctl_set`] does it through a handle, keeping the
//!   namespace's `/proc/sys/net/ipv4` and `ipv6` open (each lookup of those
//!   walks one kernel entry per namespace on the node), and
//!   [`Handle::set_ipv4_conf`] and [`Handle::forwarding`] write and read
//!   IPv4 per-link settings and the forwarding switches over netlink, in
//!   constant time.
//! * [`configure_interface`] is Go's `ipam.ConfigureIface`; [`configure_interface_with`]
//!   adds the pod interface's IPv6 DAD ([`Dad`]: off on a veth, optimistic on a
//!   shared segment).
//! * [`kernel`]: the operations the interface plugins do, behind a trait
//!   ([`kernel::NetKernel`], [`kernel::NetnsHandle`]) with the real
//!   implementation ([`kernel::LinuxKernel`]) and an in-memory recording
//!   one for tests without root (`kernel::FakeKernel`, feature `fake`).
//! * [`tc`] programs traffic control (TBF and ingress qdiscs, mirred
//!   redirect filters, IFB devices) for the bandwidth plugin.
//! * [`RoutingRule`] routing policy rules (`ip rule`) on the same [`Handle`]
//!   (the `flock` sbr takes is `cni_files::FileLock`).
//!

mod addr;
mod configure;
mod devconf;
mod error;
mod handle;
pub mod kernel;
mod link;
mod neigh;
#[doc(hidden)]
pub mod netlink;
mod netns;
#[doc(hidden)]
pub mod poll;
mod route;
mod rule;
pub mod sysctl;
pub mod tc;
#[doc(hidden)]
pub mod tool;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

use netlink_packet_route::AddressFamily;

pub use addr::{Address, AddressOptions, DAD_TIMEOUT};
pub use configure::{configure_interface, configure_interface_with, set_dad, Dad};
pub use devconf::Ipv4Conf;
pub use error::{Error, Result};
pub use handle::Handle;
/// The CIDR type used throughout the API (re-exported so callers match versions).
pub use ipnetwork::IpNetwork;
pub use link::{
    free_vrf_table, BridgePortOptions, BridgeSpec, BridgeVlan, IpvlanMode, IpvlanSpec, Link,
    LinkDetails, MacAddr, MacvlanMode, MacvlanSpec, OperState, TapSpec, VethSpec, VlanSpec, Vrf,
    IFF_MULTI_QUEUE, IFF_NO_PI, IFF_TAP, IFF_VNET_HDR, VETH_NAME_ATTEMPTS, VLAN_ID_MAX,
};
pub use neigh::Neighbour;
#[doc(hidden)]
pub use netns::{label as netns_label, run_at};
pub use netns::{Netns, OwnedNetns, NETNS_RUN_DIR};
pub use route::{KernelRoute, NextHop, SCOPE_HOST, SCOPE_LINK, SCOPE_UNIVERSE, TABLE_MAIN};
pub use rule::RoutingRule;

/// Which address families a listing (addresses, routes, rules,
/// neighbours) covers: a filter, not a family of one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressFamilyFilter {
    /// IPv4 and IPv6.
    #[default]
    All,
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
}

impl AddressFamilyFilter {
    fn address_family(self) -> AddressFamily {
        match self {
            AddressFamilyFilter::All => AddressFamily::Unspec,
            AddressFamilyFilter::V4 => AddressFamily::Inet,
            AddressFamilyFilter::V6 => AddressFamily::Inet6,
        }
    }

    fn matches(self, ip: IpAddr) -> bool {
        match self {
            AddressFamilyFilter::All => true,
            AddressFamilyFilter::V4 => ip.is_ipv4(),
            AddressFamilyFilter::V6 => ip.is_ipv6(),
        }
    }
}

/// A random u32 for names (the workspace's one source, `cni_types::random`).
pub(crate) use cni_types::random::random_u32;
