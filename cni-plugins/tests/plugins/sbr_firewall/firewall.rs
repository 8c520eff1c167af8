//! firewall: real traffic through a "node" namespace whose forward policy
//! drops (iptables-nft, iptables-legacy and a native nftables table),
//! `same-bridge` isolation between two bridges, differential runs against
//! Go's firewall, GC and bad input.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

use super::{normalized, plugin_cmd, reply};
use crate::nodenet::{Ns, TcpServer};

const OURS: &str = env!("CARGO_BIN_EXE_firewall");
const GO: &str = "/usr/lib/cni/firewall";

/// Which iptables the node uses: a directory put first on the plugin's
/// `PATH` whose `iptables`/`ip6tables` are that variant.
struct Variant {
    name: &'static str,
    dir: tempfile::TempDir,
}

impl Variant {
    fn new(name: &'static str) -> Variant {
        let dir = tempfile::tempdir().expect("tempdir");
        for (link, target) in [("iptables", "iptables"), ("ip6tables", "ip6tables")] {
            std::os::unix::fs::symlink(format!("/usr/sbin/{target}-{name}"), dir.path().join(link))
                .expect("symlink");
        }
        Variant { name, dir }
    }

    fn available(name: &str) -> bool {
        std::path::Path::new(&format!("/usr/sbin/iptables-{name}")).exists()
    }

    fn path(&self) -> String {
        format!(
            "{}:/usr/sbin:/usr/bin:/sbin:/bin",
            self.dir.path().display()
        )
    }

    /// `iptables ARGS` of this variant inside `ns`.
    fn ipt(&self, ns: &Ns, v6: bool, args: &[&str]) -> String {
        let prog = format!(
            "/usr/sbin/{}-{}",
            if v6 { "ip6tables" } else { "iptables" },
            self.name
        );
        let mut a = vec![prog.as_str(), "-w"];
        a.extend_from_slice(args);
        ns.exec_ok(&a)
    }
}

/// Runs the firewall plugin `bin` inside the node namespace.
fn fw(
    node: &Ns,
    v: Option<&Variant>,
    bin: &str,
    cmd: &str,
    cid: &str,
    stdin: &str,
) -> Result<Value, Value> {
    let mut c: Command = plugin_cmd(bin, cmd, "/run/netns/pod", "eth0", cid);
    if let Some(v) = v {
        c.env("PATH", v.path());
    }
    reply(&node.output(c, stdin.as_bytes()))
}

fn conf(version: &str, extra: Value, bridge: &str, ips: &[&str]) -> String {
    let mut c = json!({
        "cniVersion": version,
        "name": "fwnet",
        "type": "firewall",
        "prevResult": {
            "cniVersion": version,
            "interfaces": [{"name": bridge}, {"name": "veth0"}, {"name": "eth0", "sandbox": "/run/netns/pod"}],
            "ips": ips.iter().map(|a| {
                let mut ip = json!({"address": a, "interface": 2});
                if version.starts_with("0.") {
                    ip["version"] = json!(if a.contains(':') { "6" } else { "4" });
                }
                ip
            }).collect::<Vec<_>>(),
        }
    });
    if let (Some(o), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    c.to_string()
}

/// Whether a TCP connection from `from` to `addr` succeeds within 700 ms.
fn reach(from: &Ns, addr: &str) -> bool {
    let addr: SocketAddr = addr.parse().expect("addr");
    from.netns()
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_millis(700)).is_ok())
        .expect("enter")
}

/// A node with a bridge per subnet, pods on them, and an outside peer
/// 10.99.0.2 behind the node; forwarding on, nothing else.
struct Lab {
    node: Ns,
    outside: Ns,
    pods: Vec<Ns>,
    _servers: Vec<TcpServer>,
}

impl Lab {
    /// `pods`: (bridge, third octet) for 10.88.<n>.5+i/24.
    fn new(pods: &[(&str, u8)]) -> Lab {
        let node = Ns::new("fwnode");
        node.sysctl("net.ipv4.ip_forward", "1");
        let outside = Ns::new("fwout");
        node.uplink(&outside, "10.99.0");
        let mut servers = vec![TcpServer::start(&outside, "10.99.0.2:8080", "outside")];
        let mut list = Vec::new();
        for (i, (br, net)) in pods.iter().enumerate() {
            if !node
                .ip(&["-o", "link", "show"])
                .contains(&format!(": {br}:"))
            {
                node.ip(&["link", "add", br, "type", "bridge"]);
                node.ip(&["addr", "add", &format!("10.88.{net}.1/24"), "dev", br]);
                node.ip(&["link", "set", br, "up"]);
            }
            let pod = Ns::new("fwpod");
            let host = format!("vp{i}");
            node.ip(&[
                "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &pod.name,
            ]);
            node.ip(&["link", "set", &host, "master", br, "up"]);
            let addr = format!("10.88.{net}.{}", 5 + i);
            pod.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
            pod.ip(&["link", "set", "eth0", "up"]);
            pod.ip(&["route", "add", "default", "via", &format!("10.88.{net}.1")]);
            servers.push(TcpServer::start(&pod, &format!("{addr}:8080"), "pod"));
            list.push(pod);
        }
        Lab {
            node,
            outside,
            pods: list,
            _servers: servers,
        }
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

/// Real traffic through FORWARD policy DROP, then the differential run
/// against Go, for one iptables variant.
fn iptables_variant(name: &'static str) {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("firewall"),
        Need::That(Variant::available(name), &format!("iptables-{name}")),
    ]) {
        return;
    }
    let v = Variant::new(name);
    let state = tempfile::tempdir().expect("tempdir");
    let extra = json!({"backend": "iptables", "dataDir": state.path()});

    // Traffic.
    let lab = Lab::new(&[("fwbr0", 3)]);
    v.ipt(&lab.node, false, &["-P", "FORWARD", "DROP"]);
    let pod = &lab.pods[0];
    assert!(
        !reach(pod, "10.99.0.2:8080"),
        "{name}: FORWARD DROP must block before ADD"
    );
    let stdin = conf("1.0.0", extra.clone(), "fwbr0", &["10.88.3.5/24"]);
    fw(&lab.node, Some(&v), OURS, "ADD", "c1", &stdin).expect("ADD");
    assert!(
        reach(pod, "10.99.0.2:8080"),
        "{name}: pod -> outside after ADD"
    );
    // Go's rules let the pod's connections and their replies through, not
    // new connections to the pod.
    assert!(
        !reach(&lab.outside, "10.88.3.5:8080"),
        "{name}: outside -> pod stays closed"
    );
    fw(&lab.node, Some(&v), OURS, "CHECK", "c1", &stdin).expect("CHECK");
    fw(&lab.node, Some(&v), OURS, "DEL", "c1", &stdin).expect("DEL");
    assert!(
        !reach(pod, "10.99.0.2:8080"),
        "{name}: blocked again after DEL"
    );
    let err = fw(&lab.node, Some(&v), OURS, "CHECK", "c1", &stdin).expect_err("CHECK after DEL");
    assert!(err["msg"].as_str().unwrap().contains("not found"), "{err}");
    fw(&lab.node, Some(&v), OURS, "DEL", "c1", &stdin).expect("second DEL");

    // Differential: the same ADD, CHECK and DEL by Go and by us on twin
    // nodes, in each version both speak.
    for version in ["0.4.0", "1.0.0"] {
        let (go, us) = (Ns::new("fwgo"), Ns::new("fwrs"));
        let stdin = conf(
            version,
            json!({"backend": "iptables", "dataDir": state.path(), "ingressPolicy": "same-bridge", "iptablesAdminChainName": "CNI-foobar"}),
            "fwbr0",
            &["10.88.3.5/24", "fd00:3::5/64"],
        );
        let rules = |ns: &Ns| (v.ipt(ns, false, &["-S"]), v.ipt(ns, true, &["-S"]));
        let run = |ns: &Ns, bin: &str, cmd: &str| fw(ns, Some(&v), bin, cmd, "c1", &stdin);
        let (rgo, tgo_add) = timed(|| run(&go, GO, "ADD").expect("Go ADD"));
        let (rus, tus_add) = timed(|| run(&us, OURS, "ADD").expect("our ADD"));
        assert_eq!(normalized(rgo), normalized(rus), "{version}: result JSON");
        assert_eq!(
            rules(&go),
            rules(&us),
            "{name} {version}: iptables -S after ADD"
        );
        run(&go, GO, "CHECK").expect("Go CHECK");
        run(&us, OURS, "CHECK").expect("our CHECK");
        let (_, tgo_del) = timed(|| run(&go, GO, "DEL").expect("Go DEL"));
        let (_, tus_del) = timed(|| run(&us, OURS, "DEL").expect("our DEL"));
        assert_eq!(
            rules(&go),
            rules(&us),
            "{name} {version}: iptables -S after DEL"
        );
        let (ego, eus) = (
            run(&go, GO, "CHECK").unwrap_err(),
            run(&us, OURS, "CHECK").unwrap_err(),
        );
        assert!(
            ego["msg"].as_str().unwrap().starts_with("expected rule"),
            "{ego}"
        );
        assert!(
            eus["msg"].as_str().unwrap().starts_with("expected rule"),
            "{eus}"
        );
        eprintln!(
            "firewall iptables-{name} {version} dual-stack same-bridge: ADD go {tgo_add:?} ours {tus_add:?}; DEL go {tgo_del:?} ours {tus_del:?}"
        );
    }
}

#[test]
fn firewall_iptables_nft_traffic_and_go_parity() {
    iptables_variant("nft");
}

#[test]
fn firewall_iptables_legacy_traffic_and_go_parity() {
    iptables_variant("legacy");
}

#[test]
fn firewall_same_bridge_isolates_bridges() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("firewall"),
        Need::That(Variant::available("nft"), "iptables-nft"),
    ]) {
        return;
    }
    let v = Variant::new("nft");
    let state = tempfile::tempdir().expect("tempdir");
    let lab = Lab::new(&[("fwfoo", 3), ("fwbar", 4), ("fwfoo", 3)]);
    v.ipt(&lab.node, false, &["-P", "FORWARD", "DROP"]);
    let addrs = [
        ("fwfoo", "10.88.3.5/24"),
        ("fwbar", "10.88.4.6/24"),
        ("fwfoo", "10.88.3.7/24"),
    ];
    let add = |policy: &str| {
        for (i, (br, a)) in addrs.iter().enumerate() {
            let extra =
                json!({"backend": "iptables", "dataDir": state.path(), "ingressPolicy": policy});
            fw(
                &lab.node,
                Some(&v),
                OURS,
                "ADD",
                &format!("c{i}"),
                &conf("1.0.0", extra, br, &[a]),
            )
            .expect("ADD");
        }
    };
    add("open");
    assert!(reach(&lab.pods[0], "10.88.4.6:8080"), "open: foo -> bar");
    assert!(reach(&lab.pods[0], "10.88.3.7:8080"), "open: foo -> foo");
    add("same-bridge");
    assert!(
        !reach(&lab.pods[0], "10.88.4.6:8080"),
        "same-bridge: foo -> bar blocked"
    );
    assert!(
        !reach(&lab.pods[1], "10.88.3.5:8080"),
        "same-bridge: bar -> foo blocked"
    );
    assert!(
        reach(&lab.pods[0], "10.88.3.7:8080"),
        "same-bridge: foo -> foo"
    );
    assert!(
        reach(&lab.pods[0], "10.99.0.2:8080"),
        "same-bridge: foo -> outside"
    );
    let s = v.ipt(&lab.node, false, &["-S", "CNI-ISOLATION-STAGE-2"]);
    assert!(s.contains("-o fwfoo") && s.contains("-o fwbar"), "{s}");
}

/// The nftables backend on a node whose firewall is its own table with a
/// forward chain of policy drop.
#[test]
fn firewall_nftables_backend_opens_foreign_table() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("firewall"),
        Need::File("/usr/sbin/nft"),
    ]) {
        return;
    }
    let lab = Lab::new(&[("fwbr0", 3), ("fwbr0", 3)]);
    lab.node.exec_ok(&["nft", "add table inet nodefw"]);
    lab.node.exec_ok(&[
        "nft",
        "add chain inet nodefw forward { type filter hook forward priority 0; policy drop; }",
    ]);
    lab.node
        .exec_ok(&["nft", "add rule inet nodefw forward iifname lo accept"]);
    let (p0, p1) = (&lab.pods[0], &lab.pods[1]);
    assert!(
        !reach(p0, "10.99.0.2:8080"),
        "policy drop must block before ADD"
    );
    let state = tempfile::tempdir().expect("tempdir");
    let extra = json!({"backend": "nftables", "nftablesTable": "nodefw", "dataDir": state.path()});
    let c0 = conf("1.1.0", extra.clone(), "fwbr0", &["10.88.3.5/24"]);
    let c1 = conf("1.1.0", extra.clone(), "fwbr0", &["10.88.3.6/24"]);
    fw(&lab.node, None, OURS, "ADD", "c0", &c0).expect("ADD c0");
    fw(&lab.node, None, OURS, "ADD", "c1", &c1).expect("ADD c1");
    assert!(reach(p0, "10.99.0.2:8080"), "c0 -> outside after ADD");
    assert!(reach(p1, "10.99.0.2:8080"), "c1 -> outside after ADD");
    assert!(
        !reach(&lab.outside, "10.88.3.6:8080"),
        "outside -> c1 stays closed"
    );
    fw(&lab.node, None, OURS, "CHECK", "c0", &c0).expect("CHECK");
    let jumps = |ns: &Ns| {
        ns.exec_ok(&["nft", "list chain inet nodefw forward"])
            .matches("jump cni_rs_firewall")
            .count()
    };
    assert_eq!(jumps(&lab.node), 1, "one jump for any number of pods");
    // Re-ADD replaces the attachment's rules, it does not pile them up.
    fw(&lab.node, None, OURS, "ADD", "c0", &c0).expect("re-ADD c0");
    let own = lab
        .node
        .exec_ok(&["nft", "list chain inet nodefw cni_rs_firewall"]);
    assert_eq!(own.matches("10.88.3.5").count(), 2, "{own}");

    fw(&lab.node, None, OURS, "DEL", "c0", &c0).expect("DEL c0");
    let err = fw(&lab.node, None, OURS, "CHECK", "c0", &c0).expect_err("CHECK after DEL");
    assert!(err["msg"].as_str().unwrap().contains("not found"), "{err}");
    assert!(!reach(p0, "10.99.0.2:8080"), "c0 blocked after its DEL");
    assert!(reach(p1, "10.99.0.2:8080"), "c1 still open");
    assert_eq!(jumps(&lab.node), 1, "the jump stays while pods remain");

    // GC with only c0 valid removes c1 and, as the last, the jump and chain.
    let mut gc: Value = serde_json::from_str(&c1).unwrap();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c0", "ifname": "eth0"}]);
    gc.as_object_mut().unwrap().remove("prevResult");
    fw(&lab.node, None, OURS, "GC", "", &gc.to_string()).expect("GC");
    assert!(!reach(p1, "10.99.0.2:8080"), "c1 blocked after GC");
    assert_eq!(jumps(&lab.node), 0, "jump removed with the last pod");
    assert!(
        lab.node
            .exec(&["nft", "list chain inet nodefw cni_rs_firewall"])
            .status
            .code()
            != Some(0)
    );
    // The node's own table and rule are untouched.
    let fwd = lab.node.exec_ok(&["nft", "list chain inet nodefw forward"]);
    assert!(
        fwd.contains("policy drop") && fwd.contains("iifname \"lo\" accept"),
        "{fwd}"
    );
    fw(&lab.node, None, OURS, "DEL", "c1", &c1).expect("DEL after GC");

    // A chain that is not there is an error naming the key, leaving nothing.
    let bad = conf(
        "1.1.0",
        json!({"backend": "nftables", "nftablesTable": "nodefw", "nftablesChain": "nope", "dataDir": state.path()}),
        "fwbr0",
        &["10.88.3.5/24"],
    );
    let err = fw(&lab.node, None, OURS, "ADD", "c0", &bad).expect_err("missing chain");
    assert!(
        err["msg"].as_str().unwrap().starts_with("nftablesChain:"),
        "{err}"
    );
    assert!(
        lab.node
            .exec(&["nft", "list chain inet nodefw cni_rs_firewall"])
            .status
            .code()
            != Some(0)
    );
}

#[test]
fn firewall_iptables_gc_and_bad_input() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("firewall"),
        Need::That(Variant::available("nft"), "iptables-nft"),
    ]) {
        return;
    }
    let v = Variant::new("nft");
    let node = Ns::new("fwgc");
    let state = tempfile::tempdir().expect("tempdir");
    let extra = json!({"backend": "iptables", "dataDir": state.path()});
    for (cid, a) in [("c0", "10.88.3.5/24"), ("c1", "10.88.3.6/24")] {
        fw(
            &node,
            Some(&v),
            OURS,
            "ADD",
            cid,
            &conf("1.1.0", extra.clone(), "br", &[a]),
        )
        .expect("ADD");
    }
    let mut gc: Value = serde_json::from_str(&conf("1.1.0", extra.clone(), "br", &[])).unwrap();
    gc.as_object_mut().unwrap().remove("prevResult");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    fw(&node, Some(&v), OURS, "GC", "", &gc.to_string()).expect("GC");
    let s = v.ipt(&node, false, &["-S", "CNI-FORWARD"]);
    assert!(!s.contains("10.88.3.5") && s.contains("10.88.3.6"), "{s}");

    // DEL without prevResult finds the addresses in the state file.
    let mut del: Value = gc.clone();
    del.as_object_mut()
        .unwrap()
        .remove("cni.dev/valid-attachments");
    fw(&node, Some(&v), OURS, "DEL", "c1", &del.to_string()).expect("DEL");
    assert!(!v
        .ipt(&node, false, &["-S", "CNI-FORWARD"])
        .contains("10.88.3.6"));
    fw(&node, Some(&v), OURS, "DEL", "c1", &del.to_string()).expect("DEL again");
    // #31.13: the last attachment gone, its network's directory goes too.
    assert!(
        !state.path().join("fwnet").exists(),
        "{:?}",
        std::fs::read_dir(state.path().join("fwnet")).map(|d| d.count())
    );

    let before = (v.ipt(&node, false, &["-S"]), v.ipt(&node, true, &["-S"]));
    let expect_err = |stdin: String, code: u64, starts: &str| {
        let e = fw(&node, Some(&v), OURS, "ADD", "cx", &stdin).expect_err(starts);
        assert_eq!(e["code"], code, "{e}");
        assert!(e["msg"].as_str().unwrap().starts_with(starts), "{e}");
    };
    let bare = json!({"cniVersion": "1.0.0", "name": "fwnet", "type": "firewall", "dataDir": state.path()});
    expect_err(bare.to_string(), 7, "missing prevResult");
    expect_err(
        conf(
            "1.0.0",
            json!({"backend": "pf", "dataDir": state.path()}),
            "br",
            &["10.88.3.9/24"],
        ),
        7,
        "backend: unknown",
    );
    expect_err(
        conf(
            "1.0.0",
            json!({"ingressPolicy": "closed", "dataDir": state.path()}),
            "br",
            &["10.88.3.9/24"],
        ),
        7,
        "ingressPolicy:",
    );
    // #31.12: a first interface in a sandbox is the pod's, not the host
    // bridge: no isolation rules for the node's own `eth0`.
    for policy in ["same-bridge", "isolated"] {
        let mut c: Value = serde_json::from_str(&conf(
            "1.0.0",
            json!({"backend": "iptables", "dataDir": state.path(), "ingressPolicy": policy}),
            "br",
            &["10.88.3.9/24"],
        ))
        .unwrap();
        c["prevResult"]["interfaces"] = json!([{"name": "eth0", "sandbox": "/run/netns/pod"}]);
        c["prevResult"]["ips"][0]["interface"] = json!(0);
        expect_err(
            c.to_string(),
            7,
            "prevResult.interfaces[0] \"eth0\" is in a sandbox",
        );
    }
    expect_err(
        conf(
            "1.0.0",
            json!({"backend": "firewalld", "dataDir": state.path()}),
            "br",
            &["10.88.3.9/24"],
        ),
        50,
        "firewalld backend:",
    );
    // ip6tables fails after the IPv4 rules went in: they go again.
    let broken = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink("/usr/sbin/iptables-nft", broken.path().join("iptables")).unwrap();
    std::os::unix::fs::symlink("/bin/false", broken.path().join("ip6tables")).unwrap();
    let mut c: Command = plugin_cmd(OURS, "ADD", "/run/netns/pod", "eth0", "cy");
    c.env("PATH", format!("{}:/usr/bin:/bin", broken.path().display()));
    let dual = conf(
        "1.0.0",
        extra.clone(),
        "br",
        &["10.88.3.77/24", "fd00:3::77/64"],
    );
    let e = reply(&node.output(c, dual.as_bytes())).expect_err("ip6tables fails");
    assert!(e["msg"].as_str().unwrap().contains("ip6tables"), "{e}");
    assert!(
        !v.ipt(&node, false, &["-S"]).contains("10.88.3.77"),
        "IPv4 rules removed"
    );
    assert!(
        !state.path().join("fwnet").join("cy_eth0").exists(),
        "no state left"
    );

    // STATUS says the firewalld backend cannot serve ADD.
    let mut status: Value = serde_json::from_str(&conf(
        "1.1.0",
        json!({"backend": "firewalld", "dataDir": state.path()}),
        "br",
        &[],
    ))
    .unwrap();
    status["cniVersion"] = json!("1.1.0");
    status.as_object_mut().unwrap().remove("prevResult");
    let e = fw(&node, Some(&v), OURS, "STATUS", "", &status.to_string()).expect_err("STATUS");
    assert_eq!(e["code"], 50, "{e}");
    status["backend"] = json!("iptables");
    fw(&node, Some(&v), OURS, "STATUS", "", &status.to_string()).expect("STATUS iptables");
    // Go's firewall speaks 0.4.0 and later only.
    let e = fw(
        &node,
        Some(&v),
        OURS,
        "ADD",
        "cx",
        &conf("0.3.1", extra.clone(), "br", &["10.88.3.9/24"]),
    )
    .expect_err("0.3.1");
    assert_eq!(e["code"], 1, "{e}");
    assert_eq!(
        before,
        (v.ipt(&node, false, &["-S"]), v.ipt(&node, true, &["-S"])),
        "failed ADDs leave nothing"
    );
}

/// `isolated` (Go v1.7.0): the intra-bridge drop above the stage-2 jump.
#[test]
fn firewall_isolated_policy_rules() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("firewall"),
        Need::That(Variant::available("nft"), "iptables-nft"),
    ]) {
        return;
    }
    let v = Variant::new("nft");
    let node = Ns::new("fwiso");
    let state = tempfile::tempdir().expect("tempdir");
    let extra =
        json!({"backend": "iptables", "dataDir": state.path(), "ingressPolicy": "isolated"});
    fw(
        &node,
        Some(&v),
        OURS,
        "ADD",
        "c0",
        &conf("1.0.0", extra, "fwbr9", &["10.88.9.5/24"]),
    )
    .expect("ADD");
    let iso = r#""CNI firewall plugin rules (ingressPolicy: isolated)""#;
    let shared = r#""CNI firewall plugin rules (ingressPolicy: same-bridge)""#;
    assert_eq!(
        v.ipt(&node, false, &["-S", "CNI-ISOLATION-STAGE-1"]),
        format!(
            "-N CNI-ISOLATION-STAGE-1\n\
             -A CNI-ISOLATION-STAGE-1 -i fwbr9 -o fwbr9 -m comment --comment {iso} -j DROP\n\
             -A CNI-ISOLATION-STAGE-1 -i fwbr9 ! -o fwbr9 -m comment --comment {iso} -j CNI-ISOLATION-STAGE-2\n\
             -A CNI-ISOLATION-STAGE-1 -m comment --comment {shared} -j RETURN\n"
        )
    );
    let fwd = v.ipt(&node, false, &["-S", "FORWARD"]);
    let first = fwd.lines().nth(1).unwrap_or_default();
    assert!(first.contains("-j CNI-ISOLATION-STAGE-1"), "{fwd}");
}

/// Concurrent ADDs and DELs with the nftables backend: one jump, every
/// pod's rules, and nothing left after the last DEL.
#[test]
fn firewall_nftables_concurrent_attachments() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("firewall"),
        Need::File("/usr/sbin/nft"),
    ]) {
        return;
    }
    let node = Ns::new("fwpar");
    node.exec_ok(&["nft", "add table ip nodefw"]);
    node.exec_ok(&[
        "nft",
        "add chain ip nodefw fwdchain { type filter hook forward priority 0; policy drop; }",
    ]);
    let state = tempfile::tempdir().expect("tempdir");
    let extra = json!({"backend": "nftables", "nftablesTable": "nodefw", "nftablesFamily": "ip", "nftablesChain": "fwdchain", "dataDir": state.path()});
    let confs: Vec<String> = (0..8)
        .map(|i| {
            conf(
                "1.1.0",
                extra.clone(),
                "br",
                &[&format!("10.88.5.{}/24", 10 + i), "fd00:5::10/64"],
            )
        })
        .collect();
    let run_all = |cmd: &str| {
        std::thread::scope(|s| {
            for (i, c) in confs.iter().enumerate() {
                let node = &node;
                let cmd = cmd.to_owned();
                s.spawn(move || fw(node, None, OURS, &cmd, &format!("c{i}"), c).expect(&cmd));
            }
        });
    };
    run_all("ADD");
    let fwd = node.exec_ok(&["nft", "list chain ip nodefw fwdchain"]);
    assert_eq!(fwd.matches("jump cni_rs_firewall").count(), 1, "{fwd}");
    let own = node.exec_ok(&["nft", "list chain ip nodefw cni_rs_firewall"]);
    assert_eq!(
        own.matches("accept").count(),
        16,
        "two IPv4 rules per pod, no IPv6 in an ip table: {own}"
    );
    run_all("DEL");
    let fwd = node.exec_ok(&["nft", "list chain ip nodefw fwdchain"]);
    assert!(!fwd.contains("jump"), "{fwd}");
    assert!(
        node.exec(&["nft", "list chain ip nodefw cni_rs_firewall"])
            .status
            .code()
            != Some(0)
    );
}
