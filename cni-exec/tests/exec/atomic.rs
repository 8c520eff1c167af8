//! The shared atomic writer (`cni_exec::atomic`): replaces or leaves the old
//! file, and its stale-temp cleanup removes every writer's temporary names
//! (this build's and earlier builds') and nothing else.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cni_exec::atomic::{self, AtomicWrite};

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
        cni_exec::Error::Io { op, path, source } => {
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
            cni_exec::Error::Io {
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
fn stale_temp_cleanup_knows_every_writer_and_nothing_else() {
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
        ".net-cid-eth0.x.tmp",
        "net-cid-eth0.tmp.1.2",
        "foo.tmp",
        ".json.tmp",
        ".cni-ipam-tmp.",
    ];
    for name in kept {
        touch(name);
    }
    // What each writer, old and new, leaves when killed before its rename.
    let new_style: Vec<String> = [
        "net-cid-eth0",
        "cid@eth0",
        "00-multus.conf",
        "cid-eth0.json",
        "10.1.2.3",
    ]
    .iter()
    .map(|t| leftover(&d.join(t)))
    .collect();
    let old_style = [
        ".net-cid-eth0.tmp.4242.7",  // result cache, flannel
        ".cid@eth0.tmp.17.0",        // flannel
        ".net-cid-eth0.tmp4242",     // multus cache
        ".00-multus.conf.4242.tmp",  // multus auto-configuration
        "cid-eth0.json.tmp",         // tuning backup
        ".cni-ipam-tmp.reservation", // host-local reservation
        ".cni-ipam-tmp.last_reserved_ip",
        ".cni-ipam-tmp.4242.7",
    ];
    for name in old_style {
        touch(name);
    }
    for name in new_style.iter().map(String::as_str).chain(old_style) {
        assert!(atomic::is_temp_name(name), "{name}");
    }
    for name in kept {
        assert!(!atomic::is_temp_name(name), "{name}");
    }

    // Per target: only that target's temporary names go (the host-local
    // store's old names belong to no target: only the whole-directory
    // cleanup, run under the store's lock, removes them).
    assert_eq!(atomic::remove_stale_temps(&d.join("net-cid-eth0")), 3);
    let left = listing(d);
    for gone in [
        new_style[0].as_str(),
        ".net-cid-eth0.tmp.4242.7",
        ".net-cid-eth0.tmp4242",
    ] {
        assert!(!left.contains(gone), "{gone}");
    }
    assert!(left.contains(".cni-ipam-tmp.reservation"));
    assert!(left.contains(&new_style[1]) && left.contains("cid-eth0.json.tmp"));
    assert_eq!(atomic::remove_stale_temps(&d.join("cid-eth0.json")), 2);
    assert_eq!(atomic::remove_stale_temps(&d.join("00-multus.conf")), 2);

    // Whole directory: every temporary name goes, every other file stays.
    assert_eq!(atomic::remove_stale_temps_in(d), 6);
    let expect: BTreeSet<String> = kept.iter().map(|s| s.to_string()).collect();
    assert_eq!(listing(d), expect);
    // The result cache's cleanup is the shared one.
    let t = leftover(&d.join("net-cid-eth0"));
    cni_exec::cache::remove_temp_files(&d.join("net-cid-eth0"));
    assert!(!d.join(t).exists());
}
