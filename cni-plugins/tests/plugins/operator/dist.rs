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
    let bins: Vec<String> = super::binaries().all.into_iter().collect();
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

    // The README names the plugins, then the programs that are not plugins.
    let readme = Command::new("tar")
        .arg("-xzOf")
        .arg(&ta)
        .arg("./README")
        .output()
        .unwrap();
    let readme = String::from_utf8(readme.stdout).unwrap();
    let (plugins, programs) = readme
        .split_once("and the programs that are not plugins:")
        .unwrap_or_else(|| panic!("README:\n{readme}"));
    let listed = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("  "))
            .filter(|l| !l.contains(' ') && !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let b = super::binaries();
    assert_eq!(
        listed(plugins),
        Vec::from_iter(b.plugins()),
        "README:\n{readme}"
    );
    assert_eq!(
        listed(programs),
        Vec::from_iter(b.programs),
        "README:\n{readme}"
    );
}

/// SOURCE_DATE_EPOCH is the archive's alone: the cargo build never sees it
/// (build scripts that compile C with the cc crate, ring's, rerun whenever
/// it changes, and the dist profile then relinks everything with fat LTO).
/// A `cargo` on PATH records what its `build` gets and stops the script.
#[test]
fn the_cargo_build_never_sees_source_date_epoch() {
    let shim = tempfile::tempdir().unwrap();
    let seen = shim.path().join("seen");
    let real = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = build ]; then echo \"${{SOURCE_DATE_EPOCH-unset}}\" >'{}'; exit 3; fi\nexec '{real}' \"$@\"\n",
        seen.display()
    );
    // Written by a child process: a file this multi-threaded test process
    // had open for writing could leak into a child another test thread
    // forks meanwhile, and exec'ing it would then fail with ETXTBSY.
    let cargo = shim.path().join("cargo");
    let ok = Command::new("sh")
        .args([
            "-c",
            "printf %s \"$1\" >\"$2\" && chmod 755 \"$2\"",
            "sh",
            &script,
        ])
        .arg(&cargo)
        .status()
        .unwrap();
    assert!(ok.success());
    let out = tempfile::tempdir().unwrap();
    let path = format!(
        "{}:{}",
        shim.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let r = Command::new(super::workspace().join("scripts/dist.sh"))
        .args(["--out", s(out.path()), "0.1.0"])
        .env("PATH", path)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .unwrap();
    assert_eq!(
        r.status.code(),
        Some(3),
        "dist.sh did not stop at the build: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(std::fs::read_to_string(&seen).unwrap().trim(), "unset");
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
