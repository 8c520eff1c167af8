//! `chrootDir`: delegates run chrooted into the host's root when the
//! daemon lives in a container with the host mounted somewhere (multus-cni
//! `pkg/server/exec_chroot.go`). Plugins are looked up under the new root
//! and started through chroot(8), which changes root in the child only.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use cni_exec::invoke::{find_in_path, plugin_error, PluginEnv};
use cni_exec::{Error as ExecError, Exec};

/// Where chroot(8) is expected.
pub const CHROOT_BIN: &str = "/usr/sbin/chroot";

/// An [`Exec`] that runs every plugin chrooted into `root`.
#[derive(Clone, Debug)]
pub struct ChrootExec {
    root: PathBuf,
}

impl ChrootExec {
    /// Runs plugins inside `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ChrootExec { root: root.into() }
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
        let io_err = |source| ExecError::Io {
            op: "run chrooted plugin",
            path: plugin.to_path_buf(),
            source,
        };
        let mut child = std::process::Command::new(CHROOT_BIN)
            .arg(&self.root)
            .arg(plugin)
            .envs(env.vars())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ExecError::Spawn {
                path: plugin.to_path_buf(),
                source,
            })?;
        let writer = child.stdin.take().map(|mut w| {
            let data = stdin.to_vec();
            std::thread::spawn(move || {
                let _ = w.write_all(&data);
            })
        });
        let err_reader = child.stderr.take().map(|mut r| {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                let _ = r.read_to_end(&mut b);
                b
            })
        });
        let mut stdout = Vec::new();
        if let Some(mut o) = child.stdout.take() {
            o.read_to_end(&mut stdout).map_err(io_err)?;
        }
        let status = child.wait().map_err(io_err)?;
        if let Some(w) = writer {
            let _ = w.join();
        }
        let stderr = err_reader.and_then(|r| r.join().ok()).unwrap_or_default();
        if !stderr.is_empty() {
            tracing::debug!(plugin = %plugin.display(), "stderr: {}", String::from_utf8_lossy(&stderr));
        }
        if status.success() {
            Ok(stdout)
        } else {
            Err(ExecError::Plugin(plugin_error(
                &status.to_string(),
                &stdout,
                &stderr,
            )))
        }
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
