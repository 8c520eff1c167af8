//! The integration tests of `cni-types`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-types --test types [FILTER]`).

mod go_interop;
mod props;
mod spec_vectors;
mod version_pairs;
