//! Differential tests: the Go reference bridge (`/usr/lib/cni/bridge`,
//! Debian's containernetworking-plugins) and ours run the same config, each
//! in its own fresh node and pod namespaces with its own bridge name and
//! host-local dataDir (Go's host-local serves both). What must differ is
//! normalised (bridge name, random veth names, MACs, the sandbox path,
//! ifindexes are never compared); then the result JSON, the pod's links,
//! addresses and routes, the bridge's addresses, its ports' master and
//! flags, `bridge vlan`, and the forwarding sysctls must be equal.

use std::path::{Path, PathBuf};

use crate::common::*;
use cni_netns::OwnedNetns;
use cni_testkit::premise::{self, Need};
use pretty_assertions::assert_eq;
use serde_json::{json, Map, Value};

const NETWORK: &str = "difftest";
const OURS: &str = env!("CARGO_BIN_EXE_bridge");

#[derive(Clone, Copy, Debug, PartialEq)]
enum Impl {
    Go,
    Ours,
}

struct Env {
    imp: Impl,
    node: OwnedNetns,
    pod: OwnedNetns,
    data: tempfile::TempDir,
    bridge: String,
    cni_path: CniPath,
    plugin: PathBuf,
}

impl Env {
    fn new(imp: Impl) -> Env {
        let go = Path::new(GO_PLUGINS);
        let plugin = match imp {
            Impl::Go => go.join("bridge"),
            Impl::Ours => PathBuf::from(OURS),
        };
        let cni_path = CniPath::new(&[("bridge", &plugin), ("host-local", &go.join("host-local"))]);
        Env {
            imp,
            node: netns("cnin"),
            pod: netns("cnip"),
            data: tempfile::tempdir().expect("tempdir"),
            bridge: bridge_name(),
            cni_path,
            plugin,
        }
    }

    /// The scenario's config: `extra` merged over a default one (its
    /// `ipam` merged key by key; `"ipam": null` removes IPAM).
    fn config(&self, version: &str, extra: &Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": NETWORK,
            "type": "bridge",
            "bridge": self.bridge,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.99.0.0/24"}]],
                "dataDir": self.data.path(),
            }
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            match (k.as_str(), v) {
                ("ipam", Value::Null) => {
                    conf.as_object_mut().unwrap().remove("ipam");
                }
                ("ipam", Value::Object(m)) => {
                    for (ik, iv) in m {
                        conf["ipam"][ik] = iv.clone();
                    }
                }
                _ => conf[k] = v.clone(),
            }
        }
        conf
    }

    fn call(&self, command: &str, conf: &Value) -> Reply {
        let netns = netns_path(&self.pod);
        run(
            &self.node,
            &Call {
                plugin: &self.plugin,
                cni_path: self.cni_path.path(),
                command,
                container_id: "ctr-difftest",
                netns: &netns,
                ifname: "eth0",
                args: "",
            },
            conf,
        )
    }
}

/// Replaces what must differ between two runs.
struct Norm<'a> {
    env: &'a Env,
    keep_macs: &'a [&'a str],
}

impl Norm<'_> {
    fn str(&self, s: &str) -> String {
        let br = &self.env.bridge;
        if s == netns_path(&self.env.pod) {
            return "SANDBOX".into();
        }
        if let Some(rest) = s.strip_prefix(br.as_str()) {
            return format!("BR{rest}");
        }
        if s.len() == 12 && s.starts_with("veth") && s[4..].chars().all(|c| c.is_ascii_hexdigit()) {
            return "VETH".into();
        }
        let is_mac = s.len() == 17
            && s.bytes().enumerate().all(|(i, b)| {
                if i % 3 == 2 {
                    b == b':'
                } else {
                    b.is_ascii_hexdigit()
                }
            });
        if is_mac
            && !self.keep_macs.contains(&s)
            && s != "00:00:00:00:00:00"
            && s != "ff:ff:ff:ff:ff:ff"
        {
            return "MAC".into();
        }
        s.replace(br.as_str(), "BR")
    }

    fn value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.str(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.value(x)).collect()),
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, x)| (k.clone(), self.value(x))).collect())
            }
            other => other.clone(),
        }
    }
}

fn pick(v: &Value, keys: &[&str]) -> Value {
    let mut m = Map::new();
    for k in keys {
        if let Some(x) = v.get(*k) {
            m.insert((*k).to_owned(), x.clone());
        }
    }
    Value::Object(m)
}

fn list(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// The kernel state an ADD left, through the oracles.
fn kernel_state(env: &Env, n: &Norm<'_>) -> Value {
    settle(&env.pod);
    let pod_links: Vec<Value> = list(ip(&env.pod, &["-d", "link", "show"]))
        .iter()
        .map(|l| {
            pick(
                l,
                &[
                    "ifname",
                    "flags",
                    "mtu",
                    "operstate",
                    "link_type",
                    "address",
                    "promiscuity",
                ],
            )
        })
        .collect();
    let pod_addrs: Vec<Value> = list(ip(&env.pod, &["addr", "show"]))
        .iter()
        .map(|l| {
            let addrs: Vec<Value> = list(l["addr_info"].clone())
                .iter()
                .filter(|a| !(a["family"] == "inet6" && a["scope"] == "link"))
                .map(|a| {
                    pick(
                        a,
                        &[
                            "family",
                            "local",
                            "prefixlen",
                            "scope",
                            "broadcast",
                            "noprefixroute",
                            "nodad",
                            "dadfailed",
                            "tentative",
                        ],
                    )
                })
                .collect();
            json!({"ifname": l["ifname"], "addrs": addrs})
        })
        .collect();
    let route_keys = [
        "dst", "gateway", "dev", "protocol", "scope", "prefsrc", "metric", "flags",
    ];
    let routes = |args: &[&str]| -> Vec<Value> {
        list(ip(&env.pod, args))
            .iter()
            .map(|r| pick(r, &route_keys))
            .collect()
    };
    let bridge_link = list(ip(&env.node, &["-d", "link", "show", "dev", &env.bridge]))
        .first()
        .map(|l| pick(l, &["flags", "mtu", "operstate", "promiscuity"]))
        .unwrap_or(Value::Null);
    let bridge_addrs: Vec<Value> = list(ip(&env.node, &["addr", "show", "dev", &env.bridge]))
        .iter()
        .flat_map(|l| list(l["addr_info"].clone()))
        .filter(|a| a["scope"] == "global")
        .map(|a| pick(&a, &["family", "local", "prefixlen", "broadcast"]))
        .collect();
    let ports: Vec<Value> = list(bridge(&env.node, &["-d", "link", "show"]))
        .iter()
        .map(|p| {
            pick(
                p,
                &[
                    "ifname", "master", "state", "hairpin", "isolated", "learning", "flood",
                    "guard",
                ],
            )
        })
        .collect();
    let port_links: Vec<Value> = list(ip(&env.node, &["link", "show", "master", &env.bridge]))
        .iter()
        .map(|l| pick(l, &["ifname", "master", "mtu", "operstate"]))
        .collect();
    let port_accept_ra: Vec<String> = port_links
        .iter()
        .filter_map(|l| l["ifname"].as_str())
        .map(|p| sysctl(&env.node, &format!("net/ipv6/conf/{p}/accept_ra")))
        .collect();
    let bridge_accept_ra = sysctl(
        &env.node,
        &format!("net/ipv6/conf/{}/accept_ra", env.bridge),
    );
    let vlans = bridge(&env.node, &["vlan", "show"]);
    let state = json!({
        "pod_links": pod_links,
        "pod_addrs": pod_addrs,
        "pod_routes4": routes(&["route", "show"]),
        "pod_routes6": routes(&["-6", "route", "show"]),
        "bridge_link": bridge_link,
        "bridge_addrs": bridge_addrs,
        "ports": ports,
        "port_links": port_links,
        "vlans": vlans,
        "node_sysctls": {
            "port_accept_ra": port_accept_ra,
            "bridge_accept_ra": bridge_accept_ra,
            "ip_forward": sysctl(&env.node, "net.ipv4.ip_forward"),
            "ipv6_forwarding": sysctl(&env.node, "net.ipv6.conf.all.forwarding"),
        },
        "pod_sysctls": {
            "arp_notify": sysctl(&env.pod, "net.ipv4.conf.eth0.arp_notify"),
            "accept_dad": sysctl(&env.pod, "net.ipv6.conf.eth0.accept_dad"),
        },
    });
    n.value(&state)
}

/// Waits (up to 2 s) until the kernel's link watcher has reported the
/// carrier of every link that is up: neither Go nor we wait for the pod
/// end, so right after ADD its operstate may still read DOWN.
fn settle(ns: &OwnedNetns) {
    for _ in 0..200 {
        let pending = list(ip(ns, &["link", "show"])).iter().any(|l| {
            let up = l["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "UP"));
            up && l["operstate"] == "DOWN"
        });
        if !pending {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether the pod address `ip` is masqueraded on the node: Go 1.1.1 uses
/// iptables, ours nftables (own table); each is read with its own tool.
fn masqueraded(env: &Env, ip: &str) -> bool {
    match env.imp {
        Impl::Go if ip.contains(':') => {
            exec_in(&env.node, &["ip6tables-save", "-t", "nat"]).contains(&format!("-s {ip}/128"))
        }
        Impl::Go => {
            exec_in(&env.node, &["iptables-save", "-t", "nat"]).contains(&format!("-s {ip}/32"))
        }
        Impl::Ours => {
            exec_in(&env.node, &["nft", "-j", "list", "ruleset"]).contains(&format!("\"{ip}\""))
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// Both succeed with the same result and kernel state.
    Same,
    /// Both fail; `same_msg`: with the same (normalised) message.
    BothFail { same_msg: bool },
}

struct Scenario<'a> {
    version: &'a str,
    extra: Value,
    prepare: fn(&Env),
    keep_macs: &'a [&'a str],
    expect: Expect,
}

impl Default for Scenario<'_> {
    fn default() -> Self {
        Scenario {
            version: "1.0.0",
            extra: json!({}),
            prepare: |_| {},
            keep_macs: &[],
            expect: Expect::Same,
        }
    }
}

/// What is left after a failed ADD: node links, pod links, reservations.
fn leftovers(env: &Env, node_before: &[String]) -> Value {
    let node: Vec<String> = link_names(&env.node)
        .into_iter()
        .filter(|l| !node_before.contains(l))
        .collect();
    json!({
        "node_links": node,
        "pod_links": link_names(&env.pod),
        "reserved": reserved_ips(env.data.path(), NETWORK),
    })
}

/// Runs ADD, CHECK (0.4.0+), DEL on one implementation; returns what is
/// compared and what a failed ADD left behind.
fn run_scenario(env: &Env, s: &Scenario<'_>) -> (Value, Value) {
    (s.prepare)(env);
    let node_before = link_names(&env.node);
    let n = Norm {
        env,
        keep_macs: s.keep_macs,
    };
    let conf = env.config(s.version, &s.extra);
    let add = env.call("ADD", &conf);
    let mut out = Map::new();
    out.insert("add_ok".into(), json!(add.ok));
    let mut left = Value::Null;
    if add.ok {
        // Neither Go nor we make the pod do IPv6 DAD (`accept_dad` 0 before
        // the pod end comes up): no neighbour solicitation has left it
        // (the ADD does not wait 1-2 s for DAD). Random without IPAM (no
        // `accept_dad` written): not compared there.
        if conf.get("ipam").is_some() {
            out.insert(
                "pod_dad_probes".into(),
                json!(snmp6(&env.pod, "Icmp6OutNeighborSolicits")),
            );
        }
        let mut result = add.json.clone();
        // Go 1.1.1 (libcni 1.0) prints an empty `"dns": {}` in 1.0.0
        // results; libcni 1.1+ (and we) omit it.
        if result["dns"] == json!({}) && s.version >= "1.0.0" {
            result.as_object_mut().unwrap().remove("dns");
        }
        out.insert("result".into(), n.value(&result));
        out.insert("kernel".into(), kernel_state(env, &n));
        if s.extra.get("ipMasq") == Some(&json!(true)) {
            let ip = reserved_ips(env.data.path(), NETWORK);
            out.insert(
                "masqueraded".into(),
                json!(ip.iter().all(|ip| masqueraded(env, ip))),
            );
        }
        if s.version >= "0.4.0" {
            let mut check = conf.clone();
            check["prevResult"] = add.json.clone();
            let r = env.call("CHECK", &check);
            assert!(
                r.ok || env.imp == Impl::Go,
                "our CHECK failed: {:?}",
                r.json
            );
            // Go's CHECK runs IPAM CHECK even without IPAM, and fails.
            if conf.get("ipam").is_some() {
                out.insert("check_ok".into(), json!(r.ok));
            }
        }
    } else {
        if matches!(s.expect, Expect::BothFail { same_msg: true }) {
            // Go 1.1.1 ended some messages with a period; later Go did not.
            out.insert("msg".into(), json!(n.str(add.msg().trim_end_matches('.'))));
        }
        left = leftovers(env, &node_before);
    }
    let mut del_conf = conf.clone();
    if add.ok && s.version >= "0.4.0" {
        del_conf["prevResult"] = add.json.clone();
    }
    let del = env.call("DEL", &del_conf);
    assert!(
        del.ok || env.imp == Impl::Go,
        "our DEL failed: {:?}",
        del.json
    );
    // After a failed ADD Go's DEL can fail on the masquerade chain its ADD
    // never created; ours succeeds.
    if add.ok {
        out.insert("del_ok".into(), json!(del.ok));
    }
    out.insert(
        "after_del".into(),
        json!({
            "pod_links": link_names(&env.pod),
            "ports": link_names(&env.node).into_iter().filter(|l| l.starts_with("veth")).count(),
            "reserved": reserved_ips(env.data.path(), NETWORK),
        }),
    );
    if s.extra.get("ipMasq") == Some(&json!(true)) && add.ok {
        let ips: Vec<String> = add.json["ips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["address"].as_str())
            .map(|a| a.split('/').next().unwrap_or("").to_owned())
            .collect();
        out.insert(
            "masqueraded_after_del".into(),
            json!(ips.iter().any(|ip| masqueraded(env, ip))),
        );
    }
    (Value::Object(out), left)
}

fn differential(s: Scenario<'_>) {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) {
        return;
    }
    let go = Env::new(Impl::Go);
    let ours = Env::new(Impl::Ours);
    let (g, gl) = run_scenario(&go, &s);
    let (o, ol) = run_scenario(&ours, &s);
    if g != o {
        let dir = tempfile::tempdir().expect("tempdir");
        let (gp, op) = (dir.path().join("go.json"), dir.path().join("ours.json"));
        std::fs::write(&gp, serde_json::to_string_pretty(&g).unwrap()).unwrap();
        std::fs::write(&op, serde_json::to_string_pretty(&o).unwrap()).unwrap();
        let diff = std::process::Command::new("diff")
            .arg("-u")
            .arg(&gp)
            .arg(&op)
            .output()
            .unwrap();
        panic!(
            "Go (-) and ours (+) differ:\n{}",
            String::from_utf8_lossy(&diff.stdout)
        );
    }
    match s.expect {
        Expect::Same => assert_eq!(o["add_ok"], json!(true), "{o:#}"),
        Expect::BothFail { .. } => {
            assert_eq!(o["add_ok"], json!(false), "{o:#}");
            // Ours never leaves anything behind; Go leaves its veth when it
            // fails after creating it (no rollback in the reference).
            assert_eq!(
                ol,
                json!({"node_links": [], "pod_links": [], "reserved": []}),
                "ours left: {ol:#}; Go left: {gl:#}"
            );
        }
    }
}

/// Whether this kernel lets a bridge filter VLANs.
fn vlan_filtering_supported() -> bool {
    let ns = netns("cniv");
    sh_ok(&[
        "ip",
        "-n",
        ns.name(),
        "link",
        "add",
        "tbvlan",
        "type",
        "bridge",
        "vlan_filtering",
        "1",
    ])
}

fn vlan_expect() -> Expect {
    if vlan_filtering_supported() {
        Expect::Same
    } else {
        eprintln!("kernel refuses bridge vlan_filtering: comparing the clean failure");
        Expect::BothFail { same_msg: false }
    }
}

#[test]
fn default_config() {
    differential(Scenario::default());
}

#[test]
fn is_gateway() {
    differential(Scenario {
        extra: json!({"isGateway": true}),
        ..Default::default()
    });
}

#[test]
fn is_default_gateway() {
    differential(Scenario {
        extra: json!({"isDefaultGateway": true}),
        ..Default::default()
    });
}

#[test]
fn ip_masq() {
    differential(Scenario {
        extra: json!({"isGateway": true, "ipMasq": true}),
        ..Default::default()
    });
}

#[test]
fn mtu_1400() {
    differential(Scenario {
        extra: json!({"mtu": 1400}),
        ..Default::default()
    });
}

#[test]
fn hairpin_mode() {
    differential(Scenario {
        extra: json!({"hairpinMode": true}),
        ..Default::default()
    });
}

#[test]
fn promisc_mode() {
    differential(Scenario {
        extra: json!({"promiscMode": true}),
        ..Default::default()
    });
}

#[test]
fn hairpin_and_promisc_refused() {
    differential(Scenario {
        extra: json!({"hairpinMode": true, "promiscMode": true}),
        expect: Expect::BothFail { same_msg: true },
        ..Default::default()
    });
}

#[test]
fn vlan_100() {
    differential(Scenario {
        extra: json!({"vlan": 100, "isGateway": true}),
        expect: vlan_expect(),
        ..Default::default()
    });
}

#[test]
fn preserve_default_vlan_off() {
    differential(Scenario {
        extra: json!({"vlan": 100, "preserveDefaultVlan": false}),
        expect: vlan_expect(),
        ..Default::default()
    });
}

#[test]
fn force_address_replaces_the_bridge_address() {
    differential(Scenario {
        extra: json!({"isGateway": true, "forceAddress": true}),
        prepare: prepare_bridge_with_address,
        ..Default::default()
    });
}

#[test]
fn bridge_address_conflict_without_force_address() {
    differential(Scenario {
        extra: json!({"isGateway": true, "ipMasq": true}),
        prepare: prepare_bridge_with_address,
        expect: Expect::BothFail { same_msg: true },
        ..Default::default()
    });
}

fn prepare_bridge_with_address(env: &Env) {
    let (n, br) = (env.node.name(), env.bridge.as_str());
    sh(&["ip", "-n", n, "link", "add", br, "type", "bridge"]);
    sh(&["ip", "-n", n, "addr", "add", "10.0.0.1/24", "dev", br]);
    sh(&["ip", "-n", n, "link", "set", br, "up"]);
}

#[test]
fn l2_only() {
    differential(Scenario {
        extra: json!({"ipam": null}),
        ..Default::default()
    });
}

#[test]
fn mac_from_runtime_config() {
    differential(Scenario {
        extra: json!({"runtimeConfig": {"mac": "02:11:22:33:44:55"}}),
        keep_macs: &["02:11:22:33:44:55"],
        ..Default::default()
    });
}

#[test]
fn dual_stack() {
    differential(Scenario {
        extra: json!({
            "isDefaultGateway": true,
            "ipam": {"ranges": [[{"subnet": "10.99.0.0/24"}], [{"subnet": "fd99::/64"}]]}
        }),
        ..Default::default()
    });
}

#[test]
fn ipv6_only() {
    differential(Scenario {
        extra: json!({
            "isDefaultGateway": true,
            "ipMasq": true,
            "ipam": {"ranges": [[{"subnet": "fd98::/64"}]]}
        }),
        ..Default::default()
    });
}

#[test]
fn config_dns_overrides_ipam_dns() {
    differential(Scenario {
        extra: json!({"isGateway": true, "dns": {"nameservers": ["10.99.0.53"], "search": ["svc.local"]}}),
        ..Default::default()
    });
}

#[test]
fn result_versions() {
    for version in ["0.2.0", "0.3.1", "0.4.0", "1.0.0"] {
        differential(Scenario {
            version,
            extra: json!({"isDefaultGateway": true}),
            ..Default::default()
        });
    }
}
