//! The `bridge` CNI plugin binary.

cni_plugins::plugin_main!(
    "bridge",
    cni_plugins::bridge::Bridge::new(),
    cni_plugins::binary::ipam_delegates
);
