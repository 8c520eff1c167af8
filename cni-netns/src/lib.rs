//! Kernel network state for CNI plugins: network namespaces, links,
//! addresses, routes, neighbours and sysctls over a small synchronous
//! rtnetlink socket (no async runtime), plus the firewall.
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
//! * [`firewall`] programs masquerade, port mappings and the bridge MAC
//!   spoof check (nftables; see [below](#the-firewall)); [`conntrack`]
//!   flushes stale UDP conntrack entries.
//! * [`RoutingRule`] routing policy rules (`ip rule`) on the same [`Handle`]
//!   (the `flock` sbr takes is `cni_files::FileLock`).
//! * [`Iptables`] runs the system `iptables`/`ip6tables`, and
//!   [`NftForeignTable`] puts rules of ours into an nftables table another
//!   program owns: for the firewall plugin, which opens the node's own
//!   firewall.
//!
//! Errors name the operation, the object and the namespace:
//! `add address 10.1.0.5/24 to eth0 in /run/netns/x: File exists`.
//!
//! ```
//! use cni_netns::{AddressFamilyFilter, Handle};
//!
//! # fn main() -> cni_netns::Result<()> {
//! let host = Handle::current()?;
//! let lo = host.link_by_name("lo")?;
//! assert_eq!(lo.index, 1);
//! let addrs = host.addresses(Some(lo.index), AddressFamilyFilter::V4)?;
//! assert!(addrs.iter().all(|a| a.index == lo.index));
//! # Ok(())
//! # }
//! ```
//!
//! # The firewall
//!
//! A plugin builds one attachment's [`RuleSpec`](firewall::RuleSpec)
//! (masquerade, port mappings or MAC spoof check) and calls
//! [`Firewall`](firewall::Firewall)`::add`, `delete` or `check`;
//! `delete_owned` removes what an attachment owns without its spec, `list`
//! and `gc` work per network. The caller picks the
//! [`Backend`](firewall::Backend) (the plugin binaries read
//! `CNI_FIREWALL_BACKEND`); nothing here reads the environment. The layers:
//!
//! 1. the rule families, one file each (`masquerade`, `hostport`,
//!    `macspoof`): a table's fixed chains, rules and maps, and the map
//!    elements of one attachment, as values of [`firewall::model`];
//! 2. `batch`: the atomic batches that create a table's shared objects and
//!    install, delete or expire an attachment's elements;
//! 3. `engine`: ADD / DEL / CHECK / list / GC written once, over a driver
//!    that sends batches and reads tables back: [`NativeFirewall`](firewall::NativeFirewall)
//!    (nf_tables netlink, the default) or [`NftFirewall`](firewall::NftFirewall)
//!    (`nft -j`); both send the same state.
//!
//! Each table (`inet cni_rs_masq`, `inet cni_rs_hostport`,
//! `bridge cni_rs_macspoofchk`, apart from the Go reference's) holds fixed
//! rules that look packets up in maps. An attachment is nothing but map
//! elements, each tagged with its owner (`<hash>, net: N, if: I, id: C`) and
//! carrying the owner's id or its DNAT destination as data, so a key held by
//! another attachment makes an ADD fail instead of changing owner:
//!
//! | family | an attachment's elements |
//! |---|---|
//! | masquerade | `masq_src4`: pod IP (and `*6`); shared by the network's attachments, not owned: `masq_nets4`: pod subnet . pod subnet (and `*6`) |
//! | port mappings | per mapping: `hp_owner`: host IP . proto . port; `hp_dnat4`: proto . port → pod IP . port; with `snat`, `hp_masq4`: pod subnet . proto . port (hairpin) and `hp_lo4`: proto . port (localhost); with `masqAll`, `hp_all4`: proto . port; `hip_*` for a host IP; the same for IPv6 (no localhost key) |
//! | MAC spoof check | `sc_ports`: host veth; `sc_allowed`: host veth . pod MAC |
//!
//! plus one anchor in map `owners` whose data fingerprints the rest. No
//! element an attachment owns is in an interval (pipapo) map, whose
//! insertion copies the whole map and whose deletion is linear in its
//! size: the masquerade's subnets are one shared element per subnet, added
//! by every ADD if missing, removed by the DEL (or GC) that removes the
//! subnet's last address: that decision is made on a listing and commits
//! only if nf_tables' ruleset generation has not moved since it was read
//! (an ADD in the subnet landing meanwhile keeps the element; the decision
//! is then made again). Port mappings' hairpin keys (`hp_masq*`: pod
//! subnet . proto . port) are still per mapping in interval maps. Adding or
//! removing data-map elements never makes the kernel re-validate the
//! table, so ADD and DEL are one batch of a few elements whatever the
//! number of pods. A re-ADD finds its anchor and replaces what it owned; a
//! DEL whose keys differ from the ADD's (or the table missing) reads the
//! table once and removes by tag. On Linux 6.10 and later a DEL makes the
//! elements expire in 1 ms instead of deleting them, so the process does
//! not wait for an RCU grace period when its netlink socket closes.
//! `conditionsV4`/`conditionsV6` cannot be elements: those attachments also
//! get two tagged rules per mapping in chain `conditions` (the slow path).

mod addr;
mod configure;
pub mod conntrack;
mod devconf;
mod error;
pub mod firewall;
mod handle;
mod iptables;
pub mod kernel;
mod link;
mod neigh;
mod netlink;
mod netns;
mod nfnetlink;
mod nft_foreign;
mod poll;
mod route;
mod rule;
pub mod sysctl;
pub mod tc;
mod tool;

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
pub use iptables::Iptables;
pub use link::{
    free_vrf_table, BridgePortOptions, BridgeSpec, BridgeVlan, IpvlanMode, IpvlanSpec, Link,
    LinkDetails, MacAddr, MacvlanMode, MacvlanSpec, OperState, TapSpec, VethSpec, VlanSpec, Vrf,
    IFF_MULTI_QUEUE, IFF_NO_PI, IFF_TAP, IFF_VNET_HDR, VETH_NAME_ATTEMPTS, VLAN_ID_MAX,
};
pub use neigh::Neighbour;
pub use netns::{Netns, OwnedNetns, NETNS_RUN_DIR};
pub use nft_foreign::{NftForeignTable, NftListedRule};
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
