//! The `vrf` CNI plugin binary.

cni_plugins::plugin_main!("vrf", cni_plugins::vrf::VrfPlugin::new());
