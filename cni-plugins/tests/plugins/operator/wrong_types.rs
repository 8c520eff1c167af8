//! #31.5: every key of every plugin's configuration, fed a value of the
//! wrong JSON kind, is refused with code 7 and a message naming the key.
//! The keys and their kinds come from the config structs
//! (`cni_plugins::config_keys`, as the docs drift test), plus the spec's
//! own keys every plugin reads (`cni_types::NetworkConfig`); keys parsed by
//! hand (firewall, multus) carry no kind, and get a number, a boolean and
//! an object, of which at most one may be accepted.
//!
//! Each plugin binary runs ADD inside a namespace of its own (its "node"),
//! with `CNI_NETNS` naming no namespace and an empty `CNI_PATH`, and the
//! directories it may write to in a temporary directory: a config that is
//! wrongly accepted fails later, having touched nothing of the machine's.

use std::collections::HashMap;
use std::path::Path;

use cni_plugins::config_keys::PLUGINS;
use cni_types::keys::KeyKind;
use serde_json::{json, Value};

use crate::common::{self, Call};

/// The binary a page's keys are fed to.
fn binary(page: &str) -> Option<&'static str> {
    Some(match page {
        "bandwidth" => env!("CARGO_BIN_EXE_bandwidth"),
        "bridge" => env!("CARGO_BIN_EXE_bridge"),
        "dhcp" => env!("CARGO_BIN_EXE_dhcp"),
        "dummy" => env!("CARGO_BIN_EXE_dummy"),
        "firewall" => env!("CARGO_BIN_EXE_firewall"),
        "flannel" => env!("CARGO_BIN_EXE_flannel"),
        "host-device" => env!("CARGO_BIN_EXE_host-device"),
        "host-local" => env!("CARGO_BIN_EXE_host-local"),
        "ipvlan" => env!("CARGO_BIN_EXE_ipvlan"),
        "loopback" => env!("CARGO_BIN_EXE_loopback"),
        "macvlan" => env!("CARGO_BIN_EXE_macvlan"),
        #[cfg(feature = "multus")]
        "multus" => env!("CARGO_BIN_EXE_multus"),
        "passthru" => env!("CARGO_BIN_EXE_passthru"),
        "portmap" => env!("CARGO_BIN_EXE_portmap"),
        "ptp" => env!("CARGO_BIN_EXE_ptp"),
        "sbr" => env!("CARGO_BIN_EXE_sbr"),
        "static" => env!("CARGO_BIN_EXE_static"),
        "tap" => env!("CARGO_BIN_EXE_tap"),
        "tuning" => env!("CARGO_BIN_EXE_tuning"),
        "vlan" => env!("CARGO_BIN_EXE_vlan"),
        "vrf" => env!("CARGO_BIN_EXE_vrf"),
        _ => return None,
    })
}

/// A config the plugin would start from, its writable directories in
/// `tmp` (unless the key under test is one of them).
fn base(page: &str, tmp: &Path) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "wrongtypes", "type": page});
    match page {
        "flannel" => {
            c["subnetFile"] = json!(tmp.join("subnet.env"));
            c["dataDir"] = json!(tmp.join("flannel"));
        }
        "firewall" => {
            c["dataDir"] = json!(tmp.join("firewall"));
            c["prevResult"] = json!({"cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": "/nonexistent/wrongtypes"}],
                "ips": [{"address": "10.253.0.2/24", "interface": 0}]});
        }
        "host-local" | "static" | "dhcp" => {
            c["ipam"] = json!({"type": page, "dataDir": tmp.join("ipam"),
                "daemonSocketPath": tmp.join("dhcp.sock")})
        }
        "multus" => {
            c["cniDir"] = json!(tmp.join("multus"));
            c["confDir"] = json!(tmp.join("net.d"));
            c["clusterNetwork"] = json!("cluster");
        }
        _ => {}
    }
    c
}

/// The keys of the spec's `NetworkConfig` (parsed by `cni-types` for every
/// plugin), with their kinds.
fn spec_keys() -> Vec<(String, Vec<KeyKind>)> {
    use KeyKind::*;
    [
        ("cniVersion", String),
        ("name", String),
        ("type", String),
        ("ipam", Object),
        ("ipam.type", String),
        ("ipMasq", Bool),
        ("dns", Object),
        ("dns.nameservers", Array),
        ("runtimeConfig", Object),
        ("runtimeConfig.portMappings", Array),
        ("prevResult", Object),
        ("args", Object),
    ]
    .into_iter()
    .map(|(k, kind)| (k.to_string(), vec![kind]))
    .collect()
}

/// Keys the runner itself decodes before any plugin code, with the Go
/// skel's code for a wrong type there: 6, "decoding failure" (the message
/// names the key all the same).
const SKEL_KEYS: &[&str] = &["cniVersion", "name"];

/// The value of the wrong kind for a key whose type asks for `kind`.
fn wrong(kind: KeyKind) -> Option<Value> {
    match kind {
        KeyKind::Bool | KeyKind::Integer | KeyKind::Float | KeyKind::Array | KeyKind::Object => {
            Some(json!("wrong-kind"))
        }
        KeyKind::String | KeyKind::Enum => Some(json!(12345)),
        _ => None,
    }
}

/// `config` with `value` at the dotted `key`, the objects on the way
/// wrapped in as many arrays as their shapes say.
fn set(config: &mut Value, key: &str, shapes: &HashMap<String, Vec<KeyKind>>, value: Value) {
    let segs: Vec<&str> = key.split('.').collect();
    let mut at = config;
    for i in 0..segs.len() {
        let seg = segs[i];
        if i + 1 == segs.len() {
            at[seg] = value;
            return;
        }
        let prefix = segs[..=i].join(".");
        let arrays = shapes.get(&prefix).map_or(0, |k| {
            k.iter().take_while(|k| **k == KeyKind::Array).count()
        });
        if !at[seg].is_object() && !at[seg].is_array() {
            let mut v = json!({});
            for _ in 0..arrays {
                v = json!([v]);
            }
            at[seg] = v;
        }
        let mut next = &mut at[seg];
        while next.is_array() {
            next = &mut next[0];
        }
        at = next;
    }
}

/// How a plugin answered a config with one wrong value.
enum Verdict {
    /// Code 7, the key named.
    Refused,
    /// Refused without naming the key, or with another code.
    Unclear(String),
    /// Not refused for the key.
    Accepted(String),
}

fn verdict(reply: &common::Reply, key: &str) -> Verdict {
    let leaf = key.rsplit('.').next().unwrap_or(key);
    let msg = reply.msg();
    let code = reply.json["code"].as_u64();
    if reply.ok {
        return Verdict::Accepted("ADD succeeded".into());
    }
    let wanted = if SKEL_KEYS.contains(&key) { 6 } else { 7 };
    if code == Some(wanted) && msg.contains(leaf) {
        Verdict::Refused
    } else if msg.contains(leaf) {
        Verdict::Unclear(format!("code {code:?}: {msg}"))
    } else {
        Verdict::Accepted(format!("code {code:?}: {msg}"))
    }
}

#[test]
fn every_key_of_the_wrong_kind_is_refused_naming_it() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let node = common::netns("wrongty");
    let tmp = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let mut probes = 0;
    let mut untyped = Vec::new();
    for (page, keys) in PLUGINS {
        let Some(bin) = binary(page) else { continue };
        let mut keys = keys();
        for spec in spec_keys() {
            if !keys.iter().any(|(k, _)| *k == spec.0) {
                keys.push(spec);
            }
        }
        let shapes: HashMap<String, Vec<KeyKind>> = keys.iter().cloned().collect();
        let mut run = |key: &str, value: Value| {
            let mut c = base(page, tmp.path());
            set(&mut c, key, &shapes, value);
            probes += 1;
            let reply = common::run(
                &node,
                &Call {
                    plugin: Path::new(bin),
                    cni_path: empty.path(),
                    command: "ADD",
                    container_id: "wrongtypes",
                    netns: "/nonexistent/wrongtypes",
                    ifname: "eth0",
                    args: "",
                },
                &c,
            );
            verdict(&reply, key)
        };
        for (key, kinds) in &keys {
            if page == &"multus" && !multus_plugin_key(key) {
                continue;
            }
            match kinds.first().and_then(|k| Some((*k, wrong(*k)?))) {
                Some((kind, value)) => match run(key, value.clone()) {
                    Verdict::Refused => {}
                    Verdict::Unclear(why) | Verdict::Accepted(why) => {
                        problems.push(format!("{page}: {key} = {value} ({kind:?} wanted): {why}"))
                    }
                },
                None => {
                    // Read by hand, or by a type that takes any JSON
                    // first: a value is refused (code 7, the key named) or
                    // taken to be of the key's kind.
                    if !kinds.is_empty() {
                        untyped.push(format!("{page}: {key}"));
                    }
                    let mut accepted = Vec::new();
                    for value in [json!(12345), json!(true), json!({"wrong": ["kind"]})] {
                        match run(key, value.clone()) {
                            Verdict::Refused => {}
                            Verdict::Unclear(why) | Verdict::Accepted(why) => {
                                accepted.push(format!("{value} ({why})"))
                            }
                        }
                    }
                    if accepted.len() > 1 {
                        problems.push(format!("{page}: {key}: accepted {}", accepted.join(", ")));
                    }
                }
            }
        }
    }
    eprintln!("{probes} probes; keys whose type takes any JSON first: {untyped:?}");
    assert!(
        problems.is_empty(),
        "{} keys of the wrong kind not refused with code 7 naming them:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// The multus page also documents the thick daemon's keys, which the
/// plugin does not read (`multus_daemon_keys_of_the_wrong_kind`).
fn multus_plugin_key(key: &str) -> bool {
    #[cfg(feature = "multus")]
    {
        use cni_multus::thick::{config::DAEMON_KEYS, config::PRIMARY_KEYS};
        !DAEMON_KEYS.contains(&key) && !PRIMARY_KEYS.contains(&key)
    }
    #[cfg(not(feature = "multus"))]
    {
        let _ = key;
        false
    }
}

/// The multus daemon's own keys (`daemon-config.json`), decoded in this
/// process: a number, a boolean and an object each, at most one accepted,
/// every refusal naming the key.
#[cfg(feature = "multus")]
#[test]
fn multus_daemon_keys_of_the_wrong_kind() {
    use cni_multus::thick::{config::DAEMON_KEYS, config::PRIMARY_KEYS, DaemonConfig};
    let tmp = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    for key in DAEMON_KEYS.iter().chain(PRIMARY_KEYS) {
        let mut accepted = Vec::new();
        for value in [json!(12345), json!(true), json!({"wrong": ["kind"]})] {
            let mut c = json!({"socketDir": tmp.path().join("sock"), "clusterNetwork": "cluster",
                "cniDir": tmp.path().join("cni")});
            c[*key] = value.clone();
            match DaemonConfig::from_slice(c.to_string().as_bytes(), Path::new("daemon.json")) {
                Ok(_) => accepted.push(value.to_string()),
                Err(e) if e.to_string().contains(key) => {}
                Err(e) => problems.push(format!("{key} = {value}: refused without its name: {e}")),
            }
        }
        if accepted.len() > 1 {
            problems.push(format!("{key}: accepted {}", accepted.join(", ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The shim's own key, read before anything is forwarded to the daemon
/// (#36.7): a `socketDir` of the wrong kind is refused (code 7, naming
/// it), never taken for the default socket.
#[cfg(feature = "multus")]
#[test]
fn multus_shim_socket_dir_of_the_wrong_kind_is_refused() {
    shim_refuses_wrong_kinds(&["socketDir"]);
}

/// The shim's own logging keys (Go's `shimConfig` fails to unmarshal them):
/// code 7 naming the key, not silently the default.
#[test]
fn multus_shim_log_keys_of_the_wrong_kind_are_refused() {
    shim_refuses_wrong_kinds(&["logFile", "logLevel", "logToStderr"]);
}

/// multus-shim ADD with each of `keys` set to values of the wrong kind:
/// each refused (code 7) naming the key.
fn shim_refuses_wrong_kinds(keys: &[&str]) {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let node = common::netns("wrongshim");
    let empty = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    for key in keys {
        // ADD only: before the fix, a DEL fell back on the node's own
        // delegate cache (the default cniDir).
        let wrong = if *key == "logToStderr" {
            [
                json!(12345),
                json!("yes"),
                json!({"wrong": ["kind"]}),
                json!(["/run"]),
            ]
        } else {
            [
                json!(12345),
                json!(true),
                json!({"wrong": ["kind"]}),
                json!(["/run"]),
            ]
        };
        for value in wrong {
            let mut c = json!({"cniVersion": "1.0.0", "name": "wrongtypes", "type": "multus-shim"});
            c[*key] = value.clone();
            let reply = common::run(
                &node,
                &Call {
                    plugin: Path::new(env!("CARGO_BIN_EXE_multus-shim")),
                    cni_path: empty.path(),
                    command: "ADD",
                    container_id: "wrongtypes",
                    netns: "/nonexistent/wrongtypes",
                    ifname: "eth0",
                    args: "",
                },
                &c,
            );
            match verdict(&reply, key) {
                Verdict::Refused => {}
                Verdict::Unclear(why) | Verdict::Accepted(why) => {
                    problems.push(format!("{key} = {value}: {why}"))
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
