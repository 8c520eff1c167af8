//! The integration tests of `cni-types`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-types --test types [FILTER]`).

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod go_interop;
mod props;
mod spec_vectors;
mod version_pairs;
