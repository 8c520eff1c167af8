//! The `ptp` CNI plugin binary.

cni_plugins::plugin_main!(
    "ptp",
    cni_plugins::ptp::Ptp::with_backend(cni_plugins::binary::firewall_backend()),
    cni_plugins::binary::ipam_delegates
);
