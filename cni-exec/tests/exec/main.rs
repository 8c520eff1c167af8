//! The integration tests of `cni-exec`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-exec --test exec [FILTER]`).

#[path = "support/fixture.rs"]
mod fixture;

mod exec;
mod inprocess;
mod input_limits;
mod interop_go;
mod libcni;
mod skel;
