//! The portmap plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::portmap::Portmap::new())
}
