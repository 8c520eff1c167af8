//! The passthru plugin: the no-op Multus puts first in an auxiliary chain
//! (`auxiliaryCNIChainName`), so that the plugins of the chain's folder
//! have a valid chain to be appended to — multus-cni's
//! `cmd/passthru-cni/main.go` (Multus v4.2.1+).
//!
//! ADD passes a `prevResult` through unchanged, and prints an empty result
//! in the config's version when there is none (multus-cni's passthru
//! always prints an empty result: it is meant to be first, where both
//! agree; passing the previous result on keeps a chain whole wherever
//! passthru sits). DEL, CHECK, STATUS and GC succeed without doing
//! anything. It speaks 0.3.0 to 1.1.0, as Go's.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::passthru::Passthru;
//!
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/x"),
//!     ("CNI_IFNAME", "net1"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let out = dispatch(&Passthru, &env, br#"{"cniVersion":"1.0.0","name":"aux","type":"passthru"}"#);
//! assert_eq!(out.exit_code, 0);
//! let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
//! assert_eq!(v["cniVersion"], "1.0.0");
//! assert!(v.get("interfaces").is_none() && v.get("ips").is_none());
//! ```

use cni_exec::{Plugin, Request};
use cni_types::{CniResult, Version};

mod error;

pub use error::{Error, Result};

/// The passthru plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Passthru;

impl Plugin for Passthru {
    type Error = Error;

    fn name(&self) -> &str {
        "passthru"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        Ok(req.config.prev_result()?.unwrap_or_default())
    }

    fn del(&self, _req: &Request) -> Result<()> {
        Ok(())
    }

    fn supported_versions(&self) -> Vec<Version> {
        Version::ALL
            .into_iter()
            .filter(|v| *v >= Version::V0_3_0)
            .collect()
    }

    fn about(&self) -> String {
        "Passthrough CNI Plugin v1.0".into()
    }
}
