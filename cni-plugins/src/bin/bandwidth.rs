//! The bandwidth plugin binary.

cni_plugins::plugin_main!("bandwidth", cni_plugins::bandwidth::Bandwidth::new());
