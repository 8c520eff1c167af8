//! The `host-local` IPAM plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::host_local::HostLocal)
}
