//! The firewall's error type.
//!
//! Every variant names the operation and the attachment (or table) it was
//! for, so that a plugin can pass the message straight to the runtime:
//! `add port mappings for <attachment>: tcp . 8080 is already used by
//! another attachment: ...`. Kernel state below the firewall (namespaces,
//! netlink sockets) fails with [`cni_netns::Error`], wrapped as
//! [`Error::Netns`] with its message unchanged.

use std::io;
use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the firewall.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A namespace or kernel operation below the firewall failed (entering
    /// the namespace, opening a socket); its message is
    /// [`cni_netns::Error`]'s.
    #[error(transparent)]
    Netns(#[from] cni_netns::Error),
    // ---- firewall / conntrack ----
    /// The `nft` binary could not be started or talked to.
    #[error("{op} for {attachment}: run {program}: {source}")]
    NftSpawn {
        /// What was being done.
        op: FirewallOp,
        /// The attachment (or table) the operation was for.
        attachment: String,
        /// The program that was run.
        program: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// `nft` rejected a batch or a listing.
    #[error("{op} for {attachment}: nft: {message}")]
    Nft {
        /// What was being done.
        op: FirewallOp,
        /// The attachment (or table) the operation was for.
        attachment: String,
        /// What nft printed on stderr.
        message: String,
    },
    /// A key (host port, source address, bridge port) is already owned by
    /// another attachment.
    #[error("{op} for {attachment}: {key} is already used by another attachment: {message}")]
    FirewallConflict {
        /// What was being done.
        op: FirewallOp,
        /// The attachment the operation was for.
        attachment: String,
        /// The contested keys, as text.
        key: String,
        /// What nft printed on stderr.
        message: String,
    },
    /// `nft -j` printed something this crate does not understand.
    #[error("{op} for {attachment}: unexpected nft output: {message}")]
    NftOutput {
        /// What was being done.
        op: FirewallOp,
        /// The attachment (or table) the operation was for.
        attachment: String,
        /// What was wrong with the output.
        message: String,
    },
    /// A CHECK found the firewall state different from the spec.
    #[error("{op} for {attachment}: {missing}")]
    FirewallCheck {
        /// Which check.
        op: FirewallOp,
        /// The attachment checked.
        attachment: String,
        /// What is missing or different.
        missing: String,
    },
    /// A spec given to the firewall is not usable.
    #[error("{op} for {attachment}: invalid spec: {reason}")]
    InvalidFirewallSpec {
        /// What was being done.
        op: FirewallOp,
        /// The attachment the spec was for.
        attachment: String,
        /// Why the spec was rejected.
        reason: String,
    },
    /// An extra match condition (nft syntax) could not be understood.
    #[error("parse firewall condition {condition:?}: {reason}")]
    InvalidCondition {
        /// The condition tokens, joined by spaces.
        condition: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A conntrack netlink request failed.
    #[error("conntrack {op} ({family} UDP, destination ports {ports:?}): {source}")]
    Conntrack {
        /// What was being done (dump, delete).
        op: &'static str,
        /// `ipv4` or `ipv6`.
        family: &'static str,
        /// The destination ports whose entries were targeted.
        ports: Vec<u16>,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Some conntrack entries could not be deleted (the others were).
    #[error("conntrack delete entries ({family} UDP, destination ports {ports:?}): {deleted} deleted, {} refused: {}", .failures.len(), fmt_failures(.failures))]
    ConntrackDelete {
        /// `ipv4` or `ipv6`.
        family: &'static str,
        /// The destination ports whose entries were targeted.
        ports: Vec<u16>,
        /// How many entries were deleted.
        deleted: usize,
        /// Why each refused entry was refused, in the order tried.
        failures: Vec<io::Error>,
    },
    /// A conntrack netlink socket could not be opened.
    #[error("open conntrack netlink socket in {netns}: {source}")]
    ConntrackOpen {
        /// The namespace (path, or "the current network namespace").
        netns: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    // ---- end firewall / conntrack ----
    // ---- iptables / foreign nft tables (firewall plugin) ----
    /// A firewall program (`iptables`, `ip6tables`, `nft`) could not be started.
    #[error("{op}: run {program}: {source}")]
    ToolSpawn {
        /// What was being done.
        op: String,
        /// The program.
        program: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A firewall program refused a command.
    #[error("{op}: {command}: {message}")]
    FirewallTool {
        /// What was being done.
        op: String,
        /// The command line.
        command: String,
        /// What the program printed on stderr (or its exit status).
        message: String,
    },
    // ---- end iptables / foreign nft tables ----
    // ---- native nf_tables (nftnative) ----
    /// The kernel refused a native nf_tables request (or its socket failed).
    #[error("{op} for {attachment}: {object}: {source}")]
    NftNetlink {
        /// What was being done.
        op: FirewallOp,
        /// The attachment (or table) the operation was for.
        attachment: String,
        /// The nf_tables object the refused message was about
        /// (`add element hostports tcp . 8080 : goto pm-... in inet cni_rs_hostport`).
        object: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// The nf_tables netlink socket could not be opened.
    #[error("{op} for {attachment}: open nf_tables netlink socket in {netns}: {source}")]
    NftNetlinkOpen {
        /// What was being done.
        op: FirewallOp,
        /// The attachment (or table) the operation was for.
        attachment: String,
        /// The namespace (path, or "the current network namespace").
        netns: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A rule cannot be expressed by the native encoder (an extra condition
    /// it does not know); the `nft` backend can.
    #[error("{op} for {attachment}: not expressible natively: {what}")]
    NftUnsupported {
        /// What was being done.
        op: FirewallOp,
        /// The attachment the rule was for.
        attachment: String,
        /// What the encoder does not know.
        what: String,
    },
    // ---- end native nf_tables ----
}

/// The distinct reasons of `failures`, in order, with a count when one
/// repeats (a thousand refusals for one reason make one line).
fn fmt_failures(failures: &[io::Error]) -> String {
    let mut distinct: Vec<(String, usize)> = Vec::new();
    for f in failures {
        let text = f.to_string();
        match distinct.iter_mut().find(|(t, _)| *t == text) {
            Some((_, n)) => *n += 1,
            None => distinct.push((text, 1)),
        }
    }
    let parts: Vec<String> = distinct
        .into_iter()
        .map(|(t, n)| if n == 1 { t } else { format!("{t} (x{n})") })
        .collect();
    parts.join("; ")
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

impl std::fmt::Display for RuleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

impl std::fmt::Display for FirewallOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FirewallOp::Add(k) => write!(f, "add {k}"),
            FirewallOp::Delete(k) => write!(f, "delete {k}"),
            FirewallOp::Check(k) => write!(f, "check {k}"),
            FirewallOp::List(k) => write!(f, "list {k}"),
            FirewallOp::Gc(k) => write!(f, "gc {k}"),
        }
    }
}
