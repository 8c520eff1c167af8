//! Our invoker (library and `cnitool`) runs the Go reference chain
//! bridge + host-local + portmap (Debian's containernetworking-plugins in
//! /usr/lib/cni) into real namespaces.
//!
//! Isolation: bridge and portmap change the namespace they run in (bridge
//! device, iptables rules, sysctls), so every test creates a "node" netns
//! and runs the invoker from a thread that entered it (children inherit the
//! calling thread's netns), or runs cnitool under `ip netns exec`. The pod
//! is a second fresh netns; host-local's dataDir and the cache are tempdirs;
//! names carry a random suffix; a Drop guard deletes the namespaces.

use std::path::{Path, PathBuf};
use std::process::Command as Cmd;
use std::sync::Arc;

use cni_exec::{CniConfig, ProcessExec, RuntimeConf, StderrSink};
use cni_testkit::premise::{self, Need};
use cni_types::NetworkConfigList;
use serde_json::{json, Value};

const GO_PLUGINS: &str = "/usr/lib/cni";

fn suffix() -> String {
    let mut b = [0u8; 3];
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mix = t as u64 ^ ((std::process::id() as u64) << 20) ^ (&b as *const _ as u64);
    b.copy_from_slice(&mix.to_le_bytes()[..3]);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sh(args: &[&str]) -> std::process::Output {
    Cmd::new(args[0]).args(&args[1..]).output().unwrap()
}

fn sh_ok(args: &[&str]) -> String {
    let out = sh(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Named namespaces deleted on drop (also when the test fails).
struct Netns(Vec<String>);

impl Netns {
    fn create(names: &[&str]) -> Netns {
        let ns = Netns(names.iter().map(|s| s.to_string()).collect());
        for n in names {
            sh_ok(&["ip", "netns", "add", n]);
            sh_ok(&["ip", "-n", n, "link", "set", "lo", "up"]);
        }
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

fn conflist(bridge: &str, subnet: &str, data_dir: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": format!("gonet-{bridge}"),
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": data_dir
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]
    })
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_str(&sh_ok(args)).unwrap()
}

fn pod_addresses(pod: &str) -> Vec<String> {
    let v = json_of(&["ip", "-n", pod, "-j", "addr", "show", "dev", "eth0"]);
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["scope"] == "global")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect()
}

fn pod_default_gw(pod: &str) -> Option<String> {
    let v = json_of(&["ip", "-n", pod, "-j", "route"]);
    v.as_array()?
        .iter()
        .find(|r| r["dst"] == "default")
        .and_then(|r| r["gateway"].as_str().map(str::to_string))
}

fn veths_on(node: &str, bridge: &str) -> usize {
    let v = json_of(&["ip", "-n", node, "-j", "link", "show", "master", bridge]);
    v.as_array().map_or(0, Vec::len)
}

fn iptables_rules(node: &str) -> String {
    sh_ok(&["ip", "netns", "exec", node, "iptables-save"])
}

fn reserved_ips(data_dir: &Path, net: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data_dir.join(net))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
        .collect();
    v.sort();
    v
}

/// Runs `f` on a fresh thread inside the named netns.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// CHECK of the whole chain: the Go portmap 1.1.1 fails CHECK on IPv4-only
/// pods (it checks the IPv6 chains too, upstream bug), so a failure is
/// accepted only when it is portmap's; anything else fails the test.
fn assert_check_ok_or_portmap_bug(result: Result<(), String>) {
    if let Err(e) = result {
        assert!(
            e.contains("plugin type=\"portmap\" failed (check)"),
            "CHECK failed outside portmap: {e}"
        );
        eprintln!("known Go portmap 1.1.1 CHECK failure: {e}");
    }
}

#[test]
fn library_runs_go_bridge_host_local_portmap() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
        Need::GoPlugin("portmap"),
    ]) {
        return;
    }
    let s = suffix();
    let (node, pod, bridge) = (
        format!("cnx-node-{s}"),
        format!("cnx-pod-{s}"),
        format!("cnb{s}"),
    );
    let _ns = Netns::create(&[&node, &pod]);
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let conf = conflist(&bridge, "10.123.7.0/24", data.path());
    let net = conf["name"].as_str().unwrap().to_string();
    let list = NetworkConfigList::from_slice(&serde_json::to_vec(&conf).unwrap()).unwrap();
    let rt = RuntimeConf {
        container_id: format!("ctr-{s}"),
        netns: format!("/run/netns/{pod}"),
        ifname: "eth0".into(),
        args: vec![],
        capability_args: serde_json::from_value(json!({
            "portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]
        }))
        .unwrap(),
    };
    let cni = CniConfig::new(
        vec![PathBuf::from(GO_PLUGINS)],
        Arc::new(
            ProcessExec::new()
                .with_timeout(std::time::Duration::from_secs(60))
                .with_stderr(StderrSink::Discard),
        ),
    )
    .with_cache_dir(cache.path());

    let (c, l, r) = (cni.clone(), list.clone(), rt.clone());
    let added = in_netns(&node, move || {
        c.add_network_list(&l, &r).map_err(|e| e.to_string())
    })
    .expect("ADD");
    let result = added.to_value().unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    let ip = result["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.123.7."), "{result}");
    assert_eq!(pod_addresses(&pod), vec![ip.clone()]);
    assert_eq!(pod_default_gw(&pod).as_deref(), Some("10.123.7.1"));
    assert_eq!(veths_on(&node, &bridge), 1);
    let bare_ip = ip.split('/').next().unwrap().to_string();
    assert_eq!(reserved_ips(data.path(), &net), vec![bare_ip.clone()]);
    let rules = iptables_rules(&node);
    assert!(rules.contains("--dport 18080"), "{rules}");
    assert!(rules.contains(&rt.container_id), "{rules}");
    // The cache is libcni's.
    let cached: Value = serde_json::from_slice(
        &std::fs::read(
            cache
                .path()
                .join(format!("results/{net}-{}-eth0", rt.container_id)),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["result"]["ips"][0]["address"], ip.as_str());

    let (c, l, r) = (cni.clone(), list.clone(), rt.clone());
    let checked = in_netns(&node, move || {
        c.check_network_list(&l, &r).map_err(|e| e.to_string())
    });
    assert_check_ok_or_portmap_bug(checked);
    // bridge + host-local alone pass CHECK against the same attachment.
    let mut no_pm = list.clone();
    no_pm.plugins.truncate(1);
    let (c, r) = (cni.clone(), rt.clone());
    in_netns(&node, move || {
        c.check_network_list(&no_pm, &r).map_err(|e| e.to_string())
    })
    .expect("CHECK of bridge + host-local");

    for round in 0..2 {
        let (c, l, r) = (cni.clone(), list.clone(), rt.clone());
        in_netns(&node, move || {
            c.del_network_list(&l, &r).map_err(|e| e.to_string())
        })
        .unwrap_or_else(|e| panic!("DEL #{round}: {e}"));
    }
    assert_eq!(veths_on(&node, &bridge), 0);
    assert!(reserved_ips(data.path(), &net).is_empty());
    let rules = iptables_rules(&node);
    assert!(!rules.contains(&rt.container_id), "{rules}");
    assert!(!rules.contains("--dport 18080"), "{rules}");
    assert!(
        sh(&["ip", "-n", &pod, "link", "show", "eth0"])
            .status
            .code()
            != Some(0)
    );
}

#[test]
fn cnitool_runs_go_bridge_host_local_portmap() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
        Need::GoPlugin("portmap"),
    ]) {
        return;
    }
    let s = suffix();
    let (node, pod, bridge) = (
        format!("cnt-node-{s}"),
        format!("cnt-pod-{s}"),
        format!("cnt{s}"),
    );
    let _ns = Netns::create(&[&node, &pod]);
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let confdir = tempfile::tempdir().unwrap();
    let conf = conflist(&bridge, "10.124.9.0/24", data.path());
    let net = conf["name"].as_str().unwrap().to_string();
    std::fs::write(
        confdir.path().join("10-go.conflist"),
        serde_json::to_vec(&conf).unwrap(),
    )
    .unwrap();
    let netns_path = format!("/run/netns/{pod}");
    let cnitool = |cmd: &str| {
        Cmd::new("ip")
            .args([
                "netns",
                "exec",
                &node,
                env!("CARGO_BIN_EXE_cnitool"),
                cmd,
                &net,
                &netns_path,
            ])
            .env("NETCONFPATH", confdir.path())
            .env("CNI_PATH", GO_PLUGINS)
            .env("CNI_CACHEDIR", cache.path())
            .env(
                "CAP_ARGS",
                r#"{"portMappings":[{"hostPort":18081,"containerPort":80,"protocol":"tcp"}]}"#,
            )
            .env_remove("CNI_CONTAINERID")
            .env_remove("CNI_IFNAME")
            .env_remove("CNI_ARGS")
            .output()
            .unwrap()
    };

    let out = cnitool("add");
    assert!(
        out.status.success(),
        "add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ip = result["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.124.9."), "{result}");
    assert_eq!(pod_addresses(&pod), vec![ip.clone()]);
    assert_eq!(pod_default_gw(&pod).as_deref(), Some("10.124.9.1"));
    assert_eq!(veths_on(&node, &bridge), 1);
    // upstream cnitool's container id: cnitool-<sha512(netns)[:10]>.
    let results: Vec<String> = std::fs::read_dir(cache.path().join("results"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(results.len(), 1);
    assert!(
        results[0].starts_with(&format!("{net}-cnitool-")),
        "{results:?}"
    );
    assert_eq!(
        results[0].len(),
        net.len() + "-cnitool-".len() + 20 + "-eth0".len()
    );
    assert!(iptables_rules(&node).contains("--dport 18081"));

    let out = cnitool("check");
    let check = if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    };
    assert_check_ok_or_portmap_bug(check);

    for round in 0..2 {
        let out = cnitool("del");
        assert!(
            out.status.success(),
            "del #{round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(veths_on(&node, &bridge), 0);
    assert!(reserved_ips(data.path(), &net).is_empty());
    assert!(!iptables_rules(&node).contains("--dport 18081"));

    // Errors: exit 1 and a message on stderr.
    let out = Cmd::new(env!("CARGO_BIN_EXE_cnitool"))
        .args(["add", "no-such-net", &netns_path])
        .env("NETCONFPATH", confdir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("no net configuration with name \"no-such-net\""));
    let out = Cmd::new(env!("CARGO_BIN_EXE_cnitool"))
        .arg("add")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}
