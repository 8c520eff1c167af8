//! The `bridge` CNI plugin binary.

cni_plugins::plugin_main!(
    "bridge",
    cni_plugins::bridge::Bridge::with_backend(cni_plugins::binary::firewall_backend()),
    cni_plugins::binary::ipam_delegates
);
