//! The firewall plugin binary.

cni_plugins::plugin_main!("firewall", cni_plugins::firewall::Firewall::new());
