//! The firewall plugin's errors.

use cni_types::ErrorCode;

/// Why a firewall plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// CHECK: an iptables rule of the attachment is missing.
    #[error("{}", rule_missing_text(.jump_from.as_deref(), .rule))]
    IptablesRuleMissing {
        /// The chain searched.
        chain: String,
        /// For a jump rule, the chain it is in as Go names it
        /// (`"FORWARD"`, `"CNI-FORWARD"`); `None` for an address rule.
        jump_from: Option<String>,
        /// The rule's arguments.
        rule: Vec<String>,
    },
    /// CHECK: the node chain does not jump to the plugin's nft chain.
    #[error("expected jump to {target} in chain {chain} of table {table} not found")]
    NftJumpMissing {
        /// The plugin's chain.
        target: &'static str,
        /// The node chain.
        chain: String,
        /// The node table.
        table: String,
    },
    /// CHECK: an accept rule of an address is missing from the plugin's
    /// nft chain.
    #[error("expected rule accepting {address} in chain {chain} of table {table} not found")]
    NftRuleMissing {
        /// The address.
        address: std::net::IpAddr,
        /// The plugin's chain.
        chain: &'static str,
        /// The node table.
        table: String,
    },
    /// The config does not decode (code 7).
    #[error("failed to load netconf: {reason}")]
    ConfigDecode {
        /// The decoder's error.
        reason: String,
    },
    /// A key of the config is not a string (code 7).
    #[error("{key}: expected a string, got {found}")]
    KeyNotString {
        /// The key.
        key: String,
        /// The JSON value given.
        found: String,
    },
    /// Backend `nftables` without `nftablesTable` (code 7).
    #[error("nftablesTable: required with backend \"nftables\"")]
    NftTableMissing,
    /// `nftablesFamily` is not a family (code 7).
    #[error("nftablesFamily: {family:?} is not inet, ip or ip6")]
    NftFamilyInvalid {
        /// The configured family.
        family: String,
    },
    /// `backend` is unknown (code 7).
    #[error("backend: unknown firewall backend {backend:?} (iptables, firewalld or nftables)")]
    BackendUnknown {
        /// The configured backend.
        backend: String,
    },
    /// `ingressPolicy` is unknown (code 7).
    #[error("ingressPolicy: unknown ingress policy: {policy:?}")]
    IngressPolicyUnknown {
        /// The configured policy.
        policy: String,
    },
    /// `iptablesAdminChainName` is not a chain name (code 7).
    #[error("iptablesAdminChainName: {chain:?} is not a valid chain name (at most 28 characters, no spaces)")]
    AdminChainInvalid {
        /// The configured name.
        chain: String,
    },
    /// ADD or CHECK without `prevResult` (code 7).
    #[error("missing prevResult from earlier plugin (prevResult)")]
    PrevResultMissing,
    /// An ingress policy needs the bridge and `prevResult` names no
    /// interface (code 7).
    #[error("interface needs to be set for ingress policy {policy:?}, make sure to chain \"firewall\" plugin with \"bridge\"")]
    IngressBridgeMissing {
        /// The policy.
        policy: &'static str,
    },
    /// The bridge interface of `prevResult` has no name (code 7).
    #[error("got empty bridge name")]
    IngressBridgeNameEmpty,
    /// The first interface of `prevResult` is the pod's, not the bridge
    /// (code 7).
    #[error("prevResult.interfaces[0] {name:?} is in a sandbox ({sandbox}), not the host bridge that ingress policy {policy:?} isolates: chain \"firewall\" after \"bridge\"")]
    IngressBridgeInSandbox {
        /// The interface.
        name: String,
        /// Its sandbox.
        sandbox: String,
        /// The policy.
        policy: &'static str,
    },
    /// GC without `cni.dev/valid-attachments` (code 7).
    #[error("cni.dev/valid-attachments: missing from the GC request")]
    ValidAttachmentsMissing,
    /// The configured nftables chain does not exist (code 7).
    #[error("nftablesChain: chain {chain} not found in table {table}")]
    NftChainMissing {
        /// The chain.
        chain: String,
        /// The table, as nft names it.
        table: String,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::ConfigDecode { .. }
            | Error::KeyNotString { .. }
            | Error::NftTableMissing
            | Error::NftFamilyInvalid { .. }
            | Error::BackendUnknown { .. }
            | Error::IngressPolicyUnknown { .. }
            | Error::AdminChainInvalid { .. }
            | Error::PrevResultMissing
            | Error::IngressBridgeMissing { .. }
            | Error::IngressBridgeNameEmpty
            | Error::IngressBridgeInSandbox { .. }
            | Error::ValidAttachmentsMissing
            | Error::NftChainMissing { .. } => ErrorCode::InvalidNetworkConfig,
            _ => ErrorCode::Internal,
        }
    }

    fn shared(&self) -> Option<&crate::Error> {
        match self {
            Error::Shared(e) => Some(e),
            _ => None,
        }
    }
}

crate::plugin_error_glue!(Error);

/// `Result` with the firewall plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Go's wordings of a missing iptables rule: a jump names its chain.
fn rule_missing_text(jump_from: Option<&str>, rule: &[String]) -> String {
    match jump_from {
        Some(chain) => format!("expected {chain} rule {rule:?} not found"),
        None => format!("expected rule {rule:?} not found"),
    }
}
