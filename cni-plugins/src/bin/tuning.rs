//! The tuning plugin binary.

cni_plugins::plugin_main!("tuning", cni_plugins::tuning::Tuning::new());
