//! What a plugin's long-running companion (the dhcp daemon, multus-daemon)
//! needs from the unix socket its plugin talks to: the socket made at a
//! path an operator names without ever destroying what is there
//! ([`listen`]).
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("run/d.sock");
//! let listener = cni_exec::daemon::listen(&path)?;
//! // A second daemon on the same path is refused while the first listens.
//! assert!(cni_exec::daemon::listen(&path).is_err());
//! drop(listener);
//! // A socket nobody listens on (a killed daemon's) is replaced.
//! let _again = cni_exec::daemon::listen(&path)?;
//! // Anything else at the path is refused and left alone.
//! let file = dir.path().join("config.json");
//! std::fs::write(&file, "{}")?;
//! assert!(cni_exec::daemon::listen(&file).is_err());
//! assert_eq!(std::fs::read(&file)?, b"{}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::error::Error;

fn io_error(op: &'static str, path: &Path, kind: ErrorKind, msg: String) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::new(kind, msg),
    }
}

/// What is at `path`, in words, for an error message.
fn file_kind(t: std::fs::FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a socket"
    }
}

/// Makes `path` ready for a daemon's socket: creates its directory (mode
/// 0700) when missing, and removes a socket nobody answers on (a killed
/// daemon's). Nothing else is ever removed: a socket someone answers on is
/// refused (`AddrInUse`), and so is any other kind of file, found with
/// `lstat` (a symbolic link is not followed): a typo in a unit file must
/// not delete a configuration or a system file.
pub fn prepare_socket_path(path: &Path) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| Error::Io {
                    op: "create socket directory",
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                op: "inspect socket path",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(io_error(
            "refuse to replace",
            path,
            ErrorKind::AlreadyExists,
            format!(
                "{} is there, not a socket (remove it or choose another socket path)",
                file_kind(meta.file_type())
            ),
        ));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(io_error(
            "listen on",
            path,
            ErrorKind::AddrInUse,
            "another daemon is listening on this socket".into(),
        ));
    }
    std::fs::remove_file(path).map_err(|source| Error::Io {
        op: "remove stale socket",
        path: path.to_path_buf(),
        source,
    })
}

/// Listens on the unix socket `path` after [`prepare_socket_path`].
pub fn listen(path: &Path) -> Result<UnixListener, Error> {
    prepare_socket_path(path)?;
    UnixListener::bind(path).map_err(|source| Error::Io {
        op: "listen on",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_every_kind_of_file_but_a_dead_socket() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        std::fs::write(&file, "root:x:0:0").unwrap();
        let e = listen(&file).unwrap_err().to_string();
        assert!(
            e.contains("refuse to replace") && e.contains("a regular file"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "root:x:0:0");

        let sub = dir.path().join("dir");
        std::fs::create_dir(&sub).unwrap();
        let e = listen(&sub).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        assert!(sub.is_dir());

        // A symlink to a socket is not followed, and not removed.
        let target = dir.path().join("real.sock");
        let l = listen(&target).unwrap();
        drop(l);
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = listen(&link).unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "{e}");
        assert!(std::fs::symlink_metadata(&link).is_ok());

        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = listen(&fifo).unwrap_err().to_string();
        assert!(e.contains("a named pipe"), "{e}");
    }

    #[test]
    fn replaces_a_dead_socket_and_refuses_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/d.sock");
        let live = listen(&path).unwrap();
        let e = listen(&path).unwrap_err().to_string();
        assert!(e.contains("another daemon is listening"), "{e}");
        drop(live);
        let _again = listen(&path).unwrap();
    }
}
