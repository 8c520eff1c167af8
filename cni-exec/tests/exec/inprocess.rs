//! The same chain through the process executor (the `fx_plugins` example
//! binary) and the in-process executor (the same plugin values) gives the
//! same results, cache files, plugin state and errors. Delegation (fx-main
//! runs fx-ipam) goes through the executor that ran the delegator.

use crate::fixture;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cni_exec::{CniConfig, Exec, InProcessExec, ProcessExec, RuntimeConf, StderrSink};
use cni_types::{GcAttachment, NetworkConfigList};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn fixture_binary() -> PathBuf {
    // target/<profile>/deps/<test> -> target/<profile>/examples/fx_plugins
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/fx_plugins");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo test -p cni-exec` (it builds the examples) or `cargo build -p cni-exec --example fx_plugins`",
        bin.display()
    );
    bin
}

fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture_binary();
    for name in ["fx-main", "fx-ipam"] {
        std::os::unix::fs::symlink(&bin, dir.path().join(name)).unwrap();
    }
    dir
}

fn chain(data: &Path) -> NetworkConfigList {
    let v = json!({
        "cniVersion": "1.1.0",
        "name": "fxnet",
        "plugins": [
            {"type": "fx-main", "ipam": {"type": "fx-ipam", "dataDir": data}},
            {"type": "fx-ipam", "dataDir": data.join("chained")}
        ]
    });
    NetworkConfigList::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
}

fn rt() -> RuntimeConf {
    RuntimeConf {
        container_id: "ctr-1".into(),
        netns: "/run/netns/fx-nonexistent".into(),
        ifname: "eth0".into(),
        ..Default::default()
    }
}

#[derive(Debug, PartialEq)]
struct Trace {
    add: Value,
    cache: Value,
    state_after_add: Vec<String>,
    check: String,
    del: String,
    state_after_del: Vec<String>,
    second_del: String,
    gc_state: Vec<String>,
    bad: String,
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for sub in ["fxnet", "chained/fxnet"] {
        for e in std::fs::read_dir(dir.join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(format!("{sub}/{}", e.file_name().to_string_lossy()));
        }
    }
    out.sort();
    out
}

fn run_chain(exec: Arc<dyn Exec>, path: Vec<PathBuf>) -> Trace {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cni = CniConfig::new(path, exec).with_cache_dir(cache.path());
    let list = chain(data.path());
    let rt = rt();
    let add = cni
        .add_network_list(&list, &rt)
        .unwrap()
        .to_value()
        .unwrap();
    let cache_text =
        std::fs::read_to_string(cache.path().join("results/fxnet-ctr-1-eth0")).unwrap();
    let state_after_add = files(data.path());
    let check = format!("{:?}", cni.check_network_list(&list, &rt));
    let del = format!("{:?}", cni.del_network_list(&list, &rt));
    let state_after_del = files(data.path());
    let second_del = format!("{:?}", cni.del_network_list(&list, &rt));
    // GC: two attachments, one valid.
    let other = RuntimeConf {
        container_id: "ctr-2".into(),
        ..rt.clone()
    };
    cni.add_network_list(&list, &rt).unwrap();
    cni.add_network_list(&list, &other).unwrap();
    cni.gc_network_list(
        &list,
        Some(&[GcAttachment {
            container_id: "ctr-1".into(),
            ifname: "eth0".into(),
        }]),
    )
    .unwrap();
    let gc_state = files(data.path());
    // A failing plugin: config without ipam.type.
    let bad_list = NetworkConfigList::from_slice(
        br#"{"cniVersion":"1.1.0","name":"fxnet","plugins":[{"type":"fx-main"}]}"#,
    )
    .unwrap();
    let bad = cni
        .add_network_list(&bad_list, &rt)
        .unwrap_err()
        .to_string();
    Trace {
        add,
        cache: serde_json::from_str(&cache_text).unwrap(),
        state_after_add,
        check,
        del,
        state_after_del,
        second_del,
        gc_state,
        bad,
    }
}

/// The data dirs differ between the two runs; make the traces comparable.
fn normalize(mut t: Trace) -> Trace {
    t.cache["config"] = Value::Null;
    t
}

#[test]
fn exec_and_in_process_paths_agree() {
    let bins = bin_dir();
    let process: Arc<dyn Exec> = Arc::new(ProcessExec::new().with_stderr(StderrSink::Discard));
    let by_exec = normalize(run_chain(process, vec![bins.path().to_path_buf()]));

    let inproc: Arc<dyn Exec> = Arc::new(
        InProcessExec::builder()
            .register("fx-main", Arc::new(fixture::FxMain))
            .register("fx-ipam", Arc::new(fixture::FxIpam))
            .build(),
    );
    // No plugin directory at all: nothing can be exec'd, so delegation must
    // have stayed in-process.
    let in_process = normalize(run_chain(inproc, vec!["/nonexistent-cni-bin".into()]));

    assert_eq!(by_exec, in_process);
    // And the trace is what the chain should do.
    let t = by_exec;
    assert_eq!(t.add["interfaces"][0]["name"], "eth0");
    assert_eq!(t.add["ips"].as_array().unwrap().len(), 2);
    assert_eq!(t.add["dns"]["nameservers"][0], "10.77.0.10");
    assert_eq!(
        t.state_after_add,
        ["chained/fxnet/ctr-1-eth0", "fxnet/ctr-1-eth0"]
    );
    assert_eq!(t.check, "Ok(())");
    assert_eq!(t.del, "Ok(())");
    assert!(t.state_after_del.is_empty());
    assert_eq!(t.second_del, "Ok(())");
    assert_eq!(t.gc_state, ["chained/fxnet/ctr-1-eth0", "fxnet/ctr-1-eth0"]);
    assert_eq!(
        t.bad,
        "plugin type=\"fx-main\" failed (add): fx-main: ipam.type is required"
    );
}

#[test]
fn in_process_falls_back_to_processes_for_unregistered_types() {
    let bins = bin_dir();
    // Only fx-main is in-process; its fx-ipam delegate is exec'd.
    let exec: Arc<dyn Exec> = Arc::new(
        InProcessExec::builder()
            .register("fx-main", Arc::new(fixture::FxMain))
            .fallback(Arc::new(
                ProcessExec::new().with_stderr(StderrSink::Discard),
            ))
            .build(),
    );
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cni = CniConfig::new(vec![bins.path().to_path_buf()], exec).with_cache_dir(cache.path());
    let list = chain(data.path());
    cni.add_network_list(&list, &rt()).unwrap();
    assert_eq!(files(data.path()).len(), 2);
    cni.del_network_list(&list, &rt()).unwrap();
    assert!(files(data.path()).is_empty());
}

#[test]
fn fixture_binary_speaks_the_protocol() {
    let bins = bin_dir();
    let bin = bins.path().join("fx-ipam");
    // No CNI_COMMAND: the about text on stderr, exit 0.
    let out = std::process::Command::new(&bin)
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "CNI plugin fx-ipam (test fixture)\nCNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n"
    );
    // An error: JSON on stdout, exit 1.
    let out = std::process::Command::new(&bin)
        .env("CNI_COMMAND", "ADD")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["code"], 4);
    assert_eq!(
        e["msg"],
        "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    );
    // VERSION without stdin (a terminal would block if it were read).
    let out = std::process::Command::new(&bin)
        .env("CNI_COMMAND", "VERSION")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("{\"cniVersion\":\"1.1.0\""));
}

#[test]
fn run_refuses_oversized_stdin_and_logs_to_a_file() {
    let bins = bin_dir();
    let bin = bins.path().join("fx-ipam");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("plugin.log");
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/nonexistent"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/x"),
    ];
    let mut big = br#"{"cniVersion":"1.0.0","name":"n","pad":""#.to_vec();
    big.resize(big.len() + (16 << 20), b'x');
    big.extend_from_slice(b"\"}");
    let mut child = std::process::Command::new(&bin)
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut stdin, &big);
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    assert_eq!(out.status.code(), Some(1));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["code"], 5);

    // logFile in the config: errors go to the file, never to stdout.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "logFile": log, "logLevel": "debug"});
    let mut child = std::process::Command::new(&bin)
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        &serde_json::to_vec(&conf).unwrap(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "no dataDir: fails");
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["msg"], "fx-ipam: dataDir is required");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("fx-ipam: dataDir is required"), "{logged}");
}

#[test]
fn cnitool_with_fixture_plugins() {
    let bins = bin_dir();
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let confdir = tempfile::tempdir().unwrap();
    let list = json!({
        "cniVersion": "1.1.0",
        "name": "fxnet",
        "plugins": [{"type": "fx-main", "capabilities": {"mac": true}, "ipam": {"type": "fx-ipam", "dataDir": data.path()}}]
    });
    std::fs::write(
        confdir.path().join("fx.conflist"),
        serde_json::to_vec(&list).unwrap(),
    )
    .unwrap();
    let cnitool = |args: &[&str], extra: &[(&str, &str)]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cnitool"))
            .args(args)
            .env("NETCONFPATH", confdir.path())
            .env("CNI_PATH", bins.path())
            .env("CNI_CACHEDIR", cache.path())
            .env_remove("CNI_CONTAINERID")
            .env_remove("CNI_IFNAME")
            .env_remove("CAP_ARGS")
            .env_remove("CNI_ARGS")
            .envs(extra.iter().copied())
            .output()
            .unwrap()
    };
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    // -i and the env: ifname net1, explicit container id, args and caps.
    let stdout = ok(cnitool(
        &["-i", "net1", "add", "fxnet", "/run/netns/x"],
        &[
            ("CNI_CONTAINERID", "ctr-a"),
            ("CNI_ARGS", "K8S_POD_NAME=p"),
            ("CAP_ARGS", r#"{"mac":"0a:00:00:00:00:01"}"#),
        ],
    ));
    let result: Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(result["cniVersion"], "1.1.0");
    assert_eq!(result["interfaces"][0]["name"], "net1");
    // Four-space indentation, as Go's Result.Print.
    assert!(String::from_utf8(stdout)
        .unwrap()
        .starts_with("{\n    \"cniVersion\""));
    let cached: Value = serde_json::from_slice(
        &std::fs::read(cache.path().join("results/fxnet-ctr-a-net1")).unwrap(),
    )
    .unwrap();
    assert_eq!(cached["cniArgs"], json!([["K8S_POD_NAME", "p"]]));
    assert_eq!(
        cached["capabilityArgs"],
        json!({"mac": "0a:00:00:00:00:01"})
    );
    // Default ifname eth0 and the derived container id.
    ok(cnitool(&["add", "fxnet", "/run/netns/y"], &[]));
    ok(cnitool(&["check", "fxnet", "/run/netns/y"], &[]));
    ok(cnitool(&["status", "fxnet", "/run/netns/y"], &[]));
    assert_eq!(
        std::fs::read_dir(data.path().join("fxnet"))
            .unwrap()
            .count(),
        2
    );
    // gc without a valid list removes every attachment of the network.
    ok(cnitool(&["gc", "fxnet", "/run/netns/y"], &[]));
    assert_eq!(
        std::fs::read_dir(data.path().join("fxnet"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(cache.path().join("results"))
            .unwrap()
            .count(),
        0
    );
    ok(cnitool(&["del", "fxnet", "/run/netns/y"], &[]));
    // Errors: a plugin error, bad CNI_ARGS, bad CAP_ARGS, unknown command.
    let out = cnitool(&["add", "fxnet", "/run/netns/z"], &[("CNI_IFNAME", "a/b")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Error: plugin type=\"fx-main\" failed (add): interface name contains / or : or whitespace characters\n"
    );
    let out = cnitool(&["add", "fxnet", "/run/netns/z"], &[("CNI_ARGS", "A")]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Error: invalid CNI_ARGS pair \"A\"\n"
    );
    let out = cnitool(&["add", "fxnet", "/run/netns/z"], &[("CAP_ARGS", "[")]);
    assert_eq!(out.status.code(), Some(1));
    let out = cnitool(&["frob", "fxnet", "/run/netns/z"], &[]);
    assert_eq!(out.status.code(), Some(1));
}
