//! The loopback plugin (Go's `plugins/main/loopback/loopback.go`): sets
//! `lo` up in the pod, whatever `CNI_IFNAME` says. DEL sets it down and
//! succeeds when the namespace is already gone.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::loopback::Loopback;
//!
//! // DEL of a namespace that is already gone succeeds.
//! let env = Env::new([
//!     ("CNI_COMMAND", "DEL"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/no-such-namespace-here"),
//!     ("CNI_IFNAME", "eth0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let out = dispatch(&Loopback, &env, br#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#);
//! assert_eq!(out.exit_code, 0);
//! ```

use cni_exec::{Plugin, Request};
use cni_netns::{AddressFamilyFilter, Handle, Netns};
use cni_types::{CniResult, Interface, IpConfig};

use crate::{Error, Result};

const LO: &str = "lo";

/// The loopback plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Loopback;

impl Plugin for Loopback {
    type Error = crate::Error;

    fn name(&self) -> &str {
        "loopback"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        // Parsed first, as Go: a bad prevResult fails before any change.
        let prev = req.config.prev_result()?;
        let pod = Handle::in_netns(&Netns::open(&req.netns)?)?;
        let lo = pod.link_by_name(LO)?;
        pod.set_up(lo.index)?;
        let mut ips = Vec::new();
        for family in [AddressFamilyFilter::V4, AddressFamilyFilter::V6] {
            let addrs = pod.addresses(Some(lo.index), family)?;
            if let Some(bad) = addrs.iter().find(|a| !a.address.ip().is_loopback()) {
                return Err(Error::LoopbackForeignAddress {
                    address: bad.address.ip(),
                });
            }
            if let Some(first) = addrs.first() {
                ips.push(IpConfig {
                    interface: Some(0),
                    ..IpConfig::new(first.address)
                });
            }
        }
        // A chained loopback passes the previous result through unchanged.
        Ok(prev.unwrap_or_else(|| CniResult {
            interfaces: vec![Interface {
                name: LO.into(),
                mac: "00:00:00:00:00:00".into(),
                sandbox: req.netns.clone(),
                ..Default::default()
            }],
            ips,
            ..Default::default()
        }))
    }

    fn del(&self, req: &Request) -> Result<()> {
        if req.netns.is_empty() {
            return Ok(());
        }
        let netns = match Netns::open(&req.netns) {
            Ok(n) => n,
            // Beyond Go (which only forgives a missing path): an unmounted
            // bind mount leaves a plain file, the namespace is gone too.
            Err(e) if e.is_netns_gone() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let pod = Handle::in_netns(&netns)?;
        let lo = pod.link_by_name(LO)?;
        pod.set_down(lo.index)?;
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<()> {
        let pod = Handle::in_netns(&Netns::open(&req.netns)?)?;
        if !pod.link_by_name(LO)?.is_up() {
            return Err(Error::LoopbackDown);
        }
        Ok(())
    }
}
