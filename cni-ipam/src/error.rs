//! The crate's one error type and its mapping to CNI error codes.

use std::path::PathBuf;

/// CNI well-known error codes used by this crate (SPEC "Error" section, plus
/// Go's `ErrInternal`).
pub mod code {
    /// Invalid or missing environment variables (`CNI_ARGS` is one).
    pub const INVALID_ENVIRONMENT_VARIABLES: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content (malformed JSON).
    pub const DECODING_FAILURE: u32 = 6;
    /// Invalid network configuration.
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// Transient condition: the runtime should retry later.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot service ADD requests.
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// Generic failure (Go's `ErrInternal`).
    pub const INTERNAL: u32 = 999;
}

/// Everything that can go wrong in address management.
///
/// Messages reproduce the Go reference's texts (containernetworking/plugins
/// `plugins/ipam/host-local` and `plugins/ipam/static`) where it has one, so
/// that a runtime or a test that matches on them sees the same string.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin configuration (stdin) is not valid JSON or has a wrong shape.
    #[error("decode network configuration: {0}")]
    DecodeConfig(#[source] serde_json::Error),

    /// The configuration is well-formed JSON but not a valid IPAM configuration;
    /// the text is the Go reference's message.
    #[error("{0}")]
    InvalidConfig(String),

    /// `CNI_ARGS` could not be parsed; the text is the Go reference's message.
    #[error("{0}")]
    InvalidArgs(String),

    /// The network name is empty or would not be a single safe path component.
    #[error("invalid network name {name:?}: {reason}")]
    InvalidNetworkName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// The requested IP is the gateway of its range.
    #[error("requested ip {0} is subnet's gateway")]
    RequestedGateway(std::net::IpAddr),

    /// The requested IP is in no range of the set.
    #[error("{ip} not in range set {range_set}")]
    NotInRangeSet {
        /// The requested address.
        ip: std::net::IpAddr,
        /// The range set, formatted like Go (`start-end,start-end`).
        range_set: String,
    },

    /// The requested IP is already reserved by someone else.
    #[error("requested IP address {ip} is not available in range set {range_set}")]
    RequestedUnavailable {
        /// The requested address.
        ip: std::net::IpAddr,
        /// The range set, formatted like Go.
        range_set: String,
    },

    /// The (container id, ifname) already holds an address in this range set.
    #[error("{ip} has been allocated to {container_id}, duplicate allocation is not allowed")]
    Duplicate {
        /// The address already held.
        ip: std::net::IpAddr,
        /// The container holding it.
        container_id: String,
    },

    /// Every address of the range set is reserved.
    #[error("no IP addresses available in range set: {0}")]
    Exhausted(String),

    /// Allocation in one range set failed (Go: `cmdAdd` wraps the allocator error).
    #[error("failed to allocate for range {index}: {source}")]
    AllocateRange {
        /// Index of the range set.
        index: usize,
        /// The allocator's error.
        #[source]
        source: Box<Error>,
    },

    /// Some requested IPs matched no range set.
    #[error("failed to allocate all requested IPs:{}", .0.iter().map(|ip| format!(" {ip}")).collect::<String>())]
    UnfulfilledRequests(Vec<std::net::IpAddr>),

    /// CHECK found no reservation for the container.
    #[error("host-local: Failed to find address added by container {0}")]
    NotFound(String),

    /// static CHECK: an address is in prevResult with another gateway.
    #[error("static: Failed to match addr {ip} on interface {ifname}")]
    StaticMismatch {
        /// The address.
        ip: std::net::IpAddr,
        /// The container interface.
        ifname: String,
    },

    /// A file system operation on the store or a config file failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done ("create reservation", "read", "lock"...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// STATUS: the plugin cannot serve ADD (the store is unusable).
    #[error("store unavailable: {0}")]
    Unavailable(#[source] Box<Error>),

    /// Release failed in one or more range sets (Go joins them with `;`).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(";"))]
    Multiple(Vec<Error>),
}

impl Error {
    /// The CNI error code a plugin should reply with.
    pub fn code(&self) -> u32 {
        match self {
            Error::DecodeConfig(_) => code::DECODING_FAILURE,
            Error::InvalidConfig(_)
            | Error::InvalidNetworkName { .. }
            | Error::RequestedGateway(_)
            | Error::NotInRangeSet { .. }
            | Error::UnfulfilledRequests(_) => code::INVALID_NETWORK_CONFIG,
            Error::InvalidArgs(_) => code::INVALID_ENVIRONMENT_VARIABLES,
            // Another container holds the address; it is commonly being torn
            // down (StatefulSet-style IP reuse), so a retry can succeed.
            Error::RequestedUnavailable { .. } => code::TRY_AGAIN_LATER,
            Error::Io { .. } => code::IO_FAILURE,
            Error::Unavailable(_) => code::PLUGIN_NOT_AVAILABLE,
            Error::AllocateRange { source, .. } => source.code(),
            Error::Multiple(errors) => errors.first().map_or(code::INTERNAL, Error::code),
            Error::Duplicate { .. }
            | Error::Exhausted(_)
            | Error::NotFound(_)
            | Error::StaticMismatch { .. } => code::INTERNAL,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
