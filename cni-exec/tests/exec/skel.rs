//! Protocol tests through `dispatch`: every row of the skel feature table
//! (cni-features.md 1.2), with the Go reference's codes and messages
//! (vectors from containernetworking/cni pkg/skel/skel_test.go).

use std::sync::{Arc, Mutex};

use cni_exec::{dispatch, Command, Env, NetnsGuard, OwnNetnsGuard, Plugin, Request};
use cni_types::{CniError, CniResult, ErrorCode, IpConfig, Route, Version};
use pretty_assertions::assert_eq;

/// (command, container id, netns, ifname, CNI_PATH) of one call.
type Call = (Command, String, String, String, String);

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Call>>,
    versions: Option<Vec<Version>>,
    about: String,
    fail_add: Option<CniError>,
    panic_add: bool,
}

impl Recorder {
    fn with_versions(v: &[&str]) -> Self {
        Recorder {
            versions: Some(v.iter().map(|s| Version::parse(s).unwrap()).collect()),
            ..Default::default()
        }
    }
    fn record(&self, req: &Request) {
        self.calls.lock().unwrap().push((
            req.command,
            req.container_id.clone(),
            req.netns.clone(),
            req.ifname.clone(),
            req.path_raw.clone(),
        ));
    }
    fn commands(&self) -> Vec<Command> {
        self.calls.lock().unwrap().iter().map(|c| c.0).collect()
    }
}

impl Plugin for Recorder {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "recorder"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.record(req);
        if self.panic_add {
            panic!("boom");
        }
        if let Some(e) = &self.fail_add {
            return Err(e.clone());
        }
        let mut r = CniResult::default();
        let mut ip = IpConfig::new("10.1.2.3/24".parse().unwrap());
        ip.gateway = Some("10.1.2.1".parse().unwrap());
        r.ips.push(ip);
        r.routes
            .push(Route::new("0.0.0.0/0".parse().unwrap(), None));
        Ok(r)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.record(req);
        Ok(())
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        self.record(req);
        Ok(())
    }
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        self.record(req);
        Ok(())
    }
    fn status(&self, req: &Request) -> Result<(), CniError> {
        self.record(req);
        Ok(())
    }
    fn supported_versions(&self) -> Vec<Version> {
        self.versions
            .clone()
            .unwrap_or_else(|| Version::ALL.to_vec())
    }
    fn about(&self) -> String {
        self.about.clone()
    }
}

/// A plugin with only ADD and DEL (Go: nil Check/GC/Status callbacks).
struct Minimal;
impl Plugin for Minimal {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "minimal"
    }
    fn add(&self, _: &Request) -> Result<CniResult, CniError> {
        Ok(CniResult::default())
    }
    fn del(&self, _: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

/// A config every command accepts (GC's list of valid attachments
/// included: a GC without one is refused).
const STDIN: &str = r#"{ "name":"skel-test", "cniVersion":"1.1.0", "some":"config", "cni.dev/valid-attachments": [] }"#;

fn full_env(cmd: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CNI_COMMAND", cmd.to_string()),
        ("CNI_CONTAINERID", "some-container-id".into()),
        ("CNI_NETNS", "/some/netns/path".into()),
        ("CNI_IFNAME", "eth0".into()),
        ("CNI_ARGS", "some;extra;args".into()),
        ("CNI_PATH", "/some/cni/path".into()),
    ]
}

fn env_without(cmd: &str, drop: &[&str]) -> Env {
    Env::new(full_env(cmd).into_iter().filter(|(k, _)| !drop.contains(k)))
}

fn err_of(out: &cni_exec::Output) -> CniError {
    assert_eq!(
        out.exit_code,
        1,
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    out.error().unwrap()
}

#[test]
fn add_passes_env_and_stdin_to_the_plugin() {
    let p = Recorder::default();
    let out = dispatch(&p, &env_without("ADD", &[]), STDIN.as_bytes());
    assert_eq!(out.exit_code, 0);
    let calls = p.calls.lock().unwrap();
    assert_eq!(
        calls[0],
        (
            Command::Add,
            "some-container-id".into(),
            "/some/netns/path".into(),
            "eth0".into(),
            "/some/cni/path".into()
        )
    );
}

#[test]
fn required_env_matrix() {
    // (command, variable, required?) — skel.go's reqForCmd table.
    let table: &[(&str, &[(&str, bool)])] = &[
        (
            "ADD",
            &[
                ("CNI_COMMAND", true),
                ("CNI_CONTAINERID", true),
                ("CNI_NETNS", true),
                ("CNI_IFNAME", true),
                ("CNI_ARGS", false),
                ("CNI_PATH", true),
            ],
        ),
        (
            "CHECK",
            &[
                ("CNI_CONTAINERID", true),
                ("CNI_NETNS", true),
                ("CNI_IFNAME", true),
                ("CNI_ARGS", false),
                ("CNI_PATH", true),
            ],
        ),
        (
            "DEL",
            &[
                ("CNI_CONTAINERID", true),
                ("CNI_NETNS", false),
                ("CNI_IFNAME", true),
                ("CNI_ARGS", false),
                ("CNI_PATH", true),
            ],
        ),
        (
            "GC",
            &[
                ("CNI_CONTAINERID", false),
                ("CNI_NETNS", false),
                ("CNI_IFNAME", false),
                ("CNI_ARGS", false),
                ("CNI_PATH", true),
            ],
        ),
        (
            "STATUS",
            &[
                ("CNI_CONTAINERID", false),
                ("CNI_NETNS", false),
                ("CNI_IFNAME", false),
                ("CNI_ARGS", false),
                ("CNI_PATH", true),
            ],
        ),
    ];
    for (cmd, vars) in table {
        for (var, required) in *vars {
            let p = Recorder::default();
            let out = dispatch(&p, &env_without(cmd, &[var]), STDIN.as_bytes());
            if *required {
                let e = err_of(&out);
                assert_eq!(
                    e.code,
                    ErrorCode::InvalidEnvironmentVariables,
                    "{cmd} {var}"
                );
                if *var == "CNI_COMMAND" {
                    assert_eq!(e.msg, "required env variables [CNI_COMMAND] missing");
                } else {
                    assert_eq!(e.msg, format!("required env variables [{var}] missing"));
                }
                assert!(p.commands().is_empty());
            } else {
                assert_eq!(out.exit_code, 0, "{cmd} without {var}: {:?}", out.error());
            }
        }
    }
}

#[test]
fn all_missing_variables_in_one_error_in_fixed_order() {
    let out = dispatch(
        &Recorder::default(),
        &Env::new([("CNI_COMMAND", "ADD")]),
        STDIN.as_bytes(),
    );
    let e = err_of(&out);
    assert_eq!(e.code.as_u32(), 4);
    assert_eq!(
        e.msg,
        "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    );
    // skel_test: CHECK with only the container id and command.
    let out = dispatch(
        &Recorder::default(),
        &env_without("CHECK", &["CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]),
        STDIN.as_bytes(),
    );
    assert_eq!(
        err_of(&out).msg,
        "required env variables [CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    );
}

#[test]
fn container_id_and_ifname_validation() {
    let cases = [
        (
            "CNI_CONTAINERID",
            "some-%%container-id",
            "invalid characters in containerID",
            "some-%%container-id",
        ),
        (
            "CNI_IFNAME",
            "1234567890123456",
            "interface name is too long",
            "interface name should be less than 16 characters",
        ),
        ("CNI_IFNAME", ".", "interface name is . or ..", ""),
        ("CNI_IFNAME", "..", "interface name is . or ..", ""),
        (
            "CNI_IFNAME",
            "logical/eth0",
            "interface name contains / or : or whitespace characters",
            "",
        ),
        (
            "CNI_IFNAME",
            "eth0:1",
            "interface name contains / or : or whitespace characters",
            "",
        ),
        (
            "CNI_IFNAME",
            "eth 0",
            "interface name contains / or : or whitespace characters",
            "",
        ),
    ];
    for cmd in ["ADD", "CHECK", "DEL"] {
        for (var, value, msg, details) in cases {
            let mut env = env_without(cmd, &[]);
            env.set(var, value);
            let p = Recorder::default();
            let e = err_of(&dispatch(&p, &env, STDIN.as_bytes()));
            assert_eq!(e.code, ErrorCode::InvalidEnvironmentVariables);
            assert_eq!(
                (e.msg.as_str(), e.details.as_str()),
                (msg, details),
                "{cmd} {var}={value}"
            );
            assert!(p.commands().is_empty());
        }
    }
    // GC does not require (so does not validate) the ifname.
    let mut env = env_without("GC", &[]);
    env.set("CNI_IFNAME", "a/b");
    assert_eq!(
        dispatch(&Recorder::default(), &env, STDIN.as_bytes()).exit_code,
        0
    );
}

#[test]
fn stdin_decoding_and_network_name() {
    let p = Recorder::default();
    let env = env_without("ADD", &[]);
    let e = err_of(&dispatch(&p, &env, b"{}"));
    assert_eq!(
        (e.code.as_u32(), e.msg.as_str()),
        (7, "missing network name")
    );
    let e = err_of(&dispatch(&p, &env, b"{not json"));
    assert_eq!(e.code, ErrorCode::DecodingFailure);
    assert!(
        e.msg.starts_with("error unmarshall network config: "),
        "{}",
        e.msg
    );
    let e = err_of(&dispatch(
        &p,
        &env,
        br#"{ "cniVersion": "0.4.0", "some": "config", "name": "te%%st" }"#,
    ));
    assert_eq!(e.code, ErrorCode::InvalidNetworkConfig);
    assert_eq!(e.msg, "invalid characters found in network name");
    assert!(p.commands().is_empty());
}

#[test]
fn version_ignores_stdin_and_prints_the_reply() {
    let p = Recorder::with_versions(&["9.8.7"]);
    let out = dispatch(&p, &Env::new([("CNI_COMMAND", "VERSION")]), b"garbage");
    assert_eq!(out.exit_code, 0);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"9.8.7\"]}\n"
    );
    let out = dispatch(&Minimal, &Env::new([("CNI_COMMAND", "VERSION")]), b"");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n"
    );
}

#[test]
fn version_reconcile_message_and_details() {
    let p = Recorder::with_versions(&["0.4.0"]);
    let e = err_of(&dispatch(
        &p,
        &env_without("ADD", &[]),
        br#"{"cniVersion":"1.0.0","name":"n"}"#,
    ));
    assert_eq!(e.code, ErrorCode::IncompatibleCniVersion);
    assert_eq!(e.msg, "incompatible CNI versions");
    assert_eq!(e.details, r#"config is "1.0.0", plugin supports ["0.4.0"]"#);
    // A config without cniVersion is 0.1.0 (skel_test: plugin supports 4.3.2).
    let p = Recorder::with_versions(&["4.3.2"]);
    let e = err_of(&dispatch(&p, &env_without("ADD", &[]), br#"{"name":"n"}"#));
    assert_eq!(e.details, r#"config is "0.1.0", plugin supports ["4.3.2"]"#);
    // Several versions print as Go's %q of a []string.
    let p = Recorder::with_versions(&["0.3.1", "0.4.0"]);
    let e = err_of(&dispatch(
        &p,
        &env_without("DEL", &[]),
        br#"{"cniVersion":"1.0","name":"n"}"#,
    ));
    assert_eq!(
        e.details,
        r#"config is "1.0", plugin supports ["0.3.1" "0.4.0"]"#
    );
    assert!(p.commands().is_empty());
}

#[test]
fn check_gc_status_gating() {
    let stdin = |v: &str| {
        format!(
            r#"{{ "name": "skel-test", "cniVersion": "{v}", "some": "config", "cni.dev/valid-attachments": [] }}"#
        )
    };
    for (cmd, min_ok, too_old) in [
        ("CHECK", "0.4.0", "0.3.1"),
        ("GC", "1.1.0", "1.0.0"),
        ("STATUS", "1.1.0", "0.3.0"),
    ] {
        let p = Recorder::default();
        let e = err_of(&dispatch(
            &p,
            &env_without(cmd, &[]),
            stdin(too_old).as_bytes(),
        ));
        assert_eq!(e.code.as_u32(), 1);
        assert_eq!(e.msg, format!("config version does not allow {cmd}"));
        assert!(p.commands().is_empty());

        let p = Recorder::with_versions(&["0.1.0", "0.2.0", "0.3.0"]);
        let e = err_of(&dispatch(
            &p,
            &env_without(cmd, &[]),
            stdin(min_ok).as_bytes(),
        ));
        assert_eq!(e.code.as_u32(), 1);
        assert_eq!(e.msg, format!("plugin version does not allow {cmd}"));

        let p = Recorder::default();
        let e = err_of(&dispatch(
            &p,
            &env_without(cmd, &[]),
            stdin("adsfsadf").as_bytes(),
        ));
        assert_eq!(e.code, ErrorCode::DecodingFailure);

        let p = Recorder::default();
        let out = dispatch(&p, &env_without(cmd, &[]), stdin(min_ok).as_bytes());
        assert_eq!(out.exit_code, 0, "{:?}", out.error());
        assert_eq!(p.commands().len(), 1);
    }
}

#[test]
fn missing_callbacks_succeed_silently() {
    for cmd in ["GC", "STATUS", "CHECK"] {
        let out = dispatch(&Minimal, &env_without(cmd, &[]), STDIN.as_bytes());
        assert_eq!((out.exit_code, out.stdout.len()), (0, 0), "{cmd}");
    }
}

#[test]
fn about_text_on_empty_command() {
    let p = Recorder {
        about: "CNI plugin skel-test v1.2.3".into(),
        versions: Some(vec![Version::V0_4_0, Version::V1_0_0]),
        ..Default::default()
    };
    let out = dispatch(&p, &Env::new(Vec::<(String, String)>::new()), b"");
    assert_eq!(out.exit_code, 0);
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "CNI plugin skel-test v1.2.3\nCNI protocol versions supported: 0.4.0, 1.0.0\n"
    );
    // The default about text comes from the plugin's name.
    let out = dispatch(&Minimal, &Env::new([("CNI_PATH", "/x")]), b"");
    assert_eq!(out.exit_code, 0);
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .starts_with("CNI minimal plugin\n"));
    // Without an about text the missing command is an error.
    let quiet = Recorder {
        about: String::new(),
        ..Default::default()
    };
    let e = err_of(&dispatch(&quiet, &Env::new([("CNI_PATH", "/x")]), b""));
    assert_eq!(e.msg, "required env variables [CNI_COMMAND] missing");
}

#[test]
fn unknown_command() {
    let e = err_of(&dispatch(
        &Minimal,
        &env_without("FOO", &[]),
        STDIN.as_bytes(),
    ));
    assert_eq!(e.code, ErrorCode::InvalidEnvironmentVariables);
    assert_eq!(e.msg, "unknown CNI_COMMAND: FOO");
}

#[test]
fn error_json_on_stdout_with_exit_1() {
    let p = Recorder {
        fail_add: Some(CniError::internal("failed to do the thing")),
        ..Default::default()
    };
    let out = dispatch(&p, &env_without("ADD", &[]), STDIN.as_bytes());
    assert_eq!(out.exit_code, 1);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\n    \"cniVersion\": \"1.1.0\",\n    \"code\": 999,\n    \"msg\": \"failed to do the thing\"\n}"
    );
    // A plugin's own code is kept.
    let p = Recorder {
        fail_add: Some(CniError::new(ErrorCode::Other(123), "custom", "more")),
        ..Default::default()
    };
    let e = err_of(&dispatch(&p, &env_without("ADD", &[]), STDIN.as_bytes()));
    assert_eq!(
        (e.code.as_u32(), e.msg.as_str(), e.details.as_str()),
        (123, "custom", "more")
    );
}

#[test]
fn panic_becomes_code_999() {
    let p = Recorder {
        panic_add: true,
        ..Default::default()
    };
    let e = err_of(&dispatch(&p, &env_without("ADD", &[]), STDIN.as_bytes()));
    assert_eq!(e.code, ErrorCode::Internal);
    assert_eq!(e.msg, "plugin panicked during ADD: boom");
}

struct FakeGuard(bool);
impl NetnsGuard for FakeGuard {
    fn is_own_netns(&self, _: &str) -> Result<bool, CniError> {
        Ok(self.0)
    }
}

#[test]
fn own_netns_guard_runs_before_the_callback() {
    for cmd in ["ADD", "DEL"] {
        let p = Recorder::default();
        let env = env_without(cmd, &[]).with_netns_guard(Arc::new(FakeGuard(true)));
        let e = err_of(&dispatch(&p, &env, STDIN.as_bytes()));
        assert_eq!(e.code, ErrorCode::InvalidNetns);
        assert_eq!(
            e.msg,
            "plugin's netns and netns from CNI_NETNS should not be the same"
        );
        assert!(
            p.commands().is_empty(),
            "{cmd} callback ran before the guard"
        );
        for ov in ["1", "true", "TRUE"] {
            let mut env = env.clone();
            env.set("CNI_NETNS_OVERRIDE", ov);
            assert_eq!(dispatch(&p, &env, STDIN.as_bytes()).exit_code, 0);
        }
    }
    // The real guard: our own namespace is refused, a missing path is not.
    let p = Recorder::default();
    let mut env = env_without("ADD", &[]).with_netns_guard(Arc::new(OwnNetnsGuard));
    env.set("CNI_NETNS", "/proc/self/ns/net");
    assert_eq!(
        err_of(&dispatch(&p, &env, STDIN.as_bytes())).code.as_u32(),
        8
    );
    env.set("CNI_NETNS", "/nonexistent/netns");
    assert_eq!(dispatch(&p, &env, STDIN.as_bytes()).exit_code, 0);
    let mut env = env_without("DEL", &["CNI_NETNS"]).with_netns_guard(Arc::new(OwnNetnsGuard));
    env.set("CNI_PATH", "/x");
    assert_eq!(dispatch(&p, &env, STDIN.as_bytes()).exit_code, 0);
}

#[test]
fn result_printed_in_the_config_version() {
    let p = Recorder::default();
    let out = dispatch(
        &p,
        &env_without("ADD", &[]),
        br#"{"cniVersion":"0.3.1","name":"n"}"#,
    );
    assert_eq!(out.exit_code, 0);
    let expected = r#"{
    "cniVersion": "0.3.1",
    "ips": [
        {
            "version": "4",
            "address": "10.1.2.3/24",
            "gateway": "10.1.2.1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ],
    "dns": {}
}"#;
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    let out = dispatch(
        &p,
        &env_without("ADD", &[]),
        br#"{"cniVersion":"1.0.0","name":"n"}"#,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cniVersion"], "1.0.0");
    assert!(v["ips"][0].get("version").is_none());
    let out = dispatch(
        &p,
        &env_without("ADD", &[]),
        br#"{"cniVersion":"0.2.0","name":"n"}"#,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ip4"]["ip"], "10.1.2.3/24");
}

#[test]
fn request_exposes_config_and_args() {
    struct Inspect;
    impl Plugin for Inspect {
        type Error = cni_types::CniError;
        fn name(&self) -> &str {
            "inspect"
        }
        fn add(&self, req: &Request) -> Result<CniResult, CniError> {
            assert_eq!(req.config.name, "net1");
            assert_eq!(req.config.plugin_type, "inspect");
            assert_eq!(req.version, Version::V1_0_0);
            assert_eq!(req.path, vec![std::path::PathBuf::from("/a"), "/b".into()]);
            let args = req.args().map_err(CniError::from)?;
            assert_eq!(args.get("K8S_POD_NAME"), Some("pod"));
            Ok(CniResult::default())
        }
        fn del(&self, req: &Request) -> Result<(), CniError> {
            // A malformed CNI_ARGS only fails the plugin that parses it.
            assert!(req.args().is_err());
            Ok(())
        }
    }
    let mut env = env_without("ADD", &[]);
    env.set("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=pod");
    env.set("CNI_PATH", "/a:/b");
    let conf = br#"{"cniVersion":"1.0.0","name":"net1","type":"inspect"}"#;
    let out = dispatch(&Inspect, &env, conf);
    assert_eq!(out.exit_code, 0, "{:?}", out.error());
    let mut env = env_without("DEL", &[]);
    env.set("CNI_ARGS", "A=b=c");
    assert_eq!(dispatch(&Inspect, &env, conf).exit_code, 0);
}

/// A plugin that delegates to an IPAM plugin, as bridge does.
struct Delegating;
impl Plugin for Delegating {
    type Error = cni_exec::Error;
    fn name(&self) -> &str {
        "delegating"
    }
    fn add(&self, req: &Request) -> Result<CniResult, cni_exec::Error> {
        cni_exec::delegate_add("fake-ipam", &req.stdin, req)
    }
    fn del(&self, req: &Request) -> Result<(), cni_exec::Error> {
        cni_exec::delegate_del("fake-ipam", &req.stdin, req)
    }
}

#[test]
fn pure_dispatch_never_starts_a_process() {
    // A binary named like the delegate on CNI_PATH: if dispatch forked, it
    // would run (and leave a file behind).
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let bin = dir.path().join("fake-ipam");
    std::fs::write(
        &bin,
        format!("#!/bin/sh\ntouch {}\necho '{{}}'\n", marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut env = env_without("ADD", &[]);
    env.set("CNI_PATH", dir.path().display().to_string());
    let e = err_of(&dispatch(&Delegating, &env, STDIN.as_bytes()));
    assert!(e.msg.contains("no executor"), "{}", e.msg);
    assert!(!marker.exists(), "dispatch started a process");
    // Given an executor that runs processes, it does.
    let env = env.with_exec(std::sync::Arc::new(cni_exec::ProcessExec::new()));
    let out = dispatch(&Delegating, &env, STDIN.as_bytes());
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(marker.exists());
}

#[test]
fn request_builder_unit_tests_a_delegating_plugin() {
    use cni_exec::{Command, InProcessExec};
    use cni_types::{IpConfig, NetworkConfig};
    // The fake IPAM, in-process.
    struct Ipam;
    impl Plugin for Ipam {
        type Error = CniError;
        fn name(&self) -> &str {
            "fake-ipam"
        }
        fn add(&self, _: &Request) -> Result<CniResult, CniError> {
            let mut r = CniResult::default();
            r.ips.push(IpConfig::new("10.9.0.2/24".parse().unwrap()));
            Ok(r)
        }
        fn del(&self, _: &Request) -> Result<(), CniError> {
            Ok(())
        }
    }
    let exec = InProcessExec::builder()
        .register("fake-ipam", std::sync::Arc::new(Ipam))
        .build();
    let conf = NetworkConfig::builder("net", "delegating")
        .cni_version("1.0.0")
        .build()
        .unwrap();
    let req = Request::builder(Command::Add, conf)
        .container_id("c1")
        .netns("/run/netns/c1")
        .ifname("eth0")
        .path("/opt/cni/bin")
        .exec(std::sync::Arc::new(exec))
        .build()
        .unwrap();
    let r = Plugin::add(&Delegating, &req).unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.9.0.2/24");
    // Without an executor the request refuses to delegate.
    let conf = NetworkConfig::builder("net", "delegating").build().unwrap();
    let req = Request::builder(Command::Add, conf).build().unwrap();
    assert!(matches!(
        Plugin::add(&Delegating, &req),
        Err(cni_exec::Error::NoExecutor(_))
    ));
}

/// A GC without `cni.dev/valid-attachments` (absent or `null`) is refused
/// with code 7 before the plugin runs, unless the plugin says it finds the
/// live attachments elsewhere; a malformed list is a decoding error.
#[test]
fn gc_needs_the_list_of_valid_attachments() {
    let bare = r#"{ "name":"skel-test", "cniVersion":"1.1.0" }"#;
    let null = r#"{ "name":"skel-test", "cniVersion":"1.1.0", "cni.dev/valid-attachments": null }"#;
    for stdin in [bare, null] {
        let p = Recorder::default();
        let e = err_of(&dispatch(&p, &env_without("GC", &[]), stdin.as_bytes()));
        assert_eq!(e.code, ErrorCode::InvalidNetworkConfig, "{stdin}");
        assert!(e.msg.contains("cni.dev/valid-attachments"), "{}", e.msg);
        assert!(p.commands().is_empty());
        let out = dispatch(&OwnList, &env_without("GC", &[]), stdin.as_bytes());
        assert_eq!(out.exit_code, 0, "{:?}", out.error());
    }
    // The legacy name of the spec-v1.1.0 tag counts.
    let legacy = r#"{ "name":"skel-test", "cniVersion":"1.1.0", "cni.dev/attachments": [] }"#;
    let out = dispatch(
        &Recorder::default(),
        &env_without("GC", &[]),
        legacy.as_bytes(),
    );
    assert_eq!(out.exit_code, 0, "{:?}", out.error());
    let bad = r#"{ "name":"skel-test", "cniVersion":"1.1.0", "cni.dev/valid-attachments": 7 }"#;
    let e = err_of(&dispatch(
        &Recorder::default(),
        &env_without("GC", &[]),
        bad.as_bytes(),
    ));
    assert_ne!(e.code.as_u32(), 0);
    assert!(e.msg.contains("cni.dev/valid-attachments"), "{}", e.msg);
}

/// A plugin whose GC does not read the runtime's list.
struct OwnList;

impl Plugin for OwnList {
    type Error = CniError;
    fn name(&self) -> &str {
        "own-list"
    }
    fn add(&self, _: &Request) -> Result<CniResult, CniError> {
        Ok(CniResult::default())
    }
    fn del(&self, _: &Request) -> Result<(), CniError> {
        Ok(())
    }
    fn gc_needs_valid_attachments(&self) -> bool {
        false
    }
}
