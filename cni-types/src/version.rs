//! Spec versions: parsing, ordering, the supported list, and which commands
//! and fields each version allows.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::Error;

/// A CNI spec version (`major.minor.patch`).
///
/// Parsing follows the Go reference's `version.ParseVersion`: the empty
/// string is `0.1.0`, missing parts are zero (`"1"` is `1.0.0`), and more than
/// three dotted parts is an error. Comparison is numeric, part by part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version {
    /// Major part.
    pub major: u64,
    /// Minor part.
    pub minor: u64,
    /// Patch part.
    pub patch: u64,
}

/// The three wire shapes a result can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResultFamily {
    /// 0.1.0 and 0.2.0: `ip4` / `ip6` blocks.
    V020,
    /// 0.3.0, 0.3.1 and 0.4.0: `ips[]` with `version`, `interfaces[]`.
    V040,
    /// 1.0.0 and 1.1.0: `ips[]` without `version`; interface `mtu`,
    /// `socketPath`, `pciID`.
    V100,
}

impl Version {
    /// Builds a version from its parts.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }
    /// 0.1.0
    pub const V0_1_0: Version = Version::new(0, 1, 0);
    /// 0.2.0
    pub const V0_2_0: Version = Version::new(0, 2, 0);
    /// 0.3.0
    pub const V0_3_0: Version = Version::new(0, 3, 0);
    /// 0.3.1
    pub const V0_3_1: Version = Version::new(0, 3, 1);
    /// 0.4.0
    pub const V0_4_0: Version = Version::new(0, 4, 0);
    /// 1.0.0
    pub const V1_0_0: Version = Version::new(1, 0, 0);
    /// 1.1.0
    pub const V1_1_0: Version = Version::new(1, 1, 0);
    /// The newest spec version this crate implements.
    pub const CURRENT: Version = Version::V1_1_0;
    /// Every spec version this crate implements, oldest first.
    pub const ALL: [Version; 7] = [
        Version::V0_1_0,
        Version::V0_2_0,
        Version::V0_3_0,
        Version::V0_3_1,
        Version::V0_4_0,
        Version::V1_0_0,
        Version::V1_1_0,
    ];

    /// Parses a version string the way the Go reference does.
    pub fn parse(s: &str) -> Result<Version, Error> {
        if s.is_empty() {
            return Ok(Version::V0_1_0);
        }
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() > 3 {
            return Err(Error::InvalidVersion {
                version: s.to_string(),
                reason: "too many parts".into(),
            });
        }
        let mut nums = [0u64; 3];
        for (i, (part, what)) in parts.iter().zip(["major", "minor", "micro"]).enumerate() {
            nums[i] = part.parse::<u64>().map_err(|e| Error::InvalidVersion {
                version: s.to_string(),
                reason: format!("failed to convert {what} version part {part:?}: {e}"),
            })?;
        }
        Ok(Version::new(nums[0], nums[1], nums[2]))
    }

    /// True when this exact version is one of [`Version::ALL`].
    pub fn is_supported(self) -> bool {
        Version::ALL.contains(&self)
    }

    /// The wire shape of results in this version, or `None` for a version
    /// this crate does not know (newer than [`Version::CURRENT`] or in between).
    pub fn result_family(self) -> Option<ResultFamily> {
        match self {
            Version::V0_1_0 | Version::V0_2_0 => Some(ResultFamily::V020),
            Version::V0_3_0 | Version::V0_3_1 | Version::V0_4_0 => Some(ResultFamily::V040),
            Version::V1_0_0 | Version::V1_1_0 => Some(ResultFamily::V100),
            _ => None,
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn supports_check(self) -> bool {
        self >= Version::V0_4_0
    }

    /// DEL receives `prevResult` from 0.4.0 on.
    pub fn supports_prev_result_on_del(self) -> bool {
        self >= Version::V0_4_0
    }

    /// STATUS and GC exist from 1.1.0 on.
    pub fn supports_status_and_gc(self) -> bool {
        self >= Version::V1_1_0
    }

    /// Chaining (`prevResult`) and more than one address per family exist
    /// from 0.3.0 on.
    pub fn supports_chaining(self) -> bool {
        self >= Version::V0_3_0
    }

    /// The VERSION command exists from 0.2.0 on (0.1.0 plugins are assumed to
    /// support only 0.1.0).
    pub fn supports_version_command(self) -> bool {
        self >= Version::V0_2_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Version {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Version::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The version of a network config, by the one rule both ends of the
/// protocol use (Go's `version.ConfigDecoder.Decode`): the `cniVersion` key
/// (matched case-insensitively, an exact match winning), which must be a
/// string when present; absent, `null` or `""` is `"0.1.0"`. The string is
/// returned as written (it is not parsed here).
///
/// ```
/// use cni_types::config_version;
/// assert_eq!(config_version(br#"{"CNIVersion":"1.0.0"}"#).unwrap(), "1.0.0");
/// assert_eq!(config_version(br#"{"cniVersion":""}"#).unwrap(), "0.1.0");
/// assert!(config_version(br#"{"cniVersion":1}"#).is_err());
/// ```
pub fn config_version(config: &[u8]) -> Result<String, Error> {
    let value: Value = serde_json::from_slice(config).map_err(version_decode_error)?;
    match value {
        Value::Object(map) => config_version_in(&map),
        Value::Null => Ok(Version::V0_1_0.to_string()),
        other => Err(version_decode_error(format!(
            "expected an object, got {other}"
        ))),
    }
}

/// [`config_version`] on a decoded config object.
pub fn config_version_in(config: &Map<String, Value>) -> Result<String, Error> {
    let found = config.get("cniVersion").or_else(|| {
        config
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("cniVersion"))
            .map(|(_, v)| v)
    });
    match found {
        None | Some(Value::Null) => Ok(Version::V0_1_0.to_string()),
        Some(Value::String(s)) if s.is_empty() => Ok(Version::V0_1_0.to_string()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(version_decode_error(format!(
            "cniVersion must be a string, got {other}"
        ))),
    }
}

fn version_decode_error(reason: impl std::fmt::Display) -> Error {
    Error::Decode {
        what: "version from network config".into(),
        reason: reason.to_string(),
    }
}

/// Compares two version strings numerically (`a > b`), as Go's
/// `version.GreaterThan`.
pub fn greater_than(a: &str, b: &str) -> Result<bool, Error> {
    Ok(Version::parse(a)?.cmp(&Version::parse(b)?) == Ordering::Greater)
}

/// The reply to the VERSION command: `{cniVersion, supportedVersions}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionReply {
    /// The version of the reply itself. The Go reference always prints its
    /// library version (`1.1.0`) here whatever the request said; so do we.
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    /// The versions the plugin supports, as strings.
    #[serde(rename = "supportedVersions", default)]
    pub supported_versions: Vec<String>,
}

impl VersionReply {
    /// The reply of a plugin supporting `versions`.
    pub fn new(versions: &[Version]) -> Self {
        VersionReply {
            cni_version: Version::CURRENT.to_string(),
            supported_versions: versions.iter().map(Version::to_string).collect(),
        }
    }

    /// Decodes a plugin's VERSION reply with the Go reference's fallbacks
    /// (`pkg/version/plugin.go`): a reply without `supportedVersions` whose
    /// `cniVersion` is 0.2.0 means `[0.1.0, 0.2.0]`; any other reply without
    /// the list is an error.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        let mut reply: VersionReply = serde_json::from_slice(bytes).map_err(|e| Error::Decode {
            what: "VERSION reply".into(),
            reason: e.to_string(),
        })?;
        if reply.supported_versions.is_empty() {
            if reply.cni_version == "0.2.0" {
                reply.supported_versions = vec!["0.1.0".into(), "0.2.0".into()];
            } else {
                return Err(Error::Decode {
                    what: "VERSION reply".into(),
                    reason: format!(
                        "plugin version reply {:?} has no supportedVersions",
                        reply.cni_version
                    ),
                });
            }
        }
        Ok(reply)
    }

    /// The reply assumed for a plugin that does not know the VERSION command
    /// (it answers "unknown CNI_COMMAND: VERSION"): only 0.1.0.
    pub fn legacy() -> Self {
        VersionReply {
            cni_version: "0.1.0".into(),
            supported_versions: vec!["0.1.0".into()],
        }
    }

    /// True when `version` is literally one of the supported strings (the Go
    /// reconciler compares strings, not parsed versions).
    pub fn supports(&self, version: &str) -> bool {
        self.supported_versions.iter().any(|v| v == version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rules() {
        assert_eq!(Version::parse("").unwrap(), Version::V0_1_0);
        assert_eq!(Version::parse("1").unwrap(), Version::V1_0_0);
        assert_eq!(Version::parse("0.3.1").unwrap(), Version::V0_3_1);
        assert_eq!(Version::parse("1.2.3").unwrap(), Version::new(1, 2, 3));
        assert!(Version::parse("1.0.0.0").is_err());
        assert!(Version::parse("1.0.f").is_err());
        assert!(Version::parse("v1").is_err());
        assert_eq!(
            Version::parse("1.0.f").unwrap_err().code(),
            crate::ErrorCode::IncompatibleCniVersion
        );
    }

    #[test]
    fn ordering_is_numeric() {
        assert!(Version::parse("0.10.0").unwrap() > Version::parse("0.4.0").unwrap());
        assert!(greater_than("1.1.0", "1.0.0").unwrap());
        assert!(!greater_than("1.0.0", "1.0.0").unwrap());
    }

    #[test]
    fn gates() {
        assert!(!Version::V0_3_1.supports_check());
        assert!(Version::V0_4_0.supports_check());
        assert!(!Version::V1_0_0.supports_status_and_gc());
        assert!(Version::V1_1_0.supports_status_and_gc());
        assert_eq!(Version::V0_3_0.result_family(), Some(ResultFamily::V040));
        assert_eq!(Version::new(1, 2, 0).result_family(), None);
    }

    #[test]
    fn version_reply() {
        let r = VersionReply::new(&Version::ALL);
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}"#
        );
        let legacy = VersionReply::from_slice(br#"{"cniVersion":"0.2.0"}"#).unwrap();
        assert_eq!(legacy.supported_versions, ["0.1.0", "0.2.0"]);
        assert!(VersionReply::from_slice(br#"{"cniVersion":"0.3.0"}"#).is_err());
        assert!(r.supports("1.0.0"));
        assert!(!r.supports("1.0"));
    }
}
