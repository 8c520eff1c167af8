#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! - [`host_local`]: the `host-local` IPAM plugin's logic: configuration
//!   (`ranges`, legacy `subnet`, `runtimeConfig.ipRanges`, requested IPs),
//!   allocation in Go's exact round-robin order, and ADD/DEL/CHECK/GC/STATUS.
//! - [`store`]: the [`Store`](store::Store) trait and [`DiskStore`](store::DiskStore),
//!   which reads and writes the Go plugin's directory layout
//!   (`<dataDir>/<network>/<ip>`, `last_reserved_ip.<n>`, `lock`) under the
//!   same `flock`, crash-safely (temporary file and `link`, or a pooled
//!   inode and `RENAME_NOREPLACE`; fsync on request), with an owner
//!   index beside it (`<dataDir>/.cni-ipam-index/`) so that ADD, DEL and
//!   CHECK stay around a millisecond with tens of thousands of reservations
//!   (made with a network's first reservation, removed with its last).
//!   The Go plugin and this crate can share a data directory.
//! - [`static_ipam`]: the `static` IPAM plugin's logic.
//! - [`dhcp`]: the DHCP client, lease files and daemon protocol behind the
//!   `dhcp` IPAM plugin.
//!
//! Errors map to CNI codes with [`Error::code`] / [`Error::to_cni_error`].

pub mod allocator;
pub mod dhcp;
pub mod dns;
pub mod error;
pub mod host_local;
mod parse;
pub mod range;
pub mod result;
pub mod static_ipam;
pub mod store;

pub use error::{Error, Result};
