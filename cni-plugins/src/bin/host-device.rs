//! The `host-device` CNI plugin binary.

cni_plugins::plugin_main!(
    "host-device",
    cni_plugins::host_device::HostDevice::new(),
    cni_plugins::binary::ipam_delegates
);
