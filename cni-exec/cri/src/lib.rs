#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! - [`grpc`]: [`Channel`](grpc::Channel), blocking unary gRPC over a unix
//!   socket, bounded in time and answer size.
//! - [`v1`]: the CRI `runtime.v1` messages, generated from
//!   `proto/runtime_v1.proto`.
//! - [`RuntimeClient`]: the CRI calls on a runtime's socket
//!   ([`API_VERSION`], [`DEFAULT_TIMEOUT`], the condition names
//!   [`RUNTIME_READY`] and [`NETWORK_READY`]).
//!
//! Every failure is an [`Error`].

mod client;
mod error;
pub mod grpc;

/// The CRI `runtime.v1` messages, generated from `proto/runtime_v1.proto`
/// (see the [crate] documentation). Enum fields are `i32` (prost's
/// open enums): compare with `Enum::Variant as i32`.
#[allow(clippy::all, clippy::pedantic)]
pub mod v1 {
    include!("runtime.v1.rs");
}

pub use client::{RuntimeClient, API_VERSION, DEFAULT_TIMEOUT, NETWORK_READY, RUNTIME_READY};
pub use error::Error;
