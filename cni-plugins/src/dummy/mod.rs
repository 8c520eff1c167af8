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
//! let out = dispatch(&Dummy, &env, br#"{"cniVersion":"1.0.0","name":"d","type":"dummy"}"#);
//! assert_ne!(out.exit_code, 0);
//! assert!(String::from_utf8_lossy(&out.stdout).contains("dummy interface requires an IPAM configuration"));
//! ```

use cni_exec::{Plugin, Request};
use cni_netns::{Handle, Link, Netns};
use cni_types::CniResult;

use crate::macvlan::common::{self, fail};
use crate::Result;

/// The dummy plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dummy;

/// Go's refusal of a config without IPAM (ADD and CHECK).
fn require_ipam(req: &Request) -> Result<()> {
    if req.config.ipam_type().is_empty() {
        return Err(fail(
            "dummy interface requires an IPAM configuration".into(),
        ));
    }
    Ok(())
}

impl Plugin for Dummy {
    type Error = crate::Error;

    fn name(&self) -> &str {
        "dummy"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        require_ipam(req)?;
        let netns = Netns::open(&req.netns)?;
        let pod = Handle::in_netns(&netns)?;
        let link = pod.add_dummy(&req.ifname)?;
        let mut ipam_done = false;
        let added = attach(req, &pod, &link, &mut ipam_done);
        if added.is_err() {
            if ipam_done {
                common::undo_ipam(req);
            }
            if let Err(e) = pod.delete_link(link.index) {
                tracing::warn!("undo ADD: {e}");
            }
        }
        added
    }

    fn del(&self, req: &Request) -> Result<()> {
        let pod = common::pod_for_del(req)?;
        common::delete_pod_link_while(
            pod.as_ref().map(|p| &p.1),
            &req.ifname,
            req.config.ipam_type(),
            || common::ipam_del(req),
        )
    }

    fn check(&self, req: &Request) -> Result<()> {
        require_ipam(req)?;
        let netns = Netns::open(&req.netns)?;
        common::ipam_check(req)?;
        let mut prev = req
            .config
            .prev_result()?
            .ok_or_else(|| fail("dummy: Required prevResult missing".into()))?;
        let intf = common::prev_container(req, &prev)?.clone();
        let pod = Handle::in_netns(&netns)?;
        let link = common::check_container_link(&pod, &intf, Some("dummy"))?;
        if !link.is_up() {
            return Err(fail(format!("Interface {} is down", intf.name)));
        }
        // Go's dummy CHECK compares addresses only, not routes.
        prev.routes.clear();
        common::check_addresses_and_routes(&pod, &link, &prev)
    }
    fn status(&self, req: &Request) -> Result<()> {
        common::ipam_status(req)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        common::ipam_gc(req)
    }
}

/// IPAM's addresses on the link (Go's `ipam.ConfigureIface`), and the
/// result (without the config's `dns`, as Go's).
fn attach(req: &Request, pod: &Handle, link: &Link, ipam_done: &mut bool) -> Result<CniResult> {
    let ipam = common::ipam_add(req)?;
    *ipam_done = true;
    let result = common::single_interface_result(ipam, link, &req.netns);
    common::configure(pod, &req.ifname, &result)?;
    Ok(result)
}
