//! The bandwidth plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::bandwidth::Bandwidth::new())
}
