//! The tuning plugin's errors.

use cni_types::ErrorCode;

/// Why a tuning plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// ADD: the interface to tune was not found.
    #[error("failed to get {ifname:?}: {source}")]
    LinkLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// CHECK: the tuned interface was not found.
    #[error("Cannot find container link {ifname}")]
    LinkMissing {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Reading or writing a sysctl file in the pod failed.
    #[error("open {file}: {source}")]
    SysctlAccess {
        /// `"read"` or `"write"`.
        op: &'static str,
        /// The file under `/proc/sys/net`.
        file: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// CHECK: a tuned value differs from the config.
    #[error("{}", mismatch_text(.object, .attribute, .configured, .current))]
    Mismatch {
        /// The interface, or the sysctl file.
        object: String,
        /// Go's name of the value (`"value"` for a sysctl, `"MTU"`,
        /// `"Ethernet"`, `"promisc"`, `"all-multicast mode"`, `"Transmit
        /// Queue Length"`).
        attribute: &'static str,
        /// The configured value.
        configured: String,
        /// The value found.
        current: String,
    },
    /// A sysctl value of the config is not a string (code 7).
    #[error("failed to load netconf: sysctl {key} must be a string, got {found}")]
    SysctlNotString {
        /// The sysctl key.
        key: String,
        /// The JSON value given.
        found: String,
    },
    /// A sysctl key is not under `/proc/sys/net/` (code 7).
    #[error("invalid net sysctl key: {key:?}")]
    SysctlKeyInvalid {
        /// The key, dots made slashes.
        key: String,
    },
    /// The config's `sysctl` repeats a key (code 7).
    #[error("duplicated sysctl keys are not allowed")]
    SysctlDuplicated,
    /// A pattern of the sysctl allow-list does not compile (code 7).
    #[error("error parsing regexp {pattern:?}: {reason}")]
    AllowlistPatternInvalid {
        /// The pattern.
        pattern: String,
        /// The regex compiler's error.
        reason: String,
    },
    /// A sysctl key matches no pattern of the allow-list (code 7).
    #[error("Sysctl {key} is not allowed. Only the following sysctls are allowed: [{}]", .allowed.join(" "))]
    SysctlNotAllowed {
        /// The key.
        key: String,
        /// The allow-list's patterns.
        allowed: Vec<String>,
    },
    /// The requested MAC does not parse (code 7).
    #[error("invalid args {value} for MAC addr: {reason}")]
    MacInvalid {
        /// The value given.
        value: String,
        /// The parser's error.
        reason: String,
    },
    /// A numeric setting is out of range (code 7).
    #[error("invalid {field} {value}")]
    ValueInvalid {
        /// The setting (`mtu`, `txQLen`).
        field: &'static str,
        /// The value given.
        value: i64,
    },
    /// The config has no `prevResult` (code 7).
    #[error("Required prevResult missing")]
    PrevResultMissing,
    /// `CNI_IFNAME` contains a `/` (code 7).
    #[error("Interface name ({ifname}) contains an invalid character /")]
    IfnameInvalid {
        /// `CNI_IFNAME`.
        ifname: String,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::SysctlNotString { .. }
            | Error::SysctlKeyInvalid { .. }
            | Error::SysctlDuplicated
            | Error::AllowlistPatternInvalid { .. }
            | Error::SysctlNotAllowed { .. }
            | Error::MacInvalid { .. }
            | Error::ValueInvalid { .. }
            | Error::PrevResultMissing
            | Error::IfnameInvalid { .. } => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the tuning plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Go's wordings of CHECK's mismatches (promisc has its own).
fn mismatch_text(object: &str, attribute: &str, configured: &str, current: &str) -> String {
    match attribute {
        "promisc" => format!(
            "Error: Tuning link {object} configured promisc is {configured}, current value is {current}"
        ),
        a => format!(
            "Error: Tuning configured {a} of {object} is {configured}, current value is {current}"
        ),
    }
}
