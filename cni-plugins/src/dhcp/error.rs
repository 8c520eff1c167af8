//! The dhcp plugin's errors.

use cni_types::ErrorCode;

/// Why a dhcp plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// The daemon answered ADD with neither a result nor an error.
    #[error("dhcp daemon answered ADD without a result")]
    NoResult,
    /// CHECK: the daemon holds no lease for the attachment.
    #[error("dhcp: no lease held for {key}")]
    LeaseMissing {
        /// The attachment (`<container>/<network>/<ifname>`).
        key: String,
    },
    /// CHECK: the attachment's lease was lost (NAK, expiry).
    #[error("dhcp: lease for {key} lost: {reason}")]
    LeaseLost {
        /// The attachment.
        key: String,
        /// Why it was lost.
        reason: String,
    },
    /// CHECK: the leased address is not on the interface.
    #[error("dhcp: leased address {address} is not on {ifname} in {netns}")]
    AddressMissing {
        /// The leased address.
        address: std::net::Ipv4Addr,
        /// The interface.
        ifname: String,
        /// The pod's namespace.
        netns: String,
    },
    /// The config has no `ipam` section (code 7).
    #[error("dhcp: the configuration has no \"ipam\" section")]
    IpamMissing,
    /// The `ipam` section does not decode (code 7).
    #[error("dhcp: invalid \"ipam\" section: {reason}")]
    IpamInvalid {
        /// The decoder's error.
        reason: String,
    },
    /// stdin is not JSON (code 7).
    #[error("dhcp: stdin is not JSON: {reason}")]
    StdinNotJson {
        /// The decoder's error.
        reason: String,
    },
    /// The pod interface has no MAC address (code 7).
    #[error("dhcp: {ifname} in {} has no Ethernet address", .netns.display())]
    LinkWithoutMac {
        /// The interface.
        ifname: String,
        /// The pod's namespace.
        netns: std::path::PathBuf,
    },
    /// The daemon got more than one socket by socket activation (code 7).
    #[error("Too many ({count}) FDs passed through socket activation")]
    TooManyActivatedFds {
        /// The number of sockets passed.
        count: u32,
    },
    /// GC without `cni.dev/valid-attachments` (code 7).
    #[error(
        "GC needs the list of valid attachments ({})",
        cni_types::config::VALID_ATTACHMENTS_KEY
    )]
    ValidAttachmentsMissing,
    /// `dhcp daemon`: an argument that is not a flag (Go's `flag` stops
    /// there; the daemon refuses it).
    #[error("unexpected argument {arg:?}")]
    UnexpectedArgument {
        /// The argument.
        arg: String,
    },
    /// `dhcp daemon`: a flag the daemon does not define.
    #[error("flag provided but not defined: -{flag}")]
    UndefinedFlag {
        /// The flag's name.
        flag: String,
    },
    /// `dhcp daemon`: a flag that takes a value came last.
    #[error("flag needs an argument: -{flag}")]
    FlagWithoutValue {
        /// The flag's name.
        flag: String,
    },
    /// `dhcp daemon`: `-broadcast=<value>` with a value Go's
    /// `strconv.ParseBool` refuses.
    #[error("invalid boolean value {value:?} for -broadcast")]
    InvalidBoolean {
        /// The value given.
        value: String,
    },
    /// `dhcp daemon`: a duration flag whose value is not a Go duration.
    #[error("invalid value {value:?} for flag -{flag}")]
    InvalidDuration {
        /// The flag's name.
        flag: String,
        /// The value given.
        value: String,
    },
    /// `dhcp daemon`: `-pidfile` with a relative path (Go's text).
    #[error("Error writing pidfile {path:?}: path not absolute")]
    RelativePidfile {
        /// The path given.
        path: String,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::IpamMissing
            | Error::IpamInvalid { .. }
            | Error::StdinNotJson { .. }
            | Error::LinkWithoutMac { .. }
            | Error::TooManyActivatedFds { .. }
            | Error::ValidAttachmentsMissing => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the dhcp plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
