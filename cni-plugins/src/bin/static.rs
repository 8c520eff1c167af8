//! The `static` IPAM plugin binary.

cni_plugins::plugin_main!("static", cni_plugins::static_ipam::Static);
