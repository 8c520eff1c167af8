//! A backend-independent description of nftables state: tables, maps,
//! chains, rules and the commands of one atomic batch.
//!
//! The layout functions in [`super::layout`] produce these values; a backend
//! only encodes them (JSON for `nft -j`, netlink attributes for a native
//! backend) and reads back the little it needs (chains, rule comments, map
//! elements).

use std::net::IpAddr;

use ipnetwork::IpNetwork;

/// An nftables address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 only.
    Ip,
    /// IPv6 only.
    Ip6,
    /// IPv4 and IPv6.
    Inet,
    /// Bridge frames.
    Bridge,
}

impl Family {
    /// The family's name in nft.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
            Family::Bridge => "bridge",
        }
    }
}

/// A table and the objects every user of it shares (maps, fixed chains and
/// their rules). Per-attachment chains are not part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The table's family.
    pub family: Family,
    /// The table's name.
    pub name: &'static str,
    /// The verdict maps that dispatch to per-attachment chains.
    pub maps: Vec<Map>,
    /// The fixed chains, in creation order; their rules are rewritten on every
    /// ADD (flush + add in the same batch) so repeated ADDs do not duplicate
    /// them.
    pub chains: Vec<Chain>,
    /// The prefix of per-attachment chain names (`<prefix>-<owner hash>`).
    pub owner_prefix: &'static str,
}

impl Table {
    /// The name of the chain owned by the attachment with `owner_hash`.
    pub fn owner_chain(&self, owner_hash: &str) -> String {
        format!("{}-{}", self.owner_prefix, owner_hash)
    }

    /// The owner hash of a per-attachment chain name, if it is one.
    pub fn owner_of_chain<'a>(&self, chain: &'a str) -> Option<&'a str> {
        let hash = chain.strip_prefix(self.owner_prefix)?.strip_prefix('-')?;
        let (net, inst) = hash.split_once('-')?;
        let is_hash = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        (is_hash(net) && is_hash(inst)).then_some(hash)
    }
}

/// A verdict map (`key : verdict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Map {
    /// The map's name.
    pub name: &'static str,
    /// The key type; more than one part makes a concatenation.
    pub key: Vec<KeyType>,
}

/// A data type usable in a map key.
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
    pub rules: Vec<Rule>,
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
pub struct Rule {
    /// The statements.
    pub stmts: Vec<Stmt>,
    /// The comment (the owner's tag for per-attachment rules).
    pub comment: Option<String>,
}

impl Rule {
    /// A rule without comment.
    pub fn new(stmts: Vec<Stmt>) -> Self {
        Rule {
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
    /// Look `key` up in the verdict map `map` and apply the verdict found.
    Vmap {
        /// The key parts (concatenated).
        key: Vec<Expr>,
        /// The map's name.
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
    /// Go to a chain (and do not come back).
    Goto(String),
    /// Return to the calling chain.
    Return,
    /// Drop the packet.
    Drop,
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

/// One element of a verdict map: `key : goto target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The map's name.
    pub map: String,
    /// The key parts (one per key type of the map).
    pub key: Vec<Value>,
    /// The chain the element goes to.
    pub target: String,
    /// The comment (the owner's tag).
    pub comment: Option<String>,
}

/// Everything one attachment owns in a table: its chain (with rules) and
/// the map elements that go to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentRules {
    /// The chain's name ([`Table::owner_chain`]).
    pub chain: String,
    /// The chain's rules.
    pub rules: Vec<Rule>,
    /// The elements dispatching to the chain; never empty for an installed
    /// attachment (a chain nobody jumps to is never created).
    pub elements: Vec<Element>,
}

/// One command of an atomic batch on one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
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
        rule: Rule,
    },
    /// Add a map element (an existing element with another verdict makes
    /// the whole batch fail).
    AddElement(Element),
    /// Delete map elements by key (a missing one makes the batch fail).
    DeleteElements {
        /// The map's name.
        map: String,
        /// The keys.
        keys: Vec<Vec<Value>>,
    },
    /// Delete a chain (fails if missing, not empty, or still referenced).
    DeleteChain(String),
}

/// An atomic batch of commands on one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The table's family.
    pub family: Family,
    /// The table's name.
    pub table: &'static str,
    /// The commands, applied all or none.
    pub commands: Vec<Command>,
}
