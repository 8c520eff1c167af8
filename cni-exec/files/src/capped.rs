//! The one capped reader of the workspace: files an administrator names
//! (a `resolvConf`, flannel's `subnetFile`, multus's `clusterNetwork` and
//! daemon configuration, a kubeconfig and the files it names, a
//! configuration directory's files), and a plugin's stdin, are read up to a
//! bound, past which the read fails with an error saying so. A typo naming
//! `/dev/zero` or a huge file must cost an error, not the node's memory.
//!
//! ```
//! use cni_files::capped::{read_file, MAX_ADMIN_FILE};
//!
//! let dir = tempfile::tempdir()?;
//! let ok = dir.path().join("resolv.conf");
//! std::fs::write(&ok, "nameserver 10.0.0.1\n")?;
//! assert_eq!(read_file(&ok, MAX_ADMIN_FILE)?, b"nameserver 10.0.0.1\n");
//! let e = read_file(std::path::Path::new("/dev/zero"), 1024).unwrap_err();
//! assert_eq!(e.to_string(), "larger than 1024 bytes");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::Read;
use std::path::Path;

/// The bound for a file an administrator names (configurations, kubeconfig
/// and credentials, `subnet.env`, `resolv.conf`): far above any real one.
pub const MAX_ADMIN_FILE: u64 = 4 << 20;

/// Reads `input` to its end, at most `max` bytes; more is an
/// `InvalidData` error "larger than `max` bytes" (nothing past `max` + 1
/// is read).
pub fn read_to_end(input: impl Read, max: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    input.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// Reads the file at `path`, at most `max` bytes (see [`read_to_end`]).
pub fn read_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_to_end(std::fs::File::open(path)?, max)
}

/// [`read_file`] of a regular file only: the file is opened non-blocking
/// (a FIFO someone left in a directory of files does not block the open,
/// nor the read: it is refused), and anything but a regular file (a FIFO,
/// a device, a socket, a directory) is an `InvalidInput` error "not a
/// regular file". For the files of a directory a program scans (network
/// configs, libcni's cache records), where a device or a FIFO is never
/// what was meant.
pub fn read_regular_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    read_to_end(file, max)
}

/// [`read_file`] as UTF-8 text (invalid UTF-8 is an `InvalidData` error).
pub fn read_file_to_string(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_file(path, max)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_is_read_past_it_is_an_error() {
        let data = [b'x'; 100];
        assert_eq!(read_to_end(&data[..], 100).unwrap().len(), 100);
        let e = read_to_end(&data[..], 99).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "larger than 99 bytes");
        // An endless source stops at the cap.
        assert!(read_file(Path::new("/dev/zero"), 1 << 20).is_err());
        assert!(read_file_to_string(Path::new("/nonexistent/x"), 10).is_err());
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("10-net.conflist");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        // No writer: a blocking open would wait forever.
        let e = read_regular_file(&fifo, 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        let e = read_regular_file(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        assert!(read_regular_file(dir.path(), 10).is_err());
        let ok = dir.path().join("ok");
        std::fs::write(&ok, b"{}").unwrap();
        assert_eq!(read_regular_file(&ok, 10).unwrap(), b"{}");
        std::fs::write(&ok, [b' '; 11]).unwrap();
        assert_eq!(
            read_regular_file(&ok, 10).unwrap_err().to_string(),
            "larger than 10 bytes"
        );
    }
}
