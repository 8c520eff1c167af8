//! The `bridge` CNI plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::bridge::Bridge::new())
}
