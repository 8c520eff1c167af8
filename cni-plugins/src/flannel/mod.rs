//! The flannel meta-plugin: renders a delegate config (bridge by default)
//! from its own config and flanneld's `subnet.env`, saves it, and delegates.
//!
//! [`Flannel`] is the plugin; [`delegate::render`] and [`subnet_env`] are
//! its pure parts. Saved delegate configs live in `dataDir` as
//! `<containerID>@<ifname>` ([`saved_config_path`]), plus the reference's
//! `<containerID>` ([`legacy_config_path`]) for a Go flannel's DEL.

pub mod delegate;
mod error;
mod plugin;
pub mod subnet_env;

pub use error::{Error, Result};
pub use plugin::{legacy_config_path, saved_config_path, Flannel};

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Default location of flanneld's subnet file.
pub const DEFAULT_SUBNET_FILE: &str = "/run/flannel/subnet.env";
/// Default directory of the saved delegate configs.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/flannel";

/// flannel's own configuration.
#[derive(Clone, Debug, Deserialize)]
pub struct FlannelConf {
    /// `cniVersion`.
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    /// The network name (becomes the delegate's name).
    #[serde(default)]
    pub name: String,
    /// Base IPAM section for the delegate.
    #[serde(default)]
    pub ipam: Option<Map<String, Value>>,
    /// `subnetFile`.
    #[serde(rename = "subnetFile", default = "default_subnet_file")]
    pub subnet_file: PathBuf,
    /// `dataDir`.
    #[serde(rename = "dataDir", default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// `delegate`: keys merged into the rendered delegate config.
    #[serde(default)]
    pub delegate: Option<Map<String, Value>>,
    /// `runtimeConfig`, passed on to the delegate.
    #[serde(rename = "runtimeConfig", default)]
    pub runtime_config: Option<Map<String, Value>>,
}

fn default_subnet_file() -> PathBuf {
    PathBuf::from(DEFAULT_SUBNET_FILE)
}

fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}
