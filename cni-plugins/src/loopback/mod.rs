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
//! let out = dispatch(&Loopback::new(), &env, br#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#);
//! assert_eq!(out.exit_code, 0);
//! ```

mod error;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::AddressFamilyFilter;
use cni_types::{CniResult, Interface, IpConfig};

use crate::steps::iface;
pub use error::{Error, Result};

const LO: &str = "lo";

/// The loopback plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root)
/// with [`Loopback::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Loopback<K = LinuxKernel> {
    kernel: K,
}

impl Loopback {
    /// The plugin on the real kernel.
    pub fn new() -> Loopback {
        Loopback::default()
    }
}

impl<K: NetKernel> Loopback<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> Loopback<K> {
        Loopback { kernel }
    }
}

impl<K: NetKernel> Plugin for Loopback<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "loopback"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        // Parsed first, as Go: a bad prevResult fails before any change.
        let prev = req.config.prev_result()?;
        let pod = self.kernel.open(&req.netns)?;
        let lo = pod.link_by_name(LO)?;
        pod.set_up(lo.index)?;
        let mut ips = Vec::new();
        for family in [AddressFamilyFilter::V4, AddressFamilyFilter::V6] {
            let addrs = pod.addresses(Some(lo.index), family)?;
            if let Some(bad) = addrs.iter().find(|a| !a.address.ip().is_loopback()) {
                return Err(Error::ForeignAddress {
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
        // Beyond Go (which only forgives a missing path): an unmounted
        // bind mount leaves a plain file, the namespace is gone too.
        let Some(pod) = iface::pod_for_del_in(&self.kernel, req)? else {
            return Ok(());
        };
        let lo = pod.link_by_name(LO)?;
        pod.set_down(lo.index)?;
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<()> {
        let pod = self.kernel.open(&req.netns)?;
        if !pod.link_by_name(LO)?.is_up() {
            return Err(Error::Down);
        }
        Ok(())
    }
}
