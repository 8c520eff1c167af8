//! The `loopback` CNI plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::loopback::Loopback)
}
