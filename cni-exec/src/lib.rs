#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! The plugin side is [`Plugin`] and [`Request`] ([`Request::builder`] for
//! a plugin's unit tests), [`dispatch`] and [`run`]; delegation is
//! [`delegate_add`] and friends through the request's [`Exec`]. The runtime
//! side is [`CniConfig`] over an [`Exec`] ([`ProcessExec`],
//! [`InProcessExec`]), with [`conf`] for config directories.
//!
//! Modules, leaf first: [`exec`] (the executor vocabulary: [`Command`],
//! [`PluginEnv`], [`Exec`]), `plugin` ([`Request`], [`Plugin`]), [`skel`]
//! (pure [`dispatch`]), [`process`] ([`run`], [`ProcessExec`]), [`logging`]
//! (a plugin's log setup from its config and environment), [`invoke`]
//! (in-process executor, delegation, result decoding), [`same_build`]
//! (delegation without a process to a plugin of the same build),
//! [`cache`] (libcni's result cache), [`conf`] (config loading),
//! [`libcni`].
//!
//! What is not the exec protocol lives in crates of its own: the atomic
//! writer, file lock, capped reads and daemon sockets in `cni-files` (this
//! crate writes its cache and reads configs and stdin with them); gRPC and
//! the CRI client in `cni-cri`; the collector of leaked attachments in
//! `cni-gc`.
//!
//! A runtime embedding plugins without fork/exec: see [`InProcessExec`].

pub mod cache;
pub mod conf;
mod error;
pub mod exec;
pub mod invoke;
pub mod libcni;
pub mod logging;
mod plugin;
pub mod process;
pub mod same_build;
pub mod skel;

pub use cache::{CachedAttachment, ResultCache, RuntimeConf};
/// The W3C trace context passed to plugins (from `cni-trace`).
pub use cni_trace::TraceContext;
/// A result with the version it is written in (moved to `cni-types`).
pub use cni_types::VersionedResult;
pub use error::Error;
pub use exec::{Command, Exec, NoExec, PluginEnv};
pub use invoke::{
    delegate_add, delegate_check, delegate_del, delegate_gc, delegate_status, InProcessExec,
};
pub use libcni::CniConfig;
pub use plugin::{DynPlugin, Plugin, Request, RequestBuilder};
pub use process::{find_in_path, run, run_with_exec, ProcessExec, StderrSink};
pub use skel::{dispatch, Env, NetnsGuard, NoNetnsGuard, Output, OwnNetnsGuard};
