//! A conformance kit for CNI plugins, and test fixtures for the cni-rs
//! workspace.
//!
//! * [`conformance`] runs any CNI plugin binary through the requirements
//!   of the CNI spec (VERSION, ADD/CHECK/DEL idempotence, result shapes for
//!   every claimed version, error replies, STATUS and GC) inside network
//!   namespaces it creates and removes itself; the `cni-conformance` binary
//!   is its command line.
//! * [`premise`]: one rule for tests that need root or a kernel feature
//!   (fail, or `SKIP` under `CNI_TEST_ALLOW_SKIP=1`).
//! * [`matrix`]: the configuration matrix of real-world nodes (IP stacks x
//!   plugin chains) as conflists, shared by the end-to-end benchmark and
//!   the leak census test.
//! * [`otlp`]: an OTLP/HTTP trace receiver decoding with the official
//!   OpenTelemetry protobuf package (Python), for the trace tests.
//! * `KubeApiServer` (feature `kube-server`, off by default) is a small
//!   Kubernetes API server over HTTPS for multus tests; `multus_node`
//!   (same feature, root) a multus node in real namespaces with it.
//! * `containerd` (feature `containerd`, off by default): a private
//!   containerd with a locally built sandbox image, for CRI tests and
//!   benchmarks.
//!
//! ```text
//! $ sudo cni-conformance /usr/lib/cni/bridge
//! ok version
//! ok add-check-del-del
//! ...
//! 14 passed, 0 failed
//! ```
//!
//! From a Rust test (as root; [`conformance::run`] makes its own
//! namespaces), with the config the kit builds for the plugin's type:
//!
//! ```
//! use cni_testkit::conformance::{self, Options, PluginKind, Role};
//!
//! let plugin = std::path::Path::new("/usr/lib/cni/bridge");
//! assert_eq!(PluginKind::from_binary(plugin).role(), Role::Interface);
//! if nix::unistd::geteuid().is_root() && plugin.exists() {
//!     let report = conformance::run(&Options::new(plugin))?;
//!     assert!(report.case("add-check-del-del").is_some_and(|c| c.passed()));
//! }
//! # Ok::<(), cni_testkit::Error>(())
//! ```

pub mod conformance;
#[cfg(feature = "containerd")]
pub mod containerd;
mod error;
#[cfg(feature = "kube-server")]
mod kube_server;
pub mod matrix;
#[cfg(feature = "kube-server")]
pub mod multus_node;
pub mod otlp;
pub mod premise;

pub use error::Error;
#[cfg(feature = "kube-server")]
pub use kube_server::{merge_patch, KubeApiServer, KubeconfigAuth, KubeconfigCa, RecordedRequest};
