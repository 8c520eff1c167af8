//! The `vlan` CNI plugin binary.

cni_plugins::plugin_main!(
    "vlan",
    cni_plugins::vlan::Vlan::new(),
    cni_plugins::binary::ipam_delegates
);
