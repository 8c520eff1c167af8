//! Delegates of the same build run in-process; anything else is exec'd.
//!
//! The probe: a copy of our `host-local` whose execute bits are removed.
//! Exec'ing it fails ("Permission denied"), running it in-process works, so
//! the outcome of one ADD tells which path was taken. No root needed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::nodenet::workspace_bin;
use cni_exec::same_build::{read_marker, MARKER_LEN};
use cni_exec::{Command, Exec, PluginEnv};
use cni_plugins::binary::{ipam_delegates as delegates, marker};

#[path = "../../build/source_id.rs"]
mod source_id;

/// Which marker the probe copy carries.
#[derive(Clone, Copy, PartialEq)]
enum Marker {
    /// This build's.
    Ours,
    /// Another build's: one digit of the identity changed.
    OtherBuild,
    /// Name and crate version only: the identity before #31.8, which any
    /// patched or forked build of the same version carried too.
    VersionOnly,
}

/// A temp plugin dir holding a non-executable copy of our host-local,
/// with its marker as `which` says.
fn probe_dir(which: Marker) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ours = workspace_bin("cni-plugins", "host-local");
    let mut bytes = std::fs::read(&ours).unwrap();
    if which != Marker::Ours {
        let m = marker("host-local");
        let at = bytes
            .windows(MARKER_LEN)
            .position(|w| w == m)
            .expect("marker in the binary");
        match which {
            Marker::OtherBuild => {
                let v = at + b"cni-rs-plugin\0host-local\0".len();
                bytes[v] = if bytes[v] == b'9' { b'8' } else { b'9' };
            }
            _ => {
                let old =
                    cni_exec::same_build::plugin_marker("host-local", env!("CARGO_PKG_VERSION"));
                bytes[at..at + MARKER_LEN].copy_from_slice(&old);
            }
        }
    }
    let copy = dir.path().join("host-local");
    std::fs::write(&copy, bytes).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, copy)
}

fn add(exec: &dyn Exec, plugin: &Path, data_dir: &Path) -> Result<Vec<u8>, cni_exec::Error> {
    let conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "samebuild", "type": "bridge",
        "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": [[{"subnet": "10.66.0.0/24"}]]}
    });
    let mut env = PluginEnv::new(Command::Add, plugin.parent().unwrap().display().to_string());
    env.container_id = "c1".into();
    env.netns = "/nonexistent/netns".into();
    env.ifname = "eth0".into();
    exec.exec_plugin(plugin, &serde_json::to_vec(&conf).unwrap(), &env)
}

#[test]
fn our_binaries_carry_their_marker() {
    for name in ["host-local", "bridge", "static"] {
        let bin = workspace_bin("cni-plugins", name);
        assert_eq!(read_marker(&bin), Some(marker(name)), "{name}");
        // An independent reader of the section (binutils), where installed.
        if let Ok(out) = std::process::Command::new("readelf")
            .args(["-p", ".cni_rs_plugin"])
            .arg(&bin)
            .output()
        {
            let dump = String::from_utf8_lossy(&out.stdout);
            let strings: Vec<&str> = dump
                .lines()
                .filter_map(|l| l.split_once(']').map(|(_, s)| s.trim()))
                .collect();
            assert_eq!(
                strings,
                ["cni-rs-plugin", name, cni_plugins::binary::BUILD],
                "readelf: {dump}"
            );
        }
    }
    assert_eq!(read_marker(Path::new("/usr/lib/cni/host-local")), None);
}

#[test]
fn same_build_delegate_runs_in_process() {
    let (dir, copy) = probe_dir(Marker::Ours);
    let exec = delegates();
    let found = exec
        .find_plugin("host-local", &[dir.path().to_path_buf()])
        .unwrap();
    assert_eq!(found, copy);
    let data = tempfile::tempdir().unwrap();
    let out = add(&exec, &copy, data.path()).expect("in-process ADD");
    let result: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(result["ips"][0]["address"], "10.66.0.2/24");
    // The same reservation file the binary writes.
    assert!(data.path().join("samebuild/10.66.0.2").exists());
}

/// #31.8: the identity is the build's content, not its version: a file on
/// `CNI_PATH` carrying the name-and-version marker (what a patched build
/// of the same version carried, or anything given that section) is
/// exec'd, not replaced by our built-in plugin.
#[test]
fn a_version_only_marker_is_execd() {
    let data = tempfile::tempdir().unwrap();
    let (_dir, copy) = probe_dir(Marker::VersionOnly);
    let err = add(&delegates(), &copy, data.path()).unwrap_err();
    assert!(err.to_string().contains("ermission denied"), "{err}");
}

/// The features this test binary is built with, as `build.rs` sees them.
fn features() -> Vec<String> {
    let mut f = Vec::new();
    if cfg!(feature = "default") {
        f.push("default".to_string());
    }
    if cfg!(feature = "multus") {
        f.push("multus".to_string());
    }
    if cfg!(feature = "gc") {
        f.push("gc".to_string());
    }
    f
}

fn identity(root: &Path) -> String {
    let crates: Vec<(&str, PathBuf)> = source_id::CRATES
        .iter()
        .map(|c| (*c, root.join(c)))
        .collect();
    source_id::source_id(&crates, Some(&root.join("Cargo.lock")), &features()).unwrap()
}

/// #31.8: the marker's identity is a hash of the sources: the same for a
/// copy of them anywhere (a clean rebuild, another checkout), another one
/// when one byte of a plugin's code changes.
#[test]
fn the_build_identity_is_the_sources() {
    let root = crate::operator::workspace();
    // features() names each feature of the crate (cfg! takes literal names):
    // one it missed would make the identities differ in a build with it.
    let toml = std::fs::read_to_string(root.join("cni-plugins/Cargo.toml")).unwrap();
    let declared: Vec<&str> = toml
        .split("\n[features]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(" = ").map(|(k, _)| k.trim()))
        .filter(|k| !k.starts_with('#'))
        .collect();
    assert_eq!(
        declared,
        ["default", "multus", "gc"],
        "features() must name each of them"
    );
    assert_eq!(identity(&root), cni_plugins::binary::BUILD);
    let copy = tempfile::tempdir().unwrap();
    for c in source_id::CRATES {
        for rel in source_id::crate_files(&root.join(c)) {
            let to = copy.path().join(c).join(&rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(root.join(c).join(&rel), &to).unwrap();
        }
    }
    std::fs::copy(root.join("Cargo.lock"), copy.path().join("Cargo.lock")).unwrap();
    assert_eq!(identity(copy.path()), cni_plugins::binary::BUILD);
    // One byte of host-local's code.
    let f = copy.path().join("cni-ipam/src/host_local.rs");
    let mut text = std::fs::read(&f).unwrap();
    text.push(b'\n');
    std::fs::write(&f, text).unwrap();
    let changed = identity(copy.path());
    assert_ne!(changed, cni_plugins::binary::BUILD);
    assert_eq!(changed.len(), source_id::ID_LEN);
}

#[test]
fn other_builds_and_disabled_shortcut_are_execd() {
    let data = tempfile::tempdir().unwrap();
    let (_dir, other) = probe_dir(Marker::OtherBuild);
    let err = add(&delegates(), &other, data.path()).unwrap_err();
    assert!(err.to_string().contains("ermission denied"), "{err}");

    let (_dir, ours) = probe_dir(Marker::Ours);
    let err = add(&delegates().enabled(false), &ours, data.path()).unwrap_err();
    assert!(err.to_string().contains("ermission denied"), "{err}");
}

/// #31.6: a hostile `host-local` on `CNI_PATH` that prints 200 MiB before
/// its result is killed past 16 MiB of output, and the plugin delegating to
/// it fails with a clear error instead of buffering all of it. Each plugin
/// runs in a node namespace of its own, the pod in another.
#[test]
fn a_delegate_printing_too_much_is_killed() {
    use crate::common::{self, Call, CniPath};
    use std::time::{Duration, Instant};
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let loud = dir.path().join("loud-host-local");
    std::fs::write(
        &loud,
        "#!/bin/sh\ncat > /dev/null\nhead -c 209715200 /dev/zero | tr '\\0' ' '\n\
         echo '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.67.0.2/24\"}]}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&loud, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = CniPath::new(&[("host-local", &loud)]);
    for (plugin, bin) in [
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("ptp", env!("CARGO_BIN_EXE_ptp")),
        ("tap", env!("CARGO_BIN_EXE_tap")),
    ] {
        let node = common::netns("loudnode");
        let pod = common::netns("loudpod");
        let mut conf = serde_json::json!({"cniVersion": "1.0.0", "name": "loud", "type": plugin,
            "ipam": {"type": "host-local", "subnet": "10.67.0.0/24"}});
        if plugin == "bridge" {
            conf["bridge"] = serde_json::json!(format!("lb{}", common::hex6()));
        }
        let start = Instant::now();
        let reply = common::run(
            &node,
            &Call {
                plugin: Path::new(bin),
                cni_path: path.path(),
                command: "ADD",
                container_id: "loud",
                netns: &common::netns_path(&pod),
                ifname: "eth0",
                args: "",
            },
            &conf,
        );
        assert!(!reply.ok, "{plugin}: ADD took a result after 200 MiB");
        assert!(
            reply
                .msg()
                .contains("wrote more than 16777216 bytes to its stdout"),
            "{plugin}: {}",
            reply.msg()
        );
        assert!(start.elapsed() < Duration::from_secs(120), "{plugin}");
    }
}
