//! The `static` IPAM plugin: addresses, routes and DNS from the
//! configuration, with the Go reference's override order (config
//! `addresses` plus `CNI_ARGS` `IP`/`GATEWAY`, replaced by `args.cni.ips`,
//! replaced by `runtimeConfig.ips`); see [`cni_ipam::static_ipam`].
//! Nothing is allocated, so DEL is a no-op.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::static_ipam::Static;
//!
//! let conf = br#"{"cniVersion": "1.0.0", "name": "n", "type": "macvlan",
//!     "ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24"}]}}"#;
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "c1"), ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"), ("CNI_PATH", "/opt/cni/bin"), ("CNI_ARGS", "IP=10.10.0.7/24"),
//! ]);
//! let out = dispatch(&Static, &env, conf);
//! let result: serde_json::Value = serde_json::from_slice(&out.stdout)?;
//! assert_eq!(result["ips"][1]["address"], "10.10.0.7/24");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use cni_exec::{Plugin, Request};
use cni_ipam::static_ipam::{self, StaticConfig};
use cni_types::CniResult;

mod error;

pub use error::{Error, Result};

/// The `static` plugin. `main` is `cni_exec::run(&Static)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Static;

/// The request's static configuration (config and `CNI_ARGS`).
pub fn load(req: &Request) -> Result<StaticConfig> {
    Ok(StaticConfig::from_network_config(
        &req.config,
        &req.args_raw,
    )?)
}

impl Plugin for Static {
    type Error = Error;

    fn name(&self) -> &str {
        "static"
    }

    /// ADD: the configured addresses, routes and DNS.
    fn add(&self, req: &Request) -> Result<CniResult> {
        Ok(static_ipam::add(&load(req)?))
    }

    /// Nothing was allocated: always succeeds, as Go's.
    fn del(&self, _req: &Request) -> Result<()> {
        Ok(())
    }

    /// CHECK: every configured address found in `prevResult` carries the
    /// configured gateway.
    fn check(&self, req: &Request) -> Result<()> {
        Ok(static_ipam::check_network_config(
            &req.config,
            &req.args_raw,
            &req.ifname,
        )?)
    }
}
