//! The kernel a plugin's ADD and DEL work on, behind two traits, so that a
//! plugin's algorithm runs on the real kernel in production and on an
//! in-memory one in tests that need no root:
//!
//! * [`NetKernel`] opens namespaces: the caller's ([`NetKernel::current`])
//!   and a pod's by path ([`NetKernel::open`], `CNI_NETNS`);
//! * [`NetnsHandle`] is what a plugin does inside one namespace, grouped
//!   as rtnetlink groups it: links (veth, bridge, macvlan, ipvlan, vlan,
//!   dummy, tap, vrf, ifb; look up, set up or down, rename, enslave, move
//!   to another namespace, MTU, MAC, promiscuous and all-multicast modes,
//!   transmit queue length, alias, delete), addresses, routes, policy
//!   rules, neighbours, queueing disciplines and filters (tc), and
//!   sysctls.
//!
//! [`LinuxKernel`] is the real one: its handle is [`Handle`] (rtnetlink),
//! the trait's methods are `Handle`'s own. `FakeKernel` (feature `fake`,
//! as tokio's `test-util`) keeps a model of each namespace's links,
//! addresses, routes, rules, neighbours, qdiscs and sysctls in memory,
//! records every change in order
//! (`FakeKernel::calls`) and fails the calls a test asks it to
//! (`FakeKernel::fail_nth`), so that rollback paths can be driven; a
//! conformance suite runs the same scripts on it and on Linux and compares
//! them after every step. The firewall has its own trait,
//! `cni_firewall::Firewall`, and its own recording double,
//! `cni_firewall::RecordingFirewall` (crate `cni-firewall`, feature
//! `recording`).
//!
//! A step written once over the traits:
//!
//! ```
//! use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
//! use cni_netns::VethSpec;
//!
//! /// A veth whose peer `eth0` is in the pod, with an address on it.
//! fn connect<K: NetKernel>(kernel: &K, pod_path: &str) -> cni_netns::Result<()> {
//!     let (host, pod) = (kernel.current()?, kernel.open(pod_path)?);
//!     host.setup_veth_with(&VethSpec {
//!         peer_name: "eth0".into(),
//!         peer_netns: Some(pod.netns()),
//!         up: true,
//!         ..Default::default()
//!     })?;
//!     let eth0 = pod.link_by_name("eth0")?;
//!     pod.add_address(eth0.index, "10.1.0.2/24".parse().unwrap(), Default::default())?;
//!     pod.set_up(eth0.index)
//! }
//!
//! let kernel = FakeKernel::new();
//! kernel.add_netns("/run/netns/pod");
//! connect(&kernel, "/run/netns/pod")?;
//! assert!(kernel.link_names("/run/netns/pod").contains(&"eth0".to_owned()));
//!
//! // The same step with a failing address: the caller sees the kernel's error.
//! let kernel = FakeKernel::new();
//! kernel.add_netns("/run/netns/pod");
//! kernel.fail_next(KernelOp::AddAddress, "/run/netns/pod", Errno::EACCES);
//! let e = connect(&kernel, "/run/netns/pod").unwrap_err();
//! assert!(e.to_string().contains("Permission denied"), "{e}");
//! # Ok::<(), cni_netns::Error>(())
//! ```

#[cfg(any(test, feature = "fake"))]
#[cfg_attr(docsrs, doc(cfg(feature = "fake")))]
pub mod conformance;
#[cfg(any(test, feature = "fake"))]
mod fake;

use std::net::IpAddr;
use std::time::Duration;

use ipnetwork::IpNetwork;

use crate::addr::{Address, AddressOptions};
use crate::devconf::Ipv4Conf;
use crate::error::Result;
use crate::handle::Handle;
use crate::link::{
    BridgePortOptions, BridgeSpec, BridgeVlan, IpvlanSpec, Link, LinkDetails, MacAddr, MacvlanSpec,
    TapSpec, VethSpec, VlanSpec, Vrf,
};
use crate::neigh::Neighbour;
use crate::netns::Netns;
use crate::route::KernelRoute;
use crate::rule::RoutingRule;
use crate::tc::{Filter, Qdisc, RedirectFilterKind, Tbf};
use crate::AddressFamilyFilter;

#[cfg(any(test, feature = "fake"))]
#[cfg_attr(docsrs, doc(cfg(feature = "fake")))]
pub use fake::{FakeHandle, FakeKernel, FakeNetns, KernelCall, KernelOp};
/// The errno of a kernel error ([`Error::errno`](crate::Error::errno)) and
/// of an injected fault (re-exported so callers
/// match versions).
pub use nix::errno::Errno;

/// Opens network namespaces: the entry point of a plugin's kernel work.
pub trait NetKernel: Send + Sync {
    /// A handle on one namespace.
    type Handle: NetnsHandle;

    /// The caller's namespace (the node's, for a plugin).
    fn current(&self) -> Result<Self::Handle>;

    /// The namespace at `path` (`CNI_NETNS`). A path that does not exist
    /// gives an error whose [`Error::is_netns_gone`](crate::Error::is_netns_gone)
    /// is true.
    fn open(&self, path: &str) -> Result<Self::Handle>;
}

/// Declares [`NetnsHandle`] and implements it for [`Handle`]: the verbs in
/// the second block are `Handle`'s own methods of the same name and
/// signature, and the implementation delegates to them, so that a new
/// kernel verb is `Handle`'s method, one line here and the fake's
/// implementation. (`Self::Netns` is [`Netns`] for `Handle`.)
macro_rules! netns_handle {
    (
        $(#[$meta:meta])*
        pub trait NetnsHandle { $($own:tt)* }
        delegated to Handle { $(
            $(#[$doc:meta])*
            fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
        )* }
        impl for Handle { $($own_impl:tt)* }
    ) => {
        $(#[$meta])*
        pub trait NetnsHandle: Send + Sync {
            $($own)*
            $(
                $(#[$doc])*
                fn $name(&self $(, $arg: $ty)*) -> $ret;
            )*
        }

        impl NetnsHandle for Handle {
            $($own_impl)*
            $(
                fn $name(&self $(, $arg: $ty)*) -> $ret {
                    Handle::$name(self $(, $arg)*)
                }
            )*
        }
    };
}

netns_handle! {
    /// The operations the interface plugins do inside one namespace: the
    /// methods of [`Handle`] of the same names, with the same meaning and
    /// errors.
    pub trait NetnsHandle {
        /// What names this namespace as the target of a link created from
        /// another one (a veth's peer, a macvlan made straight into the pod).
        type Netns: Sync;

        /// This namespace, as a target for links created elsewhere.
        fn netns(&self) -> &Self::Netns;

        /// The namespace's path, as used in error messages.
        fn netns_name(&self) -> &str;

        /// [`Handle::setup_veth`]: [`NetnsHandle::setup_veth_with`] with the
        /// peer `peer_name` in `peer_netns`, the host end up.
        fn setup_veth(
            &self,
            peer_name: &str,
            peer_netns: &Self::Netns,
            mtu: Option<u32>,
            peer_mac: Option<MacAddr>,
        ) -> Result<Link> {
            self.setup_veth_with(&VethSpec::setup(peer_name, peer_netns, mtu, peer_mac))
        }

        /// [`crate::sysctl::get_opt`] in this namespace: `None` when the
        /// sysctl does not exist.
        fn sysctl_get(&self, key: &str) -> Result<Option<String>>;

        /// The index of a veth's peer (`IFLA_LINK`), in the peer's
        /// namespace (what [`Handle::veth_peer_index`] is):
        /// [`Error::WrongLinkKind`](crate::Error::WrongLinkKind) when the
        /// link is not a veth.
        fn veth_peer_index(&self, index: u32) -> Result<u32> {
            let op = || format!("get veth peer of link #{index}");
            let link = self.link_by_index(index)?;
            if link.kind.as_deref() != Some("veth") {
                return Err(crate::Error::WrongLinkKind {
                    op: op(),
                    name: link.name,
                    found: link.kind.unwrap_or_else(|| "device".into()),
                    expected: "veth",
                    netns: self.netns_name().to_owned(),
                });
            }
            link.parent_index.ok_or_else(|| crate::Error::Protocol {
                op: op(),
                netns: self.netns_name().to_owned(),
                detail: "no IFLA_LINK".into(),
            })
        }

        /// The routing table of the VRF device `name` (what
        /// [`Handle::vrf_table`] is): [`Error::LinkNotFound`](crate::Error::LinkNotFound)
        /// when there is no such link,
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when
        /// it is not a VRF.
        fn vrf_table(&self, name: &str) -> Result<u32> {
            let op = || format!("get table of VRF {name}");
            match self.vrf_by_name(name) {
                Ok(Some(vrf)) => Ok(vrf.table),
                Ok(None) => Err(crate::Error::LinkNotFound {
                    op: op(),
                    name: name.to_owned(),
                    netns: self.netns_name().to_owned(),
                }),
                Err(crate::Error::WrongLinkKind { .. }) => Err(crate::Error::InvalidArgument {
                    op: op(),
                    reason: format!("{name} is not a VRF device"),
                }),
                Err(e) => Err(e),
            }
        }
    }
    delegated to Handle {
        // ---- links ----

        /// [`Handle::link_by_name`].
        fn link_by_name(&self, name: &str) -> Result<Link>;

        /// [`Handle::link_by_index`].
        fn link_by_index(&self, index: u32) -> Result<Link>;

        /// [`Handle::link_details`].
        fn link_details(&self, name: &str) -> Result<LinkDetails>;

        /// [`Handle::links`].
        fn links(&self) -> Result<Vec<Link>>;

        /// [`Handle::link_by_mac`].
        fn link_by_mac(&self, mac: MacAddr) -> Result<Option<Link>>;

        /// [`Handle::links_with_master`].
        fn links_with_master(&self, index: u32) -> Result<Vec<Link>>;

        /// [`Handle::default_route_link`].
        fn default_route_link(&self) -> Result<Option<Link>>;

        /// [`Handle::setup_veth_with`]: a veth whose end here has a random
        /// `veth%08x` name; returns that end.
        fn setup_veth_with(&self, spec: &VethSpec<'_, Self::Netns>) -> Result<Link>;

        /// [`Handle::ensure_bridge`].
        fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<Link>;

        /// [`Handle::add_macvlan`].
        fn add_macvlan(&self, spec: &MacvlanSpec<'_, Self::Netns>) -> Result<()>;

        /// [`Handle::add_ipvlan`].
        fn add_ipvlan(&self, spec: &IpvlanSpec<'_, Self::Netns>) -> Result<()>;

        /// [`Handle::set_macvlan_bc_queue_len`].
        fn set_macvlan_bc_queue_len(&self, index: u32, len: u32) -> Result<()>;

        /// [`Handle::add_vlan`].
        fn add_vlan(&self, spec: &VlanSpec<'_, Self::Netns>) -> Result<()>;

        /// [`Handle::vlan_id`].
        fn vlan_id(&self, name: &str) -> Result<Option<u16>>;

        /// [`Handle::add_dummy`].
        fn add_dummy(&self, name: &str) -> Result<Link>;

        /// [`Handle::add_tap`].
        fn add_tap(&self, spec: &TapSpec, selinux_context: Option<&str>) -> Result<Link>;

        /// [`Handle::add_vrf`].
        fn add_vrf(&self, name: &str, table: u32) -> Result<Vrf>;

        /// [`Handle::vrf_by_name`].
        fn vrf_by_name(&self, name: &str) -> Result<Option<Vrf>>;

        /// [`Handle::vrfs`].
        fn vrfs(&self) -> Result<Vec<Vrf>>;

        /// [`Handle::set_up`].
        fn set_up(&self, index: u32) -> Result<()>;

        /// [`Handle::set_down`].
        fn set_down(&self, index: u32) -> Result<()>;

        /// [`Handle::set_master`].
        fn set_master(&self, index: u32, master: u32) -> Result<()>;

        /// [`Handle::set_nomaster`].
        fn set_nomaster(&self, index: u32) -> Result<()>;

        /// [`Handle::set_alias`].
        fn set_alias(&self, index: u32, alias: &str) -> Result<()>;

        /// [`Handle::move_to_netns`].
        fn move_to_netns(&self, index: u32, netns: &Self::Netns) -> Result<()>;

        /// [`Handle::set_mac`].
        fn set_mac(&self, index: u32, mac: MacAddr) -> Result<()>;

        /// [`Handle::set_mtu`].
        fn set_mtu(&self, index: u32, mtu: u32) -> Result<()>;

        /// [`Handle::set_promisc`].
        fn set_promisc(&self, index: u32, on: bool) -> Result<()>;

        /// [`Handle::set_allmulti`].
        fn set_allmulti(&self, index: u32, on: bool) -> Result<()>;

        /// [`Handle::set_txqlen`].
        fn set_txqlen(&self, index: u32, txqlen: u32) -> Result<()>;

        /// [`Handle::link_txqlen`].
        fn link_txqlen(&self, index: u32) -> Result<u32>;

        /// [`Handle::link_alias`].
        fn link_alias(&self, index: u32) -> Result<Option<String>>;

        /// [`Handle::add_ifb`].
        fn add_ifb(&self, name: &str, mtu: u32, alias: Option<&str>) -> Result<Link>;

        /// [`Handle::rename`].
        fn rename(&self, index: u32, new_name: &str) -> Result<()>;

        /// [`Handle::delete_link`].
        fn delete_link(&self, index: u32) -> Result<()>;

        /// [`Handle::delete_link_by_name`]: `false` when there was none.
        fn delete_link_by_name(&self, name: &str) -> Result<bool>;

        /// [`Handle::wait_oper_up`].
        fn wait_oper_up(&self, index: u32, timeout: Duration) -> Result<Link>;

        /// [`Handle::set_bridge_port`].
        fn set_bridge_port(&self, index: u32, opts: &BridgePortOptions) -> Result<()>;

        /// [`Handle::add_bridge_vlans`].
        fn add_bridge_vlans(&self, index: u32, vlans: &[BridgeVlan], on_bridge: bool) -> Result<()>;

        /// [`Handle::del_bridge_vlans`].
        fn del_bridge_vlans(&self, index: u32, vlans: &[BridgeVlan], on_bridge: bool) -> Result<()>;

        // ---- addresses ----

        /// [`Handle::addresses`].
        fn addresses(
            &self,
            index: Option<u32>,
            family: AddressFamilyFilter,
        ) -> Result<Vec<Address>>;

        /// [`Handle::add_address`].
        fn add_address(&self, index: u32, addr: IpNetwork, opts: AddressOptions) -> Result<()>;

        /// [`Handle::del_address`].
        fn del_address(&self, index: u32, addr: IpNetwork) -> Result<()>;

        /// [`Handle::settle_addresses`].
        fn settle_addresses(
            &self,
            index: u32,
            addresses: &[IpAddr],
            timeout: Duration,
        ) -> Result<()>;

        // ---- routes ----

        /// [`Handle::routes`].
        fn routes(&self, family: AddressFamilyFilter) -> Result<Vec<KernelRoute>>;

        /// [`Handle::add_route`].
        fn add_route(&self, r: &KernelRoute) -> Result<()>;

        /// [`Handle::add_route_ecmp`].
        fn add_route_ecmp(&self, r: &KernelRoute) -> Result<()>;

        /// [`Handle::replace_route`].
        fn replace_route(&self, r: &KernelRoute) -> Result<()>;

        /// [`Handle::del_route`].
        fn del_route(&self, r: &KernelRoute) -> Result<()>;

        // ---- policy rules ----

        /// [`Handle::rules`].
        fn rules(&self, family: AddressFamilyFilter) -> Result<Vec<RoutingRule>>;

        /// [`Handle::add_rule`].
        fn add_rule(&self, r: &RoutingRule) -> Result<()>;

        /// [`Handle::del_rule`].
        fn del_rule(&self, r: &RoutingRule) -> Result<()>;

        /// [`Handle::copy_route_to_table`].
        fn copy_route_to_table(&self, r: &KernelRoute, table: u32) -> Result<()>;

        // ---- neighbours ----

        /// [`Handle::neighbours`].
        fn neighbours(
            &self,
            index: Option<u32>,
            family: AddressFamilyFilter,
        ) -> Result<Vec<Neighbour>>;

        // ---- queueing disciplines and filters (tc) ----

        /// [`Handle::qdiscs`].
        fn qdiscs(&self, index: u32) -> Result<Vec<Qdisc>>;

        /// [`Handle::add_tbf`].
        fn add_tbf(&self, index: u32, tbf: &Tbf) -> Result<()>;

        /// [`Handle::add_ingress_qdisc`].
        fn add_ingress_qdisc(&self, index: u32) -> Result<()>;

        /// [`Handle::delete_qdisc`].
        fn delete_qdisc(&self, index: u32, parent: u32) -> Result<bool>;

        /// [`Handle::filters`].
        fn filters(&self, index: u32, parent: u32) -> Result<Vec<Filter>>;

        /// [`Handle::add_redirect_filter`].
        fn add_redirect_filter(
            &self,
            index: u32,
            target: u32,
            kind: RedirectFilterKind,
        ) -> Result<()>;

        // ---- sysctls ----

        /// [`Handle::sysctl_set`].
        fn sysctl_set(&self, key: &str, value: &str) -> Result<bool>;

        /// [`Handle::sysctl_write`]: written even when it holds the value.
        fn sysctl_write(&self, key: &str, value: &str) -> Result<()>;

        /// [`Handle::sysctl_set_in`].
        fn sysctl_set_in(&self, dir: &str, entries: &[(&str, &str)]) -> Result<Vec<Result<bool>>>;

        /// [`Handle::set_ipv4_conf`].
        fn set_ipv4_conf(&self, index: u32, settings: &[(Ipv4Conf, u32)]) -> Result<()>;

        /// [`Handle::enable_forwarding`].
        fn enable_forwarding(&self, ipv4: bool, ipv6: bool) -> Result<()>;
    }
    impl for Handle {
        type Netns = Netns;

        fn netns(&self) -> &Netns {
            Handle::netns(self)
        }
        fn netns_name(&self) -> &str {
            Handle::netns_name(self)
        }
        fn sysctl_get(&self, key: &str) -> Result<Option<String>> {
            self.run(|| crate::sysctl::get_opt(key))?
        }
    }
}

/// The real kernel: rtnetlink [`Handle`]s on real namespaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinuxKernel;

impl NetKernel for LinuxKernel {
    type Handle = Handle;

    fn current(&self) -> Result<Handle> {
        Handle::current()
    }

    fn open(&self, path: &str) -> Result<Handle> {
        Handle::in_netns(&Netns::open(path)?)
    }
}
