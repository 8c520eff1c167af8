//! The `macvlan` CNI plugin binary.

cni_plugins::plugin_main!(
    "macvlan",
    cni_plugins::macvlan::Macvlan::new(),
    cni_plugins::binary::ipam_delegates
);
