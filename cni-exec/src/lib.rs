//! Both ends of the CNI exec protocol.
//!
//! **Plugin side** (the Go reference's `pkg/skel`): implement [`Plugin`],
//! and a binary's `main` is `cni_exec::run(&MyPlugin)`. [`dispatch`] is the
//! whole protocol as a pure function (environment and stdin in, stdout and
//! exit code out), so it is tested without processes and runtimes can call
//! plugins in-process. Plugins delegate (IPAM) with [`delegate_add`] and
//! friends; [`run_with_exec`] and [`same_build::SameBuildExec`] let a
//! plugin run delegates of its own build in-process.
//!
//! **Runtime side** (`libcni` + `pkg/invoke`): [`CniConfig`] runs network
//! lists through an [`Exec`] — [`ProcessExec`] (fork/exec with timeout) or
//! [`InProcessExec`] (registered [`Plugin`] values) — keeps libcni's result
//! cache on disk, and [`conf`] loads configs from a directory with libcni's
//! rules. The `cnitool` binary is upstream cnitool on top of these.
//!
//! # Example
//!
//! A plugin, driven through [`dispatch`] and then through the runtime side
//! in-process:
//!
//! ```
//! use std::sync::Arc;
//! use cni_exec::{dispatch, CniConfig, Env, InProcessExec, Plugin, Request, RuntimeConf};
//! use cni_types::{CniError, CniResult, IpConfig, NetworkConfigList};
//!
//! struct Fixed;
//! impl Plugin for Fixed {
//!     fn add(&self, _req: &Request) -> Result<CniResult, CniError> {
//!         let mut r = CniResult::default();
//!         r.ips.push(IpConfig::new("10.1.0.5/24".parse().unwrap()));
//!         Ok(r)
//!     }
//!     fn del(&self, _req: &Request) -> Result<(), CniError> {
//!         Ok(())
//!     }
//! }
//!
//! // The protocol in memory.
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let out = dispatch(&Fixed, &env, br#"{"cniVersion":"1.0.0","name":"net","type":"fixed"}"#);
//! assert_eq!(out.exit_code, 0);
//! assert!(String::from_utf8(out.stdout).unwrap().contains("10.1.0.5/24"));
//!
//! // A runtime embedding the plugin: no fork/exec. (CNI_PATH is still
//! // passed: the protocol requires it, and delegates are found there.)
//! let exec = InProcessExec::builder().register("fixed", Arc::new(Fixed)).build();
//! let cache = std::env::temp_dir().join(format!("cni-exec-doc-{}", std::process::id()));
//! let cni = CniConfig::new(vec!["/opt/cni/bin".into()], Arc::new(exec)).with_cache_dir(&cache);
//! let list = NetworkConfigList::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"fixed"}]}"#,
//! )?;
//! let rt = RuntimeConf {
//!     container_id: "c1".into(),
//!     netns: "/run/netns/c1".into(),
//!     ifname: "eth0".into(),
//!     ..Default::default()
//! };
//! let added = cni.add_network_list(&list, &rt)?;
//! assert_eq!(added.result.ips[0].address.to_string(), "10.1.0.5/24");
//! cni.del_network_list(&list, &rt)?;
//! # std::fs::remove_dir_all(&cache).ok();
//! # Ok::<(), cni_exec::Error>(())
//! ```

pub mod cache;
pub mod conf;
mod error;
pub mod invoke;
pub mod libcni;
pub mod logging;
mod plugin;
pub mod same_build;
pub mod skel;

pub use cache::{NetworkAttachment, ResultCache, RuntimeConf};
pub use error::Error;
pub use invoke::{
    delegate_add, delegate_check, delegate_del, delegate_gc, delegate_status, find_in_path, Exec,
    InProcessExec, PluginEnv, ProcessExec, StderrSink,
};
pub use libcni::{CniConfig, VersionedResult};
pub use plugin::{Command, Plugin, Request};
pub use skel::{
    dispatch, run, run_with_exec, Env, NetnsGuard, NoNetnsGuard, Output, OwnNetnsGuard,
};
