//! The operator's path (issue 24): the release tarball (`scripts/dist.sh`),
//! the `cni-install` installer on real files, the plugin reference pages
//! against the config structs (drift), and the Kubernetes manifests of
//! `deploy/` checked offline.

// The manifests carry multus and are read with its YAML parser; they run
// cni-gc, whose flags its parser checks.
#[cfg(all(feature = "multus", feature = "gc"))]
mod deploy;
mod dist;
mod docs_drift;
mod install;
mod wrong_types;

use std::path::PathBuf;

/// The workspace root.
pub(crate) fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cni-plugins has a parent")
        .to_path_buf()
}

/// True when running as root (the installer tests mount a tmpfs).
pub(crate) fn is_root() -> bool {
    cni_testkit::premise::is_root()
}

/// A premise that cannot be established: fails, or prints SKIP when
/// `CNI_TEST_ALLOW_SKIP=1`. Returns true when the test should stop.
pub(crate) fn skip(reason: &str) -> bool {
    !cni_testkit::premise::require(false, reason)
}

/// The binaries of cni-plugins, from cargo's own view of the package.
pub(crate) fn plugin_binaries() -> std::collections::BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "cni-plugins")
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}
