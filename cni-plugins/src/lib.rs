//! The CNI plugins of this workspace as library modules: each module reads
//! as its plugin's algorithm on top of `cni-exec`, `cni-netns` and
//! `cni-ipam`; `src/bin/<plugin>.rs` is a one-line `main`.

pub mod bandwidth;
pub mod binary;
pub mod bridge;
#[doc(hidden)]
pub mod config_keys;
mod error;
pub mod flannel;
pub mod host_device;
pub mod host_local;
pub mod install;
pub mod ipvlan;
pub mod loopback;
pub mod macvlan;
pub mod multus;
pub mod portmap;
pub mod ptp;
pub mod static_ipam;
pub mod tuning;

pub use error::{Error, Result};
