//! The `host-local` IPAM plugin binary.

cni_plugins::plugin_main!("host-local", cni_plugins::host_local::HostLocal);
