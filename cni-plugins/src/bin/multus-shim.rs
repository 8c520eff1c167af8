//! The multus shim: forwards CNI commands to the multus daemon.

fn main() {
    cni_exec::run(&cni_plugins::multus::thick::Shim)
}
