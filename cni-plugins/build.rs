//! Fixes the plugins' build identity (`CNI_RS_BUILD_ID`): a hash of the
//! sources they are built from (see `build/source_id.rs`).

#[path = "build/source_id.rs"]
mod source_id;

use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
    // In this workspace, the sibling crates; from a registry, this crate
    // alone (its dependencies are then versions of their own).
    let crates: Vec<(&str, PathBuf)> = source_id::CRATES
        .iter()
        .filter_map(|name| {
            if *name == "cni-plugins" {
                return Some((*name, manifest.clone()));
            }
            let dir = workspace.join(name);
            dir.join("Cargo.toml").is_file().then_some((*name, dir))
        })
        .collect();
    let lock = workspace.join("Cargo.lock");
    let lock = lock.is_file().then_some(lock);
    let features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(str::to_lowercase))
        .collect();
    let id = source_id::source_id(&crates, lock.as_deref(), &features)
        .expect("read the plugins' sources");
    for (_, dir) in &crates {
        for sub in ["src", "build", "Cargo.toml", "build.rs"] {
            let p = dir.join(sub);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    if let Some(lock) = &lock {
        println!("cargo:rerun-if-changed={}", lock.display());
    }
    println!("cargo:rustc-env=CNI_RS_BUILD_ID={id}");
}
