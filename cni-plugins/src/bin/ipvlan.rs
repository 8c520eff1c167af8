//! The `ipvlan` CNI plugin binary.

cni_plugins::plugin_main!(
    "ipvlan",
    cni_plugins::ipvlan::Ipvlan::new(),
    cni_plugins::binary::ipam_delegates
);
