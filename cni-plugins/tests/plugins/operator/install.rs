//! `cni-install` on real files in temp dirs.

use cni_testkit::premise;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const INSTALLER: &str = env!("CARGO_BIN_EXE_cni-install");

fn run(args: &[&str]) -> Output {
    Command::new(INSTALLER)
        .args(args)
        .output()
        .expect("run cni-install")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A real ELF executable (`/bin/true`) with `pad` extra bytes at the end:
/// still runs, and two pads give two different files.
fn write_true(path: &Path, pad: usize, mode: u32) {
    let mut bytes = fs::read("/bin/true").expect("read /bin/true");
    bytes.extend(std::iter::repeat_n(0u8, pad));
    fs::write(path, bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A source dir with plugins `a` (0755) and `b` (0750), a program of this
/// crate that is not a plugin (`multus-daemon`), a non-executable file, and
/// a hidden one.
fn source(pad: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_true(&dir.path().join("a"), pad, 0o755);
    write_true(&dir.path().join("b"), pad + 1, 0o750);
    write_true(&dir.path().join("multus-daemon"), pad + 2, 0o755);
    fs::write(dir.path().join("README"), "not a plugin").unwrap();
    write_true(&dir.path().join(".hidden"), 0, 0o755);
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Names and contents of a directory, sorted: what "nothing changed" compares.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = fs::symlink_metadata(e.path()).unwrap();
            let data = if meta.is_file() {
                fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (
                e.file_name().into_string().unwrap(),
                data,
                meta.permissions().mode(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn installs_then_reports_unchanged_as_0755() {
    let src = source(1);
    let dst = tempfile::tempdir().unwrap();
    let first = run(&["--to", s(dst.path()), "--from", s(src.path())]);
    assert!(first.status.success(), "{}", stderr(&first));
    let a = dst.path().join("a");
    let b = dst.path().join("b");
    assert_eq!(
        stdout(&first),
        format!("installed {}\ninstalled {}\n", a.display(), b.display())
    );
    assert_eq!(
        fs::read(&a).unwrap(),
        fs::read(src.path().join("a")).unwrap()
    );
    assert_eq!(
        fs::metadata(&a).unwrap().permissions().mode() & 0o7777,
        0o755
    );
    // Every plugin 0755, whatever the source's mode (#31.7).
    assert_eq!(
        fs::metadata(&b).unwrap().permissions().mode() & 0o7777,
        0o755
    );
    // Neither the README, nor the hidden file, nor a temp file, nor a
    // program that is not a plugin (`install::PROGRAMS`).
    let names: Vec<_> = snapshot(dst.path()).into_iter().map(|(n, ..)| n).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(cni_plugins::install::PROGRAMS.contains(&"multus-daemon"));

    let second = run(&["--to", s(dst.path()), "--from", s(src.path())]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(
        stdout(&second),
        format!("unchanged {}\nunchanged {}\n", a.display(), b.display())
    );

    // A changed mode alone is a change.
    fs::set_permissions(&b, fs::Permissions::from_mode(0o700)).unwrap();
    let third = run(&[
        "--to",
        s(dst.path()),
        "--from",
        s(src.path()),
        "--only",
        "b",
    ]);
    assert_eq!(stdout(&third), format!("installed {}\n", b.display()));
    assert_eq!(
        fs::metadata(&b).unwrap().permissions().mode() & 0o7777,
        0o755
    );

    // A program is installed when named.
    let daemon = dst.path().join("multus-daemon");
    let fourth = run(&[
        "--to",
        s(dst.path()),
        "--from",
        s(src.path()),
        "--only",
        "multus-daemon",
    ]);
    assert_eq!(stdout(&fourth), format!("installed {}\n", daemon.display()));
}

/// #31.7: a set-user-ID or set-group-ID source owned by `nobody` is
/// installed root-owned 0755, never set-ID-root.
#[test]
fn set_id_bits_are_never_installed() {
    use std::os::unix::fs::MetadataExt;
    if !premise::require(premise::is_root(), "needs root (a file owned by nobody)") {
        return;
    }
    let src = tempfile::tempdir().unwrap();
    for (name, mode) in [("suid", 0o4755), ("sgid", 0o2755), ("both", 0o6750)] {
        let p = src.path().join(name);
        write_true(&p, 3, 0o755);
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        // chown clears set-ID bits: set them after.
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, mode);
    }
    let dst = tempfile::tempdir().unwrap();
    let out = run(&["--to", s(dst.path()), "--from", s(src.path())]);
    assert!(out.status.success(), "{}", stderr(&out));
    for name in ["suid", "sgid", "both"] {
        let m = fs::metadata(dst.path().join(name)).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755, "{name}");
        assert_eq!((m.uid(), m.gid()), (0, 0), "{name}");
    }
    // An installed file whose owner differs is rewritten.
    let suid = dst.path().join("suid");
    std::os::unix::fs::chown(&suid, Some(65534), None).unwrap();
    fs::set_permissions(&suid, fs::Permissions::from_mode(0o755)).unwrap();
    let again = run(&[
        "--to",
        s(dst.path()),
        "--from",
        s(src.path()),
        "--only",
        "suid",
    ]);
    assert_eq!(stdout(&again), format!("installed {}\n", suid.display()));
    assert_eq!(fs::metadata(&suid).unwrap().uid(), 0);
}

#[test]
fn skip_existing_keeps_what_is_there() {
    let src = source(1);
    let dst = tempfile::tempdir().unwrap();
    write_true(&dst.path().join("a"), 100, 0o755);
    let before = fs::read(dst.path().join("a")).unwrap();
    let out = run(&[
        "--to",
        s(dst.path()),
        "--from",
        s(src.path()),
        "--skip-existing",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "skipped {}\ninstalled {}\n",
            dst.path().join("a").display(),
            dst.path().join("b").display()
        )
    );
    assert_eq!(fs::read(dst.path().join("a")).unwrap(), before);

    // An existing symlink is kept too: nothing is overwritten.
    let other = tempfile::tempdir().unwrap();
    symlink("/bin/true", other.path().join("b")).unwrap();
    let out = run(&[
        "--to",
        s(other.path()),
        "--from",
        s(src.path()),
        "--only",
        "b",
        "--skip-existing",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("skipped {}\n", other.path().join("b").display())
    );
    assert!(fs::symlink_metadata(other.path().join("b"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn default_source_is_the_installers_own_directory() {
    let src = source(1);
    let installer = src.path().join("cni-install");
    // Copied by another process: a file this multi-threaded test process
    // had open for writing could leak into a child another test thread
    // forks meanwhile, and exec'ing it would then fail with ETXTBSY.
    let cp = Command::new("cp")
        .arg(INSTALLER)
        .arg(&installer)
        .status()
        .unwrap();
    assert!(cp.success());
    let dst = tempfile::tempdir().unwrap();
    let out = Command::new(&installer)
        .args(["--to", s(dst.path())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<_> = snapshot(dst.path()).into_iter().map(|(n, ..)| n).collect();
    assert_eq!(names, ["a", "b"], "the installer does not install itself");
}

#[test]
fn a_missing_requested_binary_installs_nothing() {
    let src = source(1);
    let dst = tempfile::tempdir().unwrap();
    let out = run(&[
        "--to",
        s(dst.path()),
        "--from",
        s(src.path()),
        "--only",
        "a,nope,README",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("nope, README") && err.contains("nothing installed"),
        "{err}"
    );
    assert!(snapshot(dst.path()).is_empty(), "a was installed anyway");
}

#[test]
fn a_symlink_or_directory_at_the_destination_is_refused() {
    let src = source(1);
    for kind in ["symlink", "directory"] {
        let dst = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        let victim = target.path().join("victim");
        fs::write(&victim, "keep me").unwrap();
        // `a` is fine; `b` is the non-regular destination.
        match kind {
            "symlink" => symlink(&victim, dst.path().join("b")).unwrap(),
            _ => fs::create_dir(dst.path().join("b")).unwrap(),
        }
        let before = snapshot(dst.path());
        let out = run(&["--to", s(dst.path()), "--from", s(src.path())]);
        assert_eq!(out.status.code(), Some(1), "{kind}");
        let err = stderr(&out);
        assert!(
            err.contains("refusing to replace") && err.contains(&format!("a {kind}")),
            "{kind}: {err}"
        );
        assert_eq!(
            snapshot(dst.path()),
            before,
            "{kind}: the target changed (a installed?)"
        );
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me");
    }
}

/// A tmpfs mounted on a temp dir (unmounted on drop, on failure too).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount() -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        sh(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=64m,mode=0755",
            "cni-install-test",
            s(dir.path()),
        ]);
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn read_only(&self) {
        sh(&["mount", "-o", "remount,ro", s(self.path())]);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Root ignores file modes: the target is a tmpfs remounted read-only,
/// which refuses root too.
#[test]
fn a_read_only_target_is_a_clear_error_and_nothing_changes() {
    if !premise::require(premise::is_root(), "mounting a tmpfs needs root") {
        return;
    }
    let src = source(1);
    let fs_ = Tmpfs::mount();
    write_true(&fs_.path().join("a"), 500, 0o755);
    fs_.read_only();
    let before = snapshot(fs_.path());
    let out = run(&["--to", s(fs_.path()), "--from", s(src.path())]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("create temporary file") && err.contains("Read-only file system"),
        "{err}"
    );
    assert!(
        stdout(&out).is_empty(),
        "reported a change: {}",
        stdout(&out)
    );
    assert_eq!(snapshot(fs_.path()), before);

    // Up to date on a read-only target: nothing to write, success.
    let same = Tmpfs::mount();
    let ok = run(&["--to", s(same.path()), "--from", s(src.path())]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    same.read_only();
    let again = run(&["--to", s(same.path()), "--from", s(src.path())]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stdout(&again).starts_with("unchanged "),
        "{}",
        stdout(&again)
    );
}

/// While a thread execs the installed plugin as fast as it can, the
/// installer replaces it 200 times (two different versions in turn): no
/// exec ever fails (a half-written file would not run) and no install ever
/// fails (`ETXTBSY` is what `cp` onto a running binary gets).
#[test]
fn install_while_the_plugin_is_being_execd() {
    let v1 = source(1);
    let v2 = source(4096);
    let dst = tempfile::tempdir().unwrap();
    let first = run(&["--to", s(dst.path()), "--from", s(v1.path()), "--only", "a"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let plugin: PathBuf = dst.path().join("a");

    let stop = Arc::new(AtomicBool::new(false));
    let execs = Arc::new(AtomicUsize::new(0));
    let runner = {
        let (stop, execs, plugin) = (stop.clone(), execs.clone(), plugin.clone());
        std::thread::spawn(move || -> Result<(), String> {
            while !stop.load(Ordering::Relaxed) {
                let status = Command::new(&plugin)
                    .status()
                    .map_err(|e| format!("exec {}: {e}", plugin.display()))?;
                if !status.success() {
                    return Err(format!("{} exited {status}", plugin.display()));
                }
                execs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };
    let started = std::time::Instant::now();
    for i in 0..200 {
        let from = if i % 2 == 0 { v2.path() } else { v1.path() };
        let out = run(&["--to", s(dst.path()), "--from", s(from), "--only", "a"]);
        assert!(out.status.success(), "install {i}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            format!("installed {}\n", plugin.display()),
            "install {i}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    runner.join().unwrap().unwrap();
    eprintln!(
        "200 installs in {:?} with {} concurrent execs of the plugin",
        started.elapsed(),
        execs.load(Ordering::Relaxed)
    );
    assert!(execs.load(Ordering::Relaxed) > 0, "the exec loop never ran");
    // The last install was v1 (i = 199); no temp file is left.
    assert_eq!(
        fs::read(&plugin).unwrap(),
        fs::read(v1.path().join("a")).unwrap()
    );
    let names: Vec<_> = snapshot(dst.path()).into_iter().map(|(n, ..)| n).collect();
    assert_eq!(names, ["a"]);
}
