//! The integration tests of `cni-netns`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-netns --test netns [FILTER]`).
//! The firewall's are `cni-firewall`'s (`cargo test -p cni-firewall --test
//! netns`).

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod device;
mod kernel;
mod kernel_conformance;
mod tc;
