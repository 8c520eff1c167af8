//! multus thick mode: a long-lived daemon per node serves the thin
//! plugin's code ([`crate::flow`]) over a unix socket, and a shim
//! plugin forwards the runtime's commands to it (multus-cni
//! `cmd/multus-daemon`, `cmd/multus-shim`, `pkg/server`,
//! `docs/thick-plugin.md`).
//!
//! * [`config`]: the daemon configuration ([`DaemonConfig`], Go's
//!   `ControllerNetConf`), whose multus keys override the shim's.
//! * [`server`]: the socket server (`/cni`, `/delegate`, `/healthz`,
//!   `/readyz`) and the metrics port; [`plugin`]: what a request runs.
//! * [`shim`]: the shim plugin, with an in-process DEL fallback.
//! * [`autoconf`]: `00-multus.conf` generated from the primary CNI config.
//! * [`metrics`]: Prometheus counters and histograms.
//! * [`limit`]: the cap on concurrent CNI requests (`connectionLimit`).
//! * [`chroot`]: delegates run chrooted into `chrootDir`.
//! * [`certs`]: per-node client certificates (CSR, rotation).
//! * [`watch`]: pods and NADs cached by list + watch, GET on a miss.
//! * [`api`], [`http`]: the wire format.
//!
//! ```
//! use cni_multus::thick::{api::CniRequest, DaemonConfig};
//!
//! let c = DaemonConfig::from_slice(br#"{"socketDir": "/tmp/m", "metricsPort": 9091,
//!     "clusterNetwork": "cluster"}"#, "inline".as_ref())?;
//! assert_eq!(c.socket_path().to_str(), Some("/tmp/m/multus.sock"));
//! assert!(c.netconf_overrides.contains_key("clusterNetwork"));
//!
//! let mut r = CniRequest::default();
//! r.env.insert("CNI_COMMAND".into(), "ADD".into());
//! r.config = br#"{"cniVersion":"1.0.0","name":"m","type":"multus-shim"}"#.to_vec();
//! assert_eq!(CniRequest::from_slice(&r.to_vec())?, r);
//! # Ok::<(), cni_multus::Error>(())
//! ```

pub mod api;
pub mod autoconf;
pub mod certs;
pub mod chroot;
pub mod config;
pub mod http;
pub mod limit;
pub mod metrics;
pub mod plugin;
pub mod server;
pub mod shim;
pub mod watch;

pub use config::DaemonConfig;
pub use plugin::DaemonPlugin;
pub use server::{start, start_with, DaemonHandle};
pub use shim::Shim;
