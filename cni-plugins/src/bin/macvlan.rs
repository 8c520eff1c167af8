//! The `macvlan` CNI plugin binary.

fn main() {
    cni_exec::run(&cni_plugins::macvlan::Macvlan);
}
