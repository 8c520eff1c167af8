#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
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
pub mod random;
pub mod result;
pub mod trace;
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
