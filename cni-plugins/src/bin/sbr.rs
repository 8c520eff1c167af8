//! The sbr plugin binary.

cni_plugins::plugin_main!("sbr", cni_plugins::sbr::Sbr::new());
