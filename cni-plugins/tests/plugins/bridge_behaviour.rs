//! Our bridge alone, in fresh namespaces: rollback after failures, DEL
//! idempotence, DEL after the netns is gone, pod-to-pod connectivity,
//! options the Go 1.1.1 reference lacks (portIsolation,
//! disableContainerInterface, macspoofchk), STATUS and GC. (ADD/DEL time
//! next to Go's: `plugin-timings bridge` in benches.)

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::common::*;
use cni_netns::OwnedNetns;
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

const OURS: &str = env!("CARGO_BIN_EXE_bridge");
const NETWORK: &str = "behavetest";

struct Node {
    node: OwnedNetns,
    data: tempfile::TempDir,
    bridge: String,
    cni_path: CniPath,
    plugin: PathBuf,
}

impl Node {
    fn new(plugin: &Path) -> Node {
        Node::with_host_local(plugin, &Path::new(GO_PLUGINS).join("host-local"))
    }

    fn with_host_local(plugin: &Path, host_local: &Path) -> Node {
        let fail = tempfile::tempdir().expect("tempdir");
        let failing = fail.path().join("failipam");
        std::fs::write(
            &failing,
            "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"ipam says no\"}'\nexit 1\n",
        )
        .expect("write failipam");
        std::fs::set_permissions(
            &failing,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let cni_path = CniPath::new(&[
            ("bridge", plugin),
            ("host-local", host_local),
            ("failipam", &failing),
        ]);
        // The script must outlive `fail`: keep it inside the CNI_PATH dir.
        std::fs::copy(&failing, cni_path.path().join("failipam.sh")).ok();
        std::fs::remove_file(cni_path.path().join("failipam")).ok();
        std::fs::rename(
            cni_path.path().join("failipam.sh"),
            cni_path.path().join("failipam"),
        )
        .expect("install failipam");
        Node {
            node: netns("cnin"),
            data: tempfile::tempdir().expect("tempdir"),
            bridge: bridge_name(),
            cni_path,
            plugin: plugin.to_owned(),
        }
    }

    fn config(&self, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "bridge",
            "bridge": self.bridge,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.98.0.0/24"}]],
                "dataDir": self.data.path(),
            }
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            if k == "ipam" {
                for (ik, iv) in v.as_object().into_iter().flatten() {
                    conf["ipam"][ik] = iv.clone();
                }
            } else {
                conf[k] = v.clone();
            }
        }
        conf
    }

    fn call(&self, command: &str, cid: &str, netns: &str, conf: &Value) -> Reply {
        run(
            &self.node,
            &Call {
                plugin: &self.plugin,
                cni_path: self.cni_path.path(),
                command,
                container_id: cid,
                netns,
                ifname: "eth0",
                args: "",
            },
            conf,
        )
    }

    fn veths(&self) -> Vec<String> {
        link_names(&self.node)
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .collect()
    }

    fn reserved(&self) -> Vec<String> {
        reserved_ips(self.data.path(), NETWORK)
    }

    fn masq_rules(&self) -> String {
        exec_in(&self.node, &["nft", "list", "ruleset"])
    }
}

fn ours() -> Option<Node> {
    premise::require_all(&[Need::Root, Need::GoPlugin("host-local")])
        .then(|| Node::new(Path::new(OURS)))
}

#[test]
fn ipam_exhaustion_leaves_nothing_behind() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({
        "isGateway": true, "ipMasq": true,
        "ipam": {"ranges": [[{"subnet": "10.98.0.0/30"}]]}
    }));
    let (p1, p2) = (netns("cnip"), netns("cnip"));
    let a = n.call("ADD", "c1", &netns_path(&p1), &conf);
    assert!(a.ok, "{:?}", a.json);
    let b = n.call("ADD", "c2", &netns_path(&p2), &conf);
    assert!(!b.ok, "second ADD must exhaust the /30");
    assert_eq!(n.veths().len(), 1, "only the first pod's veth");
    assert!(link_names(&p2).is_empty());
    assert_eq!(n.reserved(), ["10.98.0.2"]);
    let rules = n.masq_rules();
    assert!(rules.contains("10.98.0.2") && rules.matches("masquerade").count() >= 1);
    assert!(n.call("DEL", "c1", &netns_path(&p1), &conf).ok);
    assert!(!n.masq_rules().contains("10.98.0.2"));
    assert!(n.veths().is_empty() && n.reserved().is_empty());
}

#[test]
fn failing_ipam_delegate_leaves_no_veth() {
    let Some(n) = ours() else { return };
    let mut conf = n.config(json!({"ipMasq": true}));
    conf["ipam"] = json!({"type": "failipam"});
    let pod = netns("cnip");
    let r = n.call("ADD", "c1", &netns_path(&pod), &conf);
    assert!(!r.ok);
    assert_eq!(
        r.json["code"], 11,
        "the delegate's error is passed on: {:?}",
        r.json
    );
    assert_eq!(r.json["msg"], "ipam says no");
    assert!(n.veths().is_empty());
    assert!(link_names(&pod).is_empty());
}

#[test]
fn add_into_a_missing_netns_releases_the_address() {
    // IPAM runs while the namespace is opened: its reservation must go
    // when the namespace turns out not to exist.
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isGateway": true, "ipMasq": true}));
    let r = n.call("ADD", "c1", "/run/netns/cni-rs-no-such-netns", &conf);
    assert!(!r.ok, "{:?}", r.json);
    assert!(
        r.json["msg"]
            .as_str()
            .unwrap_or("")
            .contains("cni-rs-no-such-netns"),
        "{:?}",
        r.json
    );
    assert!(n.reserved().is_empty(), "{:?}", n.reserved());
    assert!(n.veths().is_empty());
}

#[test]
fn failure_after_ipam_add_releases_the_address() {
    let Some(n) = ours() else { return };
    let (node, br) = (n.node.name(), n.bridge.as_str());
    sh(&["ip", "-n", node, "link", "add", br, "type", "bridge"]);
    sh(&["ip", "-n", node, "addr", "add", "10.0.0.1/24", "dev", br]);
    let conf = n.config(json!({"isGateway": true, "ipMasq": true}));
    let pod = netns("cnip");
    let r = n.call("ADD", "c1", &netns_path(&pod), &conf);
    assert!(!r.ok);
    assert!(
        r.msg()
            .contains("already has an IP address different from 10.98.0.1/24"),
        "{}",
        r.msg()
    );
    assert!(n.veths().is_empty() && link_names(&pod).is_empty() && n.reserved().is_empty());
    // No pod address left masqueraded (the network's subnet key, shared by
    // its pods, may stay: a GC removes it).
    let rules = n.masq_rules();
    assert!(!rules.contains("10.98.0.2"), "{rules}");
}

#[test]
fn del_twice_and_del_without_netns_succeed() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isGateway": true, "ipMasq": true}));
    let pod = netns("cnip");
    let path = netns_path(&pod);
    assert!(n.call("ADD", "c1", &path, &conf).ok);
    assert!(n.call("DEL", "c1", &path, &conf).ok);
    assert!(n.call("DEL", "c1", &path, &conf).ok);
    assert!(n.call("DEL", "c1", "", &conf).ok);
    assert!(n.veths().is_empty() && n.reserved().is_empty());
}

#[test]
fn del_after_netns_deleted_frees_the_ip_and_rules() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isGateway": true, "ipMasq": true}));
    let pod = netns("cnip");
    let path = netns_path(&pod);
    assert!(n.call("ADD", "c1", &path, &conf).ok);
    assert_eq!(n.reserved(), ["10.98.0.2"]);
    drop(pod);
    assert!(!Path::new(&path).exists());
    let r = n.call("DEL", "c1", &path, &conf);
    assert!(r.ok, "{:?}", r.json);
    assert!(n.reserved().is_empty());
    assert!(!n.masq_rules().contains("10.98.0.2"));
    // The pod's veth dies with its namespace, in the kernel's asynchronous
    // namespace cleanup.
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while !n.veths().is_empty() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(n.veths().is_empty());
}

#[test]
fn two_pods_ping_each_other_and_the_gateway() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isDefaultGateway": true}));
    let (p1, p2) = (netns("cnip"), netns("cnip"));
    let a = n.call("ADD", "c1", &netns_path(&p1), &conf);
    let b = n.call("ADD", "c2", &netns_path(&p2), &conf);
    assert!(a.ok && b.ok, "{:?} {:?}", a.json, b.json);
    let ip_of = |r: &Reply| {
        r.json["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_owned()
    };
    let (ip1, ip2) = (ip_of(&a), ip_of(&b));
    // No ping on this machine: a TCP connection through the bridge proves
    // the same path (ARP, bridge forwarding, routes) in both directions.
    let gw = "10.98.0.1".to_owned();
    for (from, to, dst) in [(&p1, &*p2, &ip2), (&p2, &*p1, &ip1), (&p1, &*n.node, &gw)] {
        connect(from, to, dst);
    }
    assert!(n.call("DEL", "c1", &netns_path(&p1), &conf).ok);
    assert!(n.call("DEL", "c2", &netns_path(&p2), &conf).ok);
}

#[test]
fn port_isolation_sets_the_isolated_flag() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"portIsolation": true}));
    let pod = netns("cnip");
    let r = n.call("ADD", "c1", &netns_path(&pod), &conf);
    assert!(r.ok, "{:?}", r.json);
    let ports = bridge(&n.node, &["-d", "link", "show"]);
    let port = &ports.as_array().unwrap()[0];
    assert_eq!(port["isolated"], true, "{port}");
    assert_eq!(port["hairpin"], false);
}

#[test]
fn disable_container_interface_leaves_the_pod_link_down() {
    let Some(n) = ours() else { return };
    let mut conf = n.config(json!({"disableContainerInterface": true}));
    conf.as_object_mut().unwrap().remove("ipam");
    let pod = netns("cnip");
    let r = n.call("ADD", "c1", &netns_path(&pod), &conf);
    assert!(r.ok, "{:?}", r.json);
    let link = &ip(&pod, &["link", "show", "dev", "eth0"])[0];
    let flags: Vec<&str> = link["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(!flags.contains(&"UP"), "{link}");
    // With IPAM it is refused.
    let conf = n.config(json!({"disableContainerInterface": true}));
    let r = n.call("ADD", "c2", &netns_path(&netns("cnip")), &conf);
    assert_eq!(
        r.msg(),
        "cannot use IPAM when DisableContainerInterface flag is set"
    );
}

#[test]
fn mac_spoof_check_rules_follow_the_attachment() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"macspoofchk": true}));
    let pod = netns("cnip");
    let path = netns_path(&pod);
    let r = n.call("ADD", "c1", &path, &conf);
    assert!(r.ok, "{:?}", r.json);
    let mac = r.json["interfaces"][2]["mac"].as_str().unwrap().to_owned();
    let host_veth = r.json["interfaces"][1]["name"].as_str().unwrap().to_owned();
    let rules = n.masq_rules();
    assert!(
        rules.contains(&host_veth) && rules.contains(&mac),
        "{rules}"
    );
    let mut check = conf.clone();
    check["prevResult"] = r.json.clone();
    assert!(n.call("CHECK", "c1", &path, &check).ok);
    assert!(n.call("DEL", "c1", &path, &conf).ok);
    assert!(!n.masq_rules().contains(&host_veth));
}

#[test]
fn check_detects_a_missing_address() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isGateway": true}));
    let pod = netns("cnip");
    let path = netns_path(&pod);
    let r = n.call("ADD", "c1", &path, &conf);
    assert!(r.ok);
    let mut check = conf.clone();
    check["prevResult"] = r.json.clone();
    assert!(n.call("CHECK", "c1", &path, &check).ok);
    sh(&["ip", "-n", pod.name(), "addr", "flush", "dev", "eth0"]);
    let c = n.call("CHECK", "c1", &path, &check);
    assert!(!c.ok);
    assert!(
        c.msg().starts_with("Failed to match addr 10.98.0.2/24"),
        "{}",
        c.msg()
    );
}

#[test]
fn status_delegates_to_ipam() {
    let Some(n) = ours() else { return };
    // Go's host-local 1.1.1 predates STATUS: the delegate's refusal
    // reaches the runtime, which shows the call was delegated.
    let conf = n.config(json!({"cniVersion": "1.1.0"}));
    let r = n.call("STATUS", "", "", &conf);
    assert!(!r.ok);
    let mut l2 = conf.clone();
    l2.as_object_mut().unwrap().remove("ipam");
    assert!(n.call("STATUS", "", "", &l2).ok);
}

#[test]
fn gc_removes_rules_of_dead_attachments() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isGateway": true, "ipMasq": true}));
    let (p1, p2) = (netns("cnip"), netns("cnip"));
    assert!(n.call("ADD", "c1", &netns_path(&p1), &conf).ok);
    assert!(n.call("ADD", "c2", &netns_path(&p2), &conf).ok);
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    // Go's host-local 1.1.1 has no GC: the IPAM step fails after our rules
    // were collected.
    let _ = n.call("GC", "", "", &gc);
    let rules = n.masq_rules();
    assert!(rules.contains("10.98.0.2"), "{rules}");
    assert!(!rules.contains("10.98.0.3"), "{rules}");
}

/// A TCP connection from namespace `from` to a listener on `dst` in `to`.
fn connect(from: &cni_netns::Netns, to: &cni_netns::Netns, dst: &str) {
    let ip: std::net::IpAddr = dst.parse().unwrap();
    let listener = to
        .run(|| std::net::TcpListener::bind((ip, 0)))
        .unwrap()
        .unwrap_or_else(|e| panic!("listen on {dst}: {e}"));
    let addr = listener.local_addr().unwrap();
    from.run(|| std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3)))
        .unwrap()
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
}

#[test]
fn dual_stack_masquerade_covers_both_families() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({
        "isGateway": true, "ipMasq": true,
        "ipam": {"ranges": [[{"subnet": "10.98.0.0/24"}], [{"subnet": "fd98::/64"}]]}
    }));
    let pod = netns("cnip");
    let path = netns_path(&pod);
    let r = n.call("ADD", "c1", &path, &conf);
    assert!(r.ok, "{:?}", r.json);
    let rules = n.masq_rules();
    // Both families masqueraded outside their subnet (shared elements
    // `subnet . subnet` of the masq_nets maps): the second address must not
    // replace the first.
    assert!(rules.contains("10.98.0.0/24 . 10.98.0.0/24"), "{rules}");
    assert!(rules.contains("fd98::/64 . fd98::/64"), "{rules}");
    assert!(
        rules.contains("10.98.0.2") && rules.contains("fd98::2"),
        "{rules}"
    );
    let mut check = conf.clone();
    check["prevResult"] = r.json.clone();
    assert!(n.call("CHECK", "c1", &path, &check).ok);
    assert!(n.call("DEL", "c1", &path, &conf).ok);
    let rules = n.masq_rules();
    assert!(
        !rules.contains("10.98.0.2") && !rules.contains("fd98::2"),
        "{rules}"
    );
}

#[test]
fn bridge_mac_is_stable_as_ports_come_and_go() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isGateway": true}));
    let mac = || ip(&n.node, &["link", "show", "dev", &n.bridge])[0]["address"].clone();
    let (p1, p2) = (netns("cnip"), netns("cnip"));
    let a = n.call("ADD", "c1", &netns_path(&p1), &conf);
    assert!(a.ok, "{:?}", a.json);
    let first = mac();
    assert_eq!(a.json["interfaces"][0]["mac"], first);
    assert!(n.call("ADD", "c2", &netns_path(&p2), &conf).ok);
    assert_eq!(mac(), first);
    assert!(n.call("DEL", "c1", &netns_path(&p1), &conf).ok);
    assert_eq!(mac(), first);
}

/// The binary, not the library, reads `CNI_FIREWALL_BACKEND`: by default
/// the masquerade goes over netlink (no `nft` process), with `nft` through
/// the `nft` program (a wrapper first on `PATH` logs each run).
#[test]
fn the_binary_picks_the_firewall_backend() {
    let Some(n) = ours() else { return };
    let conf = n.config(json!({"isGateway": true, "ipMasq": true}));
    let bin = tempfile::tempdir().expect("tempdir");
    let log = bin.path().join("nft.log");
    let wrapper = bin.path().join("nft");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec /usr/sbin/nft \"$@\"\n",
            log.display()
        ),
    )
    .expect("write nft wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.path().display());
    for (backend, via_nft) in [("", false), ("nft", true)] {
        let pod = netns("cnip");
        let call = |command: &str| {
            let input = serde_json::to_vec(&conf).expect("encode config");
            n.node
                .run(|| {
                    let mut child = std::process::Command::new(&n.plugin)
                        .env_clear()
                        .env("CNI_COMMAND", command)
                        .env("CNI_CONTAINERID", "fwbackend")
                        .env("CNI_NETNS", netns_path(&pod))
                        .env("CNI_IFNAME", "eth0")
                        .env("CNI_PATH", n.cni_path.path())
                        .env("PATH", &path)
                        .env("CNI_FIREWALL_BACKEND", backend)
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .expect("spawn plugin");
                    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &input)
                        .expect("write stdin");
                    child.wait_with_output().expect("wait plugin")
                })
                .expect("enter node netns")
        };
        let add = call("ADD");
        assert!(
            add.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&add.stdout)
        );
        let rules = n.masq_rules();
        assert!(rules.contains("10.98.0."), "{backend}: {rules}");
        assert_eq!(log.exists(), via_nft, "backend {backend:?}: nft run?");
        let del = call("DEL");
        assert!(
            del.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&del.stdout)
        );
        // The pod address is gone (the subnet key shared by the network's
        // pods stays until a GC).
        let added: serde_json::Value = serde_json::from_slice(&add.stdout).expect("ADD result");
        let ip = added["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .expect("ADD address")
            .to_owned();
        assert!(!n.masq_rules().contains(&format!("{ip} ")), "{backend}");
        assert!(!n.masq_rules().contains(&format!("{ip},")), "{backend}");
    }
}
