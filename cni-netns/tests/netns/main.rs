//! The integration tests of `cni-netns`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-netns --test netns [FILTER]`).
//! The firewall's are `cni-firewall`'s (`cargo test -p cni-firewall --test
//! netns`).

mod common;

mod device;
mod kernel;
mod kernel_conformance;
mod tc;
