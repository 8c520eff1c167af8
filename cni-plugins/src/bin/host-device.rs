//! The `host-device` CNI plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::host_device::HostDevice);
}
