//! The integration tests of `cni-exec`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-exec --test exec [FILTER]`).

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fixture.rs"]
mod fixture;

mod exec;
mod inprocess;
mod input_limits;
mod interop_go;
mod libcni;
mod skel;
