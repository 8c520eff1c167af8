//! The operator's path (issue 24): the release tarball (`scripts/dist.sh`),
//! the `cni-install` installer on real files, the plugin reference pages
//! against the config structs (drift), every hand-written list of plugins
//! against the crate's binaries, and the Kubernetes manifests of `deploy/`
//! checked offline, and the module graphs of the library crates (no cycles).

// The manifests carry multus and are read with its YAML parser; they run
// cni-gc, whose flags its parser checks.
#[cfg(all(feature = "multus", feature = "gc"))]
mod deploy;
mod dist;
mod docs_drift;
mod install;
mod module_graph;
mod plugin_list;
mod wrong_types;

use std::collections::BTreeSet;
use std::path::PathBuf;

/// The workspace root.
pub(crate) fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cni-plugins has a parent")
        .to_path_buf()
}

/// cni-plugins as cargo sees it (`cargo metadata`): its binaries, which of
/// them need the `multus` feature, and the programs among them that are not
/// plugins (`[package.metadata.cni-rs] programs` in its Cargo.toml). That is
/// the one list of plugins every hand-written one is checked against
/// ([`plugin_list`]).
pub(crate) struct Binaries {
    /// Every binary.
    pub(crate) all: BTreeSet<String>,
    /// The binaries built only with the `multus` feature.
    pub(crate) multus: BTreeSet<String>,
    /// The binaries that are not plugins (an installer, daemons).
    pub(crate) programs: BTreeSet<String>,
}

impl Binaries {
    /// Every binary but the programs.
    pub(crate) fn plugins(&self) -> BTreeSet<String> {
        self.all.difference(&self.programs).cloned().collect()
    }
}

pub(crate) fn binaries() -> Binaries {
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
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "cni-plugins")
        .expect("cargo metadata lists cni-plugins");
    let bins: Vec<&serde_json::Value> = package["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .collect();
    let name = |t: &&serde_json::Value| t["name"].as_str().unwrap().to_string();
    Binaries {
        all: bins.iter().map(name).collect(),
        multus: bins
            .iter()
            .filter(|t| {
                t["required-features"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f == "multus"))
            })
            .map(name)
            .collect(),
        programs: package["metadata"]["cni-rs"]["programs"]
            .as_array()
            .expect("[package.metadata.cni-rs] programs in cni-plugins/Cargo.toml")
            .iter()
            .map(|p| p.as_str().expect("a program's name").to_string())
            .collect(),
    }
}
