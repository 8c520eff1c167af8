//! What every plugin binary's `main` is: [`plugin_main!`](crate::plugin_main)
//! places the binary's same-build marker (see
//! [`cni_exec::same_build`]) and runs the plugin with [`run`], whose
//! delegates run in-process when `CNI_PATH` resolves them to a binary of
//! this same build — bridge's host-local, flannel's bridge, multus's
//! delegates — and as processes otherwise (a Go plugin, another build).
//!
//! ```
//! use cni_exec::same_build::plugin_marker;
//! use cni_plugins::binary::{delegates, marker, BUILD};
//!
//! assert_eq!(marker("host-local"), plugin_marker("host-local", BUILD));
//! assert!(delegates().is_registered("host-local"));
//! ```

use std::sync::Arc;

use cni_exec::same_build::{plugin_marker, SameBuildExec, MARKER_LEN};
use cni_exec::Plugin;

/// The build identity in every marker of this crate's binaries: its
/// version. Binaries of two versions never run each other in-process.
pub const BUILD: &str = env!("CARGO_PKG_VERSION");

/// The marker of this build's plugin `name`.
pub const fn marker(name: &str) -> [u8; MARKER_LEN] {
    plugin_marker(name, BUILD)
}

/// The plugins a binary of this build runs in-process as delegates: every
/// plugin of this crate but multus (a meta plugin, never a delegate).
pub fn delegates() -> SameBuildExec {
    SameBuildExec::new(BUILD)
        .register("host-local", || Arc::new(crate::host_local::HostLocal))
        .register("static", || Arc::new(crate::static_ipam::Static))
        .register("bridge", || Arc::new(crate::bridge::Bridge::new()))
        .register("ptp", || Arc::new(crate::ptp::Ptp::default()))
        .register("macvlan", || Arc::new(crate::macvlan::Macvlan))
        .register("ipvlan", || Arc::new(crate::ipvlan::Ipvlan))
        .register("host-device", || Arc::new(crate::host_device::HostDevice))
        .register("loopback", || Arc::new(crate::loopback::Loopback))
        .register("tuning", || Arc::new(crate::tuning::Tuning::new()))
        .register("bandwidth", || Arc::new(crate::bandwidth::Bandwidth::new()))
        .register("portmap", || Arc::new(crate::portmap::Portmap::new()))
        .register("flannel", || Arc::new(crate::flannel::Flannel::new()))
}

/// A plugin binary's `main` body: [`cni_exec::run`] with [`delegates`].
pub fn run(plugin: &dyn Plugin) -> ! {
    cni_exec::run_with_exec(plugin, Arc::new(delegates()))
}

/// Defines a plugin binary's `main`: the binary carries the marker of
/// plugin `$name` of this build in its `.cni_rs_plugin` section (so that
/// other plugins of this build may run it in-process), then runs `$plugin`
/// with [`run`].
///
/// ```no_run
/// cni_plugins::plugin_main!("loopback", cni_plugins::loopback::Loopback);
/// ```
#[macro_export]
macro_rules! plugin_main {
    ($name:literal, $plugin:expr) => {
        #[used]
        #[link_section = ".cni_rs_plugin"]
        static CNI_RS_PLUGIN_MARKER: [u8; ::cni_exec::same_build::MARKER_LEN] =
            $crate::binary::marker($name);

        fn main() {
            // A reference the linker sees: the section survives
            // --gc-sections and LTO.
            ::std::hint::black_box(&CNI_RS_PLUGIN_MARKER);
            $crate::binary::run(&$plugin)
        }
    };
}
