//! Host firewall for CNI attachments: IP masquerade, port mappings and the
//! bridge MAC spoof check, on nftables. The design (layers, tables, what an
//! attachment is in the kernel) is on the [crate front page](crate#the-firewall).
//!
//! A plugin builds the [`RuleSpec`] of one attachment and calls
//! [`Firewall::add`], [`Firewall::delete`] or [`Firewall::check`]; GC calls
//! [`Firewall::gc`]. The caller picks the [`Backend`]: this crate reads no
//! environment.
//!
//! ```
//! use cni_netns::firewall::{AttachmentId, Backend, MasqueradeSpec, RuleKind, RuleSpec};
//!
//! let spec = RuleSpec::from(MasqueradeSpec {
//!     attachment: AttachmentId::new("mynet", "0123456789abcdef", "eth0"),
//!     addresses: vec!["10.88.0.5/16".parse().unwrap()],
//! });
//! assert_eq!(spec.kind(), RuleKind::Masquerade);
//! // Every element the attachment owns carries this tag.
//! assert!(spec.attachment().tag().contains("net: mynet, if: eth0, id: 0123456789abcdef"));
//! let _firewall = Backend::Native.firewall(Some("/run/netns/node".as_ref()), 0);
//! ```

mod attachment;
mod batch;
mod conditions;
mod engine;
mod hostport;
mod macspoof;
mod masquerade;
pub mod model;
mod native;
mod nfconn;
mod nft;
mod recording;

use std::fmt;
use std::path::Path;

pub use attachment::{owner_id, AttachmentId, OwnedAttachment};
pub use conditions::parse_conditions;
pub use hostport::{HostPortMapping, PortMappingSpec, Protocol, DEFAULT_MASQ_MARK};
pub use macspoof::MacSpoofCheckSpec;
pub use masquerade::MasqueradeSpec;
pub use native::NativeFirewall;
pub use nft::NftFirewall;
pub use recording::{FirewallCall, RecordingFirewall};

// Defined with the crate's error (which names them), part of the firewall's API.
pub use crate::error::{FirewallOp, RuleKind};
use crate::Result;

/// What plugins ask of the firewall. Every method is one atomic change (or
/// none); deletes are idempotent (a missing table, chain or element is not
/// an error). Implementations are cheap to share between threads.
pub trait Firewall: Send + Sync + fmt::Debug {
    /// Installs (or re-installs, replacing everything it had) the rules of
    /// `spec`'s attachment. Fails with
    /// [`Error::FirewallConflict`](crate::Error::FirewallConflict) when
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
    /// attachment ([`Error::FirewallCheck`](crate::Error::FirewallCheck)
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
