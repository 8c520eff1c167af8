//! The shared atomic writer (`cni_files::atomic`): replaces or leaves the old
//! file, and its stale-temp cleanup removes its temporary names and nothing
//! else.

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cni_files::atomic::{self, AtomicWrite};

fn listing(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// A temporary file exactly as a writer killed before its rename leaves it.
fn leftover(path: &Path) -> String {
    let staged = AtomicWrite::new().stage(path, b"half").unwrap();
    let name = staged
        .temp_path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    std::mem::forget(staged);
    name
}

#[test]
fn writes_replace_with_mode_and_sync_options() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/dir/f.json");
    let w = AtomicWrite::new()
        .mode(0o640)
        .create_dir(0o700)
        .fsync(true)
        .fsync_dir(true);
    w.write(&path, b"one").unwrap();
    w.write(&path, b"two").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"two");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o640);
    assert_eq!(mode(&dir.path().join("sub/dir")), 0o700);
    assert_eq!(
        listing(&dir.path().join("sub/dir")),
        ["f.json".to_string()].into()
    );

    // No directory: a typed error naming the temporary file, nothing left.
    let e = AtomicWrite::new()
        .write(&dir.path().join("missing/f"), b"x")
        .unwrap_err();
    match e {
        cni_files::Error::Io { op, path, source } => {
            assert_eq!(op, "create temporary file");
            assert!(path.starts_with(dir.path().join("missing")), "{path:?}");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        e => panic!("{e:?}"),
    }

    // The rename fails (the target is a non-empty directory): the target is
    // untouched and the temporary file removed.
    let target = dir.path().join("busy");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("inside"), b"keep").unwrap();
    let e = AtomicWrite::new().write(&target, b"x").unwrap_err();
    assert!(
        matches!(
            e,
            cni_files::Error::Io {
                op: "rename onto",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(fs::read(target.join("inside")).unwrap(), b"keep");
    assert_eq!(
        listing(dir.path()),
        ["busy".to_string(), "sub".to_string()].into()
    );

    // A staged file dropped without commit is removed; committed, it is the
    // target.
    let path = dir.path().join("staged");
    let staged = AtomicWrite::new().stage(&path, b"s").unwrap();
    let temp = staged.temp_path().to_path_buf();
    assert!(temp.exists() && !path.exists());
    drop(staged);
    assert!(!temp.exists());
    AtomicWrite::new()
        .stage(&path, b"s")
        .unwrap()
        .commit()
        .unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"s");
}

#[test]
fn concurrent_writers_never_share_a_temp_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let path = &path;
            s.spawn(move || {
                for _ in 0..200 {
                    AtomicWrite::new().write(path, &[t; 512]).unwrap();
                }
            });
        }
    });
    let data = fs::read(&path).unwrap();
    assert_eq!(data.len(), 512);
    assert!(data.iter().all(|b| *b == data[0]));
    assert_eq!(listing(dir.path()), ["f".to_string()].into());
}

#[test]
fn stale_temp_cleanup_removes_temp_names_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let touch = |name: &str| fs::write(d.join(name), b"x").unwrap();
    // The targets and every file that is not a temporary name.
    let kept = [
        "net-cid-eth0",
        "cid@eth0",
        "00-multus.conf",
        "cid-eth0.json",
        "10.1.2.3",
        "2001:db8::1",
        "last_reserved_ip.0",
        "lock",
        "state",
        ".hidden",
        ".net-cid-eth0.tmp",
        ".net-cid-eth0.tmpx",
        ".net-cid-eth0.tmp4242",
        ".net-cid-eth0.tmp.4242",
        ".net-cid-eth0.x.tmp",
        "net-cid-eth0.tmp.1.2",
        "foo.tmp",
        ".json.tmp",
    ];
    for name in kept {
        touch(name);
    }
    // What a writer killed before its rename leaves, per target.
    let leftovers: Vec<String> = [
        "net-cid-eth0",
        "cid@eth0",
        "00-multus.conf",
        "cid-eth0.json",
        "10.1.2.3",
    ]
    .iter()
    .map(|t| leftover(&d.join(t)))
    .collect();
    for name in &leftovers {
        assert!(atomic::is_temp_name(name), "{name}");
    }
    for name in kept {
        assert!(!atomic::is_temp_name(name), "{name}");
    }

    // Per target: only that target's temporary names go.
    assert_eq!(atomic::remove_stale_temps(&d.join("net-cid-eth0")), 1);
    let left = listing(d);
    assert!(!left.contains(&leftovers[0]));
    assert!(leftovers[1..].iter().all(|n| left.contains(n)));

    // Whole directory: every temporary name goes, every other file stays.
    assert_eq!(atomic::remove_stale_temps_in(d), 4);
    let expect: BTreeSet<String> = kept.iter().map(|s| s.to_string()).collect();
    assert_eq!(listing(d), expect);
}

/// Only the temp files of writers that no longer run are removed: a live
/// writer's (this process's) stays, and so does every other file.
#[test]
fn dead_writers_temps_are_removed_live_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let live = format!(".a.tmp.{}.0", std::process::id());
    // pid_max is at most 2^22: no process has this pid.
    let dead = ".a.tmp.999999999.0";
    for name in ["a", live.as_str(), dead, ".a.tmp.x.0"] {
        fs::write(d.join(name), b"x").unwrap();
    }
    assert_eq!(atomic::remove_dead_writers_temps(d), 1);
    assert_eq!(
        listing(d),
        ["a".to_string(), live, ".a.tmp.x.0".to_string()].into()
    );
}

/// `exact_mode` sets the mode whatever the umask, after the data (a mode
/// without the owner's write bit does not stop the write); `owner` chowns
/// (to our own ids here: chowning to another needs root).
#[test]
fn exact_mode_and_owner_are_applied_after_the_data() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bin");
    let me = fs::metadata(dir.path()).unwrap();
    for mode in [0o755, 0o500] {
        AtomicWrite::new()
            .mode(mode)
            .exact_mode(true)
            .owner(me.uid(), me.gid())
            .fsync(true)
            .stage_from(&path, &mut &b"#!/bin/true\n"[..])
            .unwrap()
            .commit()
            .unwrap();
        let m = fs::metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, mode);
        assert_eq!((m.uid(), m.gid()), (me.uid(), me.gid()));
        assert_eq!(fs::read(&path).unwrap(), b"#!/bin/true\n");
    }
}
