//! The conformance kit against our own plugin binaries (all cases must
//! pass), and against plugins made to misbehave (the kit must notice).
//!
//! Needs root and the debug plugin binaries: run
//! `cargo build -p cni-plugins --bins` first (`cargo test --workspace`
//! builds them too). They are looked up in `$CARGO_TARGET_DIR/debug`, else
//! in `target/debug` of the workspace.

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn plugin_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("debug"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug"),
    }
}

fn our_plugin(name: &str) -> PathBuf {
    let path = plugin_dir().join(name);
    assert!(
        path.is_file(),
        "plugin binary {} is missing: run `cargo build -p cni-plugins --bins` first",
        path.display()
    );
    path
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    fn failures(&self) -> Vec<&str> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with("FAIL "))
            .collect()
    }

    fn case(&self, name: &str) -> &str {
        self.lines()
            .into_iter()
            .find(|l| {
                l.strip_prefix("ok ")
                    .or_else(|| l.strip_prefix("FAIL "))
                    .is_some_and(|rest| rest.split([' ', ':']).next() == Some(name))
            })
            .unwrap_or_else(|| panic!("no case {name} in:\n{}", self.stdout))
    }
}

fn kit(args: &[&str], plugin: &Path) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_cni-conformance"))
        .args(args)
        .arg(plugin)
        .output()
        .expect("run cni-conformance");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every case passes, the summary says so and the exit status is 0.
fn assert_all_pass(name: &str) {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let run = kit(&[], &our_plugin(name));
    assert!(
        run.failures().is_empty() && run.code == Some(0),
        "{name}: exit {:?}\n{}{}",
        run.code,
        run.stdout,
        run.stderr
    );
    let lines = run.lines();
    let last = lines.last().copied().unwrap_or_default();
    assert_eq!(
        last,
        format!("{} passed, 0 failed", lines.len() - 1),
        "{}",
        run.stdout
    );
    for must in [
        "version",
        "add-check-del-del",
        "del-without-add",
        "del-after-netns-deleted",
        "error-unsupported-version",
        "unknown-command",
        "host-netns-refused",
    ] {
        run.case(must);
    }
}

#[test]
fn bridge() {
    assert_all_pass("bridge");
}

#[test]
fn ptp() {
    assert_all_pass("ptp");
}

#[test]
fn macvlan() {
    assert_all_pass("macvlan");
}

#[test]
fn host_device() {
    assert_all_pass("host-device");
}

#[test]
fn loopback() {
    assert_all_pass("loopback");
}

#[test]
fn host_local() {
    assert_all_pass("host-local");
}

#[test]
fn static_ipam() {
    assert_all_pass("static");
}

#[test]
fn tuning() {
    assert_all_pass("tuning");
}

#[test]
fn bandwidth() {
    assert_all_pass("bandwidth");
}

#[test]
fn portmap() {
    assert_all_pass("portmap");
}

#[test]
fn flannel() {
    assert_all_pass("flannel");
}

/// This kernel has no ipvlan: every case that needs a successful ADD fails
/// with the plugin's "not supported by this kernel" error, every other case
/// passes. On a kernel with ipvlan, everything passes.
#[test]
fn ipvlan_on_a_kernel_without_ipvlan_fails_only_the_add_cases() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let run = kit(&[], &our_plugin("ipvlan"));
    if run.code == Some(0) {
        return;
    }
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    let needs_add = |l: &str| {
        [
            "FAIL add-check-del-del:",
            "FAIL del-without-netns:",
            "FAIL del-after-netns-deleted:",
            "FAIL add-result-",
            "FAIL gc-empty-valid-attachments:",
        ]
        .iter()
        .any(|p| l.starts_with(p))
    };
    for line in run.failures() {
        assert!(
            needs_add(line) && line.contains("ipvlan is not supported by this kernel"),
            "unexpected failure: {line}\n{}",
            run.stdout
        );
    }
    for case in [
        "version",
        "del-without-add",
        "error-unsupported-version",
        "error-missing-ifname",
        "unknown-command",
        "add-ifname-exists",
        "host-netns-refused",
        "status",
    ] {
        assert!(run.case(case).starts_with("ok "), "{}", run.stdout);
    }
}

/// A `.conflist` given with `--config`: the plugin of the binary's type is
/// taken from it.
#[test]
fn config_file_from_a_conflist() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("10-net.conflist");
    let conflist = serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "userconf",
        "plugins": [
            {"type": "ptp", "ipMasq": true, "ipam": {
                "type": "host-local",
                "subnet": "10.77.0.0/24",
                // Replaced by the kit's own directory.
                "dataDir": "/var/lib/cni/networks"
            }},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    std::fs::write(&path, conflist.to_string()).unwrap();
    let run = kit(
        &["--config", path.to_str().unwrap(), "--ifname", "net1"],
        &our_plugin("ptp"),
    );
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    // The config's version is the one ADD/CHECK/DEL use.
    assert!(run.case("add-check-del-del").starts_with("ok "));
    assert!(!Path::new("/var/lib/cni/networks/userconf").exists());
}

fn script_plugin(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A plugin that answers `{}` to everything with exit 0 fails every case
/// that looks at an answer; only DEL-style cases pass.
#[test]
fn a_plugin_that_always_succeeds_fails_the_kit() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = script_plugin(dir.path(), "loopback", "cat >/dev/null; echo '{}'");
    let run = kit(&[], &plugin);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    for case in [
        "version",
        "add-check-del-del",
        "error-unsupported-version",
        "error-missing-ifname",
        "unknown-command",
        "host-netns-refused",
    ] {
        assert!(
            run.case(case).starts_with("FAIL "),
            "{case}:\n{}",
            run.stdout
        );
    }
    assert!(run.case("del-without-add").starts_with("ok "));
    assert!(
        run.stdout.ends_with("2 passed, 8 failed\n"),
        "{}",
        run.stdout
    );
}

/// A plugin that never answers is killed after the timeout and the case
/// fails; the run goes on.
#[test]
fn a_hanging_plugin_is_killed_after_the_timeout() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = script_plugin(
        dir.path(),
        "loopback",
        r#"if [ "$CNI_COMMAND" = VERSION ]; then sleep 600; fi; cat >/dev/null; echo '{}'"#,
    );
    let started = std::time::Instant::now();
    let run = kit(&["--timeout", "1"], &plugin);
    assert!(
        started.elapsed().as_secs() < 30,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    assert!(run.case("version").contains("timed out"), "{}", run.stdout);
}

/// Usage errors and an unknown type without a config exit 2 (the kit could
/// not run), not 1 (a plugin failed).
#[test]
fn kit_errors_exit_2() {
    let missing = kit(&[], Path::new("/nonexistent/bridge"));
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);
    assert!(missing.stderr.contains("not found"), "{}", missing.stderr);
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = script_plugin(dir.path(), "mystery", "echo '{}'");
    let unknown = kit(&[], &plugin);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(unknown.stderr.contains("--config"), "{}", unknown.stderr);
}

/// SIGINT stops the run: the plugin call in progress is killed, the kit's
/// namespaces are removed, and the exit status is 130.
#[test]
fn sigint_cleans_up_and_exits_130() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let plugin = script_plugin(
        dir.path(),
        "bridge",
        &format!(
            r#"if [ "$CNI_COMMAND" = ADD ]; then echo "$$ $CNI_NETNS" > {seen}.tmp; mv {seen}.tmp {seen}; exec sleep 600; fi
cat >/dev/null; echo '{{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}}'"#,
            seen = seen.display()
        ),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_cni-conformance"))
        .arg(&plugin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !seen.exists() {
        assert!(
            started.elapsed().as_secs() < 20,
            "the plugin's ADD never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&seen).unwrap();
    let (pid, netns) = text.trim().split_once(' ').unwrap();
    assert!(Path::new(netns).exists());
    let kit_pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &kit_pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!Path::new(netns).exists(), "{netns} left behind");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "plugin process {pid} still running"
    );
}

/// The GC case really looks at the firewall: a chained plugin that adds an
/// nftables rule naming the container on ADD, removes it on DEL, and does
/// nothing on GC fails `gc-empty-valid-attachments`. (Needs `nft` and `jq`,
/// both installed by scripts/test-all.sh.)
#[test]
fn gc_that_leaves_a_firewall_rule_fails() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = script_plugin(
        dir.path(),
        "portmap",
        r#"case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}' ;;
ADD)
    conf=$(cat)
    nft add table inet cnikfake && nft add chain inet cnikfake c || exit 1
    nft add rule inet cnikfake c counter comment "\"$CNI_CONTAINERID\"" || exit 1
    printf '%s' "$conf" | jq -c '.prevResult + {cniVersion: .cniVersion}' ;;
DEL) cat >/dev/null; nft flush chain inet cnikfake c 2>/dev/null; exit 0 ;;
*) cat >/dev/null; exit 0 ;;
esac"#,
    );
    let run = kit(&[], &plugin);
    assert!(
        run.case("add-check-del-del").starts_with("ok "),
        "{}{}",
        run.stdout,
        run.stderr
    );
    let gc = run.case("gc-empty-valid-attachments");
    assert!(
        gc.starts_with("FAIL ") && gc.contains("firewall item(s) added for the attachment remain"),
        "{}",
        run.stdout
    );
}

/// #31.13: the kit's firewall case keeps the plugin's state in the kit's
/// own directory, not the node's `/run/cni/firewall` (checked by name: no
/// `cnik-*` network directory appears there), and the run passes.
#[test]
fn firewall_state_stays_in_the_kits_directory() {
    // The built-in config names a directory of the kit's.
    let names = cni_testkit::conformance::SandboxNames::new("t", Path::new("/kit-data"));
    let conf = cni_testkit::conformance::PluginKind::Firewall
        .config("1.0.0", &names)
        .expect("a built-in firewall config");
    assert!(
        conf["dataDir"]
            .as_str()
            .is_some_and(|d| d.starts_with("/kit-data/")),
        "{conf}"
    );
    if !cni_testkit::premise::require_root() {
        return;
    }
    let node_dir = Path::new("/run/cni/firewall");
    let kits = || -> Vec<String> {
        std::fs::read_dir(node_dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("cnik-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = kits();
    let run = kit(&[], &our_plugin("firewall"));
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    let new: Vec<String> = kits().into_iter().filter(|n| !before.contains(n)).collect();
    assert!(new.is_empty(), "left in {}: {new:?}", node_dir.display());
}

/// #31.13: `--timeout` past a day (a deadline that would overflow the
/// clock) and `--config /dev/zero` are usage errors (exit 2), not a panic
/// or a read until the memory is gone (here capped at 1 GiB).
#[test]
fn hostile_options_are_usage_errors() {
    for secs in ["18446744073709551615", "0", "86401"] {
        let run = kit(&["--timeout", secs], &our_plugin("loopback"));
        assert_eq!(run.code, Some(2), "{secs}: {}", run.stderr);
        assert!(run.stderr.contains("--timeout"), "{}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cni-conformance"));
    cmd.args(["--config", "/dev/zero"])
        .arg(our_plugin("loopback"));
    // SAFETY: setrlimit(2) is async-signal-safe; it runs in the child
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run cni-conformance");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("larger than 4194304 bytes"), "{stderr}");
}

/// #31.13: plugins the kit runs start with no signal blocked, though the
/// kit blocks SIGINT, SIGTERM and SIGHUP for its own handling.
#[test]
fn plugins_start_with_no_signal_blocked() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let masks = dir.path().join("masks");
    let plugin = script_plugin(
        dir.path(),
        "probe",
        &format!(
            // The shell reads its own status (a builtin: no fork, whose
            // moment dash blocks every signal around).
            "while read -r k v; do [ \"$k\" = SigBlk: ] && echo \"$k $v\" >> '{}'; done < /proc/self/status\ncat >/dev/null\necho '{{\"cniVersion\":\"1.0.0\"}}'",
            masks.display()
        ),
    );
    let conf = dir.path().join("probe.conf");
    std::fs::write(
        &conf,
        r#"{"cniVersion":"1.0.0","name":"probe","type":"probe"}"#,
    )
    .unwrap();
    let run = kit(
        &["--role", "chained", "--config", conf.to_str().unwrap()],
        &plugin,
    );
    let text = std::fs::read_to_string(&masks).unwrap_or_default();
    assert!(
        !text.is_empty(),
        "the probe never ran: {}{}",
        run.stdout,
        run.stderr
    );
    for line in text.lines() {
        assert_eq!(
            line.split_whitespace().nth(1),
            Some("0000000000000000"),
            "{text}"
        );
    }
}

/// A plugin that prints without end (200 MB per call) is killed at the
/// runtime's output cap (16 MiB) and its cases fail saying so; the kit's
/// memory stays bounded (it held the whole output before: 413 MB).
#[test]
fn a_plugin_printing_without_end_is_cut_at_the_output_cap() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = script_plugin(
        dir.path(),
        "loopback",
        "cat >/dev/null; head -c 200000000 /dev/zero",
    );
    // Peak RSS from GNU time's wait4, not ours: a child of the test
    // process shares its memory until exec and the kernel counts it.
    let report = dir.path().join("rss");
    let out = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&report)
        .args(["-f", "%M", "--", env!("CARGO_BIN_EXE_cni-conformance")])
        .args(["--timeout", "60"])
        .arg(&plugin)
        .output()
        .expect("run cni-conformance under /usr/bin/time");
    let maxrss_kib: u64 = std::fs::read_to_string(&report)
        .expect("GNU time's report (is /usr/bin/time installed?)")
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("an RSS figure");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("wrote more than 16777216 bytes to stdout"),
        "{stdout}"
    );
    let run = Run {
        code: out.status.code(),
        stdout,
        stderr: String::new(),
    };
    assert!(run.case("version").starts_with("FAIL "), "{}", run.stdout);
    eprintln!("cni-conformance peak RSS: {} MiB", maxrss_kib >> 10);
    assert!(maxrss_kib < 128 << 10, "peak RSS {maxrss_kib} KiB");
}
