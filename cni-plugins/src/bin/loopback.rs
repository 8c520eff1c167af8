//! The `loopback` CNI plugin binary.

cni_plugins::plugin_main!("loopback", cni_plugins::loopback::Loopback::new());
