//! Errors: the crate's own error enum, the well-known CNI error codes, and
//! the error reply a plugin prints.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A CNI error code: the well-known ones of the spec (and the two the Go
/// reference adds, 8 and 999), plus plugin-specific codes (100 and up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// 0: unknown error.
    Unknown,
    /// 1: incompatible CNI version.
    IncompatibleCniVersion,
    /// 2: unsupported field in the network configuration; the message names
    /// the key and value.
    UnsupportedField,
    /// 3: container unknown or does not exist; the runtime need not DEL.
    UnknownContainer,
    /// 4: invalid or missing environment variables; the message names them.
    InvalidEnvironmentVariables,
    /// 5: I/O failure (for example reading stdin).
    IoFailure,
    /// 6: failed to decode content (bad JSON).
    DecodingFailure,
    /// 7: invalid network config.
    InvalidNetworkConfig,
    /// 8: invalid network namespace (Go reference only, not in the spec table).
    InvalidNetns,
    /// 11: try again later (transient).
    TryAgainLater,
    /// 50: STATUS: the plugin cannot service ADD requests.
    PluginNotAvailable,
    /// 51: STATUS: the plugin cannot service ADD requests and existing
    /// containers may have limited connectivity.
    LimitedConnectivity,
    /// 999: internal error (Go reference: any non-CNI error a plugin returns).
    Internal,
    /// Any other code (plugin-specific codes are 100 and up).
    Other(u32),
}

impl ErrorCode {
    /// The numeric code.
    pub fn as_u32(self) -> u32 {
        match self {
            ErrorCode::Unknown => 0,
            ErrorCode::IncompatibleCniVersion => 1,
            ErrorCode::UnsupportedField => 2,
            ErrorCode::UnknownContainer => 3,
            ErrorCode::InvalidEnvironmentVariables => 4,
            ErrorCode::IoFailure => 5,
            ErrorCode::DecodingFailure => 6,
            ErrorCode::InvalidNetworkConfig => 7,
            ErrorCode::InvalidNetns => 8,
            ErrorCode::TryAgainLater => 11,
            ErrorCode::PluginNotAvailable => 50,
            ErrorCode::LimitedConnectivity => 51,
            ErrorCode::Internal => 999,
            ErrorCode::Other(n) => n,
        }
    }

    /// The code for a number.
    pub fn from_u32(n: u32) -> Self {
        match n {
            0 => ErrorCode::Unknown,
            1 => ErrorCode::IncompatibleCniVersion,
            2 => ErrorCode::UnsupportedField,
            3 => ErrorCode::UnknownContainer,
            4 => ErrorCode::InvalidEnvironmentVariables,
            5 => ErrorCode::IoFailure,
            6 => ErrorCode::DecodingFailure,
            7 => ErrorCode::InvalidNetworkConfig,
            8 => ErrorCode::InvalidNetns,
            11 => ErrorCode::TryAgainLater,
            50 => ErrorCode::PluginNotAvailable,
            51 => ErrorCode::LimitedConnectivity,
            999 => ErrorCode::Internal,
            n => ErrorCode::Other(n),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_u32())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.as_u32())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ErrorCode::from_u32(u32::deserialize(d)?))
    }
}

/// The error reply of the protocol: what a plugin prints on stdout (exit 1)
/// when a command fails.
///
/// The spec's shape is `{cniVersion, code, msg, details}`. The Go reference's
/// `types.Error` has no `cniVersion` and omits empty `details`; a Go runtime
/// ignores the extra key, so we print `cniVersion` when we know it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    /// The config's `cniVersion`, when known.
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cni_version: Option<String>,
    /// The error code.
    #[serde(default = "unknown_code")]
    pub code: ErrorCode,
    /// A short message.
    #[serde(default)]
    pub msg: String,
    /// Longer details (omitted when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

fn unknown_code() -> ErrorCode {
    ErrorCode::Unknown
}

impl CniError {
    /// An error reply with a code, message and details.
    pub fn new(code: ErrorCode, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            cni_version: None,
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// Code 999 with the message, as the Go skel wraps non-CNI errors.
    pub fn internal(msg: impl Into<String>) -> Self {
        CniError::new(ErrorCode::Internal, msg, "")
    }

    /// Code 7 (invalid network config).
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        CniError::new(ErrorCode::InvalidNetworkConfig, msg, "")
    }

    /// Sets the `cniVersion` the reply carries.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.cni_version = Some(version.into());
        self
    }

    /// The reply as compact JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing this struct cannot fail: only strings and integers.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

impl std::error::Error for CniError {}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        e.to_cni_error()
    }
}

/// The errors of this crate: bad input found while parsing or converting spec
/// data. Each maps to a CNI error code with [`Error::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A version string does not parse.
    #[error("invalid version {version:?}: {reason}")]
    InvalidVersion {
        /// The string given.
        version: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A result version this crate cannot read or write.
    #[error("unsupported CNI result version {0:?}")]
    UnsupportedResultVersion(String),
    /// A `prevResult` whose own `cniVersion` is not one of the result
    /// shape of the config's version (Go's `types100.NewResult` and
    /// friends refuse it too): code 1.
    #[error("could not parse prevResult: result type supports {supported:?} but unmarshalled CNIVersion is {found:?}")]
    PrevResultVersion {
        /// The prevResult's `cniVersion`.
        found: String,
        /// The versions of the config version's result shape.
        supported: Vec<String>,
    },
    /// JSON that does not decode into the expected shape.
    #[error("failed to decode {what}: {reason}")]
    Decode {
        /// What was being decoded (e.g. "network configuration").
        what: String,
        /// The decoder's message.
        reason: String,
    },
    /// A result (a config's `prevResult`, a plugin's answer) holds more than
    /// a limit of [`crate::limits`] allows (code 7); reading stopped there.
    #[error("{path}: more than {limit} {what} (the limit for a result)")]
    ResultTooLarge {
        /// Where, as a path (`prevResult.interfaces`).
        path: String,
        /// The limit passed.
        limit: usize,
        /// What was counted (`"entries"`, `"JSON values"`).
        what: &'static str,
    },
    /// A network configuration (a plugin's stdin) holds more JSON values
    /// than [`crate::limits::MAX_CONFIG_VALUES`] (code 7); reading stopped
    /// there.
    #[error(
        "network configuration: more than {limit} JSON values (the limit for a configuration)"
    )]
    ConfigTooLarge {
        /// The limit passed.
        limit: usize,
    },
    /// A network configuration that decodes but is invalid.
    #[error("{0}")]
    InvalidConfig(String),
    /// A spec-defined key holding a value of the wrong JSON type (code 7).
    #[error("invalid {key}: {reason}")]
    KeyType {
        /// The key, as a path (`ipam.type`, `runtimeConfig.portMappings[0]`).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A result cannot be converted to the requested version.
    #[error("cannot convert result to version {version}: {reason}")]
    Convert {
        /// The target version.
        version: String,
        /// Why (e.g. "no valid IP addresses").
        reason: String,
    },
    /// `CNI_ARGS` does not parse, or names an unknown key.
    #[error("ARGS: {0}")]
    Args(String),
    /// A plugin-specific key was set with the name of a spec-defined key
    /// (code 7): set the typed field instead.
    #[error("set plugin-specific key {key:?}: it is a spec-defined key, set its typed field")]
    SpecKey {
        /// The key given.
        key: String,
    },
    /// A name (network, container id, interface) fails validation.
    #[error("{msg}")]
    InvalidName {
        /// The error code the Go reference uses for this rule.
        code: ErrorCode,
        /// The message (the reference's wording).
        msg: String,
        /// The offending value or the rule.
        details: String,
    },
}

impl Error {
    /// The CNI error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidVersion { .. }
            | Error::UnsupportedResultVersion(_)
            | Error::PrevResultVersion { .. } => ErrorCode::IncompatibleCniVersion,
            Error::Decode { .. } => ErrorCode::DecodingFailure,
            Error::InvalidConfig(_)
            | Error::SpecKey { .. }
            | Error::KeyType { .. }
            | Error::ResultTooLarge { .. }
            | Error::ConfigTooLarge { .. } => ErrorCode::InvalidNetworkConfig,
            Error::Convert { .. } => ErrorCode::IncompatibleCniVersion,
            Error::Args(_) => ErrorCode::InvalidEnvironmentVariables,
            Error::InvalidName { code, .. } => *code,
        }
    }

    /// The error reply for this error.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Error::InvalidName { code, msg, details } => CniError::new(*code, msg, details),
            other => CniError::new(other.code(), other.to_string(), ""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 50, 51, 999, 100, 123] {
            assert_eq!(ErrorCode::from_u32(n).as_u32(), n);
        }
    }

    #[test]
    fn reply_json() {
        let e = CniError::new(ErrorCode::InvalidNetworkConfig, "Invalid Configuration", "")
            .with_version("1.1.0");
        assert_eq!(
            String::from_utf8(e.to_json()).unwrap(),
            r#"{"cniVersion":"1.1.0","code":7,"msg":"Invalid Configuration"}"#
        );
        let parsed: CniError =
            serde_json::from_slice(br#"{"code":7,"msg":"x","details":"d"}"#).unwrap();
        assert_eq!(parsed.code, ErrorCode::InvalidNetworkConfig);
        assert_eq!(parsed.details, "d");
    }
}
