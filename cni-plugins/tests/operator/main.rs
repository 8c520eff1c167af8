//! The operator's path (issue 24): the release tarball (`scripts/dist.sh`),
//! the `cni-install` installer on real files, the plugin reference pages
//! against the config structs (drift), and the Kubernetes manifests of
//! `deploy/` checked offline.

mod deploy;
mod dist;
mod docs_drift;
mod install;

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
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// A premise that cannot be established: fails, or prints SKIP when
/// `CNI_TEST_ALLOW_SKIP=1`. Returns true when the test should stop.
pub(crate) fn skip(reason: &str) -> bool {
    if std::env::var("CNI_TEST_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!("SKIP: {reason}");
        true
    } else {
        panic!("cannot run: {reason} (set CNI_TEST_ALLOW_SKIP=1 to skip)");
    }
}
