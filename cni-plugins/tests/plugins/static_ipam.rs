//! The `static` IPAM plugin binary: results byte for byte like the Go
//! reference (`/usr/lib/cni/static`) for every version, the override order
//! of addresses, DEL as a no-op, CHECK against prevResult.

use std::path::Path;

use crate::host_local_support::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn conf(version: &str, ipam: Value) -> Value {
    let mut ipam = ipam;
    ipam["type"] = json!("static");
    json!({"cniVersion": version, "name": "net", "type": "bridge", "ipam": ipam})
}

fn with(mut c: Value, key: &str, value: Value) -> Value {
    c[key] = value;
    c
}

fn addresses(out: &Out) -> Vec<(String, Option<String>)> {
    out.json()["ips"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|ip| {
            (
                ip["address"].as_str().unwrap_or_default().to_string(),
                ip["gateway"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn cases(version: &str) -> Vec<(Value, &'static str)> {
    let base = json!({
        "addresses": [
            {"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
            {"address": "3ffe:ffff:0:1ff::1/64"},
        ],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.5.1"}],
        "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"]},
    });
    vec![
        (conf(version, base.clone()), ""),
        (
            conf(version, json!({"routes": [{"dst": "10.0.0.0/8"}]})),
            "IP=10.10.0.7/24;GATEWAY=10.10.0.254",
        ),
        (
            with(
                conf(version, base.clone()),
                "args",
                json!({"cni": {"ips": ["10.20.0.9/16"]}}),
            ),
            "",
        ),
        (
            with(
                with(
                    conf(version, base),
                    "args",
                    json!({"cni": {"ips": ["10.20.0.9/16"]}}),
                ),
                "runtimeConfig",
                json!({"ips": ["10.30.0.3/24"]}),
            ),
            "IgnoreUnknown=1;IP=10.40.0.1/24;GATEWAY=10.40.0.254",
        ),
    ]
}

#[test]
fn add_results_match_go_for_every_version() {
    let Some(go_bin) = go(GO_STATIC) else {
        return;
    };
    let versions = supported_versions(&go_bin);
    let mut compared = 0;
    for version in &versions {
        for (i, (c, args)) in cases(version).into_iter().enumerate() {
            let call = Call::new("ADD", "c1").args(args);
            let theirs = run(&go_bin, call.clone(), &c);
            let ours = run(STATIC, call, &c);
            assert_eq!(
                ours.code, theirs.code,
                "{version} case {i}: {ours:?} vs {theirs:?}"
            );
            assert_eq!(
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&without_empty_dns_1x(version, &theirs.stdout)),
                "{version} case {i}"
            );
            compared += 1;
        }
    }
    eprintln!("compared {compared} static results with Go for {versions:?}");
}

#[test]
fn override_order_of_the_reference() {
    let cs = cases("1.1.0");
    let get = |i: usize| {
        let (c, args) = &cs[i];
        let out = run(STATIC, Call::new("ADD", "c1").args(args), c);
        assert!(out.ok(), "{out:?}");
        addresses(&out)
    };
    let s = |a: &str, g: Option<&str>| (a.to_string(), g.map(str::to_string));
    assert_eq!(
        get(0),
        [
            s("10.10.0.1/24", Some("10.10.0.254")),
            s("3ffe:ffff:0:1ff::1/64", None)
        ]
    );
    // CNI_ARGS IP is appended, GATEWAY set on the address whose subnet holds it.
    assert_eq!(get(1), [s("10.10.0.7/24", Some("10.10.0.254"))]);
    // args.cni.ips replaces the configured addresses.
    assert_eq!(get(2), [s("10.20.0.9/16", None)]);
    // runtimeConfig.ips replaces everything, CNI_ARGS gateways included.
    assert_eq!(get(3), [s("10.30.0.3/24", None)]);
}

#[test]
fn del_is_a_no_op_and_version_lists_everything() {
    let (c, _) = &cases("1.0.0")[0];
    assert!(run(STATIC, Call::new("DEL", "c1"), c).ok());
    // Nothing was allocated, so not even a config without addresses fails.
    let bare = json!({"cniVersion": "1.0.0", "name": "net", "type": "bridge"});
    assert!(run(STATIC, Call::new("DEL", "c1"), &bare).ok());
    assert_eq!(
        supported_versions(Path::new(STATIC)),
        ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
    );
}

#[test]
fn check_compares_with_prev_result() {
    let (c, _) = &cases("1.0.0")[0];
    let added = run(STATIC, Call::new("ADD", "c1"), c);
    assert!(added.ok());
    let good = with(c.clone(), "prevResult", added.json());
    assert!(run(STATIC, Call::new("CHECK", "c1"), &good).ok());

    let mut wrong = added.json();
    wrong["ips"][0]["gateway"] = json!("10.10.0.1");
    let out = run(
        STATIC,
        Call::new("CHECK", "c1"),
        &with(c.clone(), "prevResult", wrong),
    );
    assert!(!out.ok());
    assert_eq!(
        out.msg(),
        "static: Failed to match addr 10.10.0.1 on interface eth0"
    );

    let out = run(STATIC, Call::new("CHECK", "c1"), c);
    assert!(!out.ok());
    assert!(out.msg().contains("prevResult"), "{}", out.msg());
}

#[test]
fn invalid_configs_name_the_field() {
    let bad = [
        (
            conf("1.0.0", json!({"addresses": [{"address": "10.10.0.1"}]})),
            "",
            "'address'",
        ),
        (
            conf(
                "1.0.0",
                json!({"addresses": [{"address": "10.10.0.1/24", "gateway": "x"}]}),
            ),
            "",
            "x",
        ),
        (conf("1.0.0", json!({})), "IP=10.1.1.1", "'ip'"),
        (
            with(
                conf("1.0.0", json!({})),
                "runtimeConfig",
                json!({"ips": ["10.1.1.1"]}),
            ),
            "",
            "'ips'",
        ),
        (
            conf(
                "0.2.0",
                json!({"addresses": [{"address": "10.0.0.1/24"}, {"address": "10.0.1.1/24"}]}),
            ),
            "",
            "more than 1 address per family",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "net", "type": "bridge"}),
            "",
            "'ipam'",
        ),
    ];
    for (c, args, needle) in bad {
        let out = run(STATIC, Call::new("ADD", "c1").args(args), &c);
        assert_eq!(out.err_code(), 7, "{c}: {out:?}");
        assert!(out.msg().contains(needle), "{c}: {}", out.msg());
    }
    let out = run(
        STATIC,
        Call::new("ADD", "c1").args("BOGUS=1"),
        &conf("1.0.0", json!({})),
    );
    assert_eq!(out.err_code(), 4, "{out:?}");
}
