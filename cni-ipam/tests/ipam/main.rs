//! The integration tests of `cni-ipam`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-ipam --test ipam [FILTER]`).

mod allocator_prop;
mod config;
mod disk_store;
mod full_disk;
mod go_interop;
mod processes;
