//! The multus thin plugin binary: logs as Multus does
//! (`cni_multus::logging`), configured from each `NetConf`.

cni_plugins::plugin_main!(@marker "multus");

fn main() {
    std::hint::black_box(&CNI_RS_PLUGIN_MARKER);
    cni_multus::logging::install();
    cni_exec::run_with_exec(
        &cni_multus::Multus,
        std::sync::Arc::new(cni_plugins::binary::all_delegates()),
    )
}
