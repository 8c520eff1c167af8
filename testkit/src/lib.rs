//! A conformance kit for CNI plugins, and test fixtures for the cni-rs
//! workspace.
//!
//! * [`conformance`] runs any CNI plugin binary through the requirements
//!   of the CNI spec (VERSION, ADD/CHECK/DEL idempotence, result shapes for
//!   every claimed version, error replies, STATUS and GC) inside network
//!   namespaces it creates and removes itself; the `cni-conformance` binary
//!   is its command line.
//! * `KubeApiServer` (feature `kube-server`, off by default) is a small
//!   Kubernetes API server over HTTPS for multus tests.
//!
//! ```text
//! $ sudo cni-conformance /usr/lib/cni/bridge
//! ok version
//! ok add-check-del-del
//! ...
//! 14 passed, 0 failed
//! ```

pub mod conformance;
mod error;
#[cfg(feature = "kube-server")]
mod kube_server;

pub use error::Error;
#[cfg(feature = "kube-server")]
pub use kube_server::{merge_patch, KubeApiServer, KubeconfigAuth, KubeconfigCa, RecordedRequest};
