//! The process executor against tiny shell-script plugins: error decoding
//! (JSON error, empty stdout, garbage), timeout, non-zero exit, result
//! version fix-up, VERSION probing, discovery (pkg/invoke/*_test.go).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni_exec::invoke::{exec_plugin_with_result, get_version_info, plugin_error};
use cni_exec::{find_in_path, Command, Error, Exec, PluginEnv, ProcessExec, StderrSink};
use cni_types::{ErrorCode, Version};
use pretty_assertions::assert_eq;

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn env() -> PluginEnv {
    let mut e = PluginEnv::new(Command::Add, "/x");
    e.container_id = "c1".into();
    e.netns = "/run/netns/x".into();
    e.ifname = "eth0".into();
    e
}

const CONF: &[u8] = br#"{"cniVersion":"1.0.0","name":"n","type":"t"}"#;

fn quiet() -> ProcessExec {
    ProcessExec::new().with_stderr(StderrSink::Discard)
}

fn plugin_err(r: Result<Vec<u8>, Error>) -> cni_types::CniError {
    match r {
        Err(Error::Plugin(e)) => e,
        other => panic!("expected a plugin error, got {other:?}"),
    }
}

#[test]
fn plugin_json_error_is_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        dir.path(),
        "p",
        r#"echo '{"code":7,"msg":"x","details":"d"}'; exit 1"#,
    );
    let e = plugin_err(quiet().exec_plugin(&p, CONF, &env()));
    assert_eq!(
        (e.code, e.msg.as_str(), e.details.as_str()),
        (ErrorCode::InvalidNetworkConfig, "x", "d")
    );
}

#[test]
fn empty_stdout_uses_stderr_or_says_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(dir.path(), "p", "echo 'it broke' >&2; exit 3");
    let e = plugin_err(quiet().exec_plugin(&p, CONF, &env()));
    assert_eq!(e.msg, "netplugin failed: \"it broke\\n\": exit status 3");
    let p = script(dir.path(), "q", "exit 2");
    let e = plugin_err(quiet().exec_plugin(&p, CONF, &env()));
    assert_eq!(
        e.msg,
        "netplugin failed with no error message: exit status 2"
    );
}

#[test]
fn garbage_stdout_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(dir.path(), "p", "echo 'not json'; exit 1");
    let e = plugin_err(quiet().exec_plugin(&p, CONF, &env()));
    assert!(
        e.msg.starts_with(
            "netplugin failed but error parsing its diagnostic message \"not json\\n\": "
        ),
        "{}",
        e.msg
    );
    // plugin_error is Go's pluginErr.
    assert_eq!(
        plugin_error("exit status 1", b"", b"").msg,
        "netplugin failed with no error message: exit status 1"
    );
}

#[test]
fn bad_json_result_on_success_is_a_decode_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(dir.path(), "p", "cat >/dev/null; echo '{bad'");
    let r = exec_plugin_with_result(&quiet(), &p, CONF, &env());
    assert!(matches!(r, Err(Error::DecodeResult { .. })), "{r:?}");
}

#[test]
fn env_and_stdin_reach_the_plugin_and_stderr_is_passed_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("seen");
    let p = script(
        dir.path(),
        "p",
        &format!(
            "cat > {o}.stdin; env | grep ^CNI_ | sort > {o}; echo warn >&2; echo '{{\"cniVersion\":\"1.0.0\"}}'",
            o = out.display()
        ),
    );
    let buf = Arc::new(Mutex::new(Vec::new()));
    let exec = ProcessExec::new().with_stderr(StderrSink::Buffer(buf.clone()));
    let mut e = env();
    e.args = "A=b".into();
    exec.exec_plugin(&p, CONF, &e).unwrap();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "CNI_ARGS=A=b\nCNI_COMMAND=ADD\nCNI_CONTAINERID=c1\nCNI_IFNAME=eth0\nCNI_NETNS=/run/netns/x\nCNI_PATH=/x\n"
    );
    assert_eq!(std::fs::read(out.with_extension("stdin")).unwrap(), CONF);
    assert_eq!(&*buf.lock().unwrap(), b"warn\n");
}

#[test]
fn hanging_plugin_is_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(dir.path(), "p", "exec sleep 30");
    let exec = quiet().with_timeout(Duration::from_millis(300));
    let start = Instant::now();
    let r = exec.exec_plugin(&p, CONF, &env());
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn plugin_that_never_reads_stdin_does_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(dir.path(), "p", "echo '{}'");
    let big = vec![b' '; 1 << 20];
    let exec = quiet().with_timeout(Duration::from_secs(10));
    assert_eq!(exec.exec_plugin(&p, &big, &env()).unwrap(), b"{}\n");
}

#[test]
fn result_without_cni_version_takes_the_config_version() {
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        dir.path(),
        "p",
        r#"cat >/dev/null; echo '{"ips":[{"address":"10.0.0.2/24"}]}'"#,
    );
    let (v, r) = exec_plugin_with_result(&quiet(), &p, CONF, &env()).unwrap();
    assert_eq!(v, Version::V1_0_0);
    assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
    // A result that states its version keeps it.
    let p = script(
        dir.path(),
        "q",
        r#"cat >/dev/null; echo '{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}'"#,
    );
    let (v, _) = exec_plugin_with_result(&quiet(), &p, CONF, &env()).unwrap();
    assert_eq!(v, Version::V0_4_0);
    // `null` is an empty result.
    let p = script(dir.path(), "r", "cat >/dev/null; echo null");
    let (_, r) = exec_plugin_with_result(&quiet(), &p, CONF, &env()).unwrap();
    assert!(r.ips.is_empty());
}

#[test]
fn version_probe_and_legacy_fallbacks() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let p = script(
        dir.path(),
        "p",
        &format!(
            "cat > {s}; echo \"$CNI_COMMAND $CNI_NETNS $CNI_IFNAME $CNI_PATH\" >> {s}; echo '{{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\"]}}'",
            s = seen.display()
        ),
    );
    let info = get_version_info(&quiet(), &p).unwrap();
    assert_eq!(info.supported_versions, ["0.4.0", "1.0.0"]);
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "{\"cniVersion\":\"1.1.0\"}VERSION dummy dummy dummy\n"
    );
    let old = script(
        dir.path(),
        "old",
        r#"echo '{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}'; exit 1"#,
    );
    assert_eq!(
        get_version_info(&quiet(), &old).unwrap().supported_versions,
        ["0.1.0"]
    );
    let v020 = script(dir.path(), "v020", r#"echo '{"cniVersion":"0.2.0"}'"#);
    assert_eq!(
        get_version_info(&quiet(), &v020)
            .unwrap()
            .supported_versions,
        ["0.1.0", "0.2.0"]
    );
    let bad = script(
        dir.path(),
        "bad",
        r#"echo '{"supportedVersions":["1.0.0"]}'"#,
    );
    assert!(get_version_info(&quiet(), &bad).is_err());
}

#[test]
fn discovery_rules() {
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    std::fs::create_dir(d1.path().join("x")).unwrap(); // a directory named like the plugin
    let real = script(d2.path(), "x", "true");
    let paths = vec![d1.path().to_path_buf(), d2.path().to_path_buf()];
    assert_eq!(find_in_path("x", &paths).unwrap(), real);
    // A symlink to a directory is not a plugin; a symlink to a file is.
    std::os::unix::fs::symlink(d1.path(), d1.path().join("y")).unwrap();
    assert!(matches!(
        find_in_path("y", &paths),
        Err(Error::PluginNotFound { .. })
    ));
    std::os::unix::fs::symlink(&real, d1.path().join("z")).unwrap();
    assert_eq!(find_in_path("z", &paths).unwrap(), d1.path().join("z"));
    assert_eq!(
        find_in_path("../x", &paths).unwrap_err().to_string(),
        "invalid plugin name: ../x"
    );
    assert_eq!(
        find_in_path("", &paths).unwrap_err().to_string(),
        "no plugin name provided"
    );
    assert_eq!(
        find_in_path("x", &[]).unwrap_err().to_string(),
        "no paths provided"
    );
    assert!(find_in_path("nope", &paths)
        .unwrap_err()
        .to_string()
        .starts_with("failed to find plugin \"nope\" in path"));
}

#[test]
fn text_file_busy_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy");
    // Hold the file open for writing: exec fails with ETXTBSY until the
    // writer closes it, which happens while the executor retries.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, b"#!/bin/sh\necho '{}'\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        drop(f);
    });
    let exec = quiet().with_busy_retry(20, Duration::from_millis(50));
    let out = exec.exec_plugin(&path, CONF, &env());
    closer.join().unwrap();
    assert_eq!(out.unwrap(), b"{}\n");
    // With no retries left the error says so.
    let mut f2 = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f2, b"#").unwrap();
    let r = quiet()
        .with_busy_retry(1, Duration::ZERO)
        .exec_plugin(&path, CONF, &env());
    assert!(matches!(r, Err(Error::Spawn { .. })), "{r:?}");
}

/// #31.6: a plugin's stdout and stderr are read up to
/// [`cni_exec::process::MAX_OUTPUT`] (16 MiB, as stdin) each; past it the
/// plugin is killed at once (here before its sleep ends) and the error
/// says so, instead of the caller buffering whatever it prints.
#[test]
fn output_past_the_cap_kills_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    for (stream, redirect) in [("stdout", ""), ("stderr", " >&2")] {
        let p = script(
            dir.path(),
            &format!("loud-{stream}"),
            &format!(
                "head -c 209715200 /dev/zero{redirect}; sleep 600; echo '{{\"cniVersion\":\"1.0.0\"}}'"
            ),
        );
        let start = Instant::now();
        let e = quiet().exec_plugin(&p, CONF, &env()).unwrap_err();
        assert!(
            matches!(e, Error::OutputTooLarge { stream: s, limit, .. } if s == stream && limit == 16 << 20),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("wrote more than 16777216 bytes"),
            "{e}"
        );
        assert!(start.elapsed() < Duration::from_secs(300), "not killed");
    }
    // Exactly the cap is read.
    let p = script(
        dir.path(),
        "at-cap",
        "head -c 1000 /dev/zero | tr '\\0' ' '; echo '{}'",
    );
    let out = quiet()
        .with_max_output(1003)
        .exec_plugin(&p, CONF, &env())
        .unwrap();
    assert_eq!(out.len(), 1003);
    let e = quiet()
        .with_max_output(1002)
        .exec_plugin(&p, CONF, &env())
        .unwrap_err();
    assert!(matches!(e, Error::OutputTooLarge { .. }), "{e:?}");
}
