//! The vrf plugin's errors.

use cni_types::ErrorCode;

/// Why a vrf plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// Several teardown steps failed (DEL, GC, an undo): all of them.
    #[error("{0}")]
    Teardown(#[from] crate::Failures<Error>),
    /// The config names no VRF.
    #[error("configuration is expected to have a valid vrf name")]
    NameMissing,
    /// ADD inside the pod failed (Go's `cmdAdd failed:` wrapper).
    #[error("cmdAdd failed: {source}")]
    Add {
        /// The VRF.
        vrf: String,
        /// The interface being put into it.
        ifname: String,
        /// What failed.
        source: Box<Error>,
    },
    /// A link has the VRF's name but is not a VRF.
    #[error("Netlink {name} is not a VRF")]
    NotAVrf {
        /// The link name.
        name: String,
    },
    /// The VRF exists with another table than the configured one.
    #[error("VRF {vrf} already exist with different routing table {table}")]
    TableMismatch {
        /// The VRF.
        vrf: String,
        /// Its table.
        table: u32,
        /// The configured table.
        configured: u32,
    },
    /// Every routing table a new VRF could take is in use.
    #[error("findFreeRoutingTableID: Failed to find an available routing id")]
    TablesExhausted {
        /// The VRF to create.
        vrf: String,
    },
    /// The interface to put into the VRF was not found.
    #[error("could not get link by name {ifname}")]
    MemberLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// The interface already has a master (another VRF or a bridge).
    #[error("interface {ifname} has already a master set: {master}")]
    MasterAlreadySet {
        /// The interface.
        ifname: String,
        /// Its master's name (`#<index>` when unreadable).
        master: String,
    },
    /// CHECK: the VRF does not exist.
    #[error("Link not found: vrf {vrf} does not exist")]
    NotFound {
        /// The VRF.
        vrf: String,
    },
    /// CHECK: the interface is not a member of the VRF.
    #[error("failed to find {ifname} associated to vrf {vrf}")]
    MemberMissing {
        /// The interface.
        ifname: String,
        /// The VRF.
        vrf: String,
    },
    /// A restored IPv6 address's local route never showed up in the
    /// VRF's table.
    #[error(
        "failed getting local/host addresses for {ifname} in table {table} with dst {address}"
    )]
    LocalRouteMissing {
        /// The interface.
        ifname: String,
        /// The VRF's table.
        table: u32,
        /// The restored address.
        address: std::net::IpAddr,
    },
    /// The config has no `prevResult` (vrf runs chained).
    #[error("missing prevResult from earlier plugin")]
    PrevResultMissing,
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::Teardown(all) => all.code(),
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

/// `Result` with the vrf plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
