//! The multus shim: forwards CNI commands to the multus daemon; logs as
//! Multus's shim does (`cni_multus::logging`).

fn main() {
    cni_multus::logging::install();
    cni_exec::run(&cni_multus::thick::Shim)
}
