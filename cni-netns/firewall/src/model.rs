//! A backend-independent description of nftables state: tables, maps,
//! chains, rules and the commands of one atomic batch.
//!
//! The rule families (masquerade, host ports, MAC spoof check) produce
//! these values and the batch assembly wraps them in batches; a backend
//! only encodes them (JSON for `nft -j`, netlink attributes for a native
//! backend) and reads back the little it needs (map elements, the rules of
//! the conditions chain).

use std::net::IpAddr;

use ipnetwork::IpNetwork;

/// An nftables address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NftFamily {
    /// IPv4 only.
    Ip,
    /// IPv6 only.
    Ip6,
    /// IPv4 and IPv6.
    Inet,
    /// Bridge frames.
    Bridge,
}

impl NftFamily {
    /// The family's name in nft.
    pub fn as_str(self) -> &'static str {
        match self {
            NftFamily::Ip => "ip",
            NftFamily::Ip6 => "ip6",
            NftFamily::Inet => "inet",
            NftFamily::Bridge => "bridge",
        }
    }
}

/// A table and the objects every user of it shares (maps, fixed chains and
/// their rules). An attachment owns only map elements (and, for port
/// mappings with extra conditions, tagged rules in the conditions chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The table's family.
    pub family: NftFamily,
    /// The table's name.
    pub name: &'static str,
    /// The maps the fixed rules look packets up in.
    pub maps: Vec<Map>,
    /// The fixed chains, in creation order; the rules of those that have
    /// any are rewritten when the shared objects are (re)created (flush + add
    /// in the same batch) so repeated creations do not duplicate them.
    pub chains: Vec<Chain>,
    /// The chain holding per-attachment rules, if the table has one (never
    /// flushed by the shared-object batch).
    pub conditions_chain: Option<&'static str>,
}

impl Table {
    /// The map named `name`.
    pub fn map(&self, name: &str) -> Option<&Map> {
        self.maps.iter().find(|m| m.name == name)
    }
}

/// A named map (`key : data`). Every map of the layout is a data map: the
/// data is either what the rule uses (a DNAT destination) or the owner's id
/// ([`KeyType::Mark`]), so an element added for one owner clashes (`File
/// exists`) with the same key held by another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Map {
    /// The map's name.
    pub name: &'static str,
    /// The key type; more than one part makes a concatenation.
    pub key: Vec<KeyType>,
    /// The data type; more than one part makes a concatenation.
    pub data: Vec<KeyType>,
    /// Keys are intervals (prefixes) per part (`flags interval`).
    pub interval: bool,
}

/// A data type usable in a map key or data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// An IPv4 address.
    Ipv4Addr,
    /// An IPv6 address.
    Ipv6Addr,
    /// A layer 4 protocol number.
    InetProto,
    /// A transport port.
    InetService,
    /// An interface name.
    IfName,
    /// An Ethernet address.
    EtherAddr,
    /// A 32-bit packet mark (used as the owner id of an element).
    Mark,
}

impl KeyType {
    /// The type's name in nft.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::Ipv4Addr => "ipv4_addr",
            KeyType::Ipv6Addr => "ipv6_addr",
            KeyType::InetProto => "inet_proto",
            KeyType::InetService => "inet_service",
            KeyType::IfName => "ifname",
            KeyType::EtherAddr => "ether_addr",
            KeyType::Mark => "mark",
        }
    }
}

/// A chain with its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The chain's name.
    pub name: String,
    /// Present for base chains (attached to a hook).
    pub base: Option<BaseChain>,
    /// The rules, in order.
    pub rules: Vec<NftRule>,
}

/// How a base chain is attached to the packet path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    /// `nat` or `filter`.
    pub chain_type: ChainType,
    /// The netfilter hook.
    pub hook: Hook,
    /// The priority (lower runs first).
    pub priority: i32,
}

/// A base chain type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    /// Network address translation (first packet of a connection only).
    Nat,
    /// Filtering.
    Filter,
}

impl ChainType {
    /// The type's name in nft.
    pub fn as_str(self) -> &'static str {
        match self {
            ChainType::Nat => "nat",
            ChainType::Filter => "filter",
        }
    }
}

/// A netfilter hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// Before routing.
    Prerouting,
    /// Locally generated packets.
    Output,
    /// After routing, before leaving.
    Postrouting,
}

impl Hook {
    /// The hook's name in nft.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// nft's `dstnat` priority.
pub const PRIORITY_DSTNAT: i32 = -100;
/// nft's `srcnat` priority.
pub const PRIORITY_SRCNAT: i32 = 100;

/// A rule: statements evaluated in order, and an optional comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftRule {
    /// The statements.
    pub stmts: Vec<Stmt>,
    /// The comment (the owner's tag for per-attachment rules).
    pub comment: Option<String>,
}

impl NftRule {
    /// A rule without comment.
    pub fn new(stmts: Vec<Stmt>) -> Self {
        NftRule {
            stmts,
            comment: None,
        }
    }
}

/// A statement of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    /// `left op right`; the rule stops here if it does not hold.
    Match {
        /// What is inspected.
        left: Expr,
        /// The comparison.
        op: CmpOp,
        /// What it is compared with.
        right: Value,
    },
    /// `key @map` (or `key != @map`): the rule stops here unless the key
    /// is (is not) in the map; the map's data is not used.
    Lookup {
        /// The key parts (concatenated).
        key: Vec<Expr>,
        /// The map's name.
        map: String,
        /// Match keys that are not in the map.
        negate: bool,
    },
    /// `dnat ip to key map @map`: destination NAT to the address and port
    /// the map gives for `key` (the rule stops here when it has none).
    DnatMap {
        /// IPv6 (`dnat ip6`) rather than IPv4.
        v6: bool,
        /// The key parts (concatenated).
        key: Vec<Expr>,
        /// The map's name (data `ipv4_addr . inet_service` or the IPv6 one).
        map: String,
    },
    /// `meta mark set meta mark | bits`.
    SetMarkBits(u32),
    /// Source NAT to the outgoing interface's address.
    Masquerade,
    /// Destination NAT to `addr:port`.
    Dnat {
        /// The new destination address.
        addr: IpAddr,
        /// The new destination port.
        port: u16,
    },
    /// Jump to a chain (and come back).
    Jump(String),
    /// Return to the calling chain.
    Return,
    /// Drop the packet.
    Drop,
    /// Accept the packet (ends the base chain).
    Accept,
}

/// Something a rule inspects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// A header field, e.g. `ip saddr`, `tcp dport`, `ether saddr`.
    Payload {
        /// `ip`, `ip6`, `tcp`, `udp`, `sctp`, `th`, `ether`...
        protocol: String,
        /// `saddr`, `daddr`, `sport`, `dport`...
        field: String,
    },
    /// Packet metadata, e.g. `meta l4proto`, `meta nfproto`, `iifname`.
    Meta(String),
    /// Connection tracking state, e.g. `ct status`, `ct state`.
    Ct(String),
    /// `fib daddr type`.
    FibDaddrType,
    /// `meta mark & mask`.
    MarkAnd(u32),
}

impl Expr {
    /// `protocol field` payload expression.
    pub fn payload(protocol: &str, field: &str) -> Self {
        Expr::Payload {
            protocol: protocol.to_owned(),
            field: field.to_owned(),
        }
    }

    /// `meta key` expression.
    pub fn meta(key: &str) -> Self {
        Expr::Meta(key.to_owned())
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// Flag test (`ct status dnat`).
    In,
}

impl CmpOp {
    /// The operator as nft writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Gt => ">",
            CmpOp::Le => "<=",
            CmpOp::Ge => ">=",
            CmpOp::In => "in",
        }
    }
}

/// A constant in a rule or a map key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A symbol or string (`tcp`, `local`, `eth0`, a MAC address).
    Str(String),
    /// A number.
    Num(u64),
    /// An address.
    Addr(IpAddr),
    /// A network (stored masked).
    Prefix(IpNetwork),
    /// An inclusive range.
    Range(Box<Value>, Box<Value>),
    /// An anonymous set.
    Set(Vec<Value>),
}

impl Value {
    /// A string constant.
    pub fn str(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}

/// One map element: `key : data`, tagged with its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The map's name.
    pub map: String,
    /// The key parts (one per key type of the map; prefixes for the
    /// address parts of interval maps).
    pub key: Vec<Value>,
    /// The data parts (one per data type of the map).
    pub data: Vec<Value>,
    /// The comment (the owner's tag).
    pub comment: Option<String>,
}

/// Everything one attachment owns in a table: map elements, and for port
/// mappings with extra conditions, rules in the table's conditions chain;
/// plus the shared elements it needs but does not own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttachmentRules {
    /// The map elements; never empty for an installed attachment.
    pub elements: Vec<Element>,
    /// The rules of the conditions chain (tagged), usually none.
    pub rules: Vec<NftRule>,
    /// Elements shared by the attachments of a network (the masquerade's
    /// subnet keys): added if missing by every ADD (never exclusively),
    /// never removed by a DEL; a GC removes those no attachment needs any
    /// more. Their comment is no owner's tag.
    pub shared: Vec<Element>,
}

/// A rule found in a table: where it is and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    /// The chain's name.
    pub chain: String,
    /// The kernel's handle of the rule.
    pub handle: u64,
}

/// One command of an atomic batch on one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NftCommand {
    /// Create the table if missing.
    AddTable,
    /// Create a map if missing.
    AddMap(Map),
    /// Create a chain if missing (a base chain with its hook).
    AddChain {
        /// The chain's name.
        name: String,
        /// The hook, for base chains.
        base: Option<BaseChain>,
    },
    /// Remove all rules of a chain.
    FlushChain(String),
    /// Append a rule to a chain.
    AddRule {
        /// The chain's name.
        chain: String,
        /// The rule.
        rule: NftRule,
    },
    /// Add a map element. An existing element with the same key and other
    /// data makes the whole batch fail (`File exists`); with `exclusive`,
    /// so does an identical one.
    AddElement {
        /// The element.
        element: Element,
        /// Fail if the key exists at all (`create element`).
        exclusive: bool,
    },
    /// Make elements expire now (re-added with a 1 ms expiration; added
    /// first if missing): a removal that leaves no deleted object for the
    /// kernel to free, so the process does not wait for an RCU grace period
    /// when its netlink socket closes. Needs Linux 6.10 (element timeout
    /// updates).
    ExpireElements(Vec<Element>),
    /// Delete map elements by key (a missing one makes the batch fail).
    DeleteElements {
        /// The map's name.
        map: String,
        /// The keys.
        keys: Vec<Vec<Value>>,
    },
    /// Delete a rule by handle (fails if missing).
    DeleteRule(RuleRef),
}
/// An atomic batch of commands on one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The table's family.
    pub family: NftFamily,
    /// The table's name.
    pub table: &'static str,
    /// The commands, applied all or none.
    pub commands: Vec<NftCommand>,
}

// Helpers the rule families share.

/// The payload protocol of an address family's header (`ip`, `ip6`).
pub(crate) fn ipx(v6: bool) -> &'static str {
    if v6 {
        "ip6"
    } else {
        "ip"
    }
}

/// `left == right`.
pub(crate) fn match_eq(left: Expr, right: Value) -> Stmt {
    Stmt::Match {
        left,
        op: CmpOp::Eq,
        right,
    }
}

/// `meta nfproto ipv4` (or `ipv6`).
pub(crate) fn nfproto(v6: bool) -> Stmt {
    match_eq(
        Expr::meta("nfproto"),
        Value::str(if v6 { "ipv6" } else { "ipv4" }),
    )
}

/// A prefix literal of the layout.
// The callers pass prefix literals (`"127.0.0.0/8"`, the masquerade
// exemptions' constants): a typo fails every firewall test, not a node.
#[allow(clippy::expect_used)]
pub(crate) fn const_net(net: &str) -> IpNetwork {
    net.parse().expect("constant prefix literal")
}

/// A prefix as an interval key part, masked (nft wants the network address;
/// ipnetwork keeps host bits): a full-length prefix is the address itself
/// (as nft lists it).
pub(crate) fn prefix_part(net: IpNetwork) -> Value {
    let net = IpNetwork::new(net.network(), net.prefix()).unwrap_or(net);
    let full = if net.is_ipv4() { 32 } else { 128 };
    if net.prefix() == full {
        Value::Addr(net.ip())
    } else {
        Value::Prefix(net)
    }
}

/// A map declaration.
pub(crate) fn map(name: &'static str, key: &[KeyType], data: &[KeyType], interval: bool) -> Map {
    Map {
        name,
        key: key.to_vec(),
        data: data.to_vec(),
        interval,
    }
}

/// One element read back from a table.
#[derive(Debug, Clone)]
pub(crate) struct ListedElement {
    pub(crate) map: String,
    /// The key, decoded (enough to delete it).
    pub(crate) key: Vec<Value>,
    /// The key as the backend identifies it ([`Driver::key_id`](super::engine::Driver::key_id)).
    pub(crate) key_id: String,
    /// The data as the backend identifies it ([`Driver::data_id`](super::engine::Driver::data_id)).
    pub(crate) data_id: String,
    pub(crate) comment: Option<String>,
    /// Expiring within [`EXPIRING_MS`](super::batch::EXPIRING_MS): removed by a DEL, gone in
    /// a few milliseconds; nobody owns it any more.
    pub(crate) expiring: bool,
}

/// One rule of a table's conditions chain read back.
#[derive(Debug, Clone)]
pub(crate) struct ListedRule {
    pub(crate) chain: String,
    pub(crate) handle: u64,
    pub(crate) comment: Option<String>,
}

/// What a backend reads of one of our tables: the elements of its maps and
/// the rules of its conditions chain.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) elements: Vec<ListedElement>,
    pub(crate) rules: Vec<ListedRule>,
}
