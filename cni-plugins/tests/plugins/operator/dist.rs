//! `scripts/dist.sh` packaging (without a build: `--bin-dir` with stand-in
//! binaries): upstream's flat layout, checksums, reproducible bytes, and a
//! clear refusal without a version.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn dist(args: &[&str], epoch: &str, umask: &str) -> Output {
    let script = super::workspace().join("scripts/dist.sh");
    Command::new("sh")
        .arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(script)
        .args(args)
        .env("SOURCE_DATE_EPOCH", epoch)
        .output()
        .expect("run dist.sh")
}

/// A bin dir with a stand-in for every binary of cni-plugins, written at
/// `mtime` with mode `mode`.
fn stand_ins(dir: &Path, mtime: &str, mode: u32) -> Vec<String> {
    let bins: Vec<String> = super::plugin_binaries().into_iter().collect();
    for b in &bins {
        let p = dir.join(b);
        std::fs::write(&p, format!("#!/bin/sh\necho {b}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let ok = Command::new("touch")
            .args(["-d", mtime])
            .arg(&p)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    bins
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn packages_the_flat_layout_reproducibly() {
    let (bin1, bin2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (out1, out2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Same content, different file mtimes, modes and umask.
    let bins = stand_ins(bin1.path(), "2001-01-01", 0o755);
    stand_ins(bin2.path(), "2024-06-30 12:00", 0o700);
    let a = dist(
        &[
            "--bin-dir",
            s(bin1.path()),
            "--out",
            s(out1.path()),
            "0.1.0",
        ],
        "1700000000",
        "022",
    );
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = dist(
        &[
            "--bin-dir",
            s(bin2.path()),
            "--out",
            s(out2.path()),
            "v0.1.0",
        ],
        "1700000000",
        "077",
    );
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));

    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let name = format!("cni-rs-plugins-linux-{arch}-v0.1.0.tgz");
    let name = name.as_str();
    let (ta, tb) = (out1.path().join(name), out2.path().join(name));
    assert_eq!(
        std::fs::read(&ta).unwrap(),
        std::fs::read(&tb).unwrap(),
        "tarballs differ"
    );
    for sum in ["sha256sum", "sha512sum"] {
        let ext = &sum[..6];
        let ok = Command::new(sum)
            .args(["-c", &format!("{name}.{ext}")])
            .current_dir(out1.path())
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{sum}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }

    // Flat, sorted, root-owned, fixed mtime, explicit modes.
    let list = Command::new("tar")
        .args(["--numeric-owner", "--full-time", "-tvzf"])
        .arg(&ta)
        .output()
        .unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    let mut names = Vec::new();
    for line in list.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (mode, owner, date, time, path) = (f[0], f[1], f[3], f[4], f[5]);
        assert_eq!(owner, "0/0", "{line}");
        assert_eq!(format!("{date} {time}"), "2023-11-14 22:13:20", "{line}");
        let entry = path.strip_prefix("./").unwrap_or_else(|| panic!("{line}"));
        if entry.is_empty() {
            assert_eq!(mode, "drwxr-xr-x", "{line}");
            continue;
        }
        assert!(!entry.contains('/'), "not flat: {line}");
        let want = if entry == "LICENSE" || entry == "README" {
            "-rw-r--r--"
        } else {
            "-rwxr-xr-x"
        };
        assert_eq!(mode, want, "{line}");
        names.push(entry.to_string());
    }
    let mut want: Vec<String> = bins.clone();
    want.extend(["LICENSE".into(), "README".into()]);
    want.sort();
    assert_eq!(
        names, want,
        "every binary, LICENSE and README, in name order"
    );
}

#[test]
fn no_version_is_a_clear_error_and_writes_nothing() {
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("dist");
    for args in [
        vec!["--no-build", "--out", s(&target)],
        vec!["--out", s(&target), "not-a-version"],
    ] {
        let r = dist(&args, "1700000000", "022");
        assert!(!r.status.success());
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(
            err.contains("dist.sh:") && err.contains("nothing written"),
            "{args:?}: {err}"
        );
        assert!(
            !target.exists(),
            "{args:?}: {} was created",
            target.display()
        );
    }
}
