//! Input limits through the runner in memory (`dispatch`), where the
//! kernel's exec limits do not apply: an embedding runtime can hand a
//! plugin any environment. Huge `CNI_ARGS`, deep JSON and control
//! characters must give one CNI error with the right code, quickly.

use std::time::{Duration, Instant};

use cni_exec::{dispatch, Env, Plugin, Request};
use cni_types::{CniError, CniResult, IpConfig};

/// Reads `CNI_ARGS` and its own config section as real plugins do.
struct ArgsReader;

impl Plugin for ArgsReader {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "args-reader"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let args = req.args().map_err(|e| e.to_cni_error())?;
        args.check_known(&["IP", "K8S_POD_NAME"])
            .map_err(|e| e.to_cni_error())?;
        req.config
            .parse_as::<serde_json::Value>()
            .map_err(|e| e.to_cni_error())?;
        let mut r = CniResult::default();
        r.ips.push(IpConfig::new(
            "10.1.0.5/24"
                .parse()
                .map_err(|_| CniError::internal("ip"))?,
        ));
        Ok(r)
    }
    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

const BUDGET: Duration = Duration::from_secs(5);

fn env(args: &str) -> Env {
    Env::new([
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/none"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/nonexistent"),
        ("CNI_ARGS", args),
    ])
}

const CONF: &[u8] = br#"{"cniVersion":"1.0.0","name":"limits","type":"args"}"#;

/// Runs `dispatch` and returns the error reply's code (the run must fail).
fn error_code(env: &Env, stdin: &[u8]) -> u32 {
    let start = Instant::now();
    let out = dispatch(&ArgsReader, env, stdin);
    assert!(start.elapsed() < BUDGET, "took {:?}", start.elapsed());
    assert_eq!(out.exit_code, 1);
    let e = out.error().expect("an error reply");
    assert!(!e.msg.contains("panicked"), "{}", e.msg);
    e.code.as_u32()
}

#[test]
fn a_1_mib_cni_args_is_an_args_error() {
    // 1 MiB in one value, and 1 MiB of 100k pairs.
    let one_value = format!("K8S_POD_NAME=p;BIG={}", "x".repeat(1 << 20));
    assert_eq!(error_code(&env(&one_value), CONF), 4);
    let mut many = String::from("K8S_POD_NAME=p");
    while many.len() < 1 << 20 {
        many.push_str(";K=v");
    }
    assert_eq!(error_code(&env(&many), CONF), 4);
    // Malformed (no '=') at the end of 1 MiB of good pairs.
    let mut bad = "IP=10.1.0.5;".repeat((1 << 20) / 12);
    bad.push_str("oops");
    assert_eq!(error_code(&env(&bad), CONF), 4);
}

#[test]
fn a_1_mib_cni_args_of_known_keys_is_accepted() {
    let mut known = String::from("IgnoreUnknown=1");
    while known.len() < 1 << 20 {
        known.push_str(";K8S_POD_NAME=p");
    }
    let start = Instant::now();
    let out = dispatch(&ArgsReader, &env(&known), CONF);
    assert!(start.elapsed() < BUDGET, "took {:?}", start.elapsed());
    assert_eq!(out.exit_code, 0, "{:?}", out.error());
}

#[test]
fn deep_json_is_a_decoding_error() {
    assert_eq!(error_code(&env(""), "[".repeat(100_000).as_bytes()), 6);
    assert_eq!(
        error_code(&env(""), "{\"a\":".repeat(100_000).as_bytes()),
        6
    );
    // Within the plugin's own section: the runner decodes the whole object
    // first, so the plugin never sees it.
    let nested = format!(
        r#"{{"cniVersion":"1.0.0","name":"limits","type":"args","mine":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_eq!(error_code(&env(""), nested.as_bytes()), 6);
    // 127 levels, under serde_json's limit of 128, still work.
    let ok = format!(
        r#"{{"cniVersion":"1.0.0","name":"limits","type":"args","mine":{}{}}}"#,
        "[".repeat(126),
        "]".repeat(126)
    );
    assert_eq!(dispatch(&ArgsReader, &env(""), ok.as_bytes()).exit_code, 0);
}

#[test]
fn control_characters_in_names_are_refused() {
    for (var, value, code) in [
        ("CNI_CONTAINERID", "c\u{1}", 4),
        ("CNI_CONTAINERID", "c\u{0}d", 4),
        ("CNI_CONTAINERID", "\u{1b}[31mc", 4),
        ("CNI_IFNAME", "eth\n0", 4),
        ("CNI_IFNAME", "eth\u{0b}", 4),
    ] {
        let mut e = env("");
        e.set(var, value);
        assert_eq!(error_code(&e, CONF), code, "{var}={value:?}");
    }
    for name in ["lim\u{1}its", "\u{7f}", "limits\u{0}"] {
        let stdin = serde_json::to_vec(
            &serde_json::json!({"cniVersion": "1.0.0", "name": name, "type": "args"}),
        )
        .unwrap();
        assert_eq!(error_code(&env(""), &stdin), 7, "{name:?}");
    }
}

#[test]
fn control_characters_in_cni_path_are_only_directories_that_do_not_exist() {
    // CNI_PATH is not validated (the Go skel does not either): entries are
    // only places to look for delegates. A plugin that delegates finds none.
    let mut e = env("");
    e.set("CNI_PATH", "/opt/\u{1}cni:\u{7f}:\n");
    let out = dispatch(&ArgsReader, &e, CONF);
    assert_eq!(out.exit_code, 0, "{:?}", out.error());
    let paths = cni_exec::skel::split_path("/opt/\u{1}cni:\u{7f}:\n");
    assert_eq!(paths.len(), 3);
    let err = cni_exec::find_in_path("bridge", &paths).expect_err("no such directory");
    assert!(err.to_string().contains("bridge"), "{err}");
}
