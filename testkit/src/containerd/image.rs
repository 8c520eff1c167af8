//! The sandbox image, built here: a static `pause` program packed as a
//! one-layer OCI image layout in a tar file, what `ctr images import`
//! reads. Nothing is pulled.

use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::{io_err, Error};

/// The sandbox's only process: waits for signals, reaps children (it is
/// PID 1 of the sandbox), exits on SIGINT/SIGTERM. containerd stops a
/// sandbox with SIGKILL anyway.
const PAUSE_C: &str = r#"#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"#;

/// Compiles the pause program in `dir` (`gcc -static`: Debian's `gcc` and
/// `libc6-dev`, what rustc links with anyway) and returns the binary.
pub(crate) fn build_pause(dir: &Path) -> Result<Vec<u8>, Error> {
    let src = dir.join("pause.c");
    let bin = dir.join("pause");
    std::fs::write(&src, PAUSE_C).map_err(io_err(format!("write {}", src.display())))?;
    let out = Command::new("gcc")
        .args(["-static", "-Os", "-s", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(io_err("run gcc (install Debian's gcc and libc6-dev)"))?;
    if !out.status.success() {
        return Err(Error::Setup {
            op: "build the static pause program with gcc -static (needs libc6-dev)".into(),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    std::fs::read(&bin).map_err(io_err(format!("read {}", bin.display())))
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The OCI platform architecture of this build.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// An OCI image layout tarball (`oci-layout`, `index.json`, blobs) of one
/// uncompressed layer holding `/pause`, the entrypoint; `name` is the
/// reference containerd files it under (`io.containerd.image.name`).
pub(crate) fn oci_image_tar(pause: &[u8], name: &str) -> Vec<u8> {
    let mut layer = Tar::default();
    layer.file("pause", 0o755, pause);
    let layer = layer.finish();
    let layer_digest = format!("sha256:{}", sha256_hex(&layer));
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {"Entrypoint": ["/pause"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    })
    .to_string();
    let config_digest = format!("sha256:{}", sha256_hex(config.as_bytes()));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer.len()}],
    })
    .to_string();
    let manifest_digest = format!("sha256:{}", sha256_hex(manifest.as_bytes()));
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": manifest_digest, "size": manifest.len(),
                       "annotations": {"io.containerd.image.name": name}}],
    })
    .to_string();
    let blob = |digest: &str| format!("blobs/sha256/{}", &digest["sha256:".len()..]);
    let mut image = Tar::default();
    image.file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#);
    image.file("index.json", 0o644, index.as_bytes());
    image.file(&blob(&layer_digest), 0o644, &layer);
    image.file(&blob(&config_digest), 0o644, config.as_bytes());
    image.file(&blob(&manifest_digest), 0o644, manifest.as_bytes());
    image.finish()
}

/// A POSIX ustar archive of regular files (names up to 100 bytes, owner
/// root, mtime 0: the same input gives the same bytes).
#[derive(Default)]
struct Tar(Vec<u8>);

impl Tar {
    fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        let mut h = [0u8; 512];
        let put = |h: &mut [u8; 512], at: usize, field: &[u8]| {
            h[at..at + field.len()].copy_from_slice(field);
        };
        let octal = |width: usize, v: u64| format!("{v:0w$o}\0", w = width - 1).into_bytes();
        debug_assert!(name.len() <= 100);
        put(&mut h, 0, name.as_bytes());
        put(&mut h, 100, &octal(8, u64::from(mode)));
        put(&mut h, 108, &octal(8, 0));
        put(&mut h, 116, &octal(8, 0));
        put(&mut h, 124, &octal(12, data.len() as u64));
        put(&mut h, 136, &octal(12, 0));
        put(&mut h, 148, b"        ");
        h[156] = b'0';
        put(&mut h, 257, b"ustar\x0000");
        put(&mut h, 265, b"root");
        put(&mut h, 297, b"root");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        self.0.extend_from_slice(&h);
        self.0.extend_from_slice(data);
        self.0
            .resize(self.0.len() + (512 - data.len() % 512) % 512, 0);
    }

    fn finish(mut self) -> Vec<u8> {
        self.0.resize(self.0.len() + 1024, 0);
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tar` (GNU tar) is the oracle for the archive format.
    #[test]
    fn tar_lists_and_extracts_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let image = oci_image_tar(b"#!/bin/true\n", "localhost/test/pause:1");
        let path = dir.path().join("image.tar");
        std::fs::write(&path, &image).unwrap();
        let out = Command::new("tar")
            .arg("-xvf")
            .arg(&path)
            .arg("-C")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
        let m = &index["manifests"][0];
        assert_eq!(
            m["annotations"]["io.containerd.image.name"],
            "localhost/test/pause:1"
        );
        // Every blob is named by its digest; the layer holds the program.
        let blob = |d: &str| dir.path().join("blobs/sha256").join(&d[7..]);
        let manifest = std::fs::read(blob(m["digest"].as_str().unwrap())).unwrap();
        assert_eq!(
            format!("sha256:{}", sha256_hex(&manifest)),
            m["digest"].as_str().unwrap()
        );
        let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
        let layer_digest = manifest["layers"][0]["digest"].as_str().unwrap();
        let layer = std::fs::read(blob(layer_digest)).unwrap();
        assert_eq!(format!("sha256:{}", sha256_hex(&layer)), layer_digest);
        let listing = Command::new("tar")
            .args(["-tvf", "-"])
            .stdin(std::fs::File::open(blob(layer_digest)).unwrap())
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&listing.stdout);
        assert!(listing.starts_with("-rwxr-xr-x root/root"), "{listing}");
        assert!(listing.trim_end().ends_with(" pause"), "{listing}");
        let config = std::fs::read(blob(manifest["config"]["digest"].as_str().unwrap())).unwrap();
        let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(config["rootfs"]["diff_ids"][0], layer_digest);
        assert_eq!(config["config"]["Entrypoint"][0], "/pause");
        // Deterministic.
        assert_eq!(
            image,
            oci_image_tar(b"#!/bin/true\n", "localhost/test/pause:1")
        );
    }
}
