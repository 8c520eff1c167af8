//! The `static` IPAM plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::static_ipam::Static)
}
