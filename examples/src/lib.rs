//! Examples for the CNI crates.
