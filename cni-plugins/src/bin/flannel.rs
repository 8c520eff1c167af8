//! The flannel plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::flannel::Flannel::new())
}
