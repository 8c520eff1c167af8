//! The multus thin plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::multus::Multus)
}
