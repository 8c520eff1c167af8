#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The crate
//!
//! The plugins as library modules: each module reads
//! as its plugin's algorithm on top of `cni-exec`, `cni-netns` and
//! `cni-ipam`; `src/bin/<plugin>.rs` is a one-line `main`
//! ([`plugin_main!`]).
//!
//! The shape:
//! - every plugin implements [`cni_exec::Plugin`] with its own error type
//!   (`<plugin>::Error`: its failures, and the crate-level [`Error`] for
//!   what plugins share); [`PluginError`] gives each its CNI code and
//!   reply (one place maps failures to CNI replies); its commands are the
//!   trait's methods;
//! - teardown (DEL, GC) runs every step and reports every failure
//!   ([`Failures`], the first one's code);
//! - the steps interface plugins share (IPAM delegation with undo,
//!   configuring the pod interface from a result, CHECK's comparisons, "the
//!   netns is gone", one undo list for rollback) live in one private module,
//!   `steps`, never under one plugin's folder;
//! - multus is a product of its own, the crate `cni-multus` (its own error
//!   enum); this crate's `multus` cargo feature (off by default) builds its
//!   three binaries: without it no Kubernetes, TLS or YAML code is compiled;
//! - every file a plugin persists goes through one atomic writer
//!   ([`cni_files::atomic`]).

pub mod bandwidth;
pub mod binary;
pub mod bridge;
#[doc(hidden)]
pub mod config_keys;
pub mod dhcp;
pub mod dummy;
mod error;
pub mod firewall;
pub mod flannel;
pub mod host_device;
pub mod host_local;
pub mod install;
pub mod ipvlan;
pub mod loopback;
pub mod macvlan;

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

pub(crate) use error::plugin_error_glue;
pub use error::{Error, Failures, PluginError, Result};
