//! The Container Network Interface (CNI) spec as data: versions, network
//! configurations and conflists, results in every wire version with
//! conversion between them, error replies, `CNI_ARGS`, and name validation.
//!
//! This crate is pure: no I/O, no environment, no processes. It covers spec
//! versions 0.1.0 through 1.1.0 and is wire-compatible with the Go reference
//! (`containernetworking/cni`): a result printed here parses in Go's
//! `types/create` and the other way round.
//!
//! # Example
//!
//! Read a plugin's config, then print a result in the config's version:
//!
//! ```
//! use cni_types::{CniResult, IpConfig, NetworkConfig, Route};
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"0.4.0","name":"pods","type":"bridge","ipam":{"type":"host-local"}}"#,
//! )?;
//! conf.validate_name()?;
//! assert_eq!(conf.ipam_type(), "host-local");
//!
//! let mut result = CniResult::default();
//! let mut ip = IpConfig::new("10.22.0.5/16".parse().unwrap());
//! ip.gateway = Some("10.22.0.1".parse().unwrap());
//! result.ips.push(ip);
//! result.routes.push(Route::new("0.0.0.0/0".parse().unwrap(), None));
//!
//! let json = result.to_value(conf.version()?)?;
//! assert_eq!(json["ips"][0]["version"], "4"); // 0.4.0 carries ips[].version
//! assert_eq!(json["ips"][0]["address"], "10.22.0.5/16"); // host bits kept
//! # Ok::<(), cni_types::Error>(())
//! ```
//!
//! # Limits
//!
//! A result read from JSON (a config's `prevResult`, a plugin's answer) may
//! hold at most 1024 interfaces, 4096 addresses, 4096 routes and 1024 entries
//! in each `dns` list, and a network configuration at most 262144 JSON
//! values; the limits are counted while the JSON is parsed, so that memory
//! stays bounded by them rather than by the input's size (see [`limits`]).
//!
//! # Case of JSON keys
//!
//! Go's `encoding/json` matches keys to fields case-insensitively (an exact
//! match wins), and configs written for the Go plugins sometimes rely on it
//! (`"RuntimeConfig"`). We match the spec-defined keys of network configs,
//! conflists and `runtimeConfig` the same way (see
//! [`json::canonicalize_keys`]); everything we print uses the spec's exact
//! spelling. A plugin's own keys decoded with [`NetworkConfig::parse_as`] are
//! matched exactly, as serde does.

pub mod args;
pub mod config;
pub mod error;
pub mod go_duration;
pub mod json;
pub mod keys;
pub mod limits;
pub mod result;
pub mod validate;
pub mod version;

pub use args::CniArgs;
pub use config::{
    Bandwidth, GcAttachment, IpRange, NetworkConfig, NetworkConfigBuilder, NetworkConfigList,
    PortMapping, RuntimeConfig, LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY,
};
pub use error::{CniError, Error, ErrorCode};
pub use result::{CniResult, Dns, Interface, IpConfig, Route, VersionedResult};
pub use version::{config_version, config_version_in, ResultFamily, Version, VersionReply};
