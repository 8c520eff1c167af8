//! The CNI plugins of this workspace as library modules: each module reads
//! as its plugin's algorithm on top of `cni-exec`, `cni-netns` and
//! `cni-ipam`; `src/bin/<plugin>.rs` is a one-line `main`.

pub mod bandwidth;
pub mod binary;
pub mod bridge;
pub mod dhcp;
pub mod dummy;
mod error;
pub mod firewall;
pub mod flannel;
mod go_duration;
pub mod host_device;
pub mod host_local;
pub mod ipvlan;
pub mod loopback;
pub mod macvlan;
#[cfg(feature = "multus")]
pub mod multus;
pub mod passthru;
pub mod portmap;
pub mod ptp;
pub mod sbr;
pub mod static_ipam;
mod steps;
pub mod tap;
pub mod tuning;
pub mod vlan;
pub mod vrf;

pub use error::{Error, Result};
