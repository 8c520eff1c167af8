//! Benchmarks for the CNI crates: criterion micro benchmarks (`benches/`)
//! and measurement programs that print their figures (`src/bin`, see
//! BENCHMARKS.md); [`measure`] holds what those programs share.

pub mod measure;
