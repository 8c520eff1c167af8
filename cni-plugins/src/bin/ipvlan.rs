//! The `ipvlan` CNI plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::ipvlan::Ipvlan);
}
