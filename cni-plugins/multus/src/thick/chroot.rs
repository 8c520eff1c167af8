//! `chrootDir`: delegates run chrooted into the host's root when the
//! daemon lives in a container with the host mounted somewhere (multus-cni
//! `pkg/server/exec_chroot.go`). Plugins are looked up under the new root
//! and started through chroot(8), which changes root in the child only.

use std::path::{Path, PathBuf};

use cni_exec::invoke::{find_in_path, PluginEnv};
use cni_exec::{Error as ExecError, Exec, ProcessExec, StderrSink};

/// Where chroot(8) is expected.
pub const CHROOT_BIN: &str = "/usr/sbin/chroot";

/// An [`Exec`] that runs every plugin chrooted into `root`.
#[derive(Clone, Debug)]
pub struct ChrootExec {
    root: PathBuf,
    process: ProcessExec,
}

impl ChrootExec {
    /// Runs plugins inside `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        // The one process runner (output caps, thread failures): through
        // chroot(8), the plugin's stderr kept for its error only.
        let process = ProcessExec::new()
            .with_launcher(CHROOT_BIN, [root.clone()])
            .with_stderr(StderrSink::Discard);
        ChrootExec { root, process }
    }

    fn under_root(&self, p: &Path) -> PathBuf {
        self.root.join(p.strip_prefix("/").unwrap_or(p))
    }
}

impl Exec for ChrootExec {
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, ExecError> {
        let rooted: Vec<PathBuf> = paths.iter().map(|p| self.under_root(p)).collect();
        let found = find_in_path(plugin_type, &rooted)?;
        // The path as the chrooted child sees it.
        let inside = found
            .strip_prefix(&self.root)
            .map(|p| Path::new("/").join(p))
            .unwrap_or(found);
        Ok(inside)
    }

    fn exec_plugin(
        &self,
        plugin: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, ExecError> {
        self.process.exec_plugin(plugin, stdin, env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_looked_up_under_the_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("opt/cni/bin")).unwrap();
        std::fs::write(root.path().join("opt/cni/bin/bridge"), b"").unwrap();
        let e = ChrootExec::new(root.path());
        let p = e
            .find_plugin(
                "bridge",
                &[PathBuf::from("/usr/lib/cni"), PathBuf::from("/opt/cni/bin")],
            )
            .unwrap();
        assert_eq!(p, Path::new("/opt/cni/bin/bridge"));
        assert!(e
            .find_plugin("macvlan", &[PathBuf::from("/opt/cni/bin")])
            .is_err());
    }
}
