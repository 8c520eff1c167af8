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

/// A temp plugin dir holding a non-executable copy of our host-local,
/// optionally with its marker rewritten to another build's.
fn probe_dir(other_build: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ours = workspace_bin("cni-plugins", "host-local");
    let mut bytes = std::fs::read(&ours).unwrap();
    if other_build {
        let m = marker("host-local");
        let at = bytes
            .windows(MARKER_LEN)
            .position(|w| w == m)
            .expect("marker in the binary");
        // "0.x.y" -> "9.x.y": the same plugin of another version.
        let v = at + b"cni-rs-plugin\0host-local\0".len();
        bytes[v] = b'9';
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
    let (dir, copy) = probe_dir(false);
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

#[test]
fn other_builds_and_disabled_shortcut_are_execd() {
    let data = tempfile::tempdir().unwrap();
    let (_dir, other) = probe_dir(true);
    let err = add(&delegates(), &other, data.path()).unwrap_err();
    assert!(err.to_string().contains("ermission denied"), "{err}");

    let (_dir, ours) = probe_dir(false);
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
