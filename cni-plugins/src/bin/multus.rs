//! The multus thin plugin binary.

cni_plugins::plugin_main!(
    "multus",
    cni_plugins::multus::Multus,
    cni_plugins::binary::all_delegates
);
