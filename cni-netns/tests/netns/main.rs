//! The integration tests of `cni-netns`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-netns --test netns [FILTER]`).

mod common;
mod firewall_common;

mod device;
mod firewall;
mod firewall_conntrack;
mod firewall_native;
mod firewall_traffic;
mod kernel;
mod kernel_conformance;
mod tc;
