//! What every plugin binary's `main` is: [`plugin_main!`](crate::plugin_main)
//! places the binary's same-build marker (see [`cni_exec::same_build`])
//! and runs the plugin; a plugin that delegates gets an executor that runs
//! its delegates in-process when `CNI_PATH` resolves them to a binary of
//! this same build — bridge's host-local, flannel's bridge, multus's
//! delegates — and as processes otherwise (a Go plugin, another build).
//!
//! ```
//! use cni_exec::same_build::plugin_marker;
//! use cni_plugins::binary::{flannel_delegates, ipam_delegates, marker, BUILD};
//!
//! assert_eq!(marker("host-local"), plugin_marker("host-local", BUILD));
//! assert!(ipam_delegates().is_registered("host-local"));
//! assert!(!ipam_delegates().is_registered("bridge"));
//! assert!(flannel_delegates().is_registered("bridge"));
//! ```

use std::sync::Arc;

use cni_exec::same_build::{plugin_marker, SameBuildExec, MARKER_LEN};
use cni_firewall::Backend;

/// The build identity in every marker of this crate's binaries: a hash of
/// the sources they are built from (the workspace crates' code, the exact
/// dependency versions of `Cargo.lock`, the enabled features), fixed by
/// `build.rs`. Two binaries run each other in-process only when built from
/// the same code: a patched or forked build of the same version has
/// another identity, and a clean rebuild of the same sources the same one.
/// What the marker proves and what it does not: see
/// [`cni_exec::same_build`].
pub const BUILD: &str = env!("CNI_RS_BUILD_ID");

/// The marker of this build's plugin `name`.
pub const fn marker(name: &str) -> [u8; MARKER_LEN] {
    plugin_marker(name, BUILD)
}

/// The environment variable that picks the firewall backend of bridge,
/// ptp and portmap: `native` (the default) or `nft`.
pub const FIREWALL_BACKEND_ENV: &str = "CNI_FIREWALL_BACKEND";

/// The firewall backend named by [`FIREWALL_BACKEND_ENV`], else native:
/// what the plugin binaries pass to their plugins (the libraries read no
/// environment).
pub fn firewall_backend() -> Backend {
    std::env::var(FIREWALL_BACKEND_ENV)
        .ok()
        .and_then(|v| Backend::from_name(&v))
        .unwrap_or_default()
}

/// The IPAM plugins of this build as in-process delegates: what bridge,
/// ptp, macvlan, ipvlan and host-device delegate to. Each binary registers
/// only what it may delegate to, so that (with LTO) it carries no other
/// plugin's code: a smaller binary starts faster.
pub fn ipam_delegates() -> SameBuildExec {
    SameBuildExec::new(BUILD)
        .register("host-local", || Arc::new(crate::host_local::HostLocal))
        .register("static", || Arc::new(crate::static_ipam::Static))
}

/// flannel's delegates: bridge (its default) and the IPAM plugins.
pub fn flannel_delegates() -> SameBuildExec {
    ipam_delegates().register("bridge", || {
        Arc::new(crate::bridge::Bridge::with_backend(firewall_backend()))
    })
}

/// Every plugin of this crate but multus (a meta plugin, never a
/// delegate): what multus delegates to.
pub fn all_delegates() -> SameBuildExec {
    flannel_delegates()
        .register("ptp", || {
            Arc::new(crate::ptp::Ptp::with_backend(firewall_backend()))
        })
        .register("macvlan", || Arc::new(crate::macvlan::Macvlan::new()))
        .register("ipvlan", || Arc::new(crate::ipvlan::Ipvlan::new()))
        .register("host-device", || {
            Arc::new(crate::host_device::HostDevice::new())
        })
        .register("loopback", || Arc::new(crate::loopback::Loopback::new()))
        .register("tuning", || Arc::new(crate::tuning::Tuning::new()))
        .register("bandwidth", || Arc::new(crate::bandwidth::Bandwidth::new()))
        .register("portmap", || {
            Arc::new(crate::portmap::Portmap::new().with_backend(firewall_backend()))
        })
        .register("flannel", || Arc::new(crate::flannel::Flannel::new()))
        .register("vlan", || Arc::new(crate::vlan::Vlan::new()))
        .register("vrf", || Arc::new(crate::vrf::VrfPlugin::new()))
        .register("dummy", || Arc::new(crate::dummy::Dummy::new()))
        .register("tap", || Arc::new(crate::tap::Tap::new()))
        .register("passthru", || Arc::new(crate::passthru::Passthru))
        .register("sbr", || Arc::new(crate::sbr::Sbr::new()))
        .register("firewall", || Arc::new(crate::firewall::Firewall::new()))
        .register("dhcp", || Arc::new(crate::dhcp::Dhcp))
}

/// Defines a plugin binary's `main`: the binary carries the marker of
/// plugin `$name` of this build in its `.cni_rs_plugin` section (so that
/// other plugins of this build may run it in-process), then runs `$plugin`
/// with [`cni_exec::run`], or, given a third argument (a function such as
/// [`ipam_delegates`]), with [`cni_exec::run_with_exec`] and that
/// function's delegates.
///
/// ```no_run
/// cni_plugins::plugin_main!("loopback", cni_plugins::loopback::Loopback::new());
/// ```
#[macro_export]
macro_rules! plugin_main {
    ($name:literal, $plugin:expr) => {
        $crate::plugin_main!(@marker $name);

        fn main() {
            ::std::hint::black_box(&CNI_RS_PLUGIN_MARKER);
            ::cni_exec::run(&$plugin)
        }
    };
    ($name:literal, $plugin:expr, $delegates:path) => {
        $crate::plugin_main!(@marker $name);

        fn main() {
            ::std::hint::black_box(&CNI_RS_PLUGIN_MARKER);
            ::cni_exec::run_with_exec(&$plugin, ::std::sync::Arc::new($delegates()))
        }
    };
    (@marker $name:literal) => {
        // `main` references it (black_box), so the section survives LTO
        // and --gc-sections.
        #[used]
        #[link_section = ".cni_rs_plugin"]
        static CNI_RS_PLUGIN_MARKER: [u8; ::cni_exec::same_build::MARKER_LEN] =
            $crate::binary::marker($name);
    };
}
