//! The `tap` CNI plugin binary.

cni_plugins::plugin_main!(
    "tap",
    cni_plugins::tap::Tap::new(),
    cni_plugins::binary::ipam_delegates
);
