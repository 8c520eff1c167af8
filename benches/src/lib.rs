//! Benchmarks for the CNI crates (see `benches/`).
