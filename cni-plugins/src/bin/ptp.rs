//! The `ptp` CNI plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::ptp::Ptp::default());
}
