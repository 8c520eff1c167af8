#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! - [`atomic`]: [`AtomicWrite`], crash-safe replacement of a file.
//! - [`file_lock`]: [`FileLock`], an exclusive `flock(2)` held until
//!   dropped.
//! - [`capped`]: reads bounded in size ([`capped::read_file`]).
//! - [`daemon`]: a daemon's unix socket and its bounded connection threads.
//! - [`metrics`]: Prometheus text exposition and its scrape endpoint.
//!
//! Every failure is an [`Error`], naming the operation and what it was done to.

pub mod atomic;
pub mod capped;
pub mod daemon;
mod error;
pub mod file_lock;
pub mod metrics;

pub use atomic::AtomicWrite;
pub use error::Error;
pub use file_lock::FileLock;
