//! The flannel plugin binary.

cni_plugins::plugin_main!(
    "flannel",
    cni_plugins::flannel::Flannel::new(),
    cni_plugins::binary::flannel_delegates
);
