#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! - [`collector`]: the decision ([`collector::plan`], pure) and
//!   [`Collector`], which observes the node and carries a plan out; what it
//!   cannot tell is a refusal ([`Error::CollectRefused`]).
//! - [`CriSandboxes`]: the [`SandboxLister`] of a CRI runtime, through
//!   [`cni_cri::RuntimeClient`].
//! - [`cli`]: `cni-gc`'s command line ([`cli::parse_args`]) and one pass
//!   ([`cli::run_pass`]).
//! - [`metrics`]: the passes' Prometheus metrics, served or written for
//!   node_exporter's textfile collector.

pub mod cli;
pub mod collector;
mod cri;
mod error;
pub mod metrics;

pub use collector::{Collector, SandboxLister};
pub use cri::CriSandboxes;
pub use error::{Error, Refusal};
