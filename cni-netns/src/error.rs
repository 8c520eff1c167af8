//! The crate's error type.

use std::io;
use std::path::PathBuf;

use crate::firewall::FirewallOp;

/// Everything that can go wrong in this crate; each variant names the
/// operation and the object it was applied to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    /// Entering the network namespace given for nft or conntrack failed.
    #[error("open network namespace {path}: {source}")]
    FirewallNetns {
        /// The namespace path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
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
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
