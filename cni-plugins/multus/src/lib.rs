#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # The modules
//!
//! The pieces, in the order ADD uses them:
//! * [`NetConf`]: the configuration, defaults and validation ([`conf`]).
//! * [`k8s`]: the [`k8s::KubeClient`] trait, kubeconfig / in-cluster
//!   config, and a blocking HTTPS client ([`k8s::HttpKubeClient`]).
//! * [`selection`]: the pod's network selection annotations.
//! * [`lookup`]: cluster network and default networks (NAD, file in
//!   `confDir`, directory, path) and NAD to delegate conversion.
//! * [`delegate`]: one [`Delegate`] per attachment, interface names,
//!   `default-route` rules; [`runtime`]: what each delegate runs with.
//! * [`cache`]: the delegate list saved for DEL (Go-compatible, atomic).
//! * [`flow`]: ADD, DEL, CHECK, STATUS, GC over a [`DelegateExec`];
//!   [`LibcniDelegates`] is the one on cni-exec's `CniConfig` (so an
//!   embedding runtime's in-process registry carries over to delegates).
//! * [`status`]: the `network-status` annotation; [`podnet`]: interface
//!   checks and default routes in the pod's namespace.
//! * [`devices`]: device IDs for NADs naming a `resourceName` (kubelet's
//!   [`podresources`] API, its checkpoint, DRA) and device-info files.
//! * [`events`]: the pod's Kubernetes events (`AddedInterface`,
//!   `NoNetworkFound`), as Go multus emits them.
//! * [`Multus`]: the `cni_exec::Plugin` the `multus` binary runs;
//!   [`logging`]: its log lines, sinks and rotation, as Multus's.
//!

pub mod cache;
pub mod capabilities;
pub mod conf;
pub mod delegate;
pub mod devices;
mod error;
pub mod events;
pub mod flow;
pub mod invoke;
pub mod k8s;
pub mod logging;
pub mod lookup;
mod plugin;
pub mod podnet;
pub mod podresources;
pub mod rotate;
pub mod runtime;
pub mod selection;
pub mod status;
pub mod thick;

pub use conf::NetConf;
pub use delegate::Delegate;
pub use error::{Error, Result};
pub use flow::{cmd_add, cmd_check, cmd_del, cmd_gc, cmd_status, DelegateExec};
pub use invoke::LibcniDelegates;
pub use plugin::{kube_client, Multus};
pub use runtime::{DelegateRuntime, PodRequest};

/// Every key multus's configurations accept, as dotted paths, with their
/// JSON kinds where serde knows them: what its reference page
/// (`docs/plugins/multus.md`) must document. multus parses its `NetConf`
/// from a JSON object against its own key list (the one Go's
/// case-insensitive matching is emulated with), and its nested objects
/// with serde; the thick daemon adds its own keys. Capability objects
/// under `runtimeConfig` are documented by name, not field by field.
#[doc(hidden)]
pub fn config_keys() -> Vec<cni_types::keys::KeyShape> {
    use cni_types::keys::accepted_key_shapes_at;
    let untyped = conf::KEYS
        .iter()
        .chain(thick::config::DAEMON_KEYS)
        .chain(thick::config::PRIMARY_KEYS);
    let mut keys: Vec<_> = untyped.map(|k| (k.to_string(), Vec::new())).collect();
    keys.extend(accepted_key_shapes_at::<conf::LogOptions>("logOptions"));
    keys.extend(
        accepted_key_shapes_at::<capabilities::RuntimeConfig>("runtimeConfig")
            .into_iter()
            .filter(|(k, _)| k.matches('.').count() == 1),
    );
    keys
}
