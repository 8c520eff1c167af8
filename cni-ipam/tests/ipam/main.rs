//! The integration tests of `cni-ipam`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-ipam --test ipam [FILTER]`).

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod allocator_prop;
mod config;
mod disk_store;
mod full_disk;
mod go_interop;
mod processes;
