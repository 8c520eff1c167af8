//! The dummy plugin: gives the pod a dummy link (no wire: a stable address
//! to bind to) addressed by the IPAM plugin — Go's
//! `plugins/main/dummy/dummy.go` (v1.9.0: the link is created from inside
//! the pod, so a host link of the same name does not clash), plus GC
//! delegated to IPAM.
//!
//! A kernel without the dummy driver ("Unknown device type") fails ADD
//! with a CNI error naming the `dummy` link type, before anything is
//! allocated.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::dummy::Dummy;
//!
//! // IPAM is required; the refusal comes before any kernel work.
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/no-such-namespace-here"),
//!     ("CNI_IFNAME", "dummy0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let out = dispatch(&Dummy::new(), &env, br#"{"cniVersion":"1.0.0","name":"d","type":"dummy"}"#);
//! assert_ne!(out.exit_code, 0);
//! assert!(String::from_utf8_lossy(&out.stdout).contains("dummy interface requires an IPAM configuration"));
//! ```

mod error;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_types::CniResult;

use crate::steps::{check, iface, ipam, Undo};
pub use error::{Error, Result};

/// The dummy plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root)
/// with [`Dummy::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Dummy<K = LinuxKernel> {
    kernel: K,
}

impl Dummy {
    /// The plugin on the real kernel.
    pub fn new() -> Dummy {
        Dummy::default()
    }
}

impl<K: NetKernel> Dummy<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> Dummy<K> {
        Dummy { kernel }
    }
}

/// Go's refusal of a config without IPAM (ADD and CHECK).
fn require_ipam(req: &Request) -> Result<()> {
    if req.config.ipam_type().is_empty() {
        return Err(Error::IpamRequired);
    }
    Ok(())
}

impl<K: NetKernel> Plugin for Dummy<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "dummy"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        require_ipam(req)?;
        let pod = self.kernel.open(&req.netns)?;
        let link = pod.add_dummy(&req.ifname)?;
        let mut undo = Undo::<Error>::new();
        undo.push(|| pod.delete_link(link.index));
        let ipam = ipam::add(req, &mut undo)?;
        // Without the config's `dns`, as Go's.
        let result = iface::single_interface_result(ipam, &link, &req.netns);
        iface::configure(&pod, &req.ifname, &result)?;
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        Ok(iface::del_link_and_lease_in(&self.kernel, req)?)
    }

    fn check(&self, req: &Request) -> Result<()> {
        require_ipam(req)?;
        let pod = self.kernel.open(&req.netns)?;
        ipam::check(req)?;
        let mut prev = req.config.prev_result()?.ok_or(Error::PrevResultMissing)?;
        let intf = check::prev_container(req, &prev)?.clone();
        let link = check::container_link(&pod, &intf, Some("dummy"))?;
        if !link.is_up() {
            return Err(Error::LinkDown { ifname: intf.name });
        }
        // Go's dummy CHECK compares addresses only, not routes.
        prev.routes.clear();
        Ok(check::addresses_and_routes(&pod, &link, &prev)?)
    }
    fn status(&self, req: &Request) -> Result<()> {
        Ok(ipam::status(req)?)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        Ok(ipam::gc(req)?)
    }
}
