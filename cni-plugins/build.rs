//! Fixes the plugins' build identity (`CNI_RS_BUILD_ID`): a hash of the
//! sources they are built from (see `build/source_id.rs`); and hands the
//! manifest's list of binaries that are not plugins
//! (`[package.metadata.cni-rs] programs`) to the code as
//! `$OUT_DIR/programs.rs`.

// A build script fails by panicking: cargo prints the message and stops.
#![allow(clippy::expect_used, clippy::unwrap_used)]

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

    let toml = std::fs::read_to_string(manifest.join("Cargo.toml")).expect("read Cargo.toml");
    let programs = programs(&toml).unwrap_or_else(|e| panic!("Cargo.toml: {e}"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    std::fs::write(
        out.join("programs.rs"),
        format!(
            "/// The binaries of this crate that are not CNI plugins (an installer,\n\
             /// daemons, tools), from `[package.metadata.cni-rs] programs` in its\n\
             /// Cargo.toml; every other binary is a plugin.\n\
             pub const PROGRAMS: &[&str] = &{programs:?};\n"
        ),
    )
    .expect("write programs.rs");
}

/// The strings of `programs = [...]` in the manifest's
/// `[package.metadata.cni-rs]` table (one array of plain strings, possibly
/// over several lines).
fn programs(toml: &str) -> Result<Vec<String>, String> {
    let (_, table) = toml
        .split_once("\n[package.metadata.cni-rs]\n")
        .ok_or("no [package.metadata.cni-rs] table")?;
    let table = table.split("\n[").next().unwrap_or(table);
    let items = table
        .split_once("programs")
        .and_then(|(_, rest)| rest.trim_start().strip_prefix('='))
        .and_then(|rest| rest.trim_start().strip_prefix('['))
        .and_then(|rest| rest.split_once(']'))
        .map(|(items, _)| items)
        .ok_or("no `programs = [...]` in [package.metadata.cni-rs]")?;
    items
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.strip_prefix('"')
                .and_then(|i| i.strip_suffix('"'))
                .filter(|i| !i.contains(['"', '\\']))
                .map(str::to_owned)
                .ok_or(format!("programs: {item} is not a plain string"))
        })
        .collect()
}
