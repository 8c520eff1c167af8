//! The `passthru` CNI plugin binary.

cni_plugins::plugin_main!("passthru", cni_plugins::passthru::Passthru);
