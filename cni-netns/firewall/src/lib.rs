#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! The rule families' specs are [`MasqueradeSpec`], [`PortMappingSpec`] and
//! [`MacSpoofCheckSpec`], owned by an [`AttachmentId`]; a [`Backend`] makes
//! the [`Firewall`] ([`NativeFirewall`] or [`NftFirewall`]). Beside it:
//! [`conntrack`], [`Iptables`], [`NftForeignTable`] (the node's own
//! tables, reached through [`NodeTables`]: [`SystemTables`], or an
//! in-memory double with feature `recording`), and [`model`], the
//! tables' objects as values. Every failure is an [`Error`].
//!
//! # Design
//!
//! A plugin builds one attachment's [`RuleSpec`]
//! (masquerade, port mappings or MAC spoof check) and calls
//! [`Firewall`]`::add`, `delete` or `check`;
//! `delete_owned` removes what an attachment owns without its spec, `list`
//! and `gc` work per network. The caller picks the
//! [`Backend`] (the plugin binaries read
//! `CNI_FIREWALL_BACKEND`); nothing here reads the environment. The layers:
//!
//! 1. the rule families, one file each (`masquerade`, `hostport`,
//!    `macspoof`): a table's fixed chains, rules and maps, and the map
//!    elements of one attachment, as values of [`model`];
//! 2. `batch`: the atomic batches that create a table's shared objects and
//!    install, delete or expire an attachment's elements;
//! 3. `engine`: ADD / DEL / CHECK / list / GC written once, over a driver
//!    that sends batches and reads tables back: [`NativeFirewall`]
//!    (nf_tables netlink, the default) or [`NftFirewall`]
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

mod attachment;
mod batch;
mod conditions;
pub mod conntrack;
mod engine;
mod error;
mod hostport;
mod iptables;
mod macspoof;
mod masquerade;
pub mod model;
mod native;
mod nfconn;
mod nfnetlink;
mod nft;
mod nft_foreign;
mod node_tables;
#[cfg(any(test, feature = "recording"))]
mod recording;
#[cfg(any(test, feature = "recording"))]
mod recording_tables;

use std::fmt;
use std::path::Path;

pub use attachment::{owner_id, AttachmentId, OwnedAttachment};
pub use conditions::parse_conditions;
pub use error::{Error, FirewallOp, Result, RuleKind};
pub use hostport::{HostPortMapping, PortMappingSpec, Protocol, DEFAULT_MASQ_MARK};
pub use iptables::Iptables;
pub use macspoof::MacSpoofCheckSpec;
pub use masquerade::MasqueradeSpec;
pub use native::NativeFirewall;
pub use nft::NftFirewall;
pub use nft_foreign::{NftForeignTable, NftListedRule};
pub use node_tables::{ForeignTable, IptablesTable, NodeTables, SystemTables};
#[cfg(any(test, feature = "recording"))]
#[cfg_attr(docsrs, doc(cfg(feature = "recording")))]
pub use recording::{FirewallCall, RecordingFirewall};
#[cfg(any(test, feature = "recording"))]
#[cfg_attr(docsrs, doc(cfg(feature = "recording")))]
pub use recording_tables::{RecordingTables, TableCall, TableOp};

/// What plugins ask of the firewall. Every method is one atomic change (or
/// none); deletes are idempotent (a missing table, chain or element is not
/// an error). Implementations are cheap to share between threads.
pub trait Firewall: Send + Sync + fmt::Debug {
    /// Installs (or re-installs, replacing everything it had) the rules of
    /// `spec`'s attachment. Fails with
    /// [`Error::FirewallConflict`] when
    /// another attachment holds one of its keys (the same address, host
    /// port or bridge port): GC or DEL it first. Port mappings without a
    /// mapping of the container's families are a no-op.
    fn add(&self, spec: &RuleSpec) -> Result<()>;
    /// Removes what [`Firewall::add`] of `spec` installed. A masquerade
    /// spec without addresses (the pod is gone), or a port mapping spec an
    /// ADD would refuse, removes whatever the attachment owns; port mappings
    /// without mappings are a no-op (as the Go reference).
    fn delete(&self, spec: &RuleSpec) -> Result<()>;
    /// Verifies that the rules of `spec` are installed, owned by its
    /// attachment ([`Error::FirewallCheck`]
    /// otherwise).
    fn check(&self, spec: &RuleSpec) -> Result<()>;
    /// Removes everything of `kind` that `attachment` owns, without its
    /// spec (reads the table once).
    fn delete_owned(&self, kind: RuleKind, attachment: &AttachmentId) -> Result<()>;
    /// The attachments owning rules of `kind`.
    fn list(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>>;
    /// Removes the rules of `kind` owned by attachments of `network` that
    /// are not in `valid` (CNI GC), in one batch; returns the attachments
    /// removed. Rules of other networks are left alone.
    fn gc(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> Result<Vec<OwnedAttachment>>;
}

/// The rules of one attachment, by family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSpec {
    /// Source NAT of the pod's traffic leaving its subnet (`ipMasq`).
    Masquerade(MasqueradeSpec),
    /// Host ports forwarded to the pod (portmap).
    PortMappings(PortMappingSpec),
    /// Drop of bridge frames whose source MAC is not the pod's
    /// (`macspoofchk`).
    MacSpoofCheck(MacSpoofCheckSpec),
}

impl RuleSpec {
    /// The family of the rules.
    pub fn kind(&self) -> RuleKind {
        match self {
            RuleSpec::Masquerade(_) => RuleKind::Masquerade,
            RuleSpec::PortMappings(_) => RuleKind::PortMapping,
            RuleSpec::MacSpoofCheck(_) => RuleKind::MacSpoofCheck,
        }
    }

    /// The owner of the rules.
    pub fn attachment(&self) -> &AttachmentId {
        match self {
            RuleSpec::Masquerade(s) => &s.attachment,
            RuleSpec::PortMappings(s) => &s.attachment,
            RuleSpec::MacSpoofCheck(s) => &s.attachment,
        }
    }
}

impl From<MasqueradeSpec> for RuleSpec {
    fn from(spec: MasqueradeSpec) -> Self {
        RuleSpec::Masquerade(spec)
    }
}

impl From<PortMappingSpec> for RuleSpec {
    fn from(spec: PortMappingSpec) -> Self {
        RuleSpec::PortMappings(spec)
    }
}

impl From<MacSpoofCheckSpec> for RuleSpec {
    fn from(spec: MacSpoofCheckSpec) -> Self {
        RuleSpec::MacSpoofCheck(spec)
    }
}

/// Which [`Firewall`] implementation programs the kernel; the caller picks
/// (the plugin binaries read `CNI_FIREWALL_BACKEND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// nf_tables over netlink, no process ([`NativeFirewall`]); the default.
    #[default]
    Native,
    /// The `nft` binary with JSON batches ([`NftFirewall`]), for kernels or
    /// environments where the native encoding is refused.
    Nft,
}

impl Backend {
    /// Parses `native` (or `netlink`) or `nft`, case-insensitive.
    pub fn from_name(name: &str) -> Option<Backend> {
        match name.trim().to_ascii_lowercase().as_str() {
            "native" | "netlink" => Some(Backend::Native),
            "nft" => Some(Backend::Nft),
            _ => None,
        }
    }

    /// A firewall of this backend for `netns` (`None`: the current
    /// namespace) using `masq_mark` (0: [`DEFAULT_MASQ_MARK`]).
    pub fn firewall(self, netns: Option<&Path>, masq_mark: u32) -> Box<dyn Firewall> {
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

impl RuleKind {
    /// The table of this feature.
    pub(crate) fn table(self, masq_mark: u32) -> model::Table {
        match self {
            RuleKind::Masquerade => masquerade::table(),
            RuleKind::PortMapping => hostport::table(masq_mark),
            RuleKind::MacSpoofCheck => macspoof::table(),
        }
    }
}
