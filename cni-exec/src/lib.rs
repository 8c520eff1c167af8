//! Both ends of the CNI exec protocol, and nothing else: how a plugin
//! binary is run, and how a runtime runs one.
//!
//! **Plugin side** (the Go reference's `pkg/skel`): implement [`Plugin`],
//! and a binary's `main` is `cni_exec::run(&MyPlugin)`. [`dispatch`] is the
//! whole protocol as a pure function (environment and stdin in, stdout and
//! exit code out): it starts no process unless you hand it an [`Exec`] that
//! does. A plugin's unit test builds a [`Request`] with
//! [`Request::builder`] and calls `add` directly. Plugins delegate (IPAM)
//! with [`delegate_add`] and friends through the request's [`Exec`].
//!
//! **Runtime side** (`libcni` + `pkg/invoke`): [`CniConfig`] runs network
//! lists through an [`Exec`] — [`ProcessExec`] (fork/exec with timeout) or
//! [`InProcessExec`] (registered [`Plugin`] values, no fork) — keeps
//! libcni's result cache on disk, and [`conf`] loads configs from a
//! directory with libcni's rules. `cnitool` is upstream cnitool on top.
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
//! # Example
//!
//! ```
//! use cni_exec::{dispatch, Env, Plugin, Request};
//! use cni_types::{CniError, CniResult, IpConfig};
//!
//! struct Fixed;
//! impl Plugin for Fixed {
//!     type Error = CniError;
//!     fn name(&self) -> &str { "fixed" }
//!     fn add(&self, _req: &Request) -> Result<CniResult, CniError> {
//!         let mut r = CniResult::default();
//!         r.ips.push(IpConfig::new("10.1.0.5/24".parse().unwrap()));
//!         Ok(r)
//!     }
//!     fn del(&self, _req: &Request) -> Result<(), CniError> { Ok(()) }
//! }
//!
//! let env = Env::new([("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/c1"), ("CNI_IFNAME", "eth0"), ("CNI_PATH", "/opt/cni/bin")]);
//! let out = dispatch(&Fixed, &env, br#"{"cniVersion":"1.0.0","name":"net","type":"fixed"}"#);
//! assert!(out.exit_code == 0 && String::from_utf8(out.stdout).unwrap().contains("10.1.0.5/24"));
//! ```
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
