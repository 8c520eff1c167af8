//! Input limits, through the real plugin binaries: stdin past the 16 MiB
//! cap, deeply nested JSON, huge `CNI_ARGS`, and names with control
//! characters. Every case must end, within a timeout, in one CNI error JSON
//! on stdout with the expected code and exit status 1, and no panic note on
//! stderr.
//!
//! Nothing here reaches the kernel: every case fails in the runner (skel)
//! or in the plugin's config and argument checks, before a namespace is
//! opened; `CNI_NETNS` names a path that does not exist.
// Runs the multus binaries too: needs the `multus` feature.
#![cfg(feature = "multus")]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_exec::{Exec, PluginEnv, ProcessExec};
use serde_json::{json, Value};

/// Every plugin binary of this crate.
const PLUGINS: &[(&str, &str)] = &[
    ("bandwidth", env!("CARGO_BIN_EXE_bandwidth")),
    ("bridge", env!("CARGO_BIN_EXE_bridge")),
    ("dhcp", env!("CARGO_BIN_EXE_dhcp")),
    ("dummy", env!("CARGO_BIN_EXE_dummy")),
    ("firewall", env!("CARGO_BIN_EXE_firewall")),
    ("flannel", env!("CARGO_BIN_EXE_flannel")),
    ("host-device", env!("CARGO_BIN_EXE_host-device")),
    ("host-local", env!("CARGO_BIN_EXE_host-local")),
    ("ipvlan", env!("CARGO_BIN_EXE_ipvlan")),
    ("loopback", env!("CARGO_BIN_EXE_loopback")),
    ("macvlan", env!("CARGO_BIN_EXE_macvlan")),
    ("multus", env!("CARGO_BIN_EXE_multus")),
    ("multus-shim", env!("CARGO_BIN_EXE_multus-shim")),
    ("passthru", env!("CARGO_BIN_EXE_passthru")),
    ("portmap", env!("CARGO_BIN_EXE_portmap")),
    ("ptp", env!("CARGO_BIN_EXE_ptp")),
    ("sbr", env!("CARGO_BIN_EXE_sbr")),
    ("static", env!("CARGO_BIN_EXE_static")),
    ("tap", env!("CARGO_BIN_EXE_tap")),
    ("tuning", env!("CARGO_BIN_EXE_tuning")),
    ("vlan", env!("CARGO_BIN_EXE_vlan")),
    ("vrf", env!("CARGO_BIN_EXE_vrf")),
];

const TIMEOUT: Duration = Duration::from_secs(20);
const MAX_STDIN: usize = cni_exec::process::MAX_STDIN;

struct Outcome {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    elapsed: Duration,
}

impl Outcome {
    /// The CNI error on stdout, checked: exit 1, a JSON object with a
    /// numeric `code` and a `msg`, and no panic note on stderr.
    fn error(&self, what: &str) -> Value {
        let stderr = String::from_utf8_lossy(&self.stderr);
        assert!(
            !stderr.contains("panicked"),
            "{what}: panic on stderr: {stderr}"
        );
        assert_eq!(self.code, Some(1), "{what}: exit status; stderr: {stderr}");
        let v: Value = serde_json::from_slice(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "{what}: stdout is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.stdout)
            )
        });
        assert!(v["code"].is_u64(), "{what}: no numeric code in {v}");
        assert!(v["msg"].is_string(), "{what}: no msg in {v}");
        v
    }

    fn error_code(&self, what: &str) -> u64 {
        self.error(what)["code"].as_u64().unwrap()
    }
}

/// Runs `bin` with exactly `env` and `stdin`, killing it after [`TIMEOUT`]
/// (a hang fails the test). Stdin is written from a thread: a plugin that
/// stops reading at its cap closes the pipe, and the writer's EPIPE is fine.
fn run(bin: &str, env: &[(&str, &str)], stdin: Vec<u8>) -> Outcome {
    run_cmd(Command::new(bin), bin, env, stdin)
}

/// [`run`] with the process's address space capped at 1 GiB: a plugin
/// reading an endless file dies of it there instead of taking the
/// machine's memory (the premise of the tests of #31.11 before the fix).
fn run_bounded(bin: &str, args: &[&str], env: &[(&str, &str)], stdin: Vec<u8>) -> Outcome {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin);
    cmd.args(args);
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
    run_cmd(cmd, bin, env, stdin)
}

fn run_cmd(mut cmd: Command, bin: &str, env: &[(&str, &str)], stdin: Vec<u8>) -> Outcome {
    let start = Instant::now();
    let mut child = cmd
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&stdin);
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let ereader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{bin}: no answer within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    writer.join().unwrap();
    Outcome {
        code: status.code(),
        stdout: reader.join().unwrap(),
        stderr: ereader.join().unwrap(),
        elapsed,
    }
}

fn add_env<'a>(container_id: &'a str, ifname: &'a str, path: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", container_id),
        ("CNI_NETNS", "/nonexistent/cni-input-limits"),
        ("CNI_IFNAME", ifname),
        ("CNI_PATH", path),
    ]
}

fn conf(plugin: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "limits", "type": plugin})).unwrap()
}

#[test]
fn stdin_past_the_cap_is_refused_with_code_5() {
    // A valid config padded with whitespace to one byte over the cap: only
    // the size is wrong.
    let mut stdin = conf("x");
    stdin.resize(MAX_STDIN + 1, b' ');
    for (name, bin) in PLUGINS {
        let out = run(bin, &add_env("c1", "eth0", "/nonexistent"), stdin.clone());
        let v = out.error(name);
        assert_eq!(v["code"], 5, "{name}: {v}");
        assert!(
            v["msg"].as_str().unwrap().contains("larger than"),
            "{name}: {v}"
        );
        eprintln!(
            "{name}: {} MiB stdin refused in {:?}",
            stdin.len() >> 20,
            out.elapsed
        );
    }
}

#[test]
fn stdin_at_the_cap_is_read() {
    // Exactly the cap is accepted: the error is then about the config
    // (no plugin named "x"... is ours), not the size.
    let mut stdin =
        serde_json::to_vec(&json!({"cniVersion": "9.9.9", "name": "limits", "type": "x"})).unwrap();
    stdin.resize(MAX_STDIN, b' ');
    let out = run(
        env!("CARGO_BIN_EXE_loopback"),
        &add_env("c1", "eth0", "/nonexistent"),
        stdin,
    );
    let v = out.error("loopback");
    assert_eq!(v["code"], 1, "incompatible version, not a size error: {v}");
}

#[test]
fn deeply_nested_json_is_a_decoding_error() {
    let deep_arrays = "[".repeat(100_000).into_bytes();
    let deep_objects = "{\"a\":".repeat(100_000).into_bytes();
    // Nesting inside an otherwise valid config, where plugins decode their
    // own sections.
    let inner = format!(
        r#"{{"cniVersion":"1.0.0","name":"limits","type":"x","ipam":{{"type":"host-local","x":{}1{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    )
    .into_bytes();
    for (name, bin) in PLUGINS {
        for (what, stdin) in [
            ("100k [", &deep_arrays),
            ("100k {\"a\":", &deep_objects),
            ("100k [ inside ipam", &inner),
        ] {
            let out = run(bin, &add_env("c1", "eth0", "/nonexistent"), stdin.clone());
            assert_eq!(
                out.error_code(&format!("{name}, {what}")),
                6,
                "{name}, {what}"
            );
        }
    }
}

#[test]
fn control_characters_in_names_are_refused() {
    let stdin = conf("x");
    for (name, bin) in PLUGINS {
        for (what, id, ifname, code) in [
            ("container id with \\x01", "c\u{1}1", "eth0", 4),
            ("container id with \\n", "c\n1", "eth0", 4),
            ("container id with \\x7f", "c\u{7f}", "eth0", 4),
            ("ifname with \\n", "c1", "eth\n0", 4),
            ("ifname with \\t", "c1", "\teth0", 4),
        ] {
            let out = run(bin, &add_env(id, ifname, "/nonexistent"), stdin.clone());
            assert_eq!(
                out.error_code(&format!("{name}, {what}")),
                code,
                "{name}, {what}"
            );
        }
        for net in ["lim\u{1}its", "limits\n", "lim\u{1b}[31mits"] {
            let stdin =
                serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": net, "type": name}))
                    .unwrap();
            let out = run(bin, &add_env("c1", "eth0", "/nonexistent"), stdin);
            assert_eq!(out.error_code(&format!("{name}, network {net:?}")), 7);
        }
    }
}

/// A host-local config on a private data directory.
fn host_local_conf(dir: &Path) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cniVersion": "1.0.0",
        "name": "limits",
        "type": "host-local",
        "ipam": {"type": "host-local", "dataDir": dir, "ranges": [[{"subnet": "10.1.0.0/24"}]]},
    }))
    .unwrap()
}

fn static_conf() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cniVersion": "1.0.0",
        "name": "limits",
        "type": "static",
        "ipam": {"type": "static", "addresses": [{"address": "10.1.0.5/24"}]},
    }))
    .unwrap()
}

/// Linux refuses any single environment string over 32 pages
/// (`MAX_ARG_STRLEN`, 128 KiB) at exec: the largest `CNI_ARGS` a plugin
/// process can receive is just under that.
const LARGEST_EXECABLE: usize = 128 * 1024 - "CNI_ARGS=".len() - 1;

/// An address list of about `len` bytes: `IP=<ip>,<ip>,...`.
fn ip_list(ip: &str, len: usize) -> String {
    let mut s = format!("IP={ip}");
    while s.len() + ip.len() + 1 < len {
        s.push(',');
        s.push_str(ip);
    }
    s
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 200 {
        format!("{}...", &s[..200])
    } else {
        s
    }
}

#[test]
fn huge_cni_args_reaching_ipam_plugins_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // One unknown key with a huge value; then the largest `IP=` lists the
    // plugin refuses (host-local: outside its range; static: not CIDR).
    let unknown = format!("K8S_POD_NAME=p;BIG={}", "x".repeat(LARGEST_EXECABLE - 19));
    let cases = [
        (
            "host-local",
            env!("CARGO_BIN_EXE_host-local"),
            host_local_conf(tmp.path()),
            vec![
                ("unknown key", unknown.clone(), 4),
                ("IP list", ip_list("10.2.0.77", LARGEST_EXECABLE), 4),
            ],
        ),
        (
            "static",
            env!("CARGO_BIN_EXE_static"),
            static_conf(),
            vec![
                ("unknown key", unknown.clone(), 4),
                ("IP list", ip_list("10.1.0.77", LARGEST_EXECABLE), 7),
            ],
        ),
    ];
    for (name, bin, stdin, args) in cases {
        for (what, args, code) in args {
            assert!(args.len() <= LARGEST_EXECABLE);
            let mut env = add_env("c1", "eth0", "/nonexistent");
            env.push(("CNI_ARGS", &args));
            let out = run(bin, &env, stdin.clone());
            let v = out.error(&format!("{name}, {what}"));
            eprintln!(
                "{name}, {} KiB CNI_ARGS ({what}): {} in {:?}",
                args.len() >> 10,
                short(&v),
                out.elapsed
            );
            assert_eq!(v["code"], code, "{name}, {what}: {}", short(&v));
        }
    }
    // Nothing was reserved.
    let net = tmp.path().join("limits");
    let reserved: Vec<_> = std::fs::read_dir(&net)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        reserved.iter().all(|n| n
            .to_str()
            .is_some_and(|n| n.parse::<std::net::IpAddr>().is_err())),
        "reservations left: {reserved:?}"
    );
}

#[test]
fn a_1_mib_cni_args_fails_at_exec_with_a_clean_runtime_error() {
    // The runtime side: the kernel refuses to exec with a 1 MiB variable
    // (E2BIG). The invoker reports it as an error, promptly.
    let args = format!("IgnoreUnknown=1;BIG={}", "x".repeat(1 << 20));
    let env = PluginEnv {
        container_id: "c1".into(),
        netns: "/nonexistent/cni-input-limits".into(),
        args,
        ifname: "eth0".into(),
        ..PluginEnv::new(cni_exec::Command::Add, "/nonexistent")
    };
    let exec = ProcessExec::new().with_timeout(TIMEOUT);
    let start = Instant::now();
    let err = exec
        .exec_plugin(
            Path::new(env!("CARGO_BIN_EXE_loopback")),
            &conf("loopback"),
            &env,
        )
        .expect_err("a 1 MiB variable cannot be exec'd");
    let msg = err.to_string();
    eprintln!("1 MiB CNI_ARGS at exec: {msg} in {:?}", start.elapsed());
    assert!(start.elapsed() < TIMEOUT);
    assert!(
        msg.contains("Argument list too long") || msg.contains("E2BIG"),
        "{msg}"
    );
}

#[test]
fn control_characters_in_cni_path_entries_find_no_delegate() {
    // Meta-plugins and main plugins look their delegates up in CNI_PATH;
    // entries with control characters name no directory. The plugin must
    // answer with an error, not hang or panic.
    let tmp = tempfile::tempdir().unwrap();
    let subnet = tmp.path().join("subnet.env");
    std::fs::write(
        &subnet,
        "FLANNEL_NETWORK=10.250.0.0/16\nFLANNEL_SUBNET=10.250.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    )
    .unwrap();
    let path = format!(
        "{}/\u{1}bin:\u{7f}:\u{1b}[0m:/nonexistent\u{2}",
        tmp.path().display()
    );
    let flannel = serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": "limits", "type": "flannel",
        "subnetFile": subnet, "dataDir": tmp.path().join("flannel"),
    }))
    .unwrap();
    let ptp = serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": "limits", "type": "ptp",
        "ipam": {"type": "host-local", "dataDir": tmp.path().join("ipam"), "subnet": "10.251.0.0/24"},
    }))
    .unwrap();
    let multus = serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": "limits", "type": "multus",
        "cniDir": tmp.path().join("multus"), "confDir": tmp.path().join("net.d"),
        "delegates": [{"cniVersion": "1.0.0", "name": "cluster", "type": "bridge"}],
    }))
    .unwrap();
    for (name, bin, stdin) in [
        ("flannel", env!("CARGO_BIN_EXE_flannel"), flannel),
        ("multus", env!("CARGO_BIN_EXE_multus"), multus),
        ("ptp", env!("CARGO_BIN_EXE_ptp"), ptp),
    ] {
        let out = run(bin, &add_env("c1", "eth0", &path), stdin);
        let v = out.error(name);
        let msg = v["msg"].as_str().unwrap();
        eprintln!("{name} with control characters in CNI_PATH: {}", short(&v));
        if name == "flannel" {
            // flannel delegates before any namespace is opened; the path is
            // quoted in the message, control characters escaped.
            assert!(msg.contains("failed to find plugin \"bridge\""), "{msg}");
            assert!(!msg.chars().any(char::is_control), "{msg:?}");
        }
    }
}

/// #31.2: one rule for every plugin's GC: without
/// `cni.dev/valid-attachments` (absent or `null`) the request is refused
/// with code 7 naming the key, whatever the plugin (portmap and bandwidth
/// used to succeed doing nothing, dhcp released every lease of the
/// network). multus GCs with the attachments of its own cache (as Go) and
/// is not refused for the list.
#[test]
fn gc_without_valid_attachments_is_refused_by_every_plugin() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().display().to_string();
    let env = [("CNI_COMMAND", "GC"), ("CNI_PATH", path.as_str())];
    for (name, bin) in PLUGINS {
        for list in [None, Some(Value::Null)] {
            let mut c = json!({"cniVersion": "1.1.0", "name": "gcnet", "type": name,
                "socketDir": tmp.path().join("multus-sock"),
                "ipam": {"type": "host-local", "dataDir": tmp.path().join("ipam"),
                    "subnet": "10.252.0.0/24"}});
            if let Some(l) = &list {
                c["cni.dev/valid-attachments"] = l.clone();
            }
            let out = run(bin, &env, serde_json::to_vec(&c).unwrap());
            let what = format!("{name}, list {list:?}");
            if name.starts_with("multus") {
                let msg = String::from_utf8_lossy(&out.stdout).into_owned();
                assert!(!msg.contains("valid-attachments"), "{what}: {msg}");
                continue;
            }
            let v = out.error(&what);
            assert_eq!(v["code"], 7, "{what}: {v}");
            assert!(
                v["msg"]
                    .as_str()
                    .unwrap()
                    .contains("cni.dev/valid-attachments"),
                "{what}: {v}"
            );
        }
    }
}

/// #31.14: a `prevResult` whose own `cniVersion` is unknown ("99.0.0") or of
/// another result shape than the config's is refused with code 1
/// (incompatible version), as Go's result types refuse it; portmap,
/// firewall and passthru used to take it.
#[test]
fn prev_result_of_an_unknown_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().display().to_string();
    let chained = [
        ("bandwidth", env!("CARGO_BIN_EXE_bandwidth")),
        ("firewall", env!("CARGO_BIN_EXE_firewall")),
        ("passthru", env!("CARGO_BIN_EXE_passthru")),
        ("portmap", env!("CARGO_BIN_EXE_portmap")),
        ("sbr", env!("CARGO_BIN_EXE_sbr")),
        ("tuning", env!("CARGO_BIN_EXE_tuning")),
    ];
    for (name, bin) in chained {
        for (config_version, prev_version) in
            [("1.0.0", "99.0.0"), ("1.0.0", "0.4.0"), ("0.4.0", "1.0.0")]
        {
            let c = json!({"cniVersion": config_version, "name": "prevver", "type": name,
                "dataDir": tmp.path().join("data"),
                "prevResult": {"cniVersion": prev_version,
                    "interfaces": [{"name": "eth0", "sandbox": "/nonexistent/cni-input-limits"}],
                    "ips": [{"address": "10.254.0.2/24", "interface": 0}]}});
            let out = run(
                bin,
                &add_env("c1", "eth0", &path),
                serde_json::to_vec(&c).unwrap(),
            );
            let what = format!("{name}, config {config_version}, prevResult {prev_version}");
            let v = out.error(&what);
            assert_eq!(v["code"], 1, "{what}: {v}");
            assert!(
                v["msg"].as_str().unwrap().contains(prev_version),
                "{what}: {v}"
            );
        }
    }
}

/// #31.11: files an administrator names are read up to 4 MiB, past which
/// the plugin answers a clear error: `/dev/zero` as host-local's
/// `resolvConf`, flannel's `subnetFile`, multus's `clusterNetwork`, and as
/// `multus-daemon --config` (#31.10), each within a 1 GiB address space.
#[test]
fn admin_named_files_are_read_with_a_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().display().to_string();
    let cases = [
        (
            "host-local",
            env!("CARGO_BIN_EXE_host-local"),
            json!({"cniVersion": "1.0.0", "name": "capped", "type": "host-local",
                "ipam": {"type": "host-local", "dataDir": tmp.path().join("ipam"),
                    "subnet": "10.250.0.0/24", "resolvConf": "/dev/zero"}}),
        ),
        (
            "flannel",
            env!("CARGO_BIN_EXE_flannel"),
            json!({"cniVersion": "1.0.0", "name": "capped", "type": "flannel",
                "subnetFile": "/dev/zero", "dataDir": tmp.path().join("flannel")}),
        ),
        (
            "multus",
            env!("CARGO_BIN_EXE_multus"),
            json!({"cniVersion": "1.0.0", "name": "capped", "type": "multus",
                "cniDir": tmp.path().join("multus"), "clusterNetwork": "/dev/zero"}),
        ),
    ];
    for (name, bin, conf) in cases {
        let out = run_bounded(
            bin,
            &[],
            &add_env("c1", "eth0", &path),
            serde_json::to_vec(&conf).unwrap(),
        );
        let v = out.error(name);
        assert!(
            v["msg"]
                .as_str()
                .unwrap()
                .contains("larger than 4194304 bytes"),
            "{name}: {v}"
        );
    }
    let out = run_bounded(
        env!("CARGO_BIN_EXE_multus-daemon"),
        &["--config", "/dev/zero"],
        &[],
        Vec::new(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.code, Some(0), "{stderr}");
    assert!(out.code.is_some(), "killed: {stderr}");
    assert!(stderr.contains("larger than 4194304 bytes"), "{stderr}");
}

/// Runs `bin` as [`run`] does under GNU time, and returns its outcome
/// with its peak resident set size in KiB (`%M`, from time's `wait4`). Not
/// from our own `wait4`: a child of this large test process shares its
/// memory until exec, and the kernel counts that in the child's peak.
fn run_measured(bin: &str, env: &[(&str, &str)], stdin: Vec<u8>) -> (Outcome, Measured) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("rss");
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-o")
        .arg(&report)
        .args(["-f", "%M %U %S", "--", bin]);
    let out = run_cmd(cmd, bin, env, stdin);
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("GNU time's report (is /usr/bin/time installed?): {e}"));
    let fields: Vec<&str> = text
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let num = |i: usize| -> f64 {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("no figure {i} in GNU time's report {text:?}"))
    };
    let measured = Measured {
        maxrss_kib: num(0) as u64,
        cpu: Duration::from_secs_f64(num(1) + num(2)),
    };
    (out, measured)
}

/// What GNU time measured of a plugin run.
struct Measured {
    /// Peak RSS.
    maxrss_kib: u64,
    /// User + system CPU time: the work done, whatever the machine's load
    /// (the wall time of a debug build under two busy cores is not).
    cpu: Duration,
}

/// A `prevResult` of 380,000 tiny interfaces (9 MB, inside the stdin cap)
/// is refused as soon as the 1025th is read, naming the key, and the
/// plugin's memory stays near its stdin's size (it took 1.9 GB when the
/// whole result was decoded and copied).
#[test]
fn a_prev_result_past_the_result_limits_is_refused_in_bounded_memory() {
    let interfaces: Vec<Value> = (0..380_000)
        .map(|i| json!({ "name": format!("veth{i:08}") }))
        .collect();
    let stdin = serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": "limits", "type": "bridge", "bridge": "br-limits",
        "prevResult": {"cniVersion": "1.0.0", "interfaces": interfaces},
    }))
    .unwrap();
    assert!(
        stdin.len() > 8 << 20 && stdin.len() < MAX_STDIN,
        "{}",
        stdin.len()
    );
    let (out, m) = run_measured(
        env!("CARGO_BIN_EXE_bridge"),
        &add_env("c1", "eth0", "/nonexistent"),
        stdin,
    );
    let v = out.error("bridge");
    assert_eq!(v["code"], 7, "{v}");
    assert_eq!(
        v["msg"],
        "prevResult.interfaces: more than 1024 entries (the limit for a result)"
    );
    eprintln!(
        "bridge: refused in {:?} ({:?} of CPU), peak RSS {} MiB",
        out.elapsed,
        m.cpu,
        m.maxrss_kib >> 10
    );
    // Bounded work (the debug build: about 1 s of CPU on this machine).
    assert!(m.cpu < Duration::from_secs(5), "{:?} of CPU", m.cpu);
    let maxrss_kib = m.maxrss_kib;
    // The stdin buffer itself (9 MB, in a vector that doubled while it was
    // read) and the runtime's own: far from the 1.9 GB of before.
    assert!(maxrss_kib < 64 << 10, "peak RSS {maxrss_kib} KiB");
}

/// Any key of a configuration counts: a plugin's own array of 7 million
/// zeros (14 MB) is refused before it is built (it cost bridge 1 GB).
#[test]
fn a_configuration_past_its_value_limit_is_refused_in_bounded_memory() {
    let mut stdin =
        br#"{"cniVersion":"1.0.0","name":"limits","type":"bridge","bridge":"br-limits","x":["#
            .to_vec();
    for i in 0..7_000_000 {
        if i > 0 {
            stdin.push(b',');
        }
        stdin.push(b'0');
    }
    stdin.extend_from_slice(b"]}");
    let (out, m) = run_measured(
        env!("CARGO_BIN_EXE_bridge"),
        &add_env("c1", "eth0", "/nonexistent"),
        stdin,
    );
    let v = out.error("bridge");
    assert_eq!(v["code"], 7, "{v}");
    assert_eq!(
        v["msg"],
        "network configuration: more than 262144 JSON values (the limit for a configuration)"
    );
    // Bounded work (the debug build: about 1 s of CPU on this machine).
    assert!(m.cpu < Duration::from_secs(5), "{:?} of CPU", m.cpu);
    let maxrss_kib = m.maxrss_kib;
    assert!(maxrss_kib < 64 << 10, "peak RSS {maxrss_kib} KiB");
}
