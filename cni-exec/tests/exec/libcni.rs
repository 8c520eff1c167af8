//! The runtime side with in-process plugins: config loading, chaining,
//! capability injection, the result cache format, CHECK/DEL/GC/STATUS rules
//! (vectors from libcni/api_test.go and libcni/conf_test.go).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cni_exec::conf::load_network_conf;
use cni_exec::{CniConfig, Error, InProcessExec, NoNetnsGuard, Plugin, Request, RuntimeConf};
use cni_types::{CniError, CniResult, ErrorCode, GcAttachment, IpConfig, NetworkConfigList};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

type Log = Arc<Mutex<Vec<(String, String, Value)>>>;

/// Records every call (type, command, stdin) and adds one address to the
/// previous result.
struct Rec {
    name: &'static str,
    log: Log,
    ip: &'static str,
    fail: Option<(&'static str, CniError)>,
}

impl Rec {
    fn log(&self, req: &Request) -> Result<(), CniError> {
        self.log.lock().unwrap().push((
            self.name.into(),
            req.command.to_string(),
            serde_json::from_slice(&req.stdin).unwrap(),
        ));
        match &self.fail {
            Some((cmd, e)) if *cmd == req.command.as_str() => Err(e.clone()),
            _ => Ok(()),
        }
    }
}

impl Plugin for Rec {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "rec"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log(req)?;
        let mut r = req
            .config
            .prev_result()
            .map_err(CniError::from)?
            .unwrap_or_default();
        r.ips.push(IpConfig::new(self.ip.parse().unwrap()));
        Ok(r)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log(req)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        self.log(req)
    }
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        self.log(req)
    }
    fn status(&self, req: &Request) -> Result<(), CniError> {
        self.log(req)
    }
}

struct Setup {
    cni: CniConfig,
    log: Log,
    cache: tempfile::TempDir,
}

fn setup(fail: Option<(&'static str, &'static str, CniError)>) -> Setup {
    let log: Log = Arc::default();
    let mut b = InProcessExec::builder().netns_guard(Arc::new(NoNetnsGuard));
    for (name, ip) in [
        ("a", "10.0.0.2/24"),
        ("b", "10.0.1.2/24"),
        ("c", "fd00::2/64"),
    ] {
        let f = fail
            .as_ref()
            .filter(|(ty, _, _)| *ty == name)
            .map(|(_, cmd, e)| (*cmd, e.clone()));
        b = b.register(
            name,
            Arc::new(Rec {
                name,
                log: log.clone(),
                ip,
                fail: f,
            }),
        );
    }
    let cache = tempfile::tempdir().unwrap();
    let cni = CniConfig::new(vec!["/opt/cni/bin".into()], Arc::new(b.build()))
        .with_cache_dir(cache.path());
    Setup { cni, log, cache }
}

fn rt(cid: &str) -> RuntimeConf {
    RuntimeConf {
        container_id: cid.into(),
        netns: "/run/netns/test".into(),
        ifname: "eth0".into(),
        args: vec![("K8S_POD_NAME".into(), "pod".into())],
        capability_args: serde_json::from_value(json!({
            "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
            "somethingElse": {"x": 1},
            "noCapability": true,
            "notAdded": [1, 2, 3]
        }))
        .unwrap(),
    }
}

fn list(v: Value) -> NetworkConfigList {
    NetworkConfigList::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
}

fn chain(version: &str) -> NetworkConfigList {
    list(json!({
        "cniVersion": version,
        "name": "net1",
        "plugins": [
            {"type": "a", "name": "other", "capabilities": {"portMappings": true, "somethingElse": true, "noCapability": false}},
            {"type": "b"},
            {"type": "c", "runtimeConfig": {"stale": 1}}
        ]
    }))
}

fn calls(log: &Log) -> Vec<(String, String)> {
    log.lock()
        .unwrap()
        .iter()
        .map(|(t, c, _)| (t.clone(), c.clone()))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn add_chains_prev_result_injects_name_version_and_capabilities() {
    let s = setup(None);
    let r = s.cni.add_network_list(&chain("1.0.0"), &rt("c1")).unwrap();
    let ips: Vec<String> = r.result.ips.iter().map(|i| i.address.to_string()).collect();
    assert_eq!(ips, ["10.0.0.2/24", "10.0.1.2/24", "fd00::2/64"]);
    let log = s.log.lock().unwrap();
    let (_, _, first) = &log[0];
    // The list's name overrides the plugin's own; cniVersion is injected.
    assert_eq!(first["name"], "net1");
    assert_eq!(first["cniVersion"], "1.0.0");
    assert!(first.get("prevResult").is_none());
    // Only declared and supplied capabilities, nothing else.
    assert_eq!(
        first["runtimeConfig"],
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}], "somethingElse": {"x": 1}})
    );
    let (_, _, second) = &log[1];
    assert_eq!(second["prevResult"]["ips"][0]["address"], "10.0.0.2/24");
    assert_eq!(second["prevResult"]["cniVersion"], "1.0.0");
    assert!(second.get("runtimeConfig").is_none());
    // A plugin without capabilities keeps its own runtimeConfig.
    assert_eq!(log[2].2["runtimeConfig"], json!({"stale": 1}));
}

#[test]
fn cache_file_is_libcni_format() {
    let s = setup(None);
    let l = chain("1.0.0");
    let rt = rt("c1");
    s.cni.add_network_list(&l, &rt).unwrap();
    let path = s.cache.path().join("results/net1-c1-eth0");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dmeta = std::fs::metadata(s.cache.path().join("results")).unwrap();
    assert_eq!(dmeta.permissions().mode() & 0o777, 0o700);
    let text = std::fs::read_to_string(&path).unwrap();
    let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&text)
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        keys,
        [
            "kind",
            "containerId",
            "config",
            "ifName",
            "networkName",
            "netns",
            "cniArgs",
            "capabilityArgs",
            "result"
        ]
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["kind"], "cniCacheV1");
    assert_eq!(v["containerId"], "c1");
    assert_eq!(v["ifName"], "eth0");
    assert_eq!(v["networkName"], "net1");
    assert_eq!(v["netns"], "/run/netns/test");
    assert_eq!(v["cniArgs"], json!([["K8S_POD_NAME", "pod"]]));
    assert_eq!(v["capabilityArgs"]["notAdded"], json!([1, 2, 3]));
    assert_eq!(v["result"]["cniVersion"], "1.0.0");
    assert_eq!(v["result"]["ips"][2]["address"], "fd00::2/64");
    let config = cni_exec::cache::decode_config(v["config"].as_str().unwrap()).unwrap();
    assert_eq!(config, l.to_bytes());
    // No temp file is left behind.
    assert_eq!(
        std::fs::read_dir(s.cache.path().join("results"))
            .unwrap()
            .count(),
        1
    );
    // The cached config comes back with the cached args.
    let (bytes, crt) = s
        .cni
        .network_list_cached_config(
            &l,
            &RuntimeConf {
                args: vec![],
                ..rt.clone()
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(bytes, l.to_bytes());
    assert_eq!(crt.args, rt.args);
    let atts = s.cni.cached_attachments("c1").unwrap();
    assert_eq!(atts.len(), 1);
    assert_eq!(
        (atts[0].network.as_str(), atts[0].ifname.as_str()),
        ("net1", "eth0")
    );
    assert!(s.cni.cached_attachments("c").unwrap().is_empty());
}

#[test]
fn failed_add_names_the_plugin_and_writes_no_cache() {
    let s = setup(Some((
        "b",
        "ADD",
        CniError::new(ErrorCode::Other(111), "nope", "why"),
    )));
    let e = s
        .cni
        .add_network_list(&chain("1.0.0"), &rt("c1"))
        .unwrap_err();
    assert_eq!(e.to_string(), "plugin type=\"b\" failed (add): nope; why");
    assert_eq!(e.code().as_u32(), 111);
    assert!(!s.cache.path().join("results/net1-c1-eth0").exists());
}

#[test]
fn runtime_validates_ids_before_add() {
    let s = setup(None);
    let cases = [
        (
            RuntimeConf {
                container_id: "".into(),
                ..rt("x")
            },
            3,
            "missing containerID",
        ),
        (
            RuntimeConf {
                container_id: "a/b".into(),
                ..rt("x")
            },
            4,
            "invalid characters in containerID",
        ),
        (
            RuntimeConf {
                ifname: "eth0:1".into(),
                ..rt("x")
            },
            4,
            "interface name contains / or : or whitespace characters",
        ),
    ];
    for (r, code, msg) in cases {
        let e = s.cni.add_network_list(&chain("1.0.0"), &r).unwrap_err();
        assert_eq!(e.code().as_u32(), code);
        assert!(e.to_string().contains(msg), "{e}");
    }
    let bad = list(json!({"cniVersion": "1.0.0", "name": "my net", "plugins": [{"type": "a"}]}));
    let e = s.cni.add_network_list(&bad, &rt("x")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidNetworkConfig);
    assert!(calls(&s.log).is_empty());
}

#[test]
fn check_rules() {
    let s = setup(None);
    let e = s
        .cni
        .check_network_list(&chain("0.3.1"), &rt("c1"))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "configuration version \"0.3.1\" does not support the CHECK command"
    );
    let mut l = chain("1.0.0");
    s.cni.add_network_list(&l, &rt("c1")).unwrap();
    s.log.lock().unwrap().clear();
    s.cni.check_network_list(&l, &rt("c1")).unwrap();
    let log = s.log.lock().unwrap().clone();
    assert_eq!(log.len(), 3);
    // Every plugin gets the cached (final) result.
    for (_, cmd, stdin) in &log {
        assert_eq!(cmd, "CHECK");
        assert_eq!(stdin["prevResult"]["ips"].as_array().unwrap().len(), 3);
    }
    s.log.lock().unwrap().clear();
    l.disable_check = true;
    s.cni.check_network_list(&l, &rt("c1")).unwrap();
    assert!(calls(&s.log).is_empty());
}

#[test]
fn del_reverse_order_with_cached_prev_result_and_twice() {
    let s = setup(None);
    let l = chain("1.0.0");
    s.cni.add_network_list(&l, &rt("c1")).unwrap();
    s.log.lock().unwrap().clear();
    s.cni.del_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(
        calls(&s.log),
        pairs(&[("c", "DEL"), ("b", "DEL"), ("a", "DEL")])
    );
    assert_eq!(
        s.log.lock().unwrap()[0].2["prevResult"]["ips"][0]["address"],
        "10.0.0.2/24"
    );
    assert!(!s.cache.path().join("results/net1-c1-eth0").exists());
    // DEL again succeeds, now without prevResult.
    s.log.lock().unwrap().clear();
    s.cni.del_network_list(&l, &rt("c1")).unwrap();
    assert!(s.log.lock().unwrap()[0].2.get("prevResult").is_none());
    // Before 0.4.0 DEL gets no prevResult even with a cache.
    let old = chain("0.3.1");
    s.cni.add_network_list(&old, &rt("c2")).unwrap();
    s.log.lock().unwrap().clear();
    s.cni.del_network_list(&old, &rt("c2")).unwrap();
    assert!(s
        .log
        .lock()
        .unwrap()
        .iter()
        .all(|(_, _, v)| v.get("prevResult").is_none()));
}

#[test]
fn failed_del_keeps_the_cache() {
    let s = setup(Some(("a", "DEL", CniError::internal("busy"))));
    let l = chain("1.0.0");
    s.cni.add_network_list(&l, &rt("c1")).unwrap();
    let e = s.cni.del_network_list(&l, &rt("c1")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "plugin type=\"a\" name=\"other\" failed (delete): busy"
    );
    assert!(s.cache.path().join("results/net1-c1-eth0").exists());
}

#[test]
fn empty_or_corrupt_cache_never_blocks_del() {
    for content in [
        "",
        "{garbage",
        r#"{"kind":"cniCacheV1","result":{"cniVersion":"1.0.0","ips":[{"address":"nope"}]}}"#,
    ] {
        let s = setup(None);
        let l = chain("1.0.0");
        let dir = s.cache.path().join("results");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("net1-c1-eth0"), content).unwrap();
        // CHECK reports it...
        let e = s.cni.check_network_list(&l, &rt("c1")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("failed to get network \"net1\" cached result"),
            "{e}"
        );
        // ...DEL goes on without it and removes it.
        s.cni.del_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(calls(&s.log).len(), 3);
        assert!(!dir.join("net1-c1-eth0").exists());
    }
}

#[test]
fn legacy_and_go_written_cache_files_are_read() {
    let s = setup(None);
    let l = chain("1.0.0");
    let dir = s.cache.path().join("results");
    std::fs::create_dir_all(&dir).unwrap();
    // A pre-cniCacheV1 file: the raw result, here 0.4.0, converted to the
    // list's version.
    std::fs::write(
        dir.join("net1-c1-eth0"),
        r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.9.0.2/24"}],"dns":{}}"#,
    )
    .unwrap();
    let v = s
        .cni
        .network_list_cached_result(&l, &rt("c1"))
        .unwrap()
        .unwrap();
    assert_eq!(v["cniVersion"], "1.0.0");
    assert_eq!(v["ips"][0]["address"], "10.9.0.2/24");
    // What Go's libcni writes (json.Marshal of cachedInfo).
    std::fs::write(
        dir.join("net1-c2-eth0"),
        r#"{"kind":"cniCacheV1","containerId":"c2","config":"eyJuYW1lIjoibmV0MSJ9","ifName":"eth0","networkName":"net1","netns":"/var/run/netns/x","cniArgs":[["A","b"]],"capabilityArgs":{"portMappings":[]},"result":{"cniVersion":"1.0.0","dns":{},"ips":[{"address":"10.9.0.3/24","interface":0}]}}"#,
    )
    .unwrap();
    let v = s
        .cni
        .network_list_cached_result(&l, &rt("c2"))
        .unwrap()
        .unwrap();
    assert_eq!(v["ips"][0]["address"], "10.9.0.3/24");
    assert_eq!(v["ips"][0]["interface"], 0);
    let (config, crt) = s
        .cni
        .network_list_cached_config(&l, &rt("c2"))
        .unwrap()
        .unwrap();
    assert_eq!(config, br#"{"name":"net1"}"#);
    assert_eq!(crt.args, pairs(&[("A", "b")]));
}

#[test]
fn gc_deletes_stale_attachments_then_gcs_every_plugin() {
    let s = setup(None);
    let l = chain("1.1.0");
    s.cni.add_network_list(&l, &rt("keep")).unwrap();
    s.cni.add_network_list(&l, &rt("stale")).unwrap();
    // Another network's attachment is not touched.
    let other = list(json!({"cniVersion": "1.1.0", "name": "net2", "plugins": [{"type": "a"}]}));
    s.cni.add_network_list(&other, &rt("stale")).unwrap();
    s.log.lock().unwrap().clear();
    let valid = [GcAttachment {
        container_id: "keep".into(),
        ifname: "eth0".into(),
    }];
    s.cni.gc_network_list(&l, Some(&valid)).unwrap();
    assert_eq!(
        calls(&s.log),
        pairs(&[
            ("c", "DEL"),
            ("b", "DEL"),
            ("a", "DEL"),
            ("a", "GC"),
            ("b", "GC"),
            ("c", "GC")
        ])
    );
    let log = s.log.lock().unwrap().clone();
    assert_eq!(log[0].2["prevResult"]["ips"][0]["address"], "10.0.0.2/24");
    let gc = &log[3].2;
    let want = json!([{"containerID": "keep", "ifname": "eth0"}]);
    assert_eq!(gc["cni.dev/valid-attachments"], want);
    assert_eq!(gc["cni.dev/attachments"], want);
    assert_eq!(gc["name"], "net1");
    assert!(s.cache.path().join("results/net1-keep-eth0").exists());
    assert!(!s.cache.path().join("results/net1-stale-eth0").exists());
    assert!(s.cache.path().join("results/net2-stale-eth0").exists());
    // disableGC: nothing runs.
    s.log.lock().unwrap().clear();
    let mut off = l.clone();
    off.disable_gc = true;
    s.cni.gc_network_list(&off, None).unwrap();
    assert!(calls(&s.log).is_empty());
    // Before 1.1.0: stale attachments are deleted, no GC command is sent.
    s.cni.gc_network_list(&chain("1.0.0"), None).unwrap();
    assert_eq!(
        calls(&s.log),
        pairs(&[("c", "DEL"), ("b", "DEL"), ("a", "DEL")])
    );
}

#[test]
fn status_rules() {
    let s = setup(Some((
        "b",
        "STATUS",
        CniError::new(ErrorCode::PluginNotAvailable, "not ready", ""),
    )));
    s.cni.status_network_list(&chain("1.0.0")).unwrap();
    assert!(calls(&s.log).is_empty());
    let e = s.cni.status_network_list(&chain("1.1.0")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::PluginNotAvailable);
    assert_eq!(e.to_string(), "not ready");
    assert_eq!(calls(&s.log), pairs(&[("a", "STATUS"), ("b", "STATUS")]));
}

#[test]
fn validate_checks_versions_and_returns_capabilities() {
    let s = setup(None);
    let caps = s.cni.validate_network_list(&chain("1.0.0")).unwrap();
    assert_eq!(caps, ["portMappings", "somethingElse"]);
    let l = list(json!({"cniVersion": "9.9.9", "name": "n", "plugins": [{"type": "a"}]}));
    let e = s.cni.validate_network_list(&l).unwrap_err();
    assert_eq!(
        e.to_string(),
        "plugin a does not support config version \"9.9.9\""
    );
    let l = list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "zz"}]}));
    assert!(matches!(
        s.cni.validate_network_list(&l),
        Err(Error::NotRegistered(_))
    ));
}

#[test]
fn single_plugin_api() {
    let s = setup(None);
    let conf = cni_types::NetworkConfig::from_slice(
        br#"{"cniVersion":"0.4.0","name":"single","type":"a"}"#,
    )
    .unwrap();
    let r = s.cni.add_network(&conf, &rt("c1")).unwrap();
    assert_eq!(r.version.to_string(), "0.4.0");
    assert!(s.cache.path().join("results/single-c1-eth0").exists());
    s.cni.check_network(&conf, &rt("c1")).unwrap();
    s.cni.del_network(&conf, &rt("c1")).unwrap();
    assert!(!s.cache.path().join("results/single-c1-eth0").exists());
    assert_eq!(
        calls(&s.log),
        pairs(&[("a", "ADD"), ("a", "CHECK"), ("a", "DEL")])
    );
}

fn write(dir: &Path, name: &str, v: Value) {
    if let Some(parent) = dir.join(name).parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(dir.join(name), serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn config_directory_rules() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    // Empty or missing directory.
    assert_eq!(
        load_network_conf(&dir.join("none"), "x")
            .unwrap_err()
            .to_string(),
        format!(
            "no net configurations found in {}",
            dir.join("none").display()
        )
    );
    write(
        dir,
        "20-net.conf",
        json!({"cniVersion": "0.4.0", "name": "net", "type": "from-conf"}),
    );
    write(
        dir,
        "10-other.json",
        json!({"cniVersion": "0.4.0", "name": "other", "type": "json-type"}),
    );
    // A .conf is upgraded to a one-plugin list.
    let l = load_network_conf(dir, "net").unwrap();
    assert_eq!(
        (l.name.as_str(), l.cni_version.as_str(), l.plugins.len()),
        ("net", "0.4.0", 1)
    );
    assert_eq!(l.plugins[0]["type"], "from-conf");
    assert_eq!(
        load_network_conf(dir, "other").unwrap().plugins[0]["type"],
        "json-type"
    );
    // A .conflist of the same name wins; the first in name order wins.
    write(
        dir,
        "50-b.conflist",
        json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "second"}]}),
    );
    write(
        dir,
        "40-a.conflist",
        json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "first"}]}),
    );
    assert_eq!(
        load_network_conf(dir, "net").unwrap().plugins[0]["type"],
        "first"
    );
    // <dir>/<name>/*.conf is appended (not .json), in order...
    write(dir, "net/02.conf", json!({"type": "dir-2"}));
    write(dir, "net/01.conf", json!({"type": "dir-1"}));
    write(dir, "net/03.json", json!({"type": "ignored"}));
    let types: Vec<String> = load_network_conf(dir, "net")
        .unwrap()
        .plugins
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["first", "dir-1", "dir-2"]);
    // ...unless loadOnlyInlinedPlugins.
    write(
        dir,
        "40-a.conflist",
        json!({"cniVersion": "1.0.0", "name": "net", "loadOnlyInlinedPlugins": true, "plugins": [{"type": "first"}]}),
    );
    assert_eq!(load_network_conf(dir, "net").unwrap().plugins.len(), 1);
    // A list without `plugins` takes them all from the folder.
    write(
        dir,
        "40-a.conflist",
        json!({"cniVersion": "1.0.0", "name": "net"}),
    );
    assert_eq!(load_network_conf(dir, "net").unwrap().plugins.len(), 2);
    // ...and with an empty folder it is an error.
    write(
        dir,
        "30-empty.conflist",
        json!({"cniVersion": "1.0.0", "name": "empty"}),
    );
    assert_eq!(
        load_network_conf(dir, "net").unwrap_err().to_string(),
        "no plugin configs found"
    );
    std::fs::remove_file(dir.join("30-empty.conflist")).unwrap();
    // Unknown name.
    assert_eq!(
        load_network_conf(dir, "nope").unwrap_err().to_string(),
        format!(
            "no net configuration with name \"nope\" in {}",
            dir.display()
        )
    );
    // Conflists but no .conf files: not-found rather than no-configs.
    let d2 = tempfile::tempdir().unwrap();
    write(
        d2.path(),
        "a.conflist",
        json!({"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "t"}]}),
    );
    assert!(matches!(
        load_network_conf(d2.path(), "y"),
        Err(Error::ConfigNotFound { .. })
    ));
    // A conflist that does not parse is an error even if another matches.
    write(
        d2.path(),
        "0.conflist",
        json!({"cniVersion": "1.0.0", "plugins": [{"type": "t"}]}),
    );
    assert!(load_network_conf(d2.path(), "x").is_err());
}
