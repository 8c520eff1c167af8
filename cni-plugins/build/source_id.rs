//! The build identity in every plugin binary's same-build marker: a hash
//! of the code the binaries are built from, so that two binaries carry the
//! same identity exactly when they are built from the same sources.
//!
//! Hashed, in this order: each crate's directory name, then every file of
//! its `Cargo.toml`, `build.rs`, `build/` and `src/` (relative path, length,
//! content; sorted by path), then the workspace's `Cargo.lock` (the exact
//! dependency versions) and the enabled cargo features. Nothing else: no
//! time, no absolute path, no compiler output, so a clean rebuild (and a
//! `SOURCE_DATE_EPOCH` reproducible build anywhere) gives the same
//! identity, and any change to the plugins' code gives another.
//!
//! Included by `build.rs` and by the tests (`#[path]`): one definition.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The workspace crates a plugin binary is built from, lowest first.
pub(crate) const CRATES: &[&str] = &[
    "cni-types",
    "cni-exec/files",
    "cni-exec",
    "cni-exec/cri",
    "cni-netns",
    "cni-netns/firewall",
    "cni-ipam",
    "cni-plugins/gc",
    "cni-plugins",
    "cni-plugins/multus",
];

/// Hex digits of the identity (128 bits): it fits the 64-byte marker with
/// the longest plugin name.
pub(crate) const ID_LEN: usize = 32;

/// The files of a crate directory that are hashed, relative to it, sorted.
pub(crate) fn crate_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for top in ["Cargo.toml", "build.rs"] {
        if dir.join(top).is_file() {
            out.push(PathBuf::from(top));
        }
    }
    for sub in ["build", "src"] {
        walk(dir, Path::new(sub), &mut out);
    }
    out.sort();
    out
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for e in entries.flatten() {
        let rel = rel.join(e.file_name());
        match e.file_type() {
            Ok(t) if t.is_dir() => walk(root, &rel, out),
            Ok(t) if t.is_file() => out.push(rel),
            _ => {}
        }
    }
}

/// The identity of `crates` (name, directory), the lock file and the
/// enabled `features`, as [`ID_LEN`] hex digits.
pub(crate) fn source_id(
    crates: &[(&str, PathBuf)],
    lock: Option<&Path>,
    features: &[String],
) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let add = |h: &mut Sha256, label: &str, path: &Path| -> std::io::Result<()> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)?.read_to_end(&mut bytes)?;
        h.update(label.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
        Ok(())
    };
    for (name, dir) in crates {
        h.update(name.as_bytes());
        h.update([0]);
        for rel in crate_files(dir) {
            add(
                &mut h,
                &format!("{name}/{}", rel.display()),
                &dir.join(&rel),
            )?;
        }
    }
    if let Some(lock) = lock {
        add(&mut h, "Cargo.lock", lock)?;
    }
    let mut features = features.to_vec();
    features.sort();
    h.update(features.join(",").as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(hex[..ID_LEN].to_string())
}
