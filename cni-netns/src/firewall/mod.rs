//! Host firewall for CNI attachments: IP masquerade, port mappings and the
//! bridge MAC spoof check.
//!
//! Plugins talk to the [`Firewall`] trait, implemented twice:
//! [`NativeFirewall`] (the default) sends each call as one atomic nf_tables
//! batch over `NETLINK_NETFILTER`, no process; [`NftFirewall`] runs one
//! atomic `nft -j -f -` batch per call. [`Backend::select`] picks one
//! (`CNI_FIREWALL_BACKEND=nft` or a plugin's configuration knob). The
//! tables, chains, maps and rules themselves are described by the
//! backend-independent model in [`model`] and built by the pure functions in
//! [`layout`], so both program exactly the same state.
//!
//! Everything an attachment owns carries a tag naming its network,
//! container id and interface, so deleting or garbage collecting one
//! attachment never touches another's:
//!
//! ```
//! use cni_netns::firewall::{AttachmentId, MasqueradeSpec};
//!
//! let spec = MasqueradeSpec {
//!     attachment: AttachmentId::new("mynet", "0123456789abcdef", "eth0"),
//!     address: "10.88.0.5/16".parse().unwrap(),
//! };
//! let tag = spec.attachment.tag();
//! assert!(tag.contains("net: mynet, if: eth0, id: 0123456789abcdef"));
//! ```
//!
//! # Layout and cost
//!
//! Each feature lives in its own table, distinct from the Go reference's
//! (`cni_plugins_masquerade`, `cni_hostport`, `bridge nat`) so both can run
//! on one node. The tables hold fixed chains and rules only; an attachment
//! is nothing but map elements (the tag in each element's comment):
//!
//! | feature | table | packet path (fixed rules) | an attachment's elements |
//! |---|---|---|---|
//! | masquerade | `inet cni_rs_masq` | `ip saddr @masq_src4 ip saddr . ip daddr != @masq_keep4 masquerade` | pod IP; pod IP . pod subnet |
//! | port mappings | `inet cni_rs_hostport` | mark for masquerade: hairpin `ip saddr [. ip daddr] . meta l4proto . th dport @hp_masq4` (intervals: the pod subnet), localhost `ip saddr 127.0.0.0/8 [ip daddr .] meta l4proto . th dport @hp_lo4`, masqAll `[ip daddr .] meta l4proto . th dport @hp_all4`; then `dnat ip to [ip daddr .] meta l4proto . th dport map @hp_dnat4` (`hip_*` maps for host IPs) | host port owner; DNAT destination; one masquerade key (subnet, localhost, or all) |
//! | MAC spoof check | `bridge cni_rs_macspoofchk` | `iifname @sc_ports iifname . ether saddr != @sc_allowed drop` | bridge port; port . MAC |
//!
//! (and the same for IPv6). A packet does a few hash or interval lookups
//! whatever the number of pods, and since adding or removing elements of
//! data maps never makes the kernel re-validate the table (only rules and
//! `jump`/`goto` elements do), ADD and DEL cost the same with 1000 pods as
//! with 50:
//!
//! - ADD is one batch of the attachment's elements, each created
//!   exclusively; only when the table does not exist yet are the shared
//!   objects created in the same batch. A key held by another attachment
//!   fails it: [`Error::FirewallConflict`](crate::Error::FirewallConflict)
//!   (every map's data is the DNAT destination or the owner's id, so such a
//!   key never silently changes owner). A re-ADD of the same attachment finds
//!   its anchor element (map `owners`) and replaces what it owned.
//! - DEL is one batch, also when repeated; the anchor's data fingerprints
//!   the attachment's elements, so a DEL naming other keys than the ADD
//!   installed (or keys held by another attachment) fails as a whole, and
//!   only then is the table read (once) to remove precisely what the
//!   attachment owns. On Linux 6.10 and later the elements are made to
//!   expire (in one jiffy, and DEL returns once they have) rather than
//!   deleted: a process whose netlink socket closes after a deletion waits
//!   for the kernel to free it (an RCU grace period, 10-20 ms), an expiry
//!   leaves nothing to free.
//! - CHECK, list and GC read the table's elements once; GC removes all dead
//!   attachments of a network in one batch.
//! - `conditionsV4`/`conditionsV6` (arbitrary nft expressions) cannot be
//!   elements: such an attachment also gets two tagged rules per mapping in
//!   the `conditions` chain, evaluated first (`<conditions> <port> return`,
//!   then `<port> accept`, so traffic failing them is not NATed), deleted by
//!   handle. Adding rules makes the kernel validate the table: this slower
//!   path is for attachments with conditions only.

mod backend;
mod conditions;
pub mod layout;
pub mod model;
mod native;
mod nft;
mod recording;

use std::fmt;
use std::net::IpAddr;

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};

pub use conditions::parse_conditions;
pub use native::NativeFirewall;
pub use nft::NftFirewall;
pub use recording::{FirewallCall, RecordingFirewall};

use crate::Result;

/// Which [`Firewall`] implementation programs the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// nf_tables over netlink, no process ([`NativeFirewall`]); the default.
    #[default]
    Native,
    /// The `nft` binary with JSON batches ([`NftFirewall`]), for kernels or
    /// environments where the native encoding is refused.
    Nft,
}

/// The environment variable that picks the backend (`native` or `nft`).
pub const BACKEND_ENV: &str = "CNI_FIREWALL_BACKEND";

impl Backend {
    /// Parses `native` or `nft` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Backend> {
        match name.trim().to_ascii_lowercase().as_str() {
            "native" | "netlink" => Some(Backend::Native),
            "nft" => Some(Backend::Nft),
            _ => None,
        }
    }

    /// The backend named by [`BACKEND_ENV`], else `configured` (a plugin's
    /// configuration knob), else [`Backend::Native`].
    pub fn select(configured: Option<&str>) -> Backend {
        std::env::var(BACKEND_ENV)
            .ok()
            .and_then(|v| Backend::from_name(&v))
            .or_else(|| configured.and_then(Backend::from_name))
            .unwrap_or_default()
    }

    /// A firewall of this backend for `netns` (`None`: the current
    /// namespace) using `masq_mark` (0: the default mark).
    pub fn firewall(self, netns: Option<&std::path::Path>, masq_mark: u32) -> Box<dyn Firewall> {
        tracing::debug!(backend = ?self, "firewall backend");
        match (self, netns) {
            (Backend::Native, Some(p)) => {
                Box::new(NativeFirewall::in_netns(p).with_masq_mark(masq_mark))
            }
            (Backend::Native, None) => Box::new(NativeFirewall::new().with_masq_mark(masq_mark)),
            (Backend::Nft, Some(p)) => Box::new(NftFirewall::in_netns(p).with_masq_mark(masq_mark)),
            (Backend::Nft, None) => Box::new(NftFirewall::new().with_masq_mark(masq_mark)),
        }
    }
}

/// The firewall plugins should use: [`Backend::select`] with no
/// configured choice (so native unless `CNI_FIREWALL_BACKEND=nft`), for
/// `netns` and the default masquerade mark.
pub fn default_backend(netns: Option<&std::path::Path>) -> Box<dyn Firewall> {
    Backend::select(None).firewall(netns, 0)
}

/// One attachment of a container to a network: the key CNI uses for
/// everything a plugin creates (`CNI_CONTAINERID`, `CNI_IFNAME` and the
/// network name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttachmentId {
    /// The network name (`name` in the network configuration).
    pub network: String,
    /// The container id (`CNI_CONTAINERID`).
    pub container_id: String,
    /// The interface name inside the container (`CNI_IFNAME`).
    pub ifname: String,
}

impl AttachmentId {
    /// Builds an id from its three parts.
    pub fn new(
        network: impl Into<String>,
        container_id: impl Into<String>,
        ifname: impl Into<String>,
    ) -> Self {
        AttachmentId {
            network: network.into(),
            container_id: container_id.into(),
            ifname: ifname.into(),
        }
    }

    /// The hash identifying this attachment's network (16 hex digits).
    pub fn network_hash(&self) -> String {
        network_hash(&self.network)
    }

    /// The hash identifying this attachment within its network
    /// (`<network hash>-<hash of ifname:container id>`); tags start with it,
    /// so it is exact even when the tag is truncated.
    pub fn owner_hash(&self) -> String {
        format!(
            "{}-{}",
            self.network_hash(),
            hash16(&format!("{}:{}", self.ifname, self.container_id))
        )
    }

    /// The comment every map element (and rule) of this attachment carries:
    /// `<owner hash>, net: <network>, if: <ifname>, id: <container id>`,
    /// cut to 128 bytes (nft's comment limit). The format follows the Go
    /// reference's `pkg/ip/ipmasq_nftables_linux.go` so operators read both
    /// the same way.
    pub fn tag(&self) -> String {
        let strip = |s: &str| s.replace('"', "");
        let mut tag = format!(
            "{}, net: {}, if: {}, id: {}",
            self.owner_hash(),
            strip(&self.network),
            strip(&self.ifname),
            strip(&self.container_id)
        );
        truncate_at_char_boundary(&mut tag, TAG_MAX_LEN);
        tag
    }

    /// Parses a tag written by [`AttachmentId::tag`]. Returns the id and
    /// whether it is complete (the tag was not truncated); `None` if the text
    /// is not one of our tags.
    pub fn from_tag(tag: &str) -> Option<(AttachmentId, bool)> {
        let (hash, rest) = tag.split_once(", net: ")?;
        let (network, rest) = rest.split_once(", if: ")?;
        let (ifname, container_id) = rest.split_once(", id: ")?;
        let id = AttachmentId::new(network, container_id, ifname);
        let complete = id.owner_hash() == hash;
        Some((id, complete))
    }
}

impl fmt::Display for AttachmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "network {:?} container {:?} interface {:?}",
            self.network, self.container_id, self.ifname
        )
    }
}

/// nft (libnftnl) refuses comments longer than this many bytes.
pub(crate) const TAG_MAX_LEN: usize = 128;

fn truncate_at_char_boundary(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// The hash naming a network in chain names and tags (16 hex digits).
pub fn network_hash(network: &str) -> String {
    hash16(network)
}

// FNV-1a (64 bit): stable across releases and platforms, no dependency, and
// collisions among the few thousand attachments of a node are negligible
// (ownership is still confirmed by the full tag where one is needed).
fn hash16(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Which firewall feature a rule set belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleKind {
    /// Source NAT of a container's traffic leaving its subnet (`ipMasq`).
    Masquerade,
    /// Host port to container port DNAT (portmap).
    PortMapping,
    /// Drop of bridge frames whose source MAC is not the container's
    /// (`macspoofchk`).
    MacSpoofCheck,
}

impl fmt::Display for RuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleKind::Masquerade => "masquerade",
            RuleKind::PortMapping => "port mappings",
            RuleKind::MacSpoofCheck => "mac spoof check",
        })
    }
}

/// The operation a firewall error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FirewallOp {
    /// Installing an attachment's rules.
    Add(RuleKind),
    /// Removing an attachment's rules.
    Delete(RuleKind),
    /// Verifying an attachment's rules.
    Check(RuleKind),
    /// Listing the attachments that own rules.
    List(RuleKind),
    /// Removing the rules of attachments that are gone.
    Gc(RuleKind),
}

impl fmt::Display for FirewallOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FirewallOp::Add(k) => write!(f, "add {k}"),
            FirewallOp::Delete(k) => write!(f, "delete {k}"),
            FirewallOp::Check(k) => write!(f, "check {k}"),
            FirewallOp::List(k) => write!(f, "list {k}"),
            FirewallOp::Gc(k) => write!(f, "gc {k}"),
        }
    }
}

/// Masquerade one attachment's address (bridge `ipMasq`, ptp): traffic from
/// the address to anything outside its subnet, except multicast
/// (224.0.0.0/4, ff00::/8), leaves with the host's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqueradeSpec {
    /// The owner of the rules.
    pub attachment: AttachmentId,
    /// The container address with its prefix (`10.88.0.5/16`); the subnet
    /// is the address masked by the prefix.
    pub address: IpNetwork,
}

/// A transport protocol of a port mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The protocol's name in nft and in CNI's `portMappings`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            "sctp" => Ok(Protocol::Sctp),
            other => Err(format!("unknown protocol {other:?}")),
        }
    }
}

/// One host port forwarded to a container port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortMapping {
    /// The port on the host.
    pub host_port: u16,
    /// The port in the container.
    pub container_port: u16,
    /// The transport protocol.
    pub protocol: Protocol,
    /// Only traffic to this host address is forwarded (and only for the
    /// container address of the same family); `None` or an unspecified
    /// address (`0.0.0.0`, `::`) means every local address (of that family).
    pub host_ip: Option<IpAddr>,
}

/// The port mappings of one attachment (portmap).
///
/// Traffic is forwarded from other hosts (prerouting), from the node itself
/// (output), including `127.0.0.1:<host port>`, and from the pod's own
/// subnet (hairpin). Reaching the container from `127.0.0.1` needs
/// `net.ipv4.conf.<host interface>.route_localnet=1` on the interface that
/// routes to the container: the kernel otherwise drops packets with a
/// loopback source leaving a non-loopback interface. Setting that sysctl is
/// the caller's job (the Go reference's portmap does it when `snat` is on).
/// On a bridge with `br_netfilter` loaded (`bridge-nf-call-iptables=1`, as
/// on most Kubernetes nodes) a pod's packet to its own host port is DNATed
/// in the bridge path and sent back out the port it came from, which the
/// bridge only does with hairpin mode on that port (the bridge plugin's
/// `hairpinMode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMappingSpec {
    /// The owner of the rules.
    pub attachment: AttachmentId,
    /// The container's IPv4 address with prefix, if it has one.
    pub container_v4: Option<Ipv4Network>,
    /// The container's IPv6 address with prefix, if it has one.
    pub container_v6: Option<Ipv6Network>,
    /// The mappings; empty means there is nothing to do.
    pub mappings: Vec<PortMapping>,
    /// Masquerade hairpin traffic (from the container's subnet) and
    /// localhost traffic (from 127.0.0.0/8) sent to the mapped ports.
    /// Default `true`.
    pub snat: bool,
    /// Masquerade all traffic sent to the mapped ports, whatever its source.
    pub masq_all: bool,
    /// Extra nft match conditions (nft syntax tokens, e.g.
    /// `["ip", "saddr", "10.0.0.0/8"]`) every IPv4 mapping must also meet.
    pub conditions_v4: Vec<String>,
    /// The same for IPv6.
    pub conditions_v6: Vec<String>,
}

impl PortMappingSpec {
    /// A spec with no addresses, no mappings and the defaults (`snat` on).
    pub fn new(attachment: AttachmentId) -> Self {
        PortMappingSpec {
            attachment,
            container_v4: None,
            container_v6: None,
            mappings: Vec::new(),
            snat: true,
            masq_all: false,
            conditions_v4: Vec::new(),
            conditions_v6: Vec::new(),
        }
    }

    /// The UDP host ports mapped for the container's IPv4 (`ipv6` false) or
    /// IPv6 address, deduplicated: the ports whose stale conntrack entries
    /// the caller should delete after ADD and DEL
    /// ([`Conntrack::delete_udp_by_dst_ports`](crate::conntrack::Conntrack::delete_udp_by_dst_ports)).
    pub fn udp_host_ports(&self, ipv6: bool) -> Vec<u16> {
        let has_address = if ipv6 {
            self.container_v6.is_some()
        } else {
            self.container_v4.is_some()
        };
        if !has_address {
            return Vec::new();
        }
        let mut ports: Vec<u16> = self
            .mappings
            .iter()
            .filter(|m| m.protocol == Protocol::Udp)
            .filter(|m| m.host_ip.is_none_or(|ip| ip.is_ipv6() == ipv6))
            .map(|m| m.host_port)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

/// The bridge MAC spoof check of one attachment: frames entering the bridge
/// from `host_ifname` whose source MAC is not `mac` are dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacSpoofCheckSpec {
    /// The owner of the rules.
    pub attachment: AttachmentId,
    /// The host side of the container's veth (the bridge port).
    pub host_ifname: String,
    /// The container interface's MAC address.
    pub mac: crate::MacAddr,
}

/// An attachment found owning firewall rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedAttachment {
    /// The owner, as read back from its tag.
    pub attachment: AttachmentId,
    /// The hash its tags start with ([`AttachmentId::owner_hash`]).
    pub owner_hash: String,
    /// `false` if the tag was truncated (very long names), so the fields of
    /// `attachment` may be cut short; `owner_hash` is exact either way.
    pub complete: bool,
}

/// Firewall operations of CNI plugins. Every method is one atomic change
/// (or none); deletes are idempotent (a missing table, chain or element is
/// not an error). Implementations are cheap to share between threads.
pub trait Firewall: Send + Sync + fmt::Debug {
    /// Installs (or re-installs) the masquerade of one attachment. Fails
    /// with [`Error::FirewallConflict`](crate::Error::FirewallConflict) when
    /// another attachment already masquerades the same address (GC or DEL it
    /// first).
    fn add_masquerade(&self, spec: &MasqueradeSpec) -> Result<()>;
    /// Removes what [`Firewall::add_masquerade`] installed for
    /// `spec.attachment`.
    fn del_masquerade(&self, spec: &MasqueradeSpec) -> Result<()>;
    /// Verifies that the masquerade of `spec` is installed as specified.
    fn check_masquerade(&self, spec: &MasqueradeSpec) -> Result<()>;
    /// Installs (or re-installs) the masquerade of every address of one
    /// attachment (a dual-stack pod) as one change. Calling
    /// [`Firewall::add_masquerade`] once per address is not the same: each
    /// call re-installs the attachment's rules with only its own address.
    /// The default suits backends whose rules are per address.
    fn add_masquerades(&self, attachment: &AttachmentId, addresses: &[IpNetwork]) -> Result<()> {
        for &address in addresses {
            self.add_masquerade(&MasqueradeSpec {
                attachment: attachment.clone(),
                address,
            })?;
        }
        Ok(())
    }
    /// Removes what [`Firewall::add_masquerades`] installed; `addresses`
    /// may be empty or stale (the pod is gone), the attachment's rules
    /// are removed all the same.
    fn del_masquerades(&self, attachment: &AttachmentId, addresses: &[IpNetwork]) -> Result<()> {
        let _ = addresses;
        self.delete_attachment(RuleKind::Masquerade, attachment)
    }
    /// Verifies what [`Firewall::add_masquerades`] installed.
    fn check_masquerades(&self, attachment: &AttachmentId, addresses: &[IpNetwork]) -> Result<()> {
        for &address in addresses {
            self.check_masquerade(&MasqueradeSpec {
                attachment: attachment.clone(),
                address,
            })?;
        }
        Ok(())
    }

    /// Installs (or re-installs) the port mappings of one attachment; no-op
    /// when it has none. Fails with
    /// [`Error::FirewallConflict`](crate::Error::FirewallConflict) when
    /// another attachment already maps one of the host ports (same protocol
    /// and host IP). A re-install replaces everything the attachment had.
    fn add_port_mappings(&self, spec: &PortMappingSpec) -> Result<()>;
    /// Removes the port mappings of `spec.attachment`; no-op when the spec
    /// has no mappings (as the Go reference).
    fn del_port_mappings(&self, spec: &PortMappingSpec) -> Result<()>;
    /// Verifies that the port mappings of `spec` are installed.
    fn check_port_mappings(&self, spec: &PortMappingSpec) -> Result<()>;

    /// Installs (or re-installs) the MAC spoof check of one attachment.
    fn add_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()>;
    /// Removes the MAC spoof check of `spec.attachment`.
    fn del_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()>;
    /// Verifies that the MAC spoof check of `spec` is installed.
    fn check_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()>;

    /// Removes everything of `kind` that `attachment` owns, without knowing
    /// its spec (reads the current state once).
    fn delete_attachment(&self, kind: RuleKind, attachment: &AttachmentId) -> Result<()>;
    /// The attachments owning rules of `kind`.
    fn list_attachments(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>>;
    /// Removes the rules of `kind` owned by attachments of `network` that
    /// are not in `valid` (CNI GC); returns the attachments removed. Rules of
    /// other networks are left alone.
    fn gc(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> Result<Vec<OwnedAttachment>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_round_trips_and_detects_truncation() {
        let id = AttachmentId::new("net1", "abc", "eth0");
        let (back, complete) = AttachmentId::from_tag(&id.tag()).unwrap();
        assert_eq!(back, id);
        assert!(complete);

        let long = AttachmentId::new("n".repeat(60), "c".repeat(64), "eth0");
        let tag = long.tag();
        assert_eq!(tag.len(), TAG_MAX_LEN);
        let (_, complete) = AttachmentId::from_tag(&tag).unwrap();
        assert!(!complete);
        assert!(tag.starts_with(&long.owner_hash()));
    }

    #[test]
    fn udp_host_ports_per_family() {
        let mut spec = PortMappingSpec::new(AttachmentId::new("n", "c", "eth0"));
        spec.container_v4 = Some("10.0.0.2/24".parse().unwrap());
        let m = |port, protocol, host_ip: Option<&str>| PortMapping {
            host_port: port,
            container_port: 1,
            protocol,
            host_ip: host_ip.map(|h| h.parse().unwrap()),
        };
        spec.mappings = vec![
            m(53, Protocol::Udp, None),
            m(53, Protocol::Udp, Some("10.1.1.1")),
            m(54, Protocol::Udp, Some("fd00::1")),
            m(80, Protocol::Tcp, None),
        ];
        assert_eq!(spec.udp_host_ports(false), vec![53]);
        assert!(spec.udp_host_ports(true).is_empty());
        spec.container_v6 = Some("fd00::2/64".parse().unwrap());
        assert_eq!(spec.udp_host_ports(true), vec![53, 54]);
    }

    #[test]
    fn hashes_are_stable() {
        assert_eq!(hash16(""), "cbf29ce484222325");
        assert_ne!(
            AttachmentId::new("n", "a", "eth0").owner_hash(),
            AttachmentId::new("n", "a", "eth1").owner_hash()
        );
    }

    #[test]
    fn truncation_respects_utf8() {
        let mut s = "é".repeat(100);
        truncate_at_char_boundary(&mut s, 127);
        assert_eq!(s.len(), 126);
    }
}
