//! The portmap plugin binary.

cni_plugins::plugin_main!(
    "portmap",
    cni_plugins::portmap::Portmap::new().with_backend(cni_plugins::binary::firewall_backend())
);
