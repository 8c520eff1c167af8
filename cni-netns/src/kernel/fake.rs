//! [`FakeKernel`]: namespaces, links, addresses, routes, policy rules,
//! neighbours, qdiscs and sysctls in memory, for tests of a plugin's
//! algorithm without root.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ipnetwork::IpNetwork;
use nix::errno::Errno;

use super::{NetKernel, NetnsHandle};
use crate::addr::{Address, AddressOptions};
use crate::devconf::Ipv4Conf;
use crate::error::{Error, Result};
use crate::link::{
    BridgePortOptions, BridgeSpec, BridgeVlan, IpvlanMode, IpvlanSpec, Link, LinkDetails, MacAddr,
    MacvlanMode, MacvlanSpec, OperState, TapSpec, VethSpec, VlanSpec, Vrf, VLAN_ID_MAX,
};
use crate::neigh::Neighbour;
use crate::route::{KernelRoute, NextHop, SCOPE_HOST, SCOPE_LINK, SCOPE_UNIVERSE, TABLE_MAIN};
use crate::rule::RoutingRule;
use crate::tc::{
    Filter, Qdisc, RedirectFilterKind, Tbf, ETH_P_ALL, HANDLE_INGRESS, HANDLE_ROOT,
    INGRESS_QDISC_HANDLE, TBF_HANDLE,
};
use crate::AddressFamilyFilter;

/// The namespace [`FakeKernel::current`](NetKernel::current) opens.
const NODE: &str = "node";

// linux/if_addr.h and linux/rtnetlink.h.
const IFA_F_SECONDARY: u32 = 0x01;
const IFA_F_NODAD: u32 = 0x02;
const IFA_F_NOPREFIXROUTE: u32 = 0x200;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;

/// A kind of kernel call: a change [`FakeKernel`] records, or a read (not
/// recorded); either can be failed ([`FakeKernel::fail_nth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KernelOp {
    /// A link created (veth pair, bridge, macvlan, ipvlan, vlan, dummy,
    /// tap, vrf).
    AddLink,
    /// A link deleted (with a veth, its peer too).
    DeleteLink,
    /// A link set up.
    SetUp,
    /// A link set down.
    SetDown,
    /// A link's master set or released.
    SetMaster,
    /// A link moved into another namespace (recorded in the one it left).
    MoveLink,
    /// A link renamed.
    Rename,
    /// A link's MAC set.
    SetMac,
    /// A link's MTU set.
    SetMtu,
    /// A link's bridge port options or VLANs, a macvlan's broadcast
    /// queue, a link's alias, promiscuous or all-multicast mode or
    /// transmit queue length, changed.
    SetLinkOption,
    /// An address added.
    AddAddress,
    /// An address deleted.
    DelAddress,
    /// A route added (or replaced).
    AddRoute,
    /// A route deleted.
    DelRoute,
    /// A sysctl (or an IPv4 per-link setting) written.
    WriteSysctl,
    /// Read: one link looked up (by name, index; its details, its VLAN
    /// id).
    GetLink,
    /// Read: the links listed (also by MAC, by master; the VRFs).
    ListLinks,
    /// Read: the addresses listed.
    ListAddresses,
    /// Read: the routes listed (also for the default route's link).
    ListRoutes,
    /// Read: a sysctl read.
    ReadSysctl,
    /// A policy rule added.
    AddRule,
    /// A policy rule deleted.
    DelRule,
    /// Read: the policy rules listed.
    ListRules,
    /// Read: the neighbours listed.
    ListNeighbours,
    /// A qdisc (root TBF, ingress) added.
    AddQdisc,
    /// A qdisc deleted (with its filters).
    DelQdisc,
    /// A tc filter added.
    AddFilter,
    /// Read: a link's qdiscs or filters listed.
    ListQdiscs,
}

/// One recorded change: its namespace (the path it was opened by, `node`
/// for the caller's), its kind and a description of its object
/// (`"veth vethXXXXXXXX peer eth0 in /run/netns/pod"`, `"10.1.0.2/24 on
/// eth0"`, `"10.1.0.0/24 dev eth0"`, `"net/ipv4/ip_forward=1"`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelCall {
    /// The namespace.
    pub netns: String,
    /// What was done.
    pub op: KernelOp,
    /// To what.
    pub object: String,
}

impl fmt::Display for KernelCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?} {}", self.netns, self.op, self.object)
    }
}

/// A link of the model, with what [`LinkDetails`] reports.
#[derive(Debug, Clone)]
struct FakeLink {
    link: Link,
    /// For a veth: the peer's namespace and index.
    peer: Option<(String, u32)>,
    macvlan_mode: Option<MacvlanMode>,
    bc_queue_len: Option<u32>,
    ipvlan_mode: Option<IpvlanMode>,
    vlan_id: Option<u16>,
    /// For a VRF: its table.
    vrf_table: Option<u32>,
    alias: Option<String>,
    txqlen: u32,
    /// The qdiscs added (the kernel's default ones, of handle 0, are not
    /// modelled).
    qdiscs: Vec<Qdisc>,
    filters: Vec<Filter>,
}

impl FakeLink {
    fn new(link: Link) -> FakeLink {
        FakeLink {
            link,
            peer: None,
            macvlan_mode: None,
            bc_queue_len: None,
            ipvlan_mode: None,
            vlan_id: None,
            vrf_table: None,
            alias: None,
            txqlen: 1000,
            qdiscs: Vec::new(),
            filters: Vec::new(),
        }
    }

    fn is_up(&self) -> bool {
        self.link.flags & libc::IFF_UP as u32 != 0
    }
}

#[derive(Debug, Default)]
struct Namespace {
    links: Vec<FakeLink>,
    addresses: Vec<Address>,
    routes: Vec<KernelRoute>,
    /// Both families' rules, each family's in the kernel's order.
    rules: Vec<RoutingRule>,
    neighbours: Vec<Neighbour>,
    sysctls: BTreeMap<String, String>,
}

/// The rules of a new namespace: `0: lookup local`, `32766: lookup
/// main`, and for IPv4 `32767: lookup default`.
fn default_rules() -> Vec<RoutingRule> {
    let rule = |v6, table, pref| RoutingRule {
        v6,
        src: None,
        dst: None,
        table,
        priority: Some(pref),
        action: 1,
    };
    vec![
        rule(false, 255, 0),
        rule(false, 254, 32766),
        rule(false, 253, 32767),
        rule(true, 255, 0),
        rule(true, 254, 32766),
    ]
}

/// Whether `k` is what `r` selects (the kernel's `rule_find`: a field `r`
/// leaves unset matches any).
fn rule_selects(r: &RoutingRule, k: &RoutingRule) -> bool {
    k.v6 == r.v6
        && (r.table == 0 || k.table == r.table)
        && r.priority.is_none_or(|p| k.priority == Some(p))
        && r.src.is_none_or(|s| k.src == Some(s))
        && r.dst.is_none_or(|d| k.dst == Some(d))
}

#[derive(Debug)]
struct Fault {
    op: KernelOp,
    netns: String,
    /// Calls of `op` in `netns` to let through first.
    skip: usize,
    errno: Errno,
}

#[derive(Debug)]
struct World {
    namespaces: BTreeMap<String, Namespace>,
    next_index: u32,
    next_mac: u32,
    calls: Vec<KernelCall>,
    faults: Vec<Fault>,
    /// Link kinds this kernel lacks ([`FakeKernel::lack_link_kind`]).
    lacking: BTreeSet<String>,
}

/// An in-memory kernel: each namespace's links, addresses, routes and
/// sysctls, changed by the [`NetnsHandle`] calls as the kernel would, as
/// the conformance suite ([`conformance`](super::conformance)) checks
/// against Linux: deleting a veth deletes its peer, a link's addresses,
/// routes and sysctls go with it, its members lose their master; an
/// address adds its prefix route while the link is up (not for a
/// secondary IPv4 address, which goes with its primary); a route needs an
/// up device (`ENETDOWN`) and a reachable gateway (`ENETUNREACH`); a link
/// going down loses its routes and, unless `keep_addr_on_down`, its IPv6
/// addresses, and coming up restores its prefix routes; names are unique
/// per namespace (renaming to its own name is no change, an up link can be
/// renamed, its sysctls follow); joining or leaving a VRF cycles the link
/// and moves its addresses' routes to the VRF's table or back; a link
/// moved to another namespace arrives down and bare (its qdiscs gone); a
/// removed namespace's plain devices return to `node`. Policy rules start
/// as the kernel's (`local`, `main`, `default`); one added without a
/// priority gets the kernel's (one below the family's second rule), the
/// same rule at the same priority is `EEXIST`, a deletion removes the
/// first rule its set fields select (`ENOENT` when none). A gateway must
/// be on a connected route of its route's table (the main table for a
/// table without routes; IPv6 falls back to main). A link holds at most
/// one root and one ingress qdisc (`EEXIST`); a redirect filter needs the
/// ingress qdisc (`EINVAL`) and goes with it. Neighbours are those a test
/// adds ([`FakeKernel::add_neighbour`]); they go when their link goes
/// down. Every change is recorded in order
/// ([`FakeKernel::calls`]), and failures are injected on request, reads
/// included ([`FakeKernel::fail_nth`]), with the error the real kernel
/// gives ([`Error::Netlink`] with the errno asked for; [`Error::Tun`] for
/// a tap, [`Error::Sysctl`] for a sysctl); a verb the real handle does in
/// several calls (`ensure_bridge`, `setup_veth_with`, `add_vrf`,
/// `add_tap`) does the same calls, so a fault fails it half-way.
///
/// The caller's namespace is `node` (with `lo`); others are made with
/// [`FakeKernel::add_netns`] and opened by that path. Clones share the
/// model. Not modelled: operational state beyond "up" (a veth end is
/// operationally up when both ends are up), local routes outside VRFs,
/// the kernel's default qdiscs (of handle 0), rule selectors other than
/// source, destination, table and priority,
/// broadcast and multicast routes, route metrics, IPv6 link-local
/// addresses, DAD (addresses settle at once), VLAN tables, sysctls that
/// do not exist but for those of a missing link (every other write
/// succeeds). Every link kind can be made unless the kernel is told it
/// lacks one ([`FakeKernel::lack_link_kind`]).
///
/// ```
/// use cni_netns::kernel::{FakeKernel, KernelOp, NetKernel, NetnsHandle};
///
/// let kernel = FakeKernel::new();
/// kernel.add_netns("/run/netns/pod");
/// let host = kernel.current()?;
/// let pod = kernel.open("/run/netns/pod")?;
/// let veth = host.setup_veth("eth0", pod.netns(), None, None)?;
/// host.delete_link(veth.index)?;
/// // Deleting one end deleted the pair.
/// assert!(pod.link_by_name("eth0").unwrap_err().is_not_found());
/// let ops: Vec<KernelOp> = kernel.calls().iter().map(|c| c.op).collect();
/// assert_eq!(ops, [KernelOp::AddLink, KernelOp::WriteSysctl, KernelOp::DeleteLink]);
/// // A namespace that was never made is gone, as for a DEL after the pod.
/// assert!(kernel.open("/run/netns/other").unwrap_err().is_netns_gone());
/// # Ok::<(), cni_netns::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FakeKernel {
    world: Arc<Mutex<World>>,
}

impl Default for FakeKernel {
    fn default() -> Self {
        FakeKernel::new()
    }
}

impl FakeKernel {
    /// A kernel with the caller's namespace (`node`) alone.
    pub fn new() -> FakeKernel {
        let kernel = FakeKernel {
            world: Arc::new(Mutex::new(World {
                namespaces: BTreeMap::new(),
                next_index: 2,
                next_mac: 1,
                calls: Vec::new(),
                faults: Vec::new(),
                lacking: BTreeSet::new(),
            })),
        };
        kernel.add_netns(NODE);
        kernel
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes namespace `path` (with `lo`, index 1, down); an existing one
    /// is kept.
    pub fn add_netns(&self, path: &str) {
        let mut w = self.world();
        if w.namespaces.contains_key(path) {
            return;
        }
        let mut ns = Namespace {
            rules: default_rules(),
            ..Namespace::default()
        };
        ns.links.push(FakeLink::new(Link {
            index: 1,
            name: "lo".into(),
            kind: None,
            mtu: 65536,
            mac: Some(MacAddr([0; 6])),
            master: None,
            oper_state: OperState::Unknown,
            flags: libc::IFF_LOOPBACK as u32,
            parent_index: None,
            link_netnsid: None,
            vlan_filtering: None,
        }));
        w.namespaces.insert(path.to_owned(), ns);
    }

    /// Removes namespace `path`, as when a pod's namespace is deleted
    /// before its DEL: its virtual links go (a veth's peer elsewhere
    /// too), its plain devices ([`FakeKernel::add_device`], the kernel's
    /// physical ones) return to `node`, down and without addresses, under
    /// their name or, when `node` has a link of that name, `dev<index>`.
    pub fn remove_netns(&self, path: &str) {
        let mut w = self.world();
        let links: Vec<(u32, bool)> = w
            .namespaces
            .get(path)
            .map(|ns| {
                ns.links
                    .iter()
                    .map(|l| {
                        let physical =
                            l.link.kind.is_none() && l.link.flags & libc::IFF_LOOPBACK as u32 == 0;
                        (l.link.index, physical)
                    })
                    .collect()
            })
            .unwrap_or_default();
        for (index, physical) in links {
            if !(physical && path != NODE && w.move_link(path, index, NODE, true).is_ok()) {
                w.remove_link(path, index);
            }
        }
        w.namespaces.remove(path);
    }

    /// Adds a plain device (an uplink, a master, a NIC for host-device)
    /// to namespace `path`, up, with MTU 1500; returns its index.
    pub fn add_device(&self, path: &str, name: &str) -> u32 {
        let mut w = self.world();
        let link = w.new_link(name, None, None, None);
        let index = link.link.index;
        if let Some(ns) = w.namespaces.get_mut(path) {
            ns.links.push(link);
            if let Some(l) = ns.links.last_mut() {
                l.link.flags |= libc::IFF_UP as u32;
            }
        }
        index
    }

    /// Every change so far, in order.
    pub fn calls(&self) -> Vec<KernelCall> {
        self.world().calls.clone()
    }

    /// The next call of kind `op` in namespace `netns` (`node` for the
    /// caller's) fails with `errno`, changing nothing:
    /// [`FakeKernel::fail_nth`] with `n` 1.
    pub fn fail_next(&self, op: KernelOp, netns: &str, errno: Errno) {
        self.fail_nth(op, netns, 1, errno);
    }

    /// The `n`-th call from now (1: the next) of kind `op` in namespace
    /// `netns` fails with `errno`, changing nothing; reads too. A verb of
    /// several kernel calls (as [`NetnsHandle::ensure_bridge`]: look up,
    /// create, look up, set up) fails at that call, leaving what the
    /// calls before it did, as on Linux.
    ///
    /// ```
    /// use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
    /// use cni_netns::BridgeSpec;
    ///
    /// let kernel = FakeKernel::new();
    /// let host = kernel.current()?;
    /// kernel.fail_nth(KernelOp::SetUp, "node", 1, Errno::ENOBUFS);
    /// let spec = BridgeSpec { name: "cni0".into(), mtu: None, promisc: false, vlan_filtering: false };
    /// assert!(host.ensure_bridge(&spec).is_err());
    /// // Half-way: made, not up.
    /// assert!(!host.link_by_name("cni0")?.is_up());
    /// kernel.fail_nth(KernelOp::ListRoutes, "node", 2, Errno::EINTR);
    /// host.routes(Default::default())?;
    /// assert_eq!(host.routes(Default::default()).unwrap_err().errno(), Some(Errno::EINTR));
    /// # Ok::<(), cni_netns::Error>(())
    /// ```
    pub fn fail_nth(&self, op: KernelOp, netns: &str, n: usize, errno: Errno) {
        self.world().faults.push(Fault {
            op,
            netns: netns.to_owned(),
            skip: n.saturating_sub(1),
            errno,
        });
    }

    /// This kernel lacks link kind `kind` (`"dummy"`, `"vrf"`, `"macvlan"`,
    /// `"ipvlan"`, `"vlan"`, `"ifb"`, as the kernel names them), as a
    /// kernel built without its module: making one fails with
    /// `EOPNOTSUPP`, changing nothing, as Linux's rtnetlink refuses a kind
    /// it does not know (`ip link add x type dummy`: "Unknown device
    /// type"). A name already taken still fails with `EEXIST` first.
    ///
    /// ```
    /// use cni_netns::kernel::{Errno, FakeKernel, NetKernel, NetnsHandle};
    ///
    /// let kernel = FakeKernel::new();
    /// kernel.lack_link_kind("dummy");
    /// let host = kernel.current()?;
    /// assert_eq!(host.add_dummy("d0").unwrap_err().errno(), Some(Errno::EOPNOTSUPP));
    /// assert_eq!(kernel.link_names("node"), ["lo"]);
    /// # Ok::<(), cni_netns::Error>(())
    /// ```
    pub fn lack_link_kind(&self, kind: &str) {
        self.world().lacking.insert(kind.to_owned());
    }

    /// The names of namespace `path`'s links, in creation order (empty
    /// when it does not exist).
    pub fn link_names(&self, path: &str) -> Vec<String> {
        self.list(path, |ns| {
            ns.links.iter().map(|l| l.link.name.clone()).collect()
        })
    }

    /// Namespace `path`'s addresses, as `address on link`.
    pub fn address_list(&self, path: &str) -> Vec<String> {
        self.list(path, |ns| {
            ns.addresses
                .iter()
                .map(|a| format!("{} on {}", a.address, ns.name_of(a.index)))
                .collect()
        })
    }

    /// Namespace `path`'s links with their master, kind and alias, as
    /// `name[@kind][ master M][ alias A][ up]`, in creation order.
    pub fn link_list(&self, path: &str) -> Vec<String> {
        self.list(path, |ns| {
            ns.links
                .iter()
                .map(|l| {
                    let mut s = l.link.name.clone();
                    if let Some(kind) = &l.link.kind {
                        s.push_str(&format!("@{kind}"));
                    }
                    if let Some(m) = l.link.master {
                        s.push_str(&format!(" master {}", ns.name_of(m)));
                    }
                    if let Some(alias) = &l.alias {
                        s.push_str(&format!(" alias {alias}"));
                    }
                    if l.is_up() {
                        s.push_str(" up");
                    }
                    s
                })
                .collect()
        })
    }

    /// Namespace `path`'s routes, as `[local ]dst [via gw] dev link[ src
    /// s][ table t]` (the table when it is not main).
    pub fn route_list(&self, path: &str) -> Vec<String> {
        self.list(path, |ns| {
            ns.routes.iter().map(|r| ns.describe_route(r)).collect()
        })
    }

    /// What `describe` makes of namespace `path` (nothing when it does
    /// not exist).
    fn list(&self, path: &str, describe: impl FnOnce(&Namespace) -> Vec<String>) -> Vec<String> {
        self.world()
            .namespaces
            .get(path)
            .map(describe)
            .unwrap_or_default()
    }

    /// Adds a neighbour entry (as traffic or `ip neigh add` would) on
    /// link `index` of namespace `path`, in state `NUD_REACHABLE`; it goes
    /// with its link, and when the link goes down.
    pub fn add_neighbour(&self, path: &str, index: u32, ip: IpAddr, mac: Option<MacAddr>) {
        if let Some(ns) = self.world().namespaces.get_mut(path) {
            ns.neighbours.push(Neighbour {
                index,
                ip,
                mac,
                state: 0x02,
            });
        }
    }

    /// Namespace `path`'s policy rules, as `pref P from S [to D] lookup
    /// T` (`-6` first for IPv6 ones), in the kernel's order.
    pub fn rule_list(&self, path: &str) -> Vec<String> {
        self.list(path, |ns| {
            ns.rules
                .iter()
                .map(|r| format!("{}{r}", if r.v6 { "-6 " } else { "" }))
                .collect()
        })
    }

    /// Namespace `path`'s qdiscs and filters, as `link kind handle:` (a
    /// qdisc) and `link filter kind prio P redirect target` (a filter).
    pub fn qdisc_list(&self, path: &str) -> Vec<String> {
        self.list(path, |ns| {
            let mut out = Vec::new();
            for l in &ns.links {
                for q in &l.qdiscs {
                    out.push(format!("{} {} {:x}:", l.link.name, q.kind, q.handle >> 16));
                }
                for f in &l.filters {
                    for t in &f.redirects {
                        out.push(format!(
                            "{} filter {} prio {} redirect {}",
                            l.link.name,
                            f.kind,
                            f.priority,
                            ns.name_of(*t)
                        ));
                    }
                }
            }
            out.dedup();
            out
        })
    }

    /// Everything namespace `path` holds, as text: its links with all
    /// their attributes (MTU, MAC, flags, alias, transmit queue length,
    /// qdiscs and filters), addresses, routes, rules, neighbours and
    /// sysctls; two states are equal when nothing differs (`None` when
    /// the namespace does not exist). Reads nothing through the
    /// injected faults.
    pub fn state(&self, path: &str) -> Option<String> {
        self.world()
            .namespaces
            .get(path)
            .map(|ns| format!("{ns:#?}"))
    }

    /// A sysctl's value in namespace `path`, when written.
    pub fn sysctl(&self, path: &str, key: &str) -> Option<String> {
        self.world()
            .namespaces
            .get(path)
            .and_then(|ns| ns.sysctls.get(&slash(key)).cloned())
    }
}

/// A sysctl key as [`crate::sysctl`] reads it: slash separated, or
/// dotted.
fn slash(key: &str) -> String {
    if key.contains('/') {
        key.trim_start_matches('/').to_owned()
    } else {
        key.replace('.', "/")
    }
}

impl Namespace {
    fn link(&self, index: u32) -> Option<&FakeLink> {
        self.links.iter().find(|l| l.link.index == index)
    }

    fn link_mut(&mut self, index: u32) -> Option<&mut FakeLink> {
        self.links.iter_mut().find(|l| l.link.index == index)
    }

    fn by_name(&self, name: &str) -> Option<&FakeLink> {
        self.links.iter().find(|l| l.link.name == name)
    }

    fn name_of(&self, index: u32) -> String {
        self.link(index)
            .map(|l| l.link.name.clone())
            .unwrap_or_else(|| format!("#{index}"))
    }

    fn describe_route(&self, r: &KernelRoute) -> String {
        let mut s = r.dst.to_string();
        if r.kind == RTN_LOCAL {
            s.insert_str(0, "local ");
        }
        if let Some(gw) = r.gateway {
            s.push_str(&format!(" via {gw}"));
        }
        if let Some(oif) = r.oif {
            s.push_str(&format!(" dev {}", self.name_of(oif)));
        }
        if let Some(src) = r.src {
            s.push_str(&format!(" src {src}"));
        }
        if let Some(table) = r.table.filter(|t| *t != TABLE_MAIN) {
            s.push_str(&format!(" table {table}"));
        }
        s
    }

    /// The routing table of link `index`'s routes: its VRF's, else main.
    fn table_of(&self, index: u32) -> u32 {
        self.link(index)
            .and_then(|l| l.link.master)
            .and_then(|m| self.link(m))
            .and_then(|m| m.vrf_table)
            .unwrap_or(TABLE_MAIN)
    }

    /// The routes the kernel adds with address `a`: its prefix route
    /// (unless `noprefixroute` or a full prefix) and, on a VRF's member,
    /// its local route, both in the link's table. (Local routes outside
    /// VRFs, in table local, are not modelled.)
    fn address_routes(&self, a: &Address) -> Vec<KernelRoute> {
        let table = self.table_of(a.index);
        let ip = a.address.ip();
        let up = self.link(a.index).is_some_and(FakeLink::is_up);
        let mut routes = Vec::new();
        let own_prefix = a.flags & (IFA_F_NOPREFIXROUTE | IFA_F_SECONDARY) == 0;
        // An IPv4 /32 has no prefix route, an IPv6 /128 has one.
        let host = a.address.is_ipv4() && full_prefix(a.address);
        if up && own_prefix && !host {
            if let Ok(subnet) = IpNetwork::new(a.address.network(), a.address.prefix()) {
                routes.push(KernelRoute {
                    oif: Some(a.index),
                    src: Some(ip).filter(|_| ip.is_ipv4()),
                    table: Some(table),
                    scope: Some(if ip.is_ipv4() {
                        SCOPE_LINK
                    } else {
                        SCOPE_UNIVERSE
                    }),
                    kind: RTN_UNICAST,
                    ..KernelRoute::new(subnet)
                });
            }
        }
        if table != TABLE_MAIN {
            routes.push(KernelRoute {
                oif: Some(a.index),
                src: Some(ip),
                table: Some(table),
                scope: Some(SCOPE_HOST),
                kind: RTN_LOCAL,
                ..KernelRoute::new(IpNetwork::from(ip))
            });
        }
        routes
    }

    /// Removes the routes `a` brought (see [`Namespace::address_routes`]).
    fn remove_address_routes(&mut self, a: &Address) {
        let gone = self.address_routes(a);
        self.routes.retain(|r| {
            !gone
                .iter()
                .any(|g| g.dst == r.dst && g.oif == r.oif && g.table == r.table && g.kind == r.kind)
        });
    }

    /// Whether link `index` keeps its IPv6 addresses when it goes down:
    /// `net/ipv6/conf/all/keep_addr_on_down`, else the link's own, is
    /// positive (the kernel's `addrconf_ifdown`).
    fn keeps_addresses_on_down(&self, index: u32) -> bool {
        let on = |key: String| {
            self.sysctls
                .get(&key)
                .and_then(|v| v.trim().parse::<i32>().ok())
                .is_some_and(|v| v > 0)
        };
        on("net/ipv6/conf/all/keep_addr_on_down".into())
            || self
                .link(index)
                .is_some_and(|l| on(format!("net/ipv6/conf/{}/keep_addr_on_down", l.link.name)))
    }

    /// What the kernel does to link `index` when it goes down: its IPv6
    /// addresses go unless it keeps them (`keep_addr_on_down`), and every
    /// route through it goes but for the local routes of the addresses
    /// left (the prefix routes of IPv4 addresses, and of kept IPv6 ones,
    /// come back with [`Namespace::link_up`]).
    fn link_down(&mut self, index: u32) {
        // The kernel flushes the link's neighbours (`neigh_ifdown`).
        self.neighbours.retain(|n| n.index != index);
        if !self.keeps_addresses_on_down(index) {
            self.addresses
                .retain(|a| !(a.index == index && a.address.is_ipv6()));
        }
        let kept: Vec<Address> = self
            .addresses
            .iter()
            .filter(|a| a.index == index)
            .cloned()
            .collect();
        let keep: Vec<KernelRoute> = kept
            .iter()
            .flat_map(|a| self.address_routes(a))
            .filter(|r| r.kind == RTN_LOCAL)
            .collect();
        self.routes.retain(|r| {
            !r.through(index)
                || keep
                    .iter()
                    .any(|k| k.dst == r.dst && k.table == r.table && k.kind == r.kind)
        });
    }

    /// What the kernel does when IPv4 primary address `gone` goes: the
    /// secondaries of its subnet go too, or with `promote_secondaries` the
    /// first becomes primary (with the prefix route).
    fn primary_gone(&mut self, gone: &Address) {
        let same_subnet = |a: &Address| {
            a.index == gone.index
                && a.address.is_ipv4()
                && a.address.prefix() == gone.address.prefix()
                && a.address.network() == gone.address.network()
        };
        let name = self.name_of(gone.index);
        let promote = [
            "net/ipv4/conf/all/promote_secondaries".to_owned(),
            format!("net/ipv4/conf/{name}/promote_secondaries"),
        ]
        .iter()
        .any(|k| self.sysctls.get(k).is_some_and(|v| v.trim() == "1"));
        if promote {
            if let Some(a) = self.addresses.iter_mut().find(|a| same_subnet(a)) {
                a.flags &= !IFA_F_SECONDARY;
                let a = a.clone();
                let routes = self.address_routes(&a);
                self.routes.extend(routes);
            }
        } else {
            self.addresses.retain(|a| !same_subnet(a));
        }
    }

    /// What the kernel does to link `index` when it comes up: the prefix
    /// routes of its addresses are (re)installed.
    fn link_up(&mut self, index: u32) {
        let routes: Vec<KernelRoute> = self
            .addresses
            .iter()
            .filter(|a| a.index == index)
            .flat_map(|a| self.address_routes(a))
            .collect();
        for r in routes {
            if !self
                .routes
                .iter()
                .any(|k| k.dst == r.dst && k.oif == r.oif && k.table == r.table && k.kind == r.kind)
            {
                self.routes.push(r);
            }
        }
    }

    /// The sysctls of link `name` (`net/ipv{4,6}/conf/<name>/...`).
    fn link_sysctl_prefixes(name: &str) -> [String; 2] {
        [
            format!("net/ipv4/conf/{name}/"),
            format!("net/ipv6/conf/{name}/"),
        ]
    }

    /// Drops the sysctls of link `name` (gone, or moved away).
    fn drop_link_sysctls(&mut self, name: &str) {
        let prefixes = Namespace::link_sysctl_prefixes(name);
        self.sysctls
            .retain(|k, _| !prefixes.iter().any(|p| k.starts_with(p.as_str())));
    }

    /// Sets link `index`'s master as the kernel does: joining or leaving a
    /// VRF cycles an up link (down, then up: see [`Namespace::link_down`])
    /// and its addresses' routes move to the VRF's table or back to main.
    fn set_master(&mut self, index: u32, master: Option<u32>) {
        let vrf = |ns: &Namespace, m: Option<u32>| {
            m.and_then(|m| ns.link(m))
                .is_some_and(|l| l.vrf_table.is_some())
        };
        let old = self.link(index).and_then(|l| l.link.master);
        let cycles = vrf(self, old) || vrf(self, master);
        let addresses: Vec<Address> = self
            .addresses
            .iter()
            .filter(|a| a.index == index)
            .cloned()
            .collect();
        if cycles {
            if self.link(index).is_some_and(FakeLink::is_up) {
                self.link_down(index);
            }
            for a in &addresses {
                self.remove_address_routes(a);
            }
        }
        if let Some(l) = self.link_mut(index) {
            l.link.master = master;
        }
        if cycles {
            let left: Vec<Address> = self
                .addresses
                .iter()
                .filter(|a| a.index == index)
                .cloned()
                .collect();
            for a in &left {
                let routes = self.address_routes(a);
                self.routes.extend(routes);
            }
        }
    }

    /// What the kernel checks of a route to add: its device exists, its
    /// gateway is reachable.
    fn check_route(&self, r: &KernelRoute) -> std::result::Result<(), Errno> {
        let up = match r.oif {
            Some(oif) => self.link(oif).ok_or(Errno::ENODEV)?.is_up(),
            None => true,
        };
        // fib_check_nh: a gateway must be on a connected route (none is
        // through a down link), else the device must be up ("Nexthop
        // device is not up").
        let table = r.table.unwrap_or(TABLE_MAIN);
        match r.gateway {
            Some(gw) if !self.reachable(gw, r.oif, table) => Err(Errno::ENETUNREACH),
            _ if !up => Err(Errno::ENETDOWN),
            _ => Ok(()),
        }
    }

    /// Whether `gw` is on a connected (gateway-less) route, out of `oif`
    /// when given, for a route of `table`.
    fn reachable(&self, gw: IpAddr, oif: Option<u32>, table: u32) -> bool {
        self.connected(gw, oif, table).is_some()
    }

    /// The connected (gateway-less) route `gw` is on, out of `oif` when
    /// given, as the kernel looks for it for a route of `table`: in that
    /// table when it exists (not main; IPv6 falls back to the main
    /// table), else by the rules' lookup (main, default).
    fn connected(&self, gw: IpAddr, oif: Option<u32>, table: u32) -> Option<&KernelRoute> {
        let on = |t: u32| {
            self.routes.iter().find(move |r| {
                r.table == Some(t)
                    && r.gateway.is_none()
                    && r.dst.contains(gw)
                    && (oif.is_none() || r.oif == oif)
                    && r.dst.is_ipv4() == gw.is_ipv4()
            })
        };
        const TABLE_DEFAULT: u32 = 253;
        let exists = table != TABLE_MAIN && self.routes.iter().any(|r| r.table == Some(table));
        let found = if exists { on(table) } else { None };
        if exists && gw.is_ipv4() {
            return found;
        }
        found
            .or_else(|| on(TABLE_MAIN))
            .or_else(|| on(TABLE_DEFAULT))
    }

    /// Route `r` as the kernel installs it: a gateway without a device
    /// goes out of the device of the connected route it is on.
    fn resolved(&self, mut r: KernelRoute) -> KernelRoute {
        if let (None, Some(gw)) = (r.oif, r.gateway) {
            let table = r.table.unwrap_or(TABLE_MAIN);
            r.oif = self.connected(gw, None, table).and_then(|c| c.oif);
        }
        r
    }
}

impl World {
    fn new_link(
        &mut self,
        name: &str,
        kind: Option<&str>,
        mtu: Option<u32>,
        mac: Option<MacAddr>,
    ) -> FakeLink {
        let index = self.next_index;
        self.next_index += 1;
        let n = self.next_mac;
        self.next_mac += 1;
        let [_, a, b, c] = n.to_be_bytes();
        FakeLink::new(Link {
            index,
            name: name.to_owned(),
            kind: kind.map(str::to_owned),
            mtu: mtu.unwrap_or(1500),
            mac: Some(mac.unwrap_or(MacAddr([0x02, 0xfa, 0x4e, a, b, c]))),
            master: None,
            oper_state: OperState::Down,
            flags: 0,
            parent_index: None,
            link_netnsid: None,
            vlan_filtering: None,
        })
    }

    /// Moves link `index` of `from` into `to`, as the kernel does: it
    /// arrives down, without addresses, routes or master, with its index
    /// (a veth's peer follows it); a name taken in `to` fails, or with
    /// `rename_on_clash` becomes `dev<index>`.
    fn move_link(
        &mut self,
        from: &str,
        index: u32,
        to: &str,
        rename_on_clash: bool,
    ) -> std::result::Result<(), Errno> {
        let target = self.namespaces.get(to).ok_or(Errno::EINVAL)?;
        let ns = self.namespaces.get(from).ok_or(Errno::ENOENT)?;
        let link = ns.link(index).ok_or(Errno::ENODEV)?;
        // NETIF_F_NETNS_LOCAL: loopback, bridges and VRFs stay.
        if link.link.flags & libc::IFF_LOOPBACK as u32 != 0
            || matches!(link.link.kind.as_deref(), Some("bridge" | "vrf"))
        {
            return Err(Errno::EINVAL);
        }
        let name = &link.link.name;
        let clash = target.by_name(name).is_some();
        if clash && !rename_on_clash {
            return Err(Errno::EEXIST);
        }
        let ns = self.namespaces.get_mut(from).ok_or(Errno::ENOENT)?;
        let pos = ns
            .links
            .iter()
            .position(|l| l.link.index == index)
            .ok_or(Errno::ENODEV)?;
        let mut link = ns.links.remove(pos);
        ns.drop_link_sysctls(&link.link.name);
        ns.neighbours.retain(|n| n.index != index);
        ns.addresses.retain(|a| a.index != index);
        ns.routes.retain(|r| !r.through(index));
        for l in &mut ns.links {
            if l.link.master == Some(index) {
                l.link.master = None;
            }
        }
        link.link.master = None;
        link.link.flags &= !(libc::IFF_UP as u32);
        // The kernel shuts its queueing down.
        link.qdiscs.clear();
        link.filters.clear();
        if clash {
            link.link.name = format!("dev{index}");
        }
        if let Some((peer_ns, peer)) = &link.peer {
            if let Some(p) = self
                .namespaces
                .get_mut(peer_ns)
                .and_then(|ns| ns.link_mut(*peer))
            {
                p.peer = Some((to.to_owned(), index));
            }
        }
        self.namespaces
            .get_mut(to)
            .ok_or(Errno::EINVAL)?
            .links
            .push(link);
        Ok(())
    }

    /// Removes link `index` of `netns` with its addresses and routes (and
    /// a veth's peer).
    fn remove_link(&mut self, netns: &str, index: u32) {
        let Some(ns) = self.namespaces.get_mut(netns) else {
            return;
        };
        let Some(pos) = ns.links.iter().position(|l| l.link.index == index) else {
            return;
        };
        let link = ns.links.remove(pos);
        ns.drop_link_sysctls(&link.link.name);
        ns.neighbours.retain(|n| n.index != index);
        ns.addresses.retain(|a| a.index != index);
        ns.routes.retain(|r| !r.through(index));
        for l in &mut ns.links {
            if l.link.master == Some(index) {
                l.link.master = None;
            }
        }
        if let Some((peer_ns, peer)) = link.peer {
            self.remove_link(&peer_ns, peer);
        }
    }

    /// A call of `op` in `netns`: the injected fault it meets, consumed
    /// (the other faults of its kind count it).
    fn fault(&mut self, op: KernelOp, netns: &str) -> Option<Errno> {
        let mut fired = None;
        self.faults.retain_mut(|f| {
            if f.op != op || f.netns != netns {
                return true;
            }
            if f.skip == 0 && fired.is_none() {
                fired = Some(f.errno);
                return false;
            }
            f.skip = f.skip.saturating_sub(1);
            true
        });
        fired
    }
}

/// A namespace of a [`FakeKernel`], as the target of a link created from
/// another one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeNetns(String);

impl FakeNetns {
    /// The path the namespace was made with.
    pub fn path(&self) -> &str {
        &self.0
    }
}

/// A handle on one namespace of a [`FakeKernel`].
#[derive(Debug, Clone)]
pub struct FakeHandle {
    kernel: FakeKernel,
    netns: FakeNetns,
}

impl NetKernel for FakeKernel {
    type Handle = FakeHandle;

    fn current(&self) -> Result<FakeHandle> {
        self.open(NODE)
    }

    fn open(&self, path: &str) -> Result<FakeHandle> {
        if !self.world().namespaces.contains_key(path) {
            return Err(Error::NetnsNotFound {
                path: PathBuf::from(path),
            });
        }
        Ok(FakeHandle {
            kernel: self.clone(),
            netns: FakeNetns(path.to_owned()),
        })
    }
}

impl FakeHandle {
    fn name(&self) -> &str {
        &self.netns.0
    }

    /// `EOPNOTSUPP` making a link of kind `feature` as the real handle
    /// reports it: [`Error::Unsupported`] naming the kind.
    fn unsupported(&self, feature: &'static str, e: Error) -> Error {
        match e {
            Error::Netlink {
                op,
                netns,
                errno,
                message,
            } if errno == Errno::EOPNOTSUPP as i32 => Error::Unsupported {
                op,
                feature,
                netns,
                message,
            },
            other => other,
        }
    }

    fn netlink_error(&self, op: String, errno: Errno) -> Error {
        Error::Netlink {
            op,
            netns: self.name().to_owned(),
            errno: errno as i32,
            message: None,
        }
    }

    /// Runs change `op` (described by `what`, `object` for the record) on
    /// the model: fails with an injected fault, else applies `change` and
    /// records it when it succeeds.
    fn change<T>(
        &self,
        op: KernelOp,
        what: impl Fn(&Namespace) -> (String, String),
        change: impl FnOnce(&mut World, &str) -> std::result::Result<T, Errno>,
    ) -> Result<T> {
        let mut w = self.kernel.world();
        let netns = self.name().to_owned();
        let Some(ns) = w.namespaces.get(&netns) else {
            return Err(Error::NetnsNotFound {
                path: PathBuf::from(netns),
            });
        };
        let (description, object) = what(ns);
        if let Some(errno) = w.fault(op, &netns) {
            return Err(self.netlink_error(description, errno));
        }
        match change(&mut w, &netns) {
            Ok(t) => {
                w.calls.push(KernelCall { netns, op, object });
                Ok(t)
            }
            Err(errno) => Err(self.netlink_error(description, errno)),
        }
    }

    /// A read of kind `op` (described by `what`): fails with an injected
    /// fault.
    fn reading(&self, op: KernelOp, what: impl FnOnce() -> String) -> Result<()> {
        let fault = self.kernel.world().fault(op, self.name());
        match fault {
            Some(errno) => Err(self.netlink_error(what(), errno)),
            None => Ok(()),
        }
    }

    /// Link `index` as reported, without a read that can fail (a step
    /// inside a verb the kernel does in one call).
    fn peek_link(&self, index: u32) -> Result<Link> {
        self.find(
            |l| l.link.index == index,
            format!("get link #{index}"),
            &format!("#{index}"),
        )
    }

    fn read<T>(&self, f: impl FnOnce(&Namespace) -> Result<T>) -> Result<T> {
        let w = self.kernel.world();
        match w.namespaces.get(self.name()) {
            Some(ns) => f(ns),
            None => Err(Error::NetnsNotFound {
                path: PathBuf::from(self.name()),
            }),
        }
    }

    fn not_found(&self, op: String, name: &str) -> Error {
        Error::LinkNotFound {
            op,
            name: name.to_owned(),
            netns: self.name().to_owned(),
        }
    }

    /// The link as the kernel reports it: a veth is operationally up when
    /// both its ends are up.
    fn reported(&self, w: &World, l: &FakeLink) -> Link {
        let mut link = l.link.clone();
        let up = link.flags & libc::IFF_UP as u32 != 0;
        let peer_up = match &l.peer {
            Some((ns, index)) => w
                .namespaces
                .get(ns)
                .and_then(|ns| ns.link(*index))
                .is_some_and(|p| p.link.flags & libc::IFF_UP as u32 != 0),
            None => true,
        };
        if l.link.index != 1 {
            link.oper_state = match (up, peer_up) {
                (true, true) => OperState::Up,
                (true, false) => OperState::LowerLayerDown,
                _ => OperState::Down,
            };
        }
        link
    }

    fn find(&self, f: impl Fn(&FakeLink) -> bool, op: String, name: &str) -> Result<Link> {
        let w = self.kernel.world();
        let ns = w
            .namespaces
            .get(self.name())
            .ok_or_else(|| Error::NetnsNotFound {
                path: PathBuf::from(self.name()),
            })?;
        match ns.links.iter().find(|l| f(l)) {
            Some(l) => Ok(self.reported(&w, l)),
            None => Err(self.not_found(op, name)),
        }
    }

    /// Creates a link of `kind` named `name` in this namespace (recorded as
    /// `object`), set up by `set`.
    fn add_here(
        &self,
        kind: &'static str,
        name: &str,
        object: String,
        set: impl FnOnce(&mut FakeLink),
    ) -> Result<()> {
        let what = |_: &Namespace| (format!("add {object}"), object.clone());
        self.change(KernelOp::AddLink, what, |w, here| {
            valid_name(name)?;
            if w.namespaces
                .get(here)
                .ok_or(Errno::ENOENT)?
                .by_name(name)
                .is_some()
            {
                return Err(Errno::EEXIST);
            }
            if w.lacking.contains(kind) {
                return Err(Errno::EOPNOTSUPP);
            }
            let mut link = w.new_link(name, Some(kind), None, None);
            set(&mut link);
            w.namespaces
                .get_mut(here)
                .ok_or(Errno::ENOENT)?
                .links
                .push(link);
            Ok(())
        })
    }

    /// Creates a link stacked on `parent` (in this namespace) in `target`.
    fn add_on_parent(
        &self,
        kind: &'static str,
        name: &str,
        parent: u32,
        target: Option<&FakeNetns>,
        (mtu, mac): (Option<u32>, Option<MacAddr>),
        set: impl FnOnce(&mut FakeLink),
    ) -> Result<()> {
        let into = target.map_or(self.name(), |t| t.path()).to_owned();
        let what = |ns: &Namespace| {
            let d = format!("add {kind} {name} on {} in {into}", ns.name_of(parent));
            (
                d.clone(),
                format!("{kind} {name} on {} in {into}", ns.name_of(parent)),
            )
        };
        self.change(KernelOp::AddLink, what, |w, here| {
            valid_name(name)?;
            let parent_link = w
                .namespaces
                .get(here)
                .and_then(|ns| ns.link(parent))
                .map(|l| l.link.clone())
                .ok_or(Errno::ENODEV)?;
            let target_ns = w.namespaces.get(&into).ok_or(Errno::EINVAL)?;
            if target_ns.by_name(name).is_some() {
                return Err(Errno::EEXIST);
            }
            if w.lacking.contains(kind) {
                return Err(Errno::EOPNOTSUPP);
            }
            let mut link = w.new_link(name, Some(kind), Some(mtu.unwrap_or(parent_link.mtu)), mac);
            link.link.parent_index = Some(parent);
            set(&mut link);
            w.namespaces
                .get_mut(&into)
                .ok_or(Errno::EINVAL)?
                .links
                .push(link);
            Ok(())
        })
    }

    fn set_link(
        &self,
        op: KernelOp,
        index: u32,
        what: &str,
        f: impl FnOnce(&mut FakeLink) -> std::result::Result<(), Errno>,
    ) -> Result<()> {
        let describe = |ns: &Namespace| {
            let name = ns.name_of(index);
            (format!("set {what} on {name}"), format!("{what} on {name}"))
        };
        self.change(op, describe, |w, here| {
            let link = w
                .namespaces
                .get_mut(here)
                .and_then(|ns| ns.link_mut(index))
                .ok_or(Errno::ENODEV)?;
            f(link)
        })
    }

    fn write_sysctl(&self, key: &str, value: &str) -> Result<bool> {
        let key = slash(key);
        let what = |_: &Namespace| (format!("write sysctl {key}"), format!("{key}={value}"));
        self.change(KernelOp::WriteSysctl, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            // A link's sysctls exist while it does.
            let link = key
                .strip_prefix("net/ipv4/conf/")
                .or_else(|| key.strip_prefix("net/ipv6/conf/"))
                .and_then(|rest| rest.split_once('/'))
                .map(|(link, _)| link);
            if link.is_some_and(|l| l != "all" && l != "default" && ns.by_name(l).is_none()) {
                return Err(Errno::ENOENT);
            }
            let old = ns.sysctls.insert(key.clone(), value.to_owned());
            Ok(old.as_deref() != Some(value))
        })
        .map_err(|e| match e {
            Error::Netlink { errno, .. } => Error::Sysctl {
                op: "write",
                key: key.clone(),
                source: std::io::Error::from_raw_os_error(errno),
            },
            other => other,
        })
    }

    /// Replaces the route of `r`'s key, or adds it (`verb` names the
    /// operation in errors): a route without a kind is unicast.
    fn replace(&self, r: KernelRoute, verb: &str) -> Result<()> {
        let what = |ns: &Namespace| {
            let d = ns.describe_route(&r);
            (format!("{verb} route {d}"), d)
        };
        let r = KernelRoute {
            table: Some(r.table.unwrap_or(TABLE_MAIN)),
            scope: Some(r.scope.unwrap_or(SCOPE_UNIVERSE)),
            kind: if r.kind == 0 { RTN_UNICAST } else { r.kind },
            ..r.clone()
        };
        self.change(KernelOp::AddRoute, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            ns.check_route(&r)?;
            let r = ns.resolved(r);
            // The kernel replaces one route of the same key (with several,
            // as after an append, the last added), else adds it.
            match ns
                .routes
                .iter()
                .rposition(|k| k.dst == r.dst && k.table == r.table && k.priority == r.priority)
            {
                Some(pos) => ns.routes[pos] = r,
                None => ns.routes.push(r),
            }
            Ok(())
        })
    }

    fn route_change(&self, r: &KernelRoute, exclusive: bool) -> Result<()> {
        let r = KernelRoute {
            table: Some(r.table.unwrap_or(TABLE_MAIN)),
            scope: Some(r.scope.unwrap_or(SCOPE_UNIVERSE)),
            // Added routes are unicast, as the real handle's.
            kind: RTN_UNICAST,
            ..r.clone()
        };
        let what = |ns: &Namespace| {
            let d = ns.describe_route(&r);
            (format!("add route {d}"), d)
        };
        self.change(KernelOp::AddRoute, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            ns.check_route(&r)?;
            let r = ns.resolved(r.clone());
            let same =
                |k: &KernelRoute| k.dst == r.dst && k.table == r.table && k.priority == r.priority;
            let hop = |k: &KernelRoute| {
                (k.gateway == r.gateway && k.oif == r.oif)
                    || k.multipath
                        .iter()
                        .any(|h| h.gateway == r.gateway && Some(h.oif) == r.oif)
            };
            if ns.routes.iter().any(|k| same(k) && (exclusive || hop(k))) {
                return Err(Errno::EEXIST);
            }
            // An IPv6 route appended to one of the same key becomes one
            // of its paths (the kernel's siblings); IPv4 keeps two routes.
            let sibling = r.dst.is_ipv6() && r.multipath.is_empty();
            match ns.routes.iter_mut().find(|k| sibling && same(k)) {
                Some(k) => {
                    if k.multipath.is_empty() {
                        k.multipath.push(NextHop {
                            gateway: k.gateway.take(),
                            oif: k.oif.take().unwrap_or(0),
                            weight: 1,
                        });
                    }
                    k.multipath.push(NextHop {
                        gateway: r.gateway,
                        oif: r.oif.unwrap_or(0),
                        weight: 1,
                    });
                }
                None => ns.routes.push(r.clone()),
            }
            Ok(())
        })
    }
}

/// What an address change is described and recorded as: `"{verb} address
/// {addr} {prep} {link}"`, and `"{addr} on {link}"`.
fn address_change(
    verb: &'static str,
    prep: &'static str,
    index: u32,
    addr: IpNetwork,
) -> impl Fn(&Namespace) -> (String, String) {
    move |ns| {
        let name = ns.name_of(index);
        (
            format!("{verb} address {addr} {prep} {name}"),
            format!("{addr} on {name}"),
        )
    }
}

/// The kernel's check of a link name (`IFLA_IFNAME`): at most 15 bytes.
fn valid_name(name: &str) -> std::result::Result<(), Errno> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(Errno::ERANGE);
    }
    Ok(())
}

/// Whether route `r` goes out of link `index` (one of its paths does).
trait Through {
    fn through(&self, index: u32) -> bool;
}

impl Through for KernelRoute {
    fn through(&self, index: u32) -> bool {
        self.oif == Some(index) || self.multipath.iter().any(|h| h.oif == index)
    }
}

fn full_prefix(addr: IpNetwork) -> bool {
    addr.prefix() == if addr.is_ipv4() { 32 } else { 128 }
}

impl NetnsHandle for FakeHandle {
    type Netns = FakeNetns;

    fn netns(&self) -> &FakeNetns {
        &self.netns
    }

    fn netns_name(&self) -> &str {
        self.name()
    }

    fn link_by_name(&self, name: &str) -> Result<Link> {
        self.reading(KernelOp::GetLink, || format!("get link {name}"))?;
        self.find(|l| l.link.name == name, format!("get link {name}"), name)
    }

    fn link_by_index(&self, index: u32) -> Result<Link> {
        let op = format!("get link #{index}");
        self.reading(KernelOp::GetLink, || op.clone())?;
        self.find(|l| l.link.index == index, op.clone(), &format!("#{index}"))
            .map_err(|e| match e {
                Error::LinkNotFound { .. } => self.netlink_error(op, Errno::ENODEV),
                other => other,
            })
    }

    fn link_details(&self, name: &str) -> Result<LinkDetails> {
        let link = self.link_by_name(name)?;
        self.read(|ns| {
            let l = ns
                .by_name(name)
                .ok_or_else(|| self.not_found(format!("get link {name}"), name))?;
            Ok(LinkDetails {
                link,
                alias: l.alias.clone(),
                macvlan_mode: l.macvlan_mode,
                bc_queue_len: l.bc_queue_len,
                ipvlan_mode: l.ipvlan_mode,
            })
        })
    }

    fn default_route_link(&self) -> Result<Option<Link>> {
        self.reading(KernelOp::ListRoutes, || "list routes".into())?;
        let oif = self.read(|ns| {
            Ok(ns
                .routes
                .iter()
                .filter(|r| r.is_default() && r.table == Some(TABLE_MAIN))
                .find_map(|r| r.oif))
        })?;
        oif.map(|i| self.link_by_index(i)).transpose()
    }

    fn links(&self) -> Result<Vec<Link>> {
        self.reading(KernelOp::ListLinks, || "list links".into())?;
        let w = self.kernel.world();
        let ns = w
            .namespaces
            .get(self.name())
            .ok_or_else(|| Error::NetnsNotFound {
                path: PathBuf::from(self.name()),
            })?;
        Ok(ns.links.iter().map(|l| self.reported(&w, l)).collect())
    }

    fn link_by_mac(&self, mac: MacAddr) -> Result<Option<Link>> {
        Ok(self.links()?.into_iter().find(|l| l.mac == Some(mac)))
    }

    fn links_with_master(&self, index: u32) -> Result<Vec<Link>> {
        Ok(self
            .links()?
            .into_iter()
            .filter(|l| l.master == Some(index))
            .collect())
    }

    fn setup_veth_with(&self, spec: &VethSpec<'_, FakeNetns>) -> Result<Link> {
        let name = format!("veth{:08x}", crate::random_u32());
        let peer_ns = spec.peer_netns.map_or(self.name(), |n| n.path()).to_owned();
        let peer_name = spec.peer_name.clone();
        let object = format!("veth {name} peer {peer_name} in {peer_ns}");
        let what = |_: &Namespace| (format!("add {object}"), object.clone());
        let index = self.change(KernelOp::AddLink, what, |w, here| {
            valid_name(&peer_name)?;
            let target = w.namespaces.get(&peer_ns).ok_or(Errno::EINVAL)?;
            if target.by_name(&peer_name).is_some() {
                return Err(Errno::EEXIST);
            }
            if let Some(master) = spec.master {
                w.namespaces
                    .get(here)
                    .and_then(|ns| ns.link(master))
                    .ok_or(Errno::ENODEV)?;
            }
            let mut host = w.new_link(&name, Some("veth"), spec.mtu, spec.mac);
            let mut peer = w.new_link(&peer_name, Some("veth"), spec.mtu, spec.peer_mac);
            host.link.master = spec.master;
            if spec.up {
                host.link.flags |= libc::IFF_UP as u32;
            }
            host.link.parent_index = Some(peer.link.index);
            peer.link.parent_index = Some(host.link.index);
            host.peer = Some((peer_ns.clone(), peer.link.index));
            peer.peer = Some((here.to_owned(), host.link.index));
            let index = host.link.index;
            w.namespaces
                .get_mut(here)
                .ok_or(Errno::ENOENT)?
                .links
                .push(host);
            w.namespaces
                .get_mut(&peer_ns)
                .ok_or(Errno::EINVAL)?
                .links
                .push(peer);
            Ok(index)
        });
        let index = match index {
            Err(e) if e.is_exists() => {
                return Err(Error::VethPeerExists {
                    name: spec.peer_name.clone(),
                    netns: self.name().to_owned(),
                })
            }
            other => other?,
        };
        // As the real one: the end is looked up (a failure leaves the
        // pair), then its accept_ra is 0, failures ignored.
        let link = self.link_by_index(index)?;
        let _ = self.write_sysctl(&format!("net/ipv6/conf/{name}/accept_ra"), "0");
        Ok(link)
    }

    fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<Link> {
        let name = &spec.name;
        let link = match self.link_by_name(name) {
            Ok(link) => link,
            Err(e) if e.is_not_found() => {
                self.add_here("bridge", name, format!("bridge {name}"), |l| {
                    l.link.mtu = spec.mtu.unwrap_or(l.link.mtu);
                    l.link.vlan_filtering = Some(spec.vlan_filtering);
                })?;
                self.link_by_name(name)?
            }
            Err(e) => return Err(e),
        };
        if link.kind.as_deref() != Some("bridge") {
            return Err(Error::WrongLinkKind {
                op: format!("add bridge {name}"),
                name: name.clone(),
                found: link.kind.unwrap_or_else(|| "device".into()),
                expected: "bridge",
                netns: self.name().to_owned(),
            });
        }
        if !link.is_up() {
            self.set_up(link.index)?;
        }
        self.link_by_index(link.index)
    }

    fn add_macvlan(&self, spec: &MacvlanSpec<'_, FakeNetns>) -> Result<()> {
        let mode = spec.mode;
        self.add_on_parent(
            "macvlan",
            &spec.name,
            spec.parent,
            spec.netns,
            (spec.mtu, spec.mac),
            |l| l.macvlan_mode = Some(mode),
        )
    }

    fn add_ipvlan(&self, spec: &IpvlanSpec<'_, FakeNetns>) -> Result<()> {
        let mode = spec.mode;
        self.add_on_parent(
            "ipvlan",
            &spec.name,
            spec.parent,
            spec.netns,
            (spec.mtu, None),
            |l| l.ipvlan_mode = Some(mode),
        )
        .map_err(|e| self.unsupported("ipvlan", e))
    }

    fn set_macvlan_bc_queue_len(&self, index: u32, len: u32) -> Result<()> {
        let what = format!("macvlan bcqueuelen {len}");
        self.set_link(KernelOp::SetLinkOption, index, &what, |l| {
            l.bc_queue_len = Some(len);
            Ok(())
        })
    }

    fn add_vlan(&self, spec: &VlanSpec<'_, FakeNetns>) -> Result<()> {
        let id = spec.vlan_id;
        if id > VLAN_ID_MAX {
            // The kernel's vlan_validate.
            return Err(self.netlink_error(format!("add vlan {}", spec.name), Errno::ERANGE));
        }
        self.add_on_parent(
            "vlan",
            &spec.name,
            spec.parent,
            spec.netns,
            (spec.mtu, None),
            |l| l.vlan_id = Some(id),
        )
        .map_err(|e| self.unsupported("vlan", e))
    }

    fn vlan_id(&self, name: &str) -> Result<Option<u16>> {
        self.reading(KernelOp::GetLink, || format!("get link {name}"))?;
        self.read(|ns| {
            ns.by_name(name)
                .map(|l| l.vlan_id)
                .ok_or_else(|| self.not_found(format!("get link {name}"), name))
        })
    }

    fn add_dummy(&self, name: &str) -> Result<Link> {
        self.add_here("dummy", name, format!("dummy {name}"), |_| {})
            .map_err(|e| self.unsupported("dummy", e))?;
        self.link_by_name(name)
    }

    fn add_tap(&self, spec: &TapSpec, selinux_context: Option<&str>) -> Result<Link> {
        let mut object = format!("tap {} (flags {:#06x})", spec.name, spec.flags());
        for (what, id) in [("owner", spec.owner), ("group", spec.group)] {
            if let Some(id) = id {
                object.push_str(&format!(" {what} {id}"));
            }
        }
        if let Some(context) = selinux_context {
            object.push_str(&format!(" context {context}"));
        }
        // Kind `tun`, as the kernel reports a tap; then, as the real one,
        // looked up, its MAC set, looked up again, deleted when one of
        // those fails.
        let mtu = spec.mtu;
        self.add_here("tun", &spec.name, object, |l| {
            l.link.mtu = mtu.unwrap_or(l.link.mtu);
        })
        .map_err(|e| match e {
            Error::Netlink {
                op, netns, errno, ..
            } => Error::Tun {
                op,
                netns,
                reason: format!("/dev/net/tun: {}", std::io::Error::from_raw_os_error(errno)),
            },
            other => other,
        })?;
        let link = self.link_by_name(&spec.name)?;
        let configured = spec
            .mac
            .map_or(Ok(()), |mac| self.set_mac(link.index, mac))
            .and_then(|()| self.link_by_index(link.index));
        if configured.is_err() {
            let _ = self.delete_link(link.index);
        }
        configured
    }

    fn add_vrf(&self, name: &str, table: u32) -> Result<Vrf> {
        // As the real one: made, looked up, set up and looked up again;
        // deleted when a step after its making fails.
        let object = format!("vrf {name} table {table}");
        self.add_here("vrf", name, object, |l| l.vrf_table = Some(table))
            .map_err(|e| self.unsupported("vrf", e))?;
        let link = self.link_by_name(name)?;
        let up = self
            .set_up(link.index)
            .and_then(|()| self.link_by_index(link.index));
        if up.is_err() {
            let _ = self.delete_link(link.index);
        }
        Ok(Vrf { link: up?, table })
    }

    fn vrf_by_name(&self, name: &str) -> Result<Option<Vrf>> {
        let link = match self.link_by_name(name) {
            Ok(l) => l,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        match self.read(|ns| Ok(ns.link(link.index).and_then(|l| l.vrf_table)))? {
            Some(table) => Ok(Some(Vrf { link, table })),
            None => Err(Error::WrongLinkKind {
                op: format!("find vrf {name}"),
                name: name.to_owned(),
                found: link.kind.unwrap_or_else(|| "device".into()),
                expected: "vrf",
                netns: self.name().to_owned(),
            }),
        }
    }

    fn vrfs(&self) -> Result<Vec<Vrf>> {
        self.reading(KernelOp::ListLinks, || "list links".into())?;
        let tables = self.read(|ns| {
            Ok(ns
                .links
                .iter()
                .filter_map(|l| l.vrf_table.map(|t| (l.link.index, t)))
                .collect::<Vec<_>>())
        })?;
        tables
            .into_iter()
            .map(|(index, table)| {
                Ok(Vrf {
                    link: self.peek_link(index)?,
                    table,
                })
            })
            .collect()
    }

    fn set_up(&self, index: u32) -> Result<()> {
        let describe = |ns: &Namespace| {
            let name = ns.name_of(index);
            (format!("set up on {name}"), format!("up on {name}"))
        };
        self.change(KernelOp::SetUp, describe, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let link = ns.link_mut(index).ok_or(Errno::ENODEV)?;
            let was_up = link.is_up();
            link.link.flags |= libc::IFF_UP as u32;
            let loopback = link.link.flags & libc::IFF_LOOPBACK as u32 != 0;
            if !was_up {
                ns.link_up(index);
            }
            if loopback {
                // The kernel's addresses of an up loopback (their routes,
                // in table local, are not modelled).
                for address in ["127.0.0.1/8", "::1/128"] {
                    let address: IpNetwork = address.parse().map_err(|_| Errno::EINVAL)?;
                    if !ns
                        .addresses
                        .iter()
                        .any(|a| a.index == index && a.address == address)
                    {
                        ns.addresses.push(Address {
                            index,
                            address,
                            flags: 0,
                            scope: SCOPE_HOST,
                            label: None,
                        });
                    }
                }
            }
            Ok(())
        })
    }

    fn set_down(&self, index: u32) -> Result<()> {
        let describe = |ns: &Namespace| {
            let name = ns.name_of(index);
            (format!("set {name} down"), format!("down on {name}"))
        };
        self.change(KernelOp::SetDown, describe, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let link = ns.link_mut(index).ok_or(Errno::ENODEV)?;
            if link.is_up() {
                link.link.flags &= !(libc::IFF_UP as u32);
                ns.link_down(index);
            }
            Ok(())
        })
    }

    fn set_master(&self, index: u32, master: u32) -> Result<()> {
        let describe = |ns: &Namespace| {
            let (name, m) = (ns.name_of(index), ns.name_of(master));
            (
                format!("set master of {name} to {m}"),
                format!("master {m} on {name}"),
            )
        };
        self.change(KernelOp::SetMaster, describe, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let old = ns.link(index).ok_or(Errno::ENODEV)?.link.master;
            if old == Some(master) {
                return Ok(());
            }
            // The kernel's do_set_master: the old master is released
            // first, then the new one must exist (EINVAL), take members
            // (EOPNOTSUPP) and not be the link itself (ELOOP).
            if old.is_some() {
                ns.set_master(index, None);
            }
            let kind = ns.link(master).ok_or(Errno::EINVAL)?.link.kind.clone();
            if matches!(
                kind.as_deref(),
                Some("veth" | "dummy" | "macvlan" | "ipvlan" | "vlan" | "tun")
            ) {
                return Err(Errno::EOPNOTSUPP);
            }
            if index == master {
                return Err(Errno::ELOOP);
            }
            ns.set_master(index, Some(master));
            Ok(())
        })
    }

    fn set_nomaster(&self, index: u32) -> Result<()> {
        let describe = |ns: &Namespace| {
            let name = ns.name_of(index);
            (
                format!("set nomaster on {name}"),
                format!("nomaster on {name}"),
            )
        };
        self.change(KernelOp::SetMaster, describe, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            ns.link(index).ok_or(Errno::ENODEV)?;
            ns.set_master(index, None);
            Ok(())
        })
    }

    fn set_alias(&self, index: u32, alias: &str) -> Result<()> {
        let what = format!("alias {alias:?}");
        self.set_link(KernelOp::SetLinkOption, index, &what, |l| {
            l.alias = Some(alias.to_owned()).filter(|a| !a.is_empty());
            Ok(())
        })
    }

    fn move_to_netns(&self, index: u32, netns: &FakeNetns) -> Result<()> {
        let to = netns.path().to_owned();
        let describe = |ns: &Namespace| {
            let name = ns.name_of(index);
            (format!("move {name} to {to}"), format!("{name} to {to}"))
        };
        self.change(KernelOp::MoveLink, describe, |w, here| {
            w.move_link(here, index, &to, false)
        })
    }

    fn set_mac(&self, index: u32, mac: MacAddr) -> Result<()> {
        self.set_link(KernelOp::SetMac, index, &format!("address {mac}"), |l| {
            l.link.mac = Some(mac);
            Ok(())
        })
    }

    fn rename(&self, index: u32, new_name: &str) -> Result<()> {
        let describe = |ns: &Namespace| {
            let name = ns.name_of(index);
            (
                format!("set name {new_name} on {name}"),
                format!("name {new_name} on {name}"),
            )
        };
        self.change(KernelOp::Rename, describe, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let old = ns.link(index).ok_or(Errno::ENODEV)?.link.name.clone();
            // The kernel's dev_change_name: its own name is no change; an
            // up link is renamed too (Linux >= 6.2).
            if old == new_name {
                return Ok(());
            }
            valid_name(new_name)?;
            if ns.by_name(new_name).is_some() {
                return Err(Errno::EEXIST);
            }
            if let Some(l) = ns.link_mut(index) {
                l.link.name = new_name.to_owned();
            }
            // Its sysctls follow it.
            let [from4, from6] = Namespace::link_sysctl_prefixes(&old);
            let [to4, to6] = Namespace::link_sysctl_prefixes(new_name);
            let moved: Vec<(String, String)> = ns
                .sysctls
                .iter()
                .filter_map(|(k, v)| {
                    let k = if let Some(rest) = k.strip_prefix(from4.as_str()) {
                        format!("{to4}{rest}")
                    } else {
                        format!("{to6}{}", k.strip_prefix(from6.as_str())?)
                    };
                    Some((k, v.clone()))
                })
                .collect();
            ns.drop_link_sysctls(&old);
            ns.sysctls.extend(moved);
            Ok(())
        })
    }

    fn delete_link(&self, index: u32) -> Result<()> {
        let what = |ns: &Namespace| {
            let name = ns.name_of(index);
            (format!("delete link {name}"), name)
        };
        self.change(KernelOp::DeleteLink, what, |w, here| {
            let link = w
                .namespaces
                .get(here)
                .and_then(|ns| ns.link(index))
                .ok_or(Errno::ENODEV)?;
            // Only links made over rtnetlink (with a kind) can be deleted:
            // not the loopback, not a physical device.
            if link.link.kind.is_none() {
                return Err(Errno::EOPNOTSUPP);
            }
            w.remove_link(here, index);
            Ok(())
        })
    }

    fn delete_link_by_name(&self, name: &str) -> Result<bool> {
        // One call on Linux (by name): no lookup that could fail.
        let found = self.find(|l| l.link.name == name, format!("get link {name}"), name);
        match found {
            Ok(link) => self.delete_link(link.index).map(|()| true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn wait_oper_up(&self, index: u32, _timeout: Duration) -> Result<Link> {
        self.link_by_index(index)
    }

    fn set_bridge_port(&self, index: u32, opts: &BridgePortOptions) -> Result<()> {
        let what = format!("bridge port options {opts}");
        self.set_link(KernelOp::SetLinkOption, index, &what, |_| Ok(()))
    }

    fn add_bridge_vlans(&self, index: u32, vlans: &[BridgeVlan], _on_bridge: bool) -> Result<()> {
        let what = format!("bridge vlans +{vlans:?}");
        self.set_link(KernelOp::SetLinkOption, index, &what, |_| Ok(()))
    }

    fn del_bridge_vlans(&self, index: u32, vlans: &[BridgeVlan], _on_bridge: bool) -> Result<()> {
        let what = format!("bridge vlans -{vlans:?}");
        self.set_link(KernelOp::SetLinkOption, index, &what, |_| Ok(()))
    }

    fn addresses(&self, index: Option<u32>, family: AddressFamilyFilter) -> Result<Vec<Address>> {
        self.reading(KernelOp::ListAddresses, || "list addresses".into())?;
        self.read(|ns| {
            Ok(ns
                .addresses
                .iter()
                .filter(|a| index.is_none_or(|i| a.index == i) && family.matches(a.address.ip()))
                .cloned()
                .collect())
        })
    }

    fn add_address(&self, index: u32, addr: IpNetwork, opts: AddressOptions) -> Result<()> {
        let what = address_change("add", "to", index, addr);
        self.change(KernelOp::AddAddress, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            ns.link(index).ok_or(Errno::ENODEV)?;
            if ns
                .addresses
                .iter()
                .any(|a| a.index == index && a.address.ip() == addr.ip())
            {
                return Err(Errno::EEXIST);
            }
            let ip = addr.ip();
            let link_local = matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
            // A second IPv4 address in a subnet of the link is secondary:
            // no prefix route of its own.
            let secondary = addr.is_ipv4()
                && ns.addresses.iter().any(|a| {
                    a.index == index
                        && a.address.is_ipv4()
                        && a.address.prefix() == addr.prefix()
                        && a.address.network() == addr.network()
                });
            let address = Address {
                index,
                address: addr,
                flags: if opts.nodad { IFA_F_NODAD } else { 0 }
                    | if secondary { IFA_F_SECONDARY } else { 0 }
                    | if opts.noprefixroute {
                        IFA_F_NOPREFIXROUTE
                    } else {
                        0
                    },
                scope: if ip.is_loopback() {
                    SCOPE_HOST
                } else if link_local {
                    SCOPE_LINK
                } else {
                    SCOPE_UNIVERSE
                },
                label: None,
            };
            let routes = ns.address_routes(&address);
            ns.addresses.push(address);
            ns.routes.extend(routes);
            Ok(())
        })
    }

    fn del_address(&self, index: u32, addr: IpNetwork) -> Result<()> {
        let what = address_change("delete", "from", index, addr);
        self.change(KernelOp::DelAddress, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let pos = ns
                .addresses
                .iter()
                .position(|a| a.index == index && a.address == addr)
                .ok_or(Errno::EADDRNOTAVAIL)?;
            let gone = ns.addresses.remove(pos);
            ns.remove_address_routes(&gone);
            if gone.address.is_ipv4() && gone.flags & IFA_F_SECONDARY == 0 {
                ns.primary_gone(&gone);
            }
            Ok(())
        })
    }

    fn settle_addresses(
        &self,
        _index: u32,
        _addresses: &[IpAddr],
        _timeout: Duration,
    ) -> Result<()> {
        Ok(())
    }

    fn routes(&self, family: AddressFamilyFilter) -> Result<Vec<KernelRoute>> {
        self.reading(KernelOp::ListRoutes, || "list routes".into())?;
        self.read(|ns| {
            Ok(ns
                .routes
                .iter()
                .filter(|r| family.matches(r.dst.ip()))
                .cloned()
                .collect())
        })
    }

    fn add_route(&self, r: &KernelRoute) -> Result<()> {
        self.route_change(r, true)
    }

    fn add_route_ecmp(&self, r: &KernelRoute) -> Result<()> {
        self.route_change(r, false)
    }

    fn replace_route(&self, r: &KernelRoute) -> Result<()> {
        self.replace(
            KernelRoute {
                // Added routes are unicast, as the real handle's.
                kind: RTN_UNICAST,
                ..r.clone()
            },
            "replace",
        )
    }

    fn del_route(&self, r: &KernelRoute) -> Result<()> {
        let what = |ns: &Namespace| {
            let d = ns.describe_route(r);
            (format!("delete route {d}"), d)
        };
        self.change(KernelOp::DelRoute, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let table = r.table.unwrap_or(TABLE_MAIN);
            // The latest added of several that match (the kernel's first).
            let pos = ns
                .routes
                .iter()
                .rposition(|k| {
                    k.dst == r.dst
                        && k.table == Some(table)
                        && (r.oif.is_none() || k.oif == r.oif)
                        && (r.gateway.is_none() || k.gateway == r.gateway)
                        && (r.scope.is_none() || k.scope == r.scope)
                        && (r.priority.is_none() || k.priority == r.priority)
                })
                .ok_or(Errno::ESRCH)?;
            ns.routes.remove(pos);
            Ok(())
        })
    }

    fn sysctl_get(&self, key: &str) -> Result<Option<String>> {
        let key = slash(key);
        if let Some(errno) = self.kernel.world().fault(KernelOp::ReadSysctl, self.name()) {
            return Err(Error::Sysctl {
                op: "read",
                key,
                source: std::io::Error::from_raw_os_error(errno as i32),
            });
        }
        self.read(|ns| Ok(ns.sysctls.get(&key).cloned()))
    }

    fn sysctl_set(&self, key: &str, value: &str) -> Result<bool> {
        self.write_sysctl(key, value)
    }

    fn sysctl_write(&self, key: &str, value: &str) -> Result<()> {
        self.write_sysctl(key, value).map(drop)
    }

    fn sysctl_set_in(&self, dir: &str, entries: &[(&str, &str)]) -> Result<Vec<Result<bool>>> {
        Ok(entries
            .iter()
            .map(|(leaf, value)| self.write_sysctl(&format!("{dir}/{leaf}"), value))
            .collect())
    }

    fn set_ipv4_conf(&self, index: u32, settings: &[(Ipv4Conf, u32)]) -> Result<()> {
        if settings.is_empty() {
            return Ok(());
        }
        // One netlink message on Linux: all or nothing (one fault), a
        // record per setting.
        let what = |ns: &Namespace| {
            let op = format!("set ipv4 conf of {}", ns.name_of(index));
            (op.clone(), op)
        };
        let written = self.change(KernelOp::WriteSysctl, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let name = ns.link(index).ok_or(Errno::ENODEV)?.link.name.clone();
            let mut written = Vec::new();
            for (conf, value) in settings {
                let key = format!("net/ipv4/conf/{name}/{}", conf.name());
                ns.sysctls.insert(key.clone(), value.to_string());
                written.push(format!("{key}={value}"));
            }
            Ok(written)
        })?;
        let mut w = self.kernel.world();
        // `change` recorded the first; the others follow it.
        if let Some(first) = w.calls.last_mut() {
            first.object = written[0].clone();
        }
        for object in &written[1..] {
            w.calls.push(KernelCall {
                netns: self.name().to_owned(),
                op: KernelOp::WriteSysctl,
                object: object.clone(),
            });
        }
        Ok(())
    }

    fn enable_forwarding(&self, ipv4: bool, ipv6: bool) -> Result<()> {
        if ipv4 {
            self.write_sysctl("net/ipv4/ip_forward", "1")?;
        }
        if ipv6 {
            self.write_sysctl("net/ipv6/conf/all/forwarding", "1")?;
        }
        Ok(())
    }

    fn set_mtu(&self, index: u32, mtu: u32) -> Result<()> {
        self.set_link(KernelOp::SetMtu, index, &format!("mtu {mtu}"), |l| {
            // The kernel's bounds for an Ethernet-like link (loopback:
            // any from 68).
            let max = if l.link.flags & libc::IFF_LOOPBACK as u32 != 0 {
                u32::MAX
            } else {
                65535
            };
            if !(68..=max).contains(&mtu) {
                return Err(Errno::EINVAL);
            }
            l.link.mtu = mtu;
            Ok(())
        })
    }

    fn set_promisc(&self, index: u32, on: bool) -> Result<()> {
        let what = if on { "promisc on" } else { "promisc off" };
        self.set_link(KernelOp::SetLinkOption, index, what, |l| {
            set_flag(&mut l.link.flags, libc::IFF_PROMISC, on);
            Ok(())
        })
    }

    fn set_allmulti(&self, index: u32, on: bool) -> Result<()> {
        let what = if on {
            "allmulticast on"
        } else {
            "allmulticast off"
        };
        self.set_link(KernelOp::SetLinkOption, index, what, |l| {
            set_flag(&mut l.link.flags, libc::IFF_ALLMULTI, on);
            Ok(())
        })
    }

    fn set_txqlen(&self, index: u32, txqlen: u32) -> Result<()> {
        let what = format!("txqueuelen {txqlen}");
        self.set_link(KernelOp::SetLinkOption, index, &what, |l| {
            l.txqlen = txqlen;
            Ok(())
        })
    }

    fn link_txqlen(&self, index: u32) -> Result<u32> {
        self.link_by_index(index)?;
        self.read(|ns| Ok(ns.link(index).map_or(0, |l| l.txqlen)))
    }

    fn link_alias(&self, index: u32) -> Result<Option<String>> {
        self.link_by_index(index)?;
        self.read(|ns| Ok(ns.link(index).and_then(|l| l.alias.clone())))
    }

    fn add_ifb(&self, name: &str, mtu: u32, alias: Option<&str>) -> Result<Link> {
        // As the real handle: create (up, txqlen 0), look up, set the alias.
        self.add_here("ifb", name, format!("ifb {name}"), |l| {
            l.link.mtu = mtu;
            l.link.flags |= libc::IFF_UP as u32;
            l.txqlen = 0;
        })?;
        let link = self.link_by_name(name)?;
        if let Some(alias) = alias {
            self.set_alias(link.index, alias)?;
        }
        Ok(link)
    }

    fn rules(&self, family: AddressFamilyFilter) -> Result<Vec<RoutingRule>> {
        self.reading(KernelOp::ListRules, || "list rules".into())?;
        self.read(|ns| {
            // IPv4's first, as the kernel dumps them.
            let (v4, v6): (Vec<_>, Vec<_>) = ns.rules.iter().cloned().partition(|r| !r.v6);
            Ok(v4
                .into_iter()
                .chain(v6)
                .filter(|r| match family {
                    AddressFamilyFilter::All => true,
                    AddressFamilyFilter::V4 => !r.v6,
                    AddressFamilyFilter::V6 => r.v6,
                })
                .collect())
        })
    }

    fn add_rule(&self, r: &RoutingRule) -> Result<()> {
        let what = |_: &Namespace| (format!("add rule {r}"), r.to_string());
        self.change(KernelOp::AddRule, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            if r.table == 0 {
                return Err(Errno::EINVAL);
            }
            // Without a priority, the kernel's `fib_default_rule_pref`:
            // one below the family's second rule (the first is `local`).
            let pref = r.priority.unwrap_or_else(|| {
                ns.rules
                    .iter()
                    .filter(|k| k.v6 == r.v6)
                    .nth(1)
                    .and_then(|k| k.priority)
                    .filter(|p| *p != 0)
                    .map_or(0, |p| p - 1)
            });
            let new = RoutingRule {
                priority: Some(pref),
                action: 1,
                ..r.clone()
            };
            // `rule_exists`: the same rule at the same priority.
            if ns.rules.contains(&new) {
                return Err(Errno::EEXIST);
            }
            // After the family's rules of lower or equal priority.
            let at = ns
                .rules
                .iter()
                .rposition(|k| k.v6 == r.v6 && k.priority.unwrap_or(0) <= pref)
                .map_or(0, |i| i + 1);
            ns.rules.insert(at, new);
            Ok(())
        })
    }

    fn del_rule(&self, r: &RoutingRule) -> Result<()> {
        let what = |_: &Namespace| (format!("delete rule {r}"), r.to_string());
        self.change(KernelOp::DelRule, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            let at = ns
                .rules
                .iter()
                .position(|k| rule_selects(r, k))
                .ok_or(Errno::ENOENT)?;
            ns.rules.remove(at);
            Ok(())
        })
    }

    fn copy_route_to_table(&self, r: &KernelRoute, table: u32) -> Result<()> {
        let moved = KernelRoute {
            table: Some(table),
            ..r.clone()
        };
        self.replace(moved, "copy")
    }

    fn neighbours(
        &self,
        index: Option<u32>,
        family: AddressFamilyFilter,
    ) -> Result<Vec<Neighbour>> {
        self.reading(KernelOp::ListNeighbours, || "list neighbours".into())?;
        self.read(|ns| {
            Ok(ns
                .neighbours
                .iter()
                .filter(|n| index.is_none_or(|i| n.index == i) && family.matches(n.ip))
                .cloned()
                .collect())
        })
    }

    fn qdiscs(&self, index: u32) -> Result<Vec<Qdisc>> {
        let op = format!("list qdiscs of #{index}");
        self.reading(KernelOp::ListQdiscs, || op.clone())?;
        self.read(|ns| {
            ns.link(index)
                .map(|l| l.qdiscs.clone())
                .ok_or_else(|| self.netlink_error(op.clone(), Errno::ENODEV))
        })
    }

    fn add_tbf(&self, index: u32, tbf: &Tbf) -> Result<()> {
        let qdisc = Qdisc {
            index,
            handle: TBF_HANDLE,
            parent: HANDLE_ROOT,
            kind: "tbf".into(),
            tbf: Some(*tbf),
        };
        self.add_qdisc(qdisc, &format!("tbf (rate {} B/s)", tbf.rate))
    }

    fn add_ingress_qdisc(&self, index: u32) -> Result<()> {
        let qdisc = Qdisc {
            index,
            handle: INGRESS_QDISC_HANDLE,
            parent: HANDLE_INGRESS,
            kind: "ingress".into(),
            tbf: None,
        };
        self.add_qdisc(qdisc, "ingress")
    }

    fn delete_qdisc(&self, index: u32, parent: u32) -> Result<bool> {
        let present = match self.qdiscs(index) {
            Ok(qs) => qs.into_iter().find(|q| q.parent == parent),
            Err(e) if e.errno() == Some(Errno::ENODEV) => None,
            Err(e) => return Err(e),
        };
        let Some(q) = present else {
            return Ok(false);
        };
        let what = |ns: &Namespace| {
            let name = ns.name_of(index);
            (
                format!("delete {} qdisc of {name}", q.kind),
                format!("{} qdisc of {name}", q.kind),
            )
        };
        self.change(KernelOp::DelQdisc, what, |w, here| {
            let link = w
                .namespaces
                .get_mut(here)
                .and_then(|ns| ns.link_mut(index))
                .ok_or(Errno::ENODEV)?;
            link.qdiscs.retain(|k| k.parent != parent);
            link.filters.retain(|f| f.parent != q.handle);
            Ok(true)
        })
    }

    fn filters(&self, index: u32, parent: u32) -> Result<Vec<Filter>> {
        let op = format!("list filters of #{index}");
        self.reading(KernelOp::ListQdiscs, || op.clone())?;
        self.read(|ns| {
            ns.link(index)
                .map(|l| {
                    l.filters
                        .iter()
                        .filter(|f| f.parent == parent)
                        .cloned()
                        .collect()
                })
                .ok_or_else(|| self.netlink_error(op.clone(), Errno::ENODEV))
        })
    }

    fn add_redirect_filter(&self, index: u32, target: u32, kind: RedirectFilterKind) -> Result<()> {
        let what = |ns: &Namespace| {
            let (from, to) = (ns.name_of(index), ns.name_of(target));
            (
                format!("add filter redirecting {from} to {to}"),
                format!("redirect {from} to {to}"),
            )
        };
        self.change(KernelOp::AddFilter, what, |w, here| {
            let ns = w.namespaces.get_mut(here).ok_or(Errno::ENOENT)?;
            if ns.link(target).is_none() {
                return Err(Errno::ENODEV);
            }
            let link = ns.link_mut(index).ok_or(Errno::ENODEV)?;
            if !link.qdiscs.iter().any(|q| q.handle == INGRESS_QDISC_HANDLE) {
                // "Parent Qdisc doesn't exists".
                return Err(Errno::EINVAL);
            }
            // u32 numbers its nodes 800::800, 800::801, ...
            let handle = 0x8000_0800 + link.filters.len() as u32;
            let (kind, redirects) = match kind {
                RedirectFilterKind::U32GoCompatible => ("u32", vec![target, target]),
                RedirectFilterKind::U32 => ("u32", vec![target]),
                RedirectFilterKind::MatchAll => ("matchall", vec![target]),
            };
            link.filters.push(Filter {
                index,
                parent: INGRESS_QDISC_HANDLE,
                handle,
                priority: 1,
                protocol: ETH_P_ALL,
                kind: kind.into(),
                redirects,
            });
            Ok(())
        })
    }
}

/// Sets or clears `flag` in `flags`.
fn set_flag(flags: &mut u32, flag: libc::c_int, on: bool) {
    if on {
        *flags |= flag as u32;
    } else {
        *flags &= !(flag as u32);
    }
}

impl FakeHandle {
    /// Adds `qdisc` (described as `what`) to its link: a second one of the
    /// same parent is `EEXIST` (`NLM_F_EXCL`).
    fn add_qdisc(&self, qdisc: Qdisc, what: &str) -> Result<()> {
        let index = qdisc.index;
        let describe = |ns: &Namespace| {
            let name = ns.name_of(index);
            (
                format!("add {what} qdisc to {name}"),
                format!("{what} on {name}"),
            )
        };
        self.change(KernelOp::AddQdisc, describe, |w, here| {
            let link = w
                .namespaces
                .get_mut(here)
                .and_then(|ns| ns.link_mut(index))
                .ok_or(Errno::ENODEV)?;
            if link.qdiscs.iter().any(|q| q.parent == qdisc.parent) {
                return Err(Errno::EEXIST);
            }
            link.qdiscs.push(qdisc);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> (FakeKernel, FakeHandle, FakeHandle) {
        let k = FakeKernel::new();
        k.add_netns("pod");
        let (host, pod) = (k.current().unwrap(), k.open("pod").unwrap());
        (k, host, pod)
    }

    #[test]
    fn an_address_brings_its_prefix_route_and_gateways_must_be_reachable() {
        let (k, _, pod) = pod();
        let idx = pod.add_dummy("eth0").unwrap().index;
        pod.set_up(idx).unwrap();
        let off_link = KernelRoute {
            gateway: Some("192.0.2.1".parse().unwrap()),
            oif: Some(idx),
            ..KernelRoute::new("10.200.0.0/16".parse().unwrap())
        };
        let e = pod.add_route(&off_link).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENETUNREACH), "{e}");
        pod.add_address(idx, "192.0.2.5/24".parse().unwrap(), Default::default())
            .unwrap();
        pod.add_route(&off_link).unwrap();
        assert_eq!(
            k.route_list("pod"),
            [
                "192.0.2.0/24 dev eth0 src 192.0.2.5",
                "10.200.0.0/16 via 192.0.2.1 dev eth0"
            ]
        );
        assert!(pod.add_route(&off_link).unwrap_err().is_exists());
        // A physical device cannot be deleted; a dummy takes its
        // addresses and routes along.
        let nic = k.add_device("pod", "nic0");
        let e = pod.delete_link(nic).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{e}");
        pod.delete_link(idx).unwrap();
        assert!(k.route_list("pod").is_empty() && k.address_list("pod").is_empty());
    }

    #[test]
    fn an_injected_fault_fails_once_and_changes_nothing() {
        let (k, host, pod) = pod();
        k.fail_next(KernelOp::AddLink, NODE, Errno::ENOMEM);
        let e = host
            .setup_veth("eth0", pod.netns(), None, None)
            .unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOMEM));
        assert!(e.to_string().contains("add veth"), "{e}");
        assert_eq!(k.link_names("pod"), ["lo"]);
        assert!(k.calls().is_empty());
        host.setup_veth("eth0", pod.netns(), None, None).unwrap();
        assert_eq!(k.link_names("pod"), ["lo", "eth0"]);
    }

    #[test]
    fn fail_nth_counts_calls_of_its_kind_reads_included() {
        let (k, _, pod) = pod();
        let eth0 = k.add_device("pod", "eth0");
        let addr = |s: &str| s.parse::<IpNetwork>().unwrap();
        k.fail_nth(KernelOp::AddAddress, "pod", 2, Errno::ENOSPC);
        // Another namespace's calls do not count.
        k.fail_nth(KernelOp::ListLinks, NODE, 1, Errno::EIO);
        pod.add_address(eth0, addr("10.0.0.1/24"), Default::default())
            .unwrap();
        let e = pod
            .add_address(eth0, addr("10.0.0.2/24"), Default::default())
            .unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOSPC), "{e}");
        pod.add_address(eth0, addr("10.0.0.3/24"), Default::default())
            .unwrap();
        assert_eq!(k.address_list("pod").len(), 2);
        // Reads fail too, each kind its own.
        pod.links().unwrap();
        k.fail_next(KernelOp::GetLink, "pod", Errno::EINTR);
        k.fail_next(KernelOp::ListRoutes, "pod", Errno::EBUSY);
        k.fail_next(KernelOp::ListAddresses, "pod", Errno::ENOBUFS);
        k.fail_next(KernelOp::ReadSysctl, "pod", Errno::EACCES);
        let e = pod.link_by_name("eth0").unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EINTR), "{e}");
        assert!(e.to_string().contains("get link eth0"), "{e}");
        assert_eq!(
            pod.routes(AddressFamilyFilter::All).unwrap_err().errno(),
            Some(Errno::EBUSY)
        );
        assert_eq!(
            pod.addresses(None, AddressFamilyFilter::All)
                .unwrap_err()
                .errno(),
            Some(Errno::ENOBUFS)
        );
        assert_eq!(
            pod.sysctl_get("net.ipv4.ip_forward").unwrap_err().errno(),
            Some(Errno::EACCES)
        );
        // Each fault fired once.
        pod.link_by_name("eth0").unwrap();
        pod.routes(AddressFamilyFilter::All).unwrap();
    }

    #[test]
    fn a_verb_of_several_calls_fails_half_way_as_linux_leaves_it() {
        let (k, host, pod) = pod();
        // ensure_bridge: made, then set up; the set-up fails: a down bridge.
        k.fail_next(KernelOp::SetUp, NODE, Errno::ENOBUFS);
        let spec = BridgeSpec {
            name: "cni0".into(),
            mtu: None,
            promisc: false,
            vlan_filtering: false,
        };
        assert!(host.ensure_bridge(&spec).is_err());
        assert_eq!(k.link_list(NODE), ["lo", "cni0@bridge"]);
        assert!(host.ensure_bridge(&spec).unwrap().is_up());
        // setup_veth_with: the pair is made, the look-up after it fails:
        // the pair stays.
        k.fail_nth(KernelOp::GetLink, NODE, 1, Errno::EINTR);
        assert!(host.setup_veth("eth0", pod.netns(), None, None).is_err());
        assert_eq!(k.link_names("pod"), ["lo", "eth0"]);
        // add_vrf: made, set up; the set-up fails: the VRF is deleted.
        k.fail_next(KernelOp::SetUp, "pod", Errno::ENOMEM);
        let e = pod.add_vrf("blue", 10).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOMEM), "{e}");
        assert_eq!(k.link_names("pod"), ["lo", "eth0"]);
        let ops: Vec<KernelOp> = k.calls().iter().rev().take(2).map(|c| c.op).collect();
        assert_eq!(ops, [KernelOp::DeleteLink, KernelOp::AddLink]);
        // set_ipv4_conf is one message: all or nothing.
        let eth0 = pod.link_by_name("eth0").unwrap().index;
        k.fail_next(KernelOp::WriteSysctl, "pod", Errno::EPERM);
        let settings = [(Ipv4Conf::ArpNotify, 1), (Ipv4Conf::RouteLocalnet, 1)];
        assert!(pod.set_ipv4_conf(eth0, &settings).is_err());
        assert_eq!(k.sysctl("pod", "net/ipv4/conf/eth0/arp_notify"), None);
        pod.set_ipv4_conf(eth0, &settings).unwrap();
        assert_eq!(
            k.sysctl("pod", "net/ipv4/conf/eth0/route_localnet")
                .as_deref(),
            Some("1")
        );
    }

    #[test]
    fn veth_ends_are_up_together_and_a_taken_peer_name_is_named() {
        let (_, host, pod) = pod();
        let veth = host
            .setup_veth("eth0", pod.netns(), Some(1400), None)
            .unwrap();
        assert_eq!(veth.oper_state, OperState::LowerLayerDown);
        let peer = pod.link_by_name("eth0").unwrap();
        assert_eq!((peer.mtu, peer.parent_index), (1400, Some(veth.index)));
        pod.set_up(peer.index).unwrap();
        assert_eq!(
            host.wait_oper_up(veth.index, Duration::ZERO)
                .unwrap()
                .oper_state,
            OperState::Up
        );
        let e = host
            .setup_veth("eth0", pod.netns(), None, None)
            .unwrap_err();
        assert!(matches!(e, Error::VethPeerExists { .. }), "{e}");
    }

    #[test]
    fn joining_a_vrf_cycles_the_link_and_moves_its_address_routes() {
        let (k, _, pod) = pod();
        let eth0 = k.add_device("pod", "eth0");
        pod.add_address(eth0, "10.1.0.2/24".parse().unwrap(), Default::default())
            .unwrap();
        pod.add_address(eth0, "2001:db8::2/64".parse().unwrap(), Default::default())
            .unwrap();
        let vrf = pod.add_vrf("blue", 10).unwrap();
        assert_eq!(pod.vrf_by_name("blue").unwrap(), Some(vrf.clone()));
        assert!(pod
            .vrf_by_name("eth0")
            .unwrap_err()
            .to_string()
            .contains("vrf"));
        pod.set_master(eth0, vrf.link.index).unwrap();
        // IPv6 went with the cycle; IPv4's routes are in the VRF's table.
        assert_eq!(k.address_list("pod"), ["10.1.0.2/24 on eth0"]);
        assert_eq!(
            k.route_list("pod"),
            [
                "10.1.0.0/24 dev eth0 src 10.1.0.2 table 10",
                "local 10.1.0.2/32 dev eth0 src 10.1.0.2 table 10"
            ]
        );
        assert_eq!(pod.links_with_master(vrf.link.index).unwrap().len(), 1);
        pod.set_nomaster(eth0).unwrap();
        assert_eq!(k.route_list("pod"), ["10.1.0.0/24 dev eth0 src 10.1.0.2"]);
        let ops: Vec<KernelOp> = k.calls().iter().map(|c| c.op).collect();
        assert_eq!(
            ops[ops.len() - 2..],
            [KernelOp::SetMaster, KernelOp::SetMaster]
        );
    }

    #[test]
    fn a_moved_link_arrives_down_and_bare_and_physical_ones_return_to_node() {
        let (k, host, pod) = pod();
        let nic = k.add_device(NODE, "nic0");
        host.add_address(nic, "192.0.2.5/24".parse().unwrap(), Default::default())
            .unwrap();
        host.set_alias(nic, "uplink").unwrap();
        host.move_to_netns(nic, pod.netns()).unwrap();
        assert_eq!(k.link_list(NODE), ["lo"]);
        assert_eq!(k.link_list("pod"), ["lo", "nic0 alias uplink"]);
        assert!(k.address_list("pod").is_empty() && k.route_list(NODE).is_empty());
        // An up link is renamed too (Linux >= 6.2), its own name is no
        // change.
        pod.set_up(nic).unwrap();
        pod.rename(nic, "eth0").unwrap();
        pod.rename(nic, "eth0").unwrap();
        pod.set_down(nic).unwrap();
        // A name taken in the target refuses the move.
        k.add_device(NODE, "eth0");
        let e = pod.move_to_netns(nic, host.netns()).unwrap_err();
        assert!(e.is_exists(), "{e}");
        // The namespace goes: the NIC returns, renamed as its name is taken.
        pod.add_dummy("dummy0").unwrap();
        k.remove_netns("pod");
        assert_eq!(
            k.link_list(NODE),
            ["lo", "eth0 up", &format!("dev{nic} alias uplink")]
        );
    }

    #[test]
    fn a_removed_namespace_takes_its_veth_peers_along() {
        let (k, host, pod) = pod();
        host.setup_veth("eth0", pod.netns(), None, None).unwrap();
        assert_eq!(k.link_names(NODE).len(), 2);
        k.remove_netns("pod");
        assert_eq!(k.link_names(NODE), ["lo"]);
        assert!(k.open("pod").unwrap_err().is_netns_gone());
        assert!(pod.link_by_name("eth0").is_err());
    }

    #[test]
    fn rules_qdiscs_and_link_attributes_are_recorded_and_can_fail() {
        let (k, host, pod) = pod();
        let veth = host.setup_veth("eth0", pod.netns(), None, None).unwrap();
        let rule = RoutingRule::from_source("10.1.0.2".parse().unwrap(), 100);
        pod.add_rule(&rule).unwrap();
        assert!(k
            .rule_list("pod")
            .contains(&"pref 32765 from 10.1.0.2/32 lookup 100".to_owned()));
        k.fail_next(KernelOp::DelRule, "pod", Errno::EPERM);
        assert_eq!(pod.del_rule(&rule).unwrap_err().errno(), Some(Errno::EPERM));
        pod.del_rule(&rule).unwrap();
        assert!(pod.del_rule(&rule).unwrap_err().is_not_found());

        let tbf = Tbf::from_rate_and_burst(8_000_000, 80_000, Default::default());
        host.add_tbf(veth.index, &tbf).unwrap();
        let ifb = host.add_ifb("ifb0", 1500, Some("cni/n/c1")).unwrap();
        assert_eq!(
            host.link_alias(ifb.index).unwrap().as_deref(),
            Some("cni/n/c1")
        );
        assert_eq!(host.link_txqlen(ifb.index).unwrap(), 0);
        k.fail_next(KernelOp::AddFilter, "node", Errno::ENOMEM);
        host.add_ingress_qdisc(veth.index).unwrap();
        let redirect = RedirectFilterKind::U32GoCompatible;
        assert!(host
            .add_redirect_filter(veth.index, ifb.index, redirect)
            .is_err());
        host.add_redirect_filter(veth.index, ifb.index, redirect)
            .unwrap();
        let name = &veth.name;
        assert_eq!(
            k.qdisc_list("node"),
            [
                format!("{name} tbf 1:"),
                format!("{name} ingress ffff:"),
                format!("{name} filter u32 prio 1 redirect ifb0"),
            ]
        );
        assert!(host.delete_qdisc(veth.index, HANDLE_INGRESS).unwrap());
        assert!(!host.delete_qdisc(veth.index, HANDLE_INGRESS).unwrap());
        assert_eq!(k.qdisc_list("node"), [format!("{name} tbf 1:")]);

        k.fail_next(KernelOp::SetMtu, "node", Errno::EBUSY);
        assert!(host.set_mtu(veth.index, 9000).is_err());
        host.set_mtu(veth.index, 9000).unwrap();
        host.set_promisc(veth.index, true).unwrap();
        host.set_allmulti(veth.index, true).unwrap();
        let link = host.link_by_index(veth.index).unwrap();
        assert!(link.mtu == 9000 && link.is_promisc() && link.is_allmulti());
        let eth0 = pod.link_by_name("eth0").unwrap();
        assert_eq!(pod.veth_peer_index(eth0.index).unwrap(), veth.index);
        pod.set_up(eth0.index).unwrap();
        k.add_neighbour("pod", eth0.index, "10.1.0.1".parse().unwrap(), None);
        assert_eq!(pod.neighbours(None, Default::default()).unwrap().len(), 1);
        pod.set_down(eth0.index).unwrap();
        assert!(pod.neighbours(None, Default::default()).unwrap().is_empty());
    }
}
