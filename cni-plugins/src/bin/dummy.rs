//! The `dummy` CNI plugin binary.

cni_plugins::plugin_main!(
    "dummy",
    cni_plugins::dummy::Dummy::new(),
    cni_plugins::binary::ipam_delegates
);
