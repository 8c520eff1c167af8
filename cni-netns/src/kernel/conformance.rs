//! The kernel conformance suite: one table of scripted kernel operations
//! ([`scripts`]), each step with the outcome Linux gives it, run on two
//! kernels in lockstep ([`compare`]) and compared after every step: the
//! links (name, kind, MTU, up, promiscuous, all-multicast, transmit queue
//! length, master), addresses, routes, policy rules, neighbours, the
//! qdiscs and redirect filters added, and touched sysctls of both
//! namespaces, and the step's outcome (`ok`, or the errno).
//!
//! `cni-netns`'s tests run it on [`LinuxKernel`](super::LinuxKernel) (in
//! throwaway namespaces, as root) against [`FakeKernel`](super::FakeKernel),
//! and the fake alone against the table's outcomes (no root). A plugin
//! author's own [`NetKernel`] double can be checked the same way.
//!
//! What is compared is what the fake models: routes of the local table,
//! link-local IPv6 addresses and routes, multicast and broadcast routes,
//! route metrics and the kernel's default qdiscs (handle 0) are left out.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::{NetKernel, NetnsHandle};
use crate::addr::AddressOptions;
use crate::error::Result;
use crate::link::{BridgeSpec, MacvlanSpec, VethSpec};
use crate::route::{KernelRoute, TABLE_MAIN};
use crate::rule::RoutingRule;
use crate::tc::{PschedClock, RedirectFilterKind, Tbf, HANDLE_INGRESS, HANDLE_ROOT};
use crate::AddressFamilyFilter;

/// One of the two namespaces a script works in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    /// The first.
    A,
    /// The second.
    B,
}

impl Ns {
    fn i(self) -> usize {
        self as usize
    }
}

/// A route of a step: destination, gateway, device, table.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// Destination.
    pub dst: &'static str,
    /// Gateway.
    pub via: Option<&'static str>,
    /// Device (a link name of the script).
    pub dev: Option<&'static str>,
    /// Table (main when `None`).
    pub table: Option<u32>,
}

/// One kernel operation of a script; links are named by the script (a
/// veth's end made here, whose real name is random, by its alias).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Op {
    /// `setup_veth_with`: the end here (`alias`), its peer `peer` in
    /// `peer_ns`, the end here up or not, enslaved to `master` or not.
    Veth {
        /// Where the end here is made.
        ns: Ns,
        /// The script's name of that end.
        alias: &'static str,
        /// The peer's name.
        peer: &'static str,
        /// The peer's namespace.
        peer_ns: Ns,
        /// The end here up.
        up: bool,
        /// The end's master.
        master: Option<&'static str>,
    },
    /// `ensure_bridge`.
    Bridge(Ns, &'static str),
    /// `add_macvlan` (bridge mode) of `name` on `parent`, into a namespace.
    Macvlan(Ns, &'static str, &'static str, Ns),
    /// `add_dummy`.
    Dummy(Ns, &'static str),
    /// `add_vrf`.
    Vrf(Ns, &'static str, u32),
    /// `set_up`.
    Up(Ns, &'static str),
    /// `set_down`.
    Down(Ns, &'static str),
    /// `rename`.
    Rename(Ns, &'static str, &'static str),
    /// `set_master`.
    Master(Ns, &'static str, &'static str),
    /// `set_nomaster`.
    NoMaster(Ns, &'static str),
    /// `delete_link`.
    Delete(Ns, &'static str),
    /// `delete_link_by_name`, with whether there was one.
    DeleteByName(Ns, &'static str),
    /// `move_to_netns`.
    Move(Ns, &'static str, Ns),
    /// `add_address` (`nodad` for IPv6).
    AddAddr(Ns, &'static str, &'static str),
    /// `add_address` with `noprefixroute`.
    AddAddrNoPrefixRoute(Ns, &'static str, &'static str),
    /// `del_address`.
    DelAddr(Ns, &'static str, &'static str),
    /// `add_route`.
    AddRoute(Ns, Route),
    /// `add_route_ecmp`.
    AddRouteEcmp(Ns, Route),
    /// `replace_route`.
    ReplaceRoute(Ns, Route),
    /// `del_route`.
    DelRoute(Ns, Route),
    /// `sysctl_set` (`{link}` in the key: the link's real name).
    Sysctl(Ns, &'static str, &'static str),
    /// `sysctl_write`: written even when it holds the value (`{link}` in
    /// the key: the link's real name).
    SysctlWrite(Ns, &'static str, &'static str),
    /// `enable_forwarding` of both families.
    Forwarding(Ns),
    /// `set_ipv4_conf` of a link: `arp_notify` and `route_localnet`.
    Ipv4Conf(Ns, &'static str, u32),
    /// `set_mtu`.
    Mtu(Ns, &'static str, u32),
    /// `set_promisc`.
    Promisc(Ns, &'static str, bool),
    /// `set_allmulti`.
    Allmulti(Ns, &'static str, bool),
    /// `set_txqlen`.
    TxQLen(Ns, &'static str, u32),
    /// `add_ifb` of a name with an MTU.
    Ifb(Ns, &'static str, u32),
    /// `add_rule`: `from src lookup table [pref p]`.
    AddRule(Ns, &'static str, u32, Option<u32>),
    /// `del_rule`: `[from src] [lookup table] [pref p]` (0: any table).
    DelRule(Ns, Option<&'static str>, u32, Option<u32>),
    /// `copy_route_to_table` of the main table's route to `dst` (as
    /// listed) into a table.
    CopyRoute(Ns, &'static str, u32),
    /// `add_tbf` (8 Mbit/s, 80 kbit burst) on a link.
    Tbf(Ns, &'static str),
    /// `add_ingress_qdisc` on a link.
    Ingress(Ns, &'static str),
    /// `add_redirect_filter` from a link's ingress to another link.
    Redirect(Ns, &'static str, &'static str),
    /// `delete_qdisc` of a link's root (`true`) or ingress qdisc, with
    /// whether there was one.
    DelQdisc(Ns, &'static str, bool),
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// A step: an operation and the outcome Linux gives it (`"ok"`, an errno
/// name as `"ENETDOWN"`, or `"error Kind"` for an error without one).
#[derive(Debug, Clone)]
pub struct Step {
    /// The operation.
    pub op: Op,
    /// Its outcome on Linux.
    pub expect: &'static str,
}

/// A named sequence of steps, run in two fresh namespaces.
#[derive(Debug, Clone)]
pub struct Script {
    /// What it checks.
    pub name: &'static str,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

fn ok(op: Op) -> Step {
    Step { op, expect: "ok" }
}

fn err(op: Op, expect: &'static str) -> Step {
    Step { op, expect }
}

impl Step {
    /// The step with outcome `expect`.
    fn with(self, expect: &'static str) -> Step {
        Step { expect, ..self }
    }
}

fn route(dst: &'static str, via: Option<&'static str>, dev: Option<&'static str>) -> Route {
    Route {
        dst,
        via,
        dev,
        table: None,
    }
}

use Ns::{A, B};
use Op::*;

/// The suite: every script, each step with its outcome on Linux (kernel
/// 6.x).
pub fn scripts() -> Vec<Script> {
    vec![
        Script {
            name: "an IPv4 address on a down link, routes through it, down flushes",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(Down(A, "br0")),
                ok(AddAddr(A, "br0", "10.0.0.1/24")),
                err(
                    AddRoute(A, route("10.2.0.0/16", None, Some("br0"))),
                    "ENETDOWN",
                ),
                err(
                    AddRoute(A, route("10.1.0.0/16", Some("10.0.0.254"), Some("br0"))),
                    "ENETUNREACH",
                ),
                ok(Up(A, "br0")),
                ok(AddRoute(
                    A,
                    route("10.1.0.0/16", Some("10.0.0.254"), Some("br0")),
                )),
                ok(AddRoute(A, route("10.2.0.0/16", None, Some("br0")))),
                ok(Down(A, "br0")),
                ok(Up(A, "br0")),
                ok(DelAddr(A, "br0", "10.0.0.1/24")),
            ],
        },
        Script {
            name: "IPv6 addresses on down, with and without keep_addr_on_down",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(AddAddr(A, "br0", "2001:db8::1/64")),
                ok(AddRoute(A, route("2001:db8:1::/64", None, Some("br0")))),
                ok(Down(A, "br0")),
                ok(Up(A, "br0")),
                ok(Sysctl(A, "net/ipv6/conf/{br0}/keep_addr_on_down", "1")),
                ok(AddAddr(A, "br0", "2001:db8::1/64")),
                ok(AddAddr(A, "br0", "10.0.0.1/24")),
                ok(Down(A, "br0")),
                err(
                    AddRoute(A, route("2001:db8:2::/64", None, Some("br0"))),
                    "ENETDOWN",
                ),
                ok(Up(A, "br0")),
            ],
        },
        Script {
            name: "rename: to its own name, while up, to a taken name",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(Bridge(A, "br1")),
                ok(Rename(A, "br0", "br0")),
                ok(Rename(A, "br0", "br2")),
                err(Rename(A, "br2", "br1"), "EEXIST"),
                ok(Down(A, "br2")),
                ok(Rename(A, "br2", "br0")),
                err(Rename(A, "nothere", "br5"), "ENODEV"),
            ],
        },
        Script {
            name: "masters: enslave, release, delete a master with members",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "p0",
                    peer_ns: B,
                    up: true,
                    master: Some("br0"),
                }),
                ok(Veth {
                    ns: A,
                    alias: "v1",
                    peer: "p1",
                    peer_ns: A,
                    up: false,
                    master: None,
                }),
                ok(Master(A, "v1", "br0")),
                ok(Master(A, "p1", "br0")),
                ok(NoMaster(A, "p1")),
                ok(NoMaster(A, "p1")),
                err(Master(A, "br0", "br0"), "ELOOP"),
                ok(Delete(A, "br0")),
                ok(Bridge(A, "br0")),
            ],
        },
        Script {
            name: "veths: peers up and down, deleting one end, a taken peer name",
            steps: vec![
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "eth0",
                    peer_ns: B,
                    up: true,
                    master: None,
                }),
                ok(Up(B, "eth0")),
                ok(AddAddr(B, "eth0", "10.0.0.2/24")),
                ok(AddRoute(
                    B,
                    route("0.0.0.0/0", Some("10.0.0.1"), Some("eth0")),
                )),
                err(
                    Veth {
                        ns: A,
                        alias: "v1",
                        peer: "eth0",
                        peer_ns: B,
                        up: true,
                        master: None,
                    },
                    "error VethPeerExists",
                ),
                ok(Down(A, "v0")),
                ok(Delete(A, "v0")),
                err(Delete(B, "eth0"), "ENODEV"),
                ok(DeleteByName(A, "nothere")),
            ],
        },
        Script {
            name: "a link moved to another namespace arrives down and bare",
            steps: vec![
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "eth0",
                    peer_ns: A,
                    up: true,
                    master: None,
                }),
                ok(Up(A, "eth0")),
                ok(AddAddr(A, "eth0", "10.0.0.2/24")),
                ok(AddAddr(A, "eth0", "2001:db8::2/64")),
                ok(Move(A, "eth0", B)),
                ok(Bridge(A, "eth0")),
                err(Move(B, "eth0", A), "EEXIST"),
                ok(Rename(B, "eth0", "eth1")),
                ok(Move(B, "eth1", A)),
            ],
        },
        Script {
            name: "routes: add, exists, replace, delete, unreachable gateways",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(AddAddr(A, "br0", "10.0.0.1/24")),
                ok(AddRoute(
                    A,
                    route("10.5.0.0/16", Some("10.0.0.254"), Some("br0")),
                )),
                err(
                    AddRoute(A, route("10.5.0.0/16", Some("10.0.0.253"), Some("br0"))),
                    "EEXIST",
                ),
                ok(AddRouteEcmp(
                    A,
                    route("10.5.0.0/16", Some("10.0.0.253"), Some("br0")),
                )),
                ok(ReplaceRoute(
                    A,
                    route("10.5.0.0/16", Some("10.0.0.252"), Some("br0")),
                )),
                ok(DelRoute(A, route("10.5.0.0/16", None, Some("br0")))),
                ok(DelRoute(A, route("10.5.0.0/16", None, Some("br0")))),
                err(
                    DelRoute(A, route("10.5.0.0/16", None, Some("br0"))),
                    "ESRCH",
                ),
                err(
                    AddRoute(A, route("10.6.0.0/16", Some("192.0.2.1"), Some("br0"))),
                    "ENETUNREACH",
                ),
                ok(AddRoute(A, route("10.7.0.0/16", Some("10.0.0.9"), None))),
                err(
                    AddRoute(A, route("10.8.0.0/16", None, Some("nothere"))),
                    "ENODEV",
                ),
                ok(AddAddr(A, "br0", "2001:db8::1/64")),
                ok(AddRoute(
                    A,
                    route("::/0", Some("2001:db8::ff"), Some("br0")),
                )),
                ok(Delete(A, "br0")),
            ],
        },
        Script {
            name: "addresses: duplicates, noprefixroute, deleting what is not there",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(AddAddr(A, "br0", "10.0.0.1/24")),
                err(AddAddr(A, "br0", "10.0.0.1/24"), "EEXIST"),
                ok(AddAddr(A, "br0", "10.0.0.2/24")),
                ok(AddAddrNoPrefixRoute(A, "br0", "10.9.0.1/24")),
                ok(AddAddr(A, "br0", "10.3.0.1/32")),
                err(DelAddr(A, "br0", "10.4.0.1/24"), "EADDRNOTAVAIL"),
                ok(DelAddr(A, "br0", "10.0.0.1/24")),
                err(AddAddr(A, "nothere", "10.0.0.1/24"), "ENODEV"),
            ],
        },
        Script {
            name: "sysctls: per link, forwarding, gone with the link",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(Sysctl(A, "net/ipv4/conf/{br0}/arp_notify", "1")),
                ok(Sysctl(A, "net/ipv6/conf/{br0}/accept_ra", "0")),
                ok(SysctlWrite(A, "net/ipv4/conf/{br0}/arp_notify", "1")),
                ok(SysctlWrite(A, "net/ipv4/conf/{br0}/arp_notify", "0")),
                ok(Forwarding(A)),
                ok(Ipv4Conf(A, "br0", 1)),
                ok(Ipv4Conf(A, "br0", 0)),
                err(Ipv4Conf(A, "nothere", 1), "ENODEV"),
                ok(Rename(A, "br0", "br1")),
                ok(Delete(A, "br1")),
                err(Sysctl(A, "net/ipv4/conf/{br1}/arp_notify", "1"), "ENOENT"),
                err(
                    SysctlWrite(A, "net/ipv4/conf/{br1}/arp_notify", "1"),
                    "ENOENT",
                ),
            ],
        },
        Script {
            name: "loopback, IPv6 addresses and routes, tables",
            steps: vec![
                ok(Up(A, "lo")),
                ok(Bridge(A, "br0")),
                ok(AddAddr(A, "br0", "2001:db8::1/64")),
                err(AddAddr(A, "br0", "2001:db8::1/64"), "EEXIST"),
                ok(AddAddr(A, "br0", "2001:db8:5::1/128")),
                ok(AddRoute(
                    A,
                    route("2001:db8:9::/64", Some("2001:db8::ff"), None),
                )),
                err(
                    AddRoute(A, route("2001:db8:9::/64", Some("2001:db8::fe"), None)),
                    "EEXIST",
                ),
                ok(AddRouteEcmp(
                    A,
                    route("2001:db8:9::/64", Some("2001:db8::fe"), Some("br0")),
                )),
                ok(AddRoute(
                    A,
                    Route {
                        table: Some(100),
                        ..route("10.0.0.0/8", None, Some("br0"))
                    },
                )),
                ok(DelRoute(
                    A,
                    Route {
                        table: Some(100),
                        ..route("10.0.0.0/8", None, None)
                    },
                )),
                ok(ReplaceRoute(A, route("2001:db8:7::/64", None, Some("br0")))),
                ok(DelAddr(A, "br0", "2001:db8::1/64")),
                err(DelAddr(A, "br0", "2001:db8::1/64"), "EADDRNOTAVAIL"),
                ok(Down(A, "lo")),
            ],
        },
        Script {
            name: "a bridge of veths: members, their peers, deleting the bridge",
            steps: vec![
                ok(Bridge(A, "br0")),
                ok(AddAddr(A, "br0", "10.0.0.1/24")),
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "eth0",
                    peer_ns: B,
                    up: true,
                    master: Some("br0"),
                }),
                ok(Veth {
                    ns: A,
                    alias: "v1",
                    peer: "eth1",
                    peer_ns: B,
                    up: false,
                    master: Some("br0"),
                }),
                ok(Down(A, "v1")),
                ok(Down(A, "v1")),
                ok(Up(B, "eth1")),
                ok(Delete(B, "eth1")),
                ok(Delete(A, "br0")),
                ok(Bridge(A, "br0")),
                ok(Master(A, "v0", "br0")),
                // The old master is released first.
                err(Master(A, "v0", "nothere"), "EINVAL"),
                ok(Delete(A, "v0")),
                ok(Move(B, "lo", A)).with("EINVAL"),
                ok(Move(A, "br0", B)).with("EINVAL"),
            ],
        },
        Script {
            name: "ensure_bridge on a link that is not a bridge",
            steps: vec![
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "br0",
                    peer_ns: A,
                    up: false,
                    master: None,
                }),
                err(Bridge(A, "br0"), "error WrongLinkKind"),
                err(Master(A, "v0", "br0"), "EOPNOTSUPP"),
                ok(Rename(A, "br0", "this-name-is-too-long")).with("ERANGE"),
                err(Delete(A, "lo"), "EOPNOTSUPP"),
                ok(Down(A, "lo")),
            ],
        },
        // A kernel without dummy or vrf refuses each script's first step
        // (EOPNOTSUPP, nothing made): `compare`'s `lacking`.
        Script {
            name: "a dummy and a macvlan on it (where the kernel has dummy)",
            steps: vec![
                ok(Dummy(A, "d0")),
                ok(Macvlan(A, "mv0", "d0", B)),
                ok(AddAddr(A, "d0", "10.0.0.1/24")),
                ok(Up(A, "d0")),
            ],
        },
        Script {
            name: "a VRF and its member (where the kernel has vrf and dummy)",
            steps: vec![
                ok(Vrf(A, "red", 10)),
                ok(Dummy(A, "d0")),
                ok(Master(A, "d0", "red")),
                ok(AddAddr(A, "d0", "10.0.0.1/24")),
                ok(Up(A, "d0")),
                ok(NoMaster(A, "d0")),
            ],
        },
        Script {
            name: "policy rules: the kernel's priorities, duplicates, deletion by selector",
            steps: vec![
                ok(AddRule(A, "10.0.0.1/32", 100, None)),
                // Not a duplicate: the kernel's priority moved on.
                ok(AddRule(A, "10.0.0.1/32", 100, None)),
                ok(AddRule(A, "fd00::1/128", 100, None)),
                ok(AddRule(A, "10.0.0.3/32", 101, Some(32765))),
                err(AddRule(A, "10.0.0.3/32", 101, Some(32765)), "EEXIST"),
                ok(AddRule(A, "10.0.0.4/32", 5000, Some(100))),
                ok(AddRule(A, "10.0.0.5/32", 5000, None)),
                err(DelRule(A, Some("10.0.0.9/32"), 0, None), "ENOENT"),
                err(DelRule(A, Some("10.0.0.3/32"), 101, Some(1)), "ENOENT"),
                ok(DelRule(A, None, 100, None)),
                ok(DelRule(A, Some("10.0.0.3/32"), 101, None)),
                ok(DelRule(A, Some("fd00::1/128"), 0, None)),
                err(DelRule(A, Some("fd00::1/128"), 0, None), "ENOENT"),
            ],
        },
        Script {
            name: "sbr's tables: routes copied to a table, rules from the addresses",
            steps: vec![
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "eth0",
                    peer_ns: B,
                    up: true,
                    master: None,
                }),
                ok(Up(B, "eth0")),
                ok(AddAddr(B, "eth0", "10.1.0.2/24")),
                ok(AddAddr(B, "eth0", "fd00:1::2/64")),
                ok(AddRoute(
                    B,
                    route("0.0.0.0/0", Some("10.1.0.1"), Some("eth0")),
                )),
                ok(CopyRoute(B, "10.1.0.0/24", 100)),
                ok(CopyRoute(B, "0.0.0.0/0", 100)),
                ok(CopyRoute(B, "fd00:1::/64", 101)),
                // Copying again replaces.
                ok(CopyRoute(B, "10.1.0.0/24", 100)),
                ok(AddRule(B, "10.1.0.2/32", 100, None)),
                ok(AddRule(B, "fd00:1::2/128", 101, None)),
                ok(DelRoute(B, route("10.1.0.0/24", None, Some("eth0")))),
                // Its gateway is no longer on a route of the main table.
                err(CopyRoute(B, "0.0.0.0/0", 254), "ENETUNREACH"),
                ok(CopyRoute(B, "fd00:1::/64", 254)),
                // Down: every table's routes through the link go; the
                // rules stay.
                ok(Down(B, "eth0")),
                ok(Up(B, "eth0")),
                ok(Delete(A, "v0")),
            ],
        },
        Script {
            name: "link attributes: MTU, promiscuous, all-multicast, queue length",
            steps: vec![
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "eth0",
                    peer_ns: B,
                    up: false,
                    master: None,
                }),
                ok(Mtu(A, "v0", 9000)),
                err(Mtu(A, "v0", 10), "EINVAL"),
                err(Mtu(A, "v0", 70000), "EINVAL"),
                ok(Mtu(B, "eth0", 1280)),
                ok(Promisc(A, "v0", true)),
                ok(Allmulti(A, "v0", true)),
                ok(TxQLen(A, "v0", 500)),
                ok(Up(A, "v0")),
                ok(Promisc(A, "v0", false)),
                ok(Allmulti(B, "eth0", true)),
                ok(Move(B, "eth0", A)),
                err(Mtu(A, "gone", 1500), "ENODEV"),
                err(Promisc(A, "gone", true), "ENODEV"),
            ],
        },
        Script {
            name: "tc: a root TBF, ingress redirected to an IFB, deletion, a move",
            steps: vec![
                ok(Veth {
                    ns: A,
                    alias: "v0",
                    peer: "eth0",
                    peer_ns: B,
                    up: true,
                    master: None,
                }),
                ok(Ifb(A, "ifb0", 1400)),
                err(Ifb(A, "ifb0", 1400), "EEXIST"),
                ok(Tbf(A, "v0")),
                err(Tbf(A, "v0"), "EEXIST"),
                err(Redirect(A, "v0", "ifb0"), "EINVAL"),
                ok(Ingress(A, "v0")),
                err(Ingress(A, "v0"), "EEXIST"),
                ok(Redirect(A, "v0", "ifb0")),
                ok(Tbf(A, "ifb0")),
                ok(DelQdisc(A, "v0", false)),
                ok(DelQdisc(A, "v0", false)),
                ok(DelQdisc(A, "v0", true)),
                ok(Tbf(A, "v0")),
                ok(Down(A, "v0")),
                ok(DelQdisc(A, "gone", true)),
                err(Tbf(A, "gone"), "ENODEV"),
                // A moved link leaves its qdiscs behind.
                ok(Move(A, "ifb0", B)),
                ok(Delete(A, "v0")),
            ],
        },
    ]
}

/// The state of one namespace as compared: sorted descriptions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// `name kind mtu M [up] [master M]`.
    pub links: Vec<String>,
    /// `address on link`.
    pub addresses: Vec<String>,
    /// `[local ]dst [via gw] [dev link] [src s] table t scope s`.
    pub routes: Vec<String>,
    /// `key=value` of the sysctls touched so far.
    pub sysctls: Vec<String>,
    /// `pref P [-6 ]from S lookup T`.
    pub rules: Vec<String>,
    /// `ip on link`.
    pub neighbours: Vec<String>,
    /// `link kind handle parent` of the qdiscs added, `link filter kind
    /// prio P redirect target` of the filters under an ingress qdisc.
    pub qdiscs: Vec<String>,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "    links: {:?}", self.links)?;
        writeln!(f, "    addresses: {:?}", self.addresses)?;
        writeln!(f, "    routes: {:?}", self.routes)?;
        writeln!(f, "    rules: {:?}", self.rules)?;
        writeln!(f, "    neighbours: {:?}", self.neighbours)?;
        writeln!(f, "    qdiscs: {:?}", self.qdiscs)?;
        write!(f, "    sysctls: {:?}", self.sysctls)
    }
}

/// A script running on one kernel: its two namespaces, the real names of
/// the veth ends it named, the sysctls it touched.
pub struct Run<H: NetnsHandle> {
    handles: [H; 2],
    aliases: BTreeMap<&'static str, String>,
    sysctls: Vec<(Ns, String)>,
}

/// An index no link has.
const NO_LINK: u32 = 0x7fff_fff0;

impl<H: NetnsHandle> Run<H> {
    /// A run in namespaces `a` and `b` of `kernel`.
    pub fn new<K: NetKernel<Handle = H>>(kernel: &K, a: &str, b: &str) -> Result<Run<H>> {
        Ok(Run {
            handles: [kernel.open(a)?, kernel.open(b)?],
            aliases: BTreeMap::new(),
            sysctls: Vec::new(),
        })
    }

    fn h(&self, ns: Ns) -> &H {
        &self.handles[ns.i()]
    }

    fn real<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases.get(name).map_or(name, String::as_str)
    }

    fn alias<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases
            .iter()
            .find(|(_, real)| real.as_str() == name)
            .map_or(name, |(alias, _)| alias)
    }

    fn index(&self, ns: Ns, name: &str) -> u32 {
        self.h(ns)
            .link_by_name(self.real(name))
            .map_or(NO_LINK, |l| l.index)
    }

    fn key(&self, key: &str) -> String {
        let mut key = key.to_owned();
        for (alias, real) in &self.aliases {
            key = key.replace(&format!("{{{alias}}}"), real);
        }
        // A `{name}` not aliased is the link's own name.
        key.replace(['{', '}'], "")
    }

    fn kernel_route(&self, ns: Ns, r: &Route) -> KernelRoute {
        KernelRoute {
            gateway: r
                .via
                .map(|g| g.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
            oif: r.dev.map(|d| self.index(ns, d)),
            table: r.table,
            ..KernelRoute::new(
                r.dst
                    .parse()
                    .unwrap_or_else(|_| IpNetwork::from(IpAddr::from([0, 0, 0, 0]))),
            )
        }
    }

    /// Applies `op`; returns its outcome (`ok`, an errno's name, `error`).
    pub fn apply(&mut self, op: &Op) -> String {
        outcome(self.try_apply(op))
    }

    fn try_apply(&mut self, op: &Op) -> Result<()> {
        let net = |s: &str| {
            s.parse::<IpNetwork>()
                .unwrap_or_else(|_| IpNetwork::from(IpAddr::from([0, 0, 0, 0])))
        };
        match *op {
            Veth {
                ns,
                alias,
                peer,
                peer_ns,
                up,
                master,
            } => {
                let spec = VethSpec {
                    peer_name: peer.into(),
                    peer_netns: Some(self.h(peer_ns).netns()),
                    up,
                    master: master.map(|m| self.index(ns, m)),
                    ..Default::default()
                };
                let link = self.h(ns).setup_veth_with(&spec)?;
                self.sysctls
                    .push((ns, format!("net/ipv6/conf/{{{alias}}}/accept_ra")));
                self.aliases.insert(alias, link.name);
            }
            Bridge(ns, name) => {
                self.h(ns).ensure_bridge(&BridgeSpec {
                    name: name.into(),
                    mtu: None,
                    promisc: false,
                    vlan_filtering: false,
                })?;
            }
            Macvlan(ns, name, parent, into) => self.h(ns).add_macvlan(&MacvlanSpec {
                name: name.into(),
                parent: self.index(ns, parent),
                netns: Some(self.h(into).netns()),
                ..Default::default()
            })?,
            Dummy(ns, name) => drop(self.h(ns).add_dummy(name)?),
            Vrf(ns, name, table) => drop(self.h(ns).add_vrf(name, table)?),
            Up(ns, name) => self.h(ns).set_up(self.index(ns, name))?,
            Down(ns, name) => self.h(ns).set_down(self.index(ns, name))?,
            Rename(ns, name, to) => self.h(ns).rename(self.index(ns, name), to)?,
            Master(ns, name, master) => self
                .h(ns)
                .set_master(self.index(ns, name), self.index(ns, master))?,
            NoMaster(ns, name) => self.h(ns).set_nomaster(self.index(ns, name))?,
            Delete(ns, name) => self.h(ns).delete_link(self.index(ns, name))?,
            DeleteByName(ns, name) => {
                self.h(ns).delete_link_by_name(self.real(name))?;
            }
            Move(ns, name, to) => self
                .h(ns)
                .move_to_netns(self.index(ns, name), self.h(to).netns())?,
            AddAddr(ns, name, addr) => {
                let opts = AddressOptions {
                    nodad: true,
                    ..Default::default()
                };
                self.h(ns)
                    .add_address(self.index(ns, name), net(addr), opts)?
            }
            AddAddrNoPrefixRoute(ns, name, addr) => {
                let opts = AddressOptions {
                    nodad: true,
                    noprefixroute: true,
                    ..Default::default()
                };
                self.h(ns)
                    .add_address(self.index(ns, name), net(addr), opts)?
            }
            DelAddr(ns, name, addr) => self.h(ns).del_address(self.index(ns, name), net(addr))?,
            AddRoute(ns, r) => self.h(ns).add_route(&self.kernel_route(ns, &r))?,
            AddRouteEcmp(ns, r) => self.h(ns).add_route_ecmp(&self.kernel_route(ns, &r))?,
            ReplaceRoute(ns, r) => self.h(ns).replace_route(&self.kernel_route(ns, &r))?,
            DelRoute(ns, r) => self.h(ns).del_route(&self.kernel_route(ns, &r))?,
            Sysctl(ns, key, value) => {
                self.sysctls.push((ns, key.to_owned()));
                self.h(ns).sysctl_set(&self.key(key), value)?;
            }
            SysctlWrite(ns, key, value) => {
                self.sysctls.push((ns, key.to_owned()));
                self.h(ns).sysctl_write(&self.key(key), value)?;
            }
            Ipv4Conf(ns, name, value) => {
                for leaf in ["arp_notify", "route_localnet"] {
                    self.sysctls
                        .push((ns, format!("net/ipv4/conf/{{{name}}}/{leaf}")));
                }
                let settings = [
                    (crate::Ipv4Conf::ArpNotify, value),
                    (crate::Ipv4Conf::RouteLocalnet, value),
                ];
                self.h(ns).set_ipv4_conf(self.index(ns, name), &settings)?;
            }
            Mtu(ns, name, mtu) => self.h(ns).set_mtu(self.index(ns, name), mtu)?,
            Promisc(ns, name, on) => self.h(ns).set_promisc(self.index(ns, name), on)?,
            Allmulti(ns, name, on) => self.h(ns).set_allmulti(self.index(ns, name), on)?,
            TxQLen(ns, name, q) => self.h(ns).set_txqlen(self.index(ns, name), q)?,
            Ifb(ns, name, mtu) => drop(self.h(ns).add_ifb(name, mtu, None)?),
            AddRule(ns, src, table, pref) => {
                let rule = RoutingRule {
                    priority: pref,
                    ..RoutingRule::from_source(net(src).ip(), table)
                };
                self.h(ns).add_rule(&rule)?
            }
            DelRule(ns, src, table, pref) => {
                let v6 = src.is_some_and(|s| s.contains(':'));
                let rule = RoutingRule {
                    v6,
                    src: src.map(net),
                    dst: None,
                    table,
                    priority: pref,
                    action: 1,
                };
                self.h(ns).del_rule(&rule)?
            }
            CopyRoute(ns, dst, table) => {
                let h = self.h(ns);
                let found = h
                    .routes(AddressFamilyFilter::All)?
                    .into_iter()
                    .find(|r| r.dst == net(dst) && r.table == Some(TABLE_MAIN));
                match found {
                    Some(r) => h.copy_route_to_table(&r, table)?,
                    None => {
                        return Err(crate::Error::InvalidArgument {
                            op: format!("copy route {dst}"),
                            reason: "no such route in the main table".into(),
                        })
                    }
                }
            }
            Tbf(ns, name) => {
                let tbf = Tbf::from_rate_and_burst(8_000_000, 80_000, PschedClock::default());
                self.h(ns).add_tbf(self.index(ns, name), &tbf)?
            }
            Ingress(ns, name) => self.h(ns).add_ingress_qdisc(self.index(ns, name))?,
            Redirect(ns, from, to) => self.h(ns).add_redirect_filter(
                self.index(ns, from),
                self.index(ns, to),
                RedirectFilterKind::U32GoCompatible,
            )?,
            DelQdisc(ns, name, root) => {
                let parent = if root { HANDLE_ROOT } else { HANDLE_INGRESS };
                self.h(ns).delete_qdisc(self.index(ns, name), parent)?;
            }
            Forwarding(ns) => {
                self.sysctls.push((ns, "net/ipv4/ip_forward".into()));
                self.sysctls
                    .push((ns, "net/ipv6/conf/all/forwarding".into()));
                self.h(ns).enable_forwarding(true, true)?;
            }
        }
        Ok(())
    }

    /// The state of both namespaces.
    pub fn observe(&self) -> Result<[State; 2]> {
        Ok([self.state(A)?, self.state(B)?])
    }

    fn state(&self, ns: Ns) -> Result<State> {
        let h = self.h(ns);
        let links = h.links()?;
        let name_of = |index: u32| {
            links
                .iter()
                .find(|l| l.index == index)
                .map_or_else(|| format!("#{index}"), |l| self.alias(&l.name).to_owned())
        };
        let mut state = State::default();
        for l in &links {
            let mut s = format!(
                "{} {} mtu {}",
                self.alias(&l.name),
                l.kind.as_deref().unwrap_or("device"),
                l.mtu
            );
            if l.is_up() {
                s.push_str(" up");
            }
            if l.is_promisc() {
                s.push_str(" promisc");
            }
            if l.is_allmulti() {
                s.push_str(" allmulti");
            }
            s.push_str(&format!(" qlen {}", h.link_txqlen(l.index)?));
            if let Some(m) = l.master {
                s.push_str(&format!(" master {}", name_of(m)));
            }
            state.links.push(s);
            for q in h.qdiscs(l.index)? {
                if q.handle == 0 {
                    continue;
                }
                state.qdiscs.push(format!(
                    "{} {} {:x}: parent {:x}",
                    self.alias(&l.name),
                    q.kind,
                    q.handle >> 16,
                    q.parent
                ));
                if q.parent == HANDLE_INGRESS {
                    for f in h.filters(l.index, q.handle)? {
                        for t in &f.redirects {
                            state.qdiscs.push(format!(
                                "{} filter {} prio {} redirect {}",
                                self.alias(&l.name),
                                f.kind,
                                f.priority,
                                name_of(*t)
                            ));
                        }
                    }
                }
            }
        }
        for r in h.rules(AddressFamilyFilter::All)? {
            state.rules.push(format!(
                "pref {} {}{}",
                r.priority.unwrap_or(0),
                if r.v6 { "-6 " } else { "" },
                RoutingRule {
                    priority: None,
                    ..r
                }
            ));
        }
        // Not the kernel's NOARP entries (multicast groups).
        const NUD_NOARP: u16 = 0x40;
        for n in h.neighbours(None, AddressFamilyFilter::All)? {
            if n.state & NUD_NOARP != 0 || n.ip.is_multicast() {
                continue;
            }
            state
                .neighbours
                .push(format!("{} on {}", n.ip, name_of(n.index)));
        }
        for a in h.addresses(None, AddressFamilyFilter::All)? {
            if link_local(a.address.ip()) {
                continue;
            }
            state
                .addresses
                .push(format!("{} on {}", a.address, name_of(a.index)));
        }
        for r in h.routes(AddressFamilyFilter::All)? {
            // Unicast and local routes outside the local table.
            const RTN_UNICAST: u8 = 1;
            const RTN_LOCAL: u8 = 2;
            const TABLE_LOCAL: u32 = 255;
            if !(r.kind == RTN_UNICAST || r.kind == RTN_LOCAL)
                || r.table == Some(TABLE_LOCAL)
                || link_local(r.dst.ip())
                || r.dst.ip().is_multicast()
            {
                continue;
            }
            let mut s = String::new();
            if r.kind == RTN_LOCAL {
                s.push_str("local ");
            }
            s.push_str(&r.dst.to_string());
            if let Some(gw) = r.gateway {
                s.push_str(&format!(" via {gw}"));
            }
            for hop in &r.multipath {
                s.push_str(" nexthop");
                if let Some(gw) = hop.gateway {
                    s.push_str(&format!(" via {gw}"));
                }
                s.push_str(&format!(" dev {}", name_of(hop.oif)));
            }
            if let Some(oif) = r.oif {
                s.push_str(&format!(" dev {}", name_of(oif)));
            }
            if let Some(src) = r.src {
                s.push_str(&format!(" src {src}"));
            }
            s.push_str(&format!(
                " table {} scope {}",
                r.table.unwrap_or(0),
                r.scope.unwrap_or(0)
            ));
            state.routes.push(s);
        }
        for (n, key) in &self.sysctls {
            if *n == ns {
                let value = h.sysctl_get(&self.key(key))?;
                state.sysctls.push(format!(
                    "{key}={}",
                    value.as_deref().map_or("(none)", str::trim)
                ));
            }
        }
        state.links.sort();
        state.addresses.sort();
        state.routes.sort();
        state.sysctls.sort();
        state.sysctls.dedup();
        state.rules.sort();
        state.neighbours.sort();
        state.qdiscs.sort();
        Ok(state)
    }
}

fn link_local(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// A step's outcome as the table writes it.
pub fn outcome<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => match e.errno() {
            Some(errno) => format!("{errno:?}"),
            // Without an errno: the error's kind (`Sysctl`, `VethPeerExists`).
            None => {
                let debug = format!("{e:?}");
                let end = debug.find([' ', '{', '(']).unwrap_or(debug.len());
                format!("error {}", &debug[..end])
            }
        },
    }
}

/// Whether an outcome says the kernel lacks the link kind.
fn unsupported(e: &str) -> bool {
    e == "EOPNOTSUPP"
}

/// What one step of a script did on two kernels.
#[derive(Debug)]
pub enum Divergence {
    /// The outcomes differ.
    Outcome {
        /// The script.
        script: &'static str,
        /// The step's position (1-based) and operation.
        step: (usize, Op),
        /// On the first kernel, the second, and the table's.
        outcomes: [String; 3],
    },
    /// The states after the step differ.
    State {
        /// The script.
        script: &'static str,
        /// The step's position (1-based) and operation.
        step: (usize, Op),
        /// The namespace.
        ns: Ns,
        /// On the first kernel, and the second.
        states: Box<[State; 2]>,
    },
    /// A step refused because the kernel lacks a link kind changed the
    /// first kernel's state all the same (a partial link left behind).
    Leftover {
        /// The script.
        script: &'static str,
        /// The step's position (1-based) and operation.
        step: (usize, Op),
        /// The namespace.
        ns: Ns,
        /// Before the step, and after.
        states: Box<[State; 2]>,
    },
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Divergence::Outcome {
                script,
                step: (i, op),
                outcomes: [a, b, table],
            } => write!(
                f,
                "{script}: step {i} {op}: outcome {a} (first) vs {b} (second), table says {table}"
            ),
            Divergence::State {
                script,
                step: (i, op),
                ns,
                states,
            } => write!(
                f,
                "{script}: step {i} {op}: namespace {ns:?} differs\n  first:\n{}\n  second:\n{}",
                states[0], states[1]
            ),
            Divergence::Leftover {
                script,
                step: (i, op),
                ns,
                states,
            } => write!(
                f,
                "{script}: step {i} {op}: refused (link kind lacking) but namespace {ns:?} \
                 changed\n  before:\n{}\n  after:\n{}",
                states[0], states[1]
            ),
        }
    }
}

/// What [`compare`] found for one script.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Comparison {
    /// The divergences; the first one ends the script.
    pub divergences: Vec<Divergence>,
    /// The step (1-based, with its operation) where the first kernel
    /// refused to make a link of a kind it lacks (`EOPNOTSUPP` where the
    /// table says `ok`). The script ends there; the second kernel must
    /// refuse the same way (a [`FakeKernel`](super::FakeKernel) told so
    /// with `lack_link_kind`, see [`lacking_link_kinds`]) and neither may
    /// change anything, else that is a divergence.
    pub lacking: Option<(usize, Op)>,
}

/// Runs `script` on two kernels in lockstep (`first` and `second`, each in
/// its two namespaces), comparing outcomes and states after every step;
/// the first divergence ends the script. Where the first kernel lacks a
/// link kind the script makes, the clean refusal is what is compared
/// ([`Comparison::lacking`]).
pub fn compare<H1: NetnsHandle, H2: NetnsHandle>(
    script: &Script,
    first: &mut Run<H1>,
    second: &mut Run<H2>,
) -> Result<Comparison> {
    let mut found = Vec::new();
    let mut before = first.observe()?;
    for (i, step) in script.steps.iter().enumerate() {
        let (a, b) = (first.apply(&step.op), second.apply(&step.op));
        let at = (i + 1, step.op.clone());
        let lacking = unsupported(&a) && step.expect == "ok";
        if a != b || (a != step.expect && !lacking) {
            found.push(Divergence::Outcome {
                script: script.name,
                step: at.clone(),
                outcomes: [a, b, step.expect.to_owned()],
            });
        }
        let (sa, sb) = (first.observe()?, second.observe()?);
        for ns in [A, B] {
            if sa[ns.i()] != sb[ns.i()] {
                found.push(Divergence::State {
                    script: script.name,
                    step: at.clone(),
                    ns,
                    states: Box::new([sa[ns.i()].clone(), sb[ns.i()].clone()]),
                });
            }
            if lacking && sa[ns.i()] != before[ns.i()] {
                found.push(Divergence::Leftover {
                    script: script.name,
                    step: at.clone(),
                    ns,
                    states: Box::new([before[ns.i()].clone(), sa[ns.i()].clone()]),
                });
            }
        }
        if lacking {
            let lacking = found.is_empty().then_some(at);
            return Ok(Comparison {
                divergences: found,
                lacking,
            });
        }
        if !found.is_empty() {
            break;
        }
        before = sa;
    }
    Ok(Comparison {
        divergences: found,
        lacking: None,
    })
}

/// The link kinds the suite makes by a verb of their own (`dummy`, `vrf`,
/// `ifb`, `macvlan`) that `kernel` lacks: each made once in namespace
/// `path` (and deleted again), those refused with `EOPNOTSUPP` returned.
/// Tell a [`FakeKernel`](super::FakeKernel) compared with this kernel to
/// lack the same (`lack_link_kind`).
pub fn lacking_link_kinds<K: NetKernel>(kernel: &K, path: &str) -> Result<Vec<&'static str>> {
    let h = kernel.open(path)?;
    let mut lacking = Vec::new();
    let mut made = |kind: &'static str, name: &str, r: Result<()>| -> Result<()> {
        match r {
            Ok(()) => {
                h.delete_link_by_name(name)?;
            }
            Err(e) if e.errno() == Some(nix::errno::Errno::EOPNOTSUPP) => lacking.push(kind),
            Err(e) => return Err(e),
        }
        Ok(())
    };
    made(
        "dummy",
        "cprobe-dummy",
        h.add_dummy("cprobe-dummy").map(drop),
    )?;
    made("vrf", "cprobe-vrf", h.add_vrf("cprobe-vrf", 4242).map(drop))?;
    made(
        "ifb",
        "cprobe-ifb",
        h.add_ifb("cprobe-ifb", 1500, None).map(drop),
    )?;
    let parent = h.ensure_bridge(&BridgeSpec {
        name: "cprobe-br".into(),
        mtu: None,
        promisc: false,
        vlan_filtering: false,
    })?;
    let macvlan = h.add_macvlan(&MacvlanSpec {
        name: "cprobe-mv".into(),
        parent: parent.index,
        netns: None,
        ..Default::default()
    });
    made("macvlan", "cprobe-mv", macvlan)?;
    h.delete_link_by_name("cprobe-br")?;
    Ok(lacking)
}

/// Runs `script` on one kernel: the steps whose outcome is not the
/// table's, as `(step, op, outcome)`.
pub fn check_outcomes<H: NetnsHandle>(
    script: &Script,
    run: &mut Run<H>,
) -> Vec<(usize, Op, String)> {
    script
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, step)| {
            let got = run.apply(&step.op);
            (got != step.expect).then(|| (i + 1, step.op.clone(), got))
        })
        .collect()
}

/// The no-root half of the suite: the fake gives every step the outcome
/// Linux gives it.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::FakeKernel;

    #[test]
    fn the_fake_gives_every_step_the_outcome_linux_gives() {
        let mut wrong = Vec::new();
        for script in scripts() {
            let kernel = FakeKernel::new();
            kernel.add_netns("a");
            kernel.add_netns("b");
            let mut run = Run::new(&kernel, "a", "b").unwrap();
            for (i, op, got) in check_outcomes(&script, &mut run) {
                wrong.push(format!("{}: step {i} {op}: {got}", script.name));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    fn fake_lacking(kinds: &[&str]) -> FakeKernel {
        let kernel = FakeKernel::new();
        for k in kinds {
            kernel.lack_link_kind(k);
        }
        kernel.add_netns("a");
        kernel.add_netns("b");
        kernel
    }

    /// A kernel without dummy and vrf, compared with a fake told the same:
    /// the script making them stops at its first step, refused cleanly on
    /// both; a fake that has the kinds diverges there.
    #[test]
    fn a_lacking_link_kind_is_a_clean_refusal_on_both() {
        let script = scripts()
            .into_iter()
            .find(|s| matches!(s.steps[0].op, Dummy(..)))
            .unwrap();
        let (k1, k2) = (
            fake_lacking(&["dummy", "vrf"]),
            fake_lacking(&["dummy", "vrf"]),
        );
        assert_eq!(
            lacking_link_kinds(&k1, "a").unwrap(),
            ["dummy", "vrf"],
            "{:?}",
            k1.link_names("a")
        );
        assert_eq!(k1.link_names("a"), ["lo"]);
        let (mut r1, mut r2) = (
            Run::new(&k1, "a", "b").unwrap(),
            Run::new(&k2, "a", "b").unwrap(),
        );
        let c = compare(&script, &mut r1, &mut r2).unwrap();
        assert!(c.divergences.is_empty(), "{:?}", c.divergences);
        assert!(matches!(c.lacking, Some((1, Dummy(A, "d0")))), "{c:?}");

        let (k1, k2) = (fake_lacking(&["dummy"]), fake_lacking(&[]));
        let (mut r1, mut r2) = (
            Run::new(&k1, "a", "b").unwrap(),
            Run::new(&k2, "a", "b").unwrap(),
        );
        let c = compare(&script, &mut r1, &mut r2).unwrap();
        assert!(c.lacking.is_none());
        let text: Vec<String> = c.divergences.iter().map(ToString::to_string).collect();
        assert!(
            text[0].contains("outcome EOPNOTSUPP (first) vs ok (second)"),
            "{text:?}"
        );
    }
}
