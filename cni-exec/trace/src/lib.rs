#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! [`context`] (W3C trace context in the environment), [`config`] (the
//! exporter's configuration from OpenTelemetry's variables and a config
//! key), [`proto`] (the OTLP messages we send, their encoder and decoder),
//! [`export`] (one bounded HTTP POST), the recording layer ([`layer`],
//! [`set_remote_parent`], [`current_context`]), and [`receiver`] (a tiny
//! receiver and a span tree printer, for a human view).

pub mod config;
pub mod context;
mod error;
pub mod export;
mod layer;
pub mod proto;
pub mod receiver;

pub use config::{Endpoint, ExportConfig, Overrides};
pub use context::TraceContext;
pub use error::Error;
pub use layer::{
    context_of, current_context, default_filter, layer, set_remote_parent, Exporter, OtlpLayer,
    MAX_BUFFERED_SPANS, MAX_EVENTS_PER_SPAN, SCOPE_NAME,
};
