//! The `ptp` CNI plugin binary.

cni_plugins::plugin_main!(
    "ptp",
    cni_plugins::ptp::Ptp::default(),
    cni_plugins::binary::ipam_delegates
);
