//! The portmap plugin's errors.

use cni_types::ErrorCode;

/// Why a portmap plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// Setting `route_localnet` on the node's interface towards the
    /// container failed.
    #[error("unable to enable route_localnet: {source}")]
    RouteLocalnet {
        /// The node interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// The config does not decode (code 7).
    #[error("failed to parse network configuration: {reason}")]
    ConfigDecode {
        /// The decoder's error.
        reason: String,
    },
    /// A config error, as ADD, DEL and CHECK word it (its code is the
    /// inner error's).
    #[error("failed to parse config: {source}")]
    ConfigParse {
        /// The config error.
        source: Box<Error>,
    },
    /// Both `externalSetMarkChain` and `markMasqBit` are set (code 7).
    #[error("Cannot specify externalSetMarkChain and markMasqBit")]
    MarkChainWithMarkBit,
    /// `markMasqBit` is outside 0..=31 (code 7).
    #[error("MasqMarkBit must be between 0 and 31")]
    MarkBitInvalid {
        /// The configured bit.
        bit: i64,
    },
    /// The requested backend conflicts with options of the other one
    /// (code 7).
    #[error("{backend} backend was requested but configuration contains {other}-specific options [{}]", .options.join(" "))]
    BackendOptionsConflict {
        /// The requested backend.
        backend: &'static str,
        /// The backend the options belong to.
        other: &'static str,
        /// The options.
        options: Vec<&'static str>,
    },
    /// The iptables backend was requested; only nftables is built (code 7).
    #[error(
        "iptables backend was requested but this portmap implements only the nftables backend: \
         remove \"backend\" or set it to \"nftables\" (iptables-style conditions must be rewritten in nft syntax)"
    )]
    IptablesUnsupported,
    /// iptables-specific options without a backend (code 7).
    #[error(
        "configuration contains iptables-specific options [{}] but this portmap implements only the nftables backend \
         (write conditions in nft syntax; externalSetMarkChain has no nftables equivalent)",
        .options.join(" ")
    )]
    IptablesOptionsUnsupported {
        /// The options.
        options: Vec<&'static str>,
    },
    /// `backend` is neither `iptables` nor `nftables` (code 7).
    #[error("unrecognized backend {backend:?}")]
    BackendUnknown {
        /// The configured backend.
        backend: String,
    },
    /// A port mapping's container port is not a port (code 7).
    #[error("Invalid container port number: {port}")]
    ContainerPortInvalid {
        /// The value given.
        port: i32,
    },
    /// A port mapping's host port is not a port (code 7).
    #[error("Invalid host port number: {port}")]
    HostPortInvalid {
        /// The value given.
        port: i32,
    },
    /// A port mapping's protocol is unknown (code 7).
    #[error("Invalid protocol {protocol:?} in port mapping {host_port}:{container_port}: want tcp, udp or sctp")]
    ProtocolInvalid {
        /// The value given.
        protocol: String,
        /// The mapping's host port.
        host_port: i32,
        /// The mapping's container port.
        container_port: i32,
    },
    /// A port mapping's `hostIP` is not an address (code 7).
    #[error("Invalid hostIP {host_ip:?} in port mapping {host_port}:{container_port}")]
    HostIpInvalid {
        /// The value given.
        host_ip: String,
        /// The mapping's host port.
        host_port: i32,
        /// The mapping's container port.
        container_port: i32,
    },
    /// `prevResult` does not parse (code 7).
    #[error("failed to parse config: could not parse prevResult: {source}")]
    PrevResultParse {
        /// The parser's error.
        source: cni_types::Error,
    },
    /// ADD without `prevResult` (code 7).
    #[error("must be called as chained plugin")]
    PrevResultMissing,
    /// CHECK without `prevResult` (code 7; Go's CHECK words it so).
    #[error("Required prevResult missing")]
    CheckPrevResultMissing,
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::ConfigParse { source } => source.code(),
            Error::ConfigDecode { .. }
            | Error::MarkChainWithMarkBit
            | Error::MarkBitInvalid { .. }
            | Error::BackendOptionsConflict { .. }
            | Error::IptablesUnsupported
            | Error::IptablesOptionsUnsupported { .. }
            | Error::BackendUnknown { .. }
            | Error::ContainerPortInvalid { .. }
            | Error::HostPortInvalid { .. }
            | Error::ProtocolInvalid { .. }
            | Error::HostIpInvalid { .. }
            | Error::PrevResultParse { .. }
            | Error::PrevResultMissing
            | Error::CheckPrevResultMissing => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the portmap plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
