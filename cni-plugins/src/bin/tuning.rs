//! The tuning plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::tuning::Tuning::new())
}
