//! The crate's one error type and its mapping to CNI error codes.

use std::path::PathBuf;

use cni_types::{CniError, ErrorCode};

/// Everything that can go wrong in address management.
///
/// Messages reproduce the Go reference's texts (containernetworking/plugins
/// `plugins/ipam/host-local` and `plugins/ipam/static`) where it has one, so
/// that a runtime or a test that matches on them sees the same string.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin configuration (stdin) is not valid JSON (code 6).
    #[error("decode network configuration: {0}")]
    DecodeConfig(#[source] serde_json::Error),

    /// A key of the configuration holds a value of the wrong JSON type
    /// (code 7); the text names the key (`ipam.ranges[0][0].subnet: …`).
    #[error("decode network configuration: {0}")]
    KeyType(String),

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

    /// static CHECK without a `prevResult` in the configuration.
    #[error("Required prevResult missing")]
    MissingPrevResult,

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

    /// dhcp: no server answered (or none gave a lease) before the acquire
    /// deadline (code 11: the server may come back).
    #[error("no DHCP server answered on {ifname} within {waited:.1?} (timeout, resendMax, resendTimeout): no more tries")]
    DhcpTimeout {
        /// The pod interface.
        ifname: String,
        /// How long the client tried.
        waited: std::time::Duration,
    },
    /// dhcp: the server refused the request (DHCPNAK).
    #[error("DHCP server refused the lease on {ifname} (DHCPNAK): {reason}")]
    DhcpNak {
        /// The pod interface.
        ifname: String,
        /// The NAK's message option, or "DHCPNAK".
        reason: String,
    },
    /// dhcp: a socket operation on the pod interface failed.
    #[error("dhcp: {op} {ifname}: {source}")]
    DhcpSocket {
        /// The operation ("open packet socket on", "send DHCPDISCOVER on"...).
        op: &'static str,
        /// The pod interface.
        ifname: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// dhcp: a DHCPRELEASE sent from the caller's own namespace (the pod
    /// interface being gone) could not be sent: no route to the server,
    /// or a server address no release is sent to.
    #[error("dhcp: send DHCPRELEASE of {address} to {server} from this namespace: {source}")]
    DhcpRelease {
        /// The leased address.
        address: std::net::Ipv4Addr,
        /// The server identifier.
        server: std::net::Ipv4Addr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// dhcp: a DHCP message is malformed or lacks what a lease needs.
    #[error("{0}")]
    DhcpPacket(String),
    /// dhcp: the daemon's socket cannot be reached (code 11).
    #[error("error dialing DHCP daemon at {}: {source} (is `dhcp daemon` running?)", path.display())]
    DhcpDaemonUnreachable {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// dhcp: the daemon closed the connection without a reply (killed or
    /// restarted mid-request): transient, code 11.
    #[error("DHCP daemon at {} closed the connection without a reply (restarted or stopped mid-request?)", path.display())]
    DhcpDaemonClosed {
        /// The socket path.
        path: PathBuf,
    },
    /// dhcp: the daemon did not answer in time or answered something that
    /// is not a reply.
    #[error("DHCP daemon at {}: {reason}", path.display())]
    DhcpDaemonProtocol {
        /// The socket path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

impl Error {
    /// The CNI error code a plugin should reply with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::DecodeConfig(_) => ErrorCode::DecodingFailure,
            Error::InvalidConfig(_)
            | Error::KeyType(_)
            | Error::InvalidNetworkName { .. }
            | Error::RequestedGateway(_)
            | Error::NotInRangeSet { .. }
            | Error::UnfulfilledRequests(_) => ErrorCode::InvalidNetworkConfig,
            Error::InvalidArgs(_) => ErrorCode::InvalidEnvironmentVariables,
            // Another container holds the address; it is commonly being torn
            // down (StatefulSet-style IP reuse), so a retry can succeed.
            Error::RequestedUnavailable { .. } => ErrorCode::TryAgainLater,
            Error::Io { .. } => ErrorCode::IoFailure,
            Error::Unavailable(_) => ErrorCode::PluginNotAvailable,
            Error::AllocateRange { source, .. } => source.code(),
            Error::DhcpTimeout { .. }
            | Error::DhcpDaemonUnreachable { .. }
            | Error::DhcpDaemonClosed { .. } => ErrorCode::TryAgainLater,
            Error::DhcpNak { .. }
            | Error::DhcpSocket { .. }
            | Error::DhcpRelease { .. }
            | Error::DhcpPacket(_)
            | Error::DhcpDaemonProtocol { .. } => ErrorCode::Internal,
            Error::Duplicate { .. }
            | Error::Exhausted(_)
            | Error::NotFound(_)
            | Error::StaticMismatch { .. }
            | Error::MissingPrevResult => ErrorCode::Internal,
        }
    }

    /// The error reply a plugin prints: this error's code, and its message
    /// as `msg` (the Go plugins put their error text there).
    pub fn to_cni_error(&self) -> CniError {
        CniError::new(self.code(), self.to_string(), "")
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A failed file operation of `cni-files` (the atomic writer of
    /// [`cni_files::atomic`], the lock, the daemon socket of
    /// [`cni_files::daemon`]): its I/O errors stay [`Error::Io`] (operation
    /// and file named).
    pub(crate) fn atomic_write(e: cni_files::Error) -> Self {
        match e {
            cni_files::Error::Io { op, path, source } => Error::io(op, path, source),
            e => Error::io("write", "", std::io::Error::other(e.to_string())),
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
