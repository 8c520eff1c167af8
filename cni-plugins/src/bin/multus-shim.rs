//! The multus shim: forwards CNI commands to the multus daemon; logs as
//! Multus's shim does (`cni_plugins::multus::logging`).

fn main() {
    cni_plugins::multus::logging::install();
    cni_exec::run(&cni_plugins::multus::thick::Shim)
}
