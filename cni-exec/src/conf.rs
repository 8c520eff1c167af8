//! Loading network configs from a directory with libcni's rules
//! (`libcni/conf.go`).

use std::path::{Path, PathBuf};

use cni_types::{NetworkConfig, NetworkConfigList};
use serde_json::{Map, Value};

use crate::Error;

/// Files in `dir` whose extension is one of `extensions` (with the dot),
/// sorted by name. Directories are skipped; a missing `dir` is empty.
pub fn conf_files(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                op: "read config directory",
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        // Go skips what the directory entry says is a directory; a symlink
        // to a directory is kept (and then fails to read), as there. A FIFO,
        // socket or device (itself or behind a symlink) is no config: Go
        // would block forever on a FIFO's open; it is skipped.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if std::fs::metadata(&path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            continue;
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| format!(".{e}"));
        if ext.is_some_and(|e| extensions.contains(&e.as_str())) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    // Non-blocking and regular files only: one replaced by a FIFO after the
    // directory was listed must not block the reader either.
    cni_files::capped::read_regular_file(path, cni_files::capped::MAX_ADMIN_FILE)
        .map_err(Error::io("read", path))
}

/// Parses a single-plugin config (`type` required), as libcni's
/// `ConfFromBytes`.
pub fn conf_from_bytes(bytes: &[u8]) -> Result<NetworkConfig, Error> {
    let conf = NetworkConfig::from_slice(bytes)?;
    if conf.plugin_type.is_empty() {
        return Err(Error::Types(cni_types::Error::InvalidConfig(
            "error parsing configuration: missing 'type'".into(),
        )));
    }
    Ok(conf)
}

/// Reads a single-plugin config file.
pub fn conf_from_file(path: &Path) -> Result<NetworkConfig, Error> {
    conf_from_bytes(&read(path)?).map_err(|e| match e {
        Error::Types(source) => Error::ConfigFile {
            path: path.to_path_buf(),
            source,
        },
        other => other,
    })
}

/// The plugin objects of `<dir>/<network>/*.conf`, in name order.
pub fn plugin_confs_from_dir(dir: &Path, network: &str) -> Result<Vec<Map<String, Value>>, Error> {
    let mut out = Vec::new();
    for file in conf_files(&dir.join(network), &[".conf"])? {
        let conf = conf_from_file(&file)?;
        out.push(conf.to_map());
    }
    Ok(out)
}

/// Reads a conflist file; unless `loadOnlyInlinedPlugins`, the plugins of
/// `<dir>/<name>/*.conf` are appended after the inline ones. A list with no
/// plugin at all is an error.
pub fn conf_list_from_file(path: &Path) -> Result<NetworkConfigList, Error> {
    let mut list =
        NetworkConfigList::from_slice(&read(path)?).map_err(|source| Error::ConfigFile {
            path: path.to_path_buf(),
            source,
        })?;
    if !list.load_only_inlined_plugins {
        let dir = path.parent().unwrap_or(Path::new("."));
        let extra = plugin_confs_from_dir(dir, &list.name)?;
        list.append_plugins(extra)?;
    }
    if list.plugins.is_empty() {
        return Err(Error::NoPluginConfigs);
    }
    Ok(list)
}

/// Reads a single-plugin config file (`.conf`, `.json`) as a one-plugin
/// list (libcni's `ConfListFromConf`).
pub fn conf_list_from_conf_file(path: &Path) -> Result<NetworkConfigList, Error> {
    let bytes = read(path)?;
    conf_from_bytes(&bytes)
        .and_then(|_| NetworkConfigList::from_single_conf(&bytes).map_err(Error::Types))
        .map_err(|e| match e {
            Error::Types(source) => Error::ConfigFile {
                path: path.to_path_buf(),
                source,
            },
            other => other,
        })
}

/// Finds the single-plugin config (`.conf`, `.json`) named `name` in `dir`.
pub fn load_conf(dir: &Path, name: &str) -> Result<(PathBuf, NetworkConfig), Error> {
    let files = conf_files(dir, &[".conf", ".json"])?;
    if files.is_empty() {
        return Err(Error::NoConfigsFound {
            dir: dir.to_path_buf(),
        });
    }
    for file in files {
        let conf = conf_from_file(&file)?;
        if conf.name == name {
            return Ok((file, conf));
        }
    }
    Err(Error::ConfigNotFound {
        dir: dir.to_path_buf(),
        name: name.to_string(),
    })
}

/// Loads the network `name` from `dir` as libcni's `LoadNetworkConf`:
/// `.conflist` files first in name order (the first with that name wins),
/// then a `.conf`/`.json` single-plugin config upgraded to a one-plugin
/// list. Any unparsable file on the way is an error, as in Go.
pub fn load_network_conf(dir: &Path, name: &str) -> Result<NetworkConfigList, Error> {
    let lists = conf_files(dir, &[".conflist"])?;
    for file in &lists {
        let list = conf_list_from_file(file)?;
        if list.name == name {
            return Ok(list);
        }
    }
    match load_conf(dir, name) {
        Ok((file, _)) => conf_list_from_conf_file(&file),
        Err(Error::NoConfigsFound { .. }) if !lists.is_empty() => Err(Error::ConfigNotFound {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_in_the_conf_dir_is_skipped_and_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("05-fifo.conflist");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        std::os::unix::fs::symlink(&fifo, dir.path().join("06-link.conflist")).unwrap();
        let ok = dir.path().join("10-ok.conflist");
        std::fs::write(&ok, "{}").unwrap();
        assert_eq!(conf_files(dir.path(), &[".conflist"]).unwrap(), [ok]);
        // Read directly (replaced after the listing): refused, not blocked.
        let e = conf_list_from_file(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
