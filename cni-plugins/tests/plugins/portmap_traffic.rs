//! portmap in real namespaces with real traffic. Each test builds its own
//! "node" namespace (bridge `br0` 10.77.0.1/24, uplink 10.78.0.1/24 to a
//! "client" namespace standing for another host) and pod namespaces on the
//! bridge, then drives portmap in-process against the node namespace
//! (`Portmap::in_netns`). The kernel effects are read back with `nft -j`,
//! `sysctl` and TCP/UDP traffic. Skipped unless root.

use std::time::Duration;

use crate::nodenet::{tcp_get, udp_bind, udp_recv, wait_until, Ns, TcpServer};
use cni_exec::{dispatch, Env};
use cni_plugins::portmap::Portmap;

struct Node {
    node: Ns,
    client: Ns,
}

impl Node {
    fn new() -> Node {
        let node = Ns::new("pmnode");
        let client = Ns::new("pmcli");
        node.sysctl("net.ipv4.ip_forward", "1");
        node.ip(&["link", "add", "br0", "type", "bridge"]);
        node.ip(&["addr", "add", "10.77.0.1/24", "dev", "br0"]);
        node.ip(&["link", "set", "br0", "up"]);
        node.uplink(&client, "10.78.0");
        Node { node, client }
    }

    /// A pod on br0 with `addr` (host side `vh<n>`).
    fn pod(&self, n: u32, addr: &str) -> Ns {
        let pod = Ns::new("pmpod");
        let host = format!("vh{n}");
        self.node.ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &pod.name,
        ]);
        self.node.ip(&["link", "set", &host, "master", "br0", "up"]);
        // br_netfilter (loaded on this kind of node) DNATs a pod's packet to
        // its own host port in the bridge path and sends it back out the
        // port it came in: the bridge plugin's hairpinMode.
        self.node.ip(&[
            "link",
            "set",
            &host,
            "type",
            "bridge_slave",
            "hairpin",
            "on",
        ]);
        pod.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod.ip(&["route", "add", "default", "via", "10.77.0.1"]);
        pod
    }

    fn portmap(&self) -> Portmap {
        Portmap::in_netns(self.node.path())
    }
}

fn env(cmd: &str, cid: &str, pod: &Ns) -> Env {
    Env::new([
        ("CNI_COMMAND", cmd.to_string()),
        ("CNI_CONTAINERID", cid.to_string()),
        ("CNI_NETNS", pod.path()),
        ("CNI_IFNAME", "eth0".to_string()),
        ("CNI_PATH", "/nonexistent".to_string()),
    ])
}

fn conf(pod: &Ns, addr: &str, mappings: &str, extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"pmtest","type":"portmap"{extra},
            "runtimeConfig":{{"portMappings":{mappings}}},
            "prevResult":{{"cniVersion":"1.0.0",
              "interfaces":[{{"name":"br0"}},{{"name":"vh"}},{{"name":"eth0","sandbox":"{}"}}],
              "ips":[{{"address":"{addr}/24","gateway":"10.77.0.1","interface":2}}]}}}}"#,
        pod.path()
    )
}

fn run(pm: &Portmap, cmd: &str, cid: &str, pod: &Ns, stdin: &str) -> String {
    let out = dispatch(pm, &env(cmd, cid, pod), stdin.as_bytes());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.exit_code, 0, "{cmd} failed: {stdout}");
    stdout
}

/// The rules and map elements (`nft -j`) tagged for container `cid`.
fn owned_rules(node: &Ns, cid: &str) -> usize {
    let rs = node.nft_ruleset();
    let items = rs["nftables"].as_array().cloned().unwrap_or_default();
    let mut comments: Vec<String> = node.nft_rule_comments();
    for m in items.iter().filter_map(|o| o.get("map")) {
        for e in m["elem"].as_array().into_iter().flatten() {
            if let Some(c) = e[0]["elem"]["comment"].as_str() {
                comments.push(c.to_owned());
            }
        }
    }
    comments
        .iter()
        .filter(|c| c.ends_with(&format!("id: {cid}")))
        .count()
}

#[test]
fn tcp_from_other_host_node_localhost_bridge_and_hairpin() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    let pod = n.pod(1, "10.77.0.2");
    let _srv = TcpServer::start(&pod, "0.0.0.0:80", "pod1");
    let pm = n.portmap();
    let c = conf(
        &pod,
        "10.77.0.2",
        r#"[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]"#,
        "",
    );
    let out = run(&pm, "ADD", "cid-tcp", &pod, &c);
    // output = prevResult
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ips"][0]["address"], "10.77.0.2/24");
    assert_eq!(v["interfaces"][2]["sandbox"], pod.path());

    assert_eq!(n.node.sysctl_get("net.ipv4.conf.br0.route_localnet"), "1");
    assert!(owned_rules(&n.node, "cid-tcp") > 0);

    for (from, addr, src_prefix) in [
        (&n.client, "10.78.0.1:8080", "10.78.0.2:"), // other host: prerouting, no SNAT
        (&n.node, "127.0.0.1:8080", "10.77.0.1:"),   // localhost: output + masquerade
        (&n.node, "10.77.0.1:8080", "10.77.0.1:"),   // bridge address
        (&n.node, "10.78.0.1:8080", ""),             // node's uplink address
        (&pod, "10.77.0.1:8080", "10.77.0.1:"),      // hairpin: the pod to its own port
    ] {
        let got = tcp_get(from, addr).unwrap_or_else(|e| panic!("{addr} from {}: {e}", from.name));
        assert!(got.starts_with("pod1 "), "{got}");
        assert!(
            got.contains(&format!(" {src_prefix}")),
            "{addr}: unexpected peer in {got:?}"
        );
    }

    run(&pm, "CHECK", "cid-tcp", &pod, &c);
    run(&pm, "DEL", "cid-tcp", &pod, &c);
    assert_eq!(owned_rules(&n.node, "cid-tcp"), 0);
    assert!(tcp_get(&n.client, "10.78.0.1:8080").is_err());
    assert!(tcp_get(&n.node, "127.0.0.1:8080").is_err());
    // idempotent DEL, also without prevResult
    run(&pm, "DEL", "cid-tcp", &pod, &c);
    let no_prev = r#"{"cniVersion":"1.0.0","name":"pmtest","type":"portmap",
        "runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}"#;
    run(&pm, "DEL", "cid-tcp", &pod, no_prev);
    // CHECK now fails: the rules are gone.
    let out = dispatch(&pm, &env("CHECK", "cid-tcp", &pod), c.as_bytes());
    assert_ne!(out.exit_code, 0);
}

#[test]
fn host_ip_limits_the_mapping_and_snat_off_skips_localhost() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    let pod = n.pod(1, "10.77.0.2");
    let _srv = TcpServer::start(&pod, "0.0.0.0:81", "pod1");
    let pm = n.portmap();
    let c = conf(
        &pod,
        "10.77.0.2",
        r#"[{"hostPort":8081,"containerPort":81,"protocol":"tcp","hostIP":"10.78.0.1"},
            {"hostPort":8081,"containerPort":81,"protocol":"tcp","hostIP":"fd00::1"}]"#,
        r#","snat":false"#,
    );
    run(&pm, "ADD", "cid-hip", &pod, &c);
    assert!(tcp_get(&n.client, "10.78.0.1:8081").is_ok());
    assert!(tcp_get(&n.node, "10.78.0.1:8081").is_ok());
    assert!(tcp_get(&n.node, "10.77.0.1:8081").is_err());
    // snat off: no route_localnet and no localhost path
    assert_eq!(n.node.sysctl_get("net.ipv4.conf.br0.route_localnet"), "0");
    run(&pm, "DEL", "cid-hip", &pod, &c);
    assert_eq!(owned_rules(&n.node, "cid-hip"), 0);
}

#[test]
fn no_mappings_means_no_work() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    let pod = n.pod(1, "10.77.0.2");
    let pm = n.portmap();
    let c = conf(&pod, "10.77.0.2", "[]", "");
    let out = run(&pm, "ADD", "cid-none", &pod, &c);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ips"][0]["address"], "10.77.0.2/24");
    let tables: Vec<serde_json::Value> = n.node.nft_ruleset()["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o.get("table").is_some())
        .cloned()
        .collect();
    assert!(tables.is_empty(), "{tables:?}");
    run(&pm, "DEL", "cid-none", &pod, &c);
    run(&pm, "CHECK", "cid-none", &pod, &c);
    // Chained only.
    let bare = r#"{"cniVersion":"1.0.0","name":"pmtest","type":"portmap"}"#;
    let out = dispatch(&pm, &env("ADD", "cid-none", &pod), bare.as_bytes());
    assert!(String::from_utf8_lossy(&out.stdout).contains("must be called as chained plugin"));
}

#[test]
fn gc_removes_only_attachments_not_valid() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    let pod1 = n.pod(1, "10.77.0.2");
    let pod2 = n.pod(2, "10.77.0.3");
    let pm = n.portmap();
    let c1 = conf(
        &pod1,
        "10.77.0.2",
        r#"[{"hostPort":9001,"containerPort":80,"protocol":"tcp"}]"#,
        "",
    );
    let c2 = conf(
        &pod2,
        "10.77.0.3",
        r#"[{"hostPort":9002,"containerPort":80,"protocol":"tcp"}]"#,
        "",
    );
    run(&pm, "ADD", "cid-keep", &pod1, &c1);
    run(&pm, "ADD", "cid-dead", &pod2, &c2);
    let gc = r#"{"cniVersion":"1.1.0","name":"pmtest","type":"portmap",
        "cni.dev/valid-attachments":[{"containerID":"cid-keep","ifname":"eth0"}]}"#;
    let genv = Env::new([("CNI_COMMAND", "GC"), ("CNI_PATH", "/nonexistent")]);
    let out = dispatch(&pm, &genv, gc.as_bytes());
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(owned_rules(&n.node, "cid-keep") > 0);
    assert_eq!(owned_rules(&n.node, "cid-dead"), 0);
    let status = Env::new([("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/nonexistent")]);
    let out = dispatch(
        &pm,
        &status,
        br#"{"cniVersion":"1.1.0","name":"pmtest","type":"portmap"}"#,
    );
    assert_eq!(out.exit_code, 0);
    run(&pm, "DEL", "cid-keep", &pod1, &c1);
}

/// A UDP "connection" keeps its conntrack entry as long as the client
/// sends; after the pod is replaced (new IP, same host port) datagrams must
/// reach the new pod.
#[test]
fn udp_reaches_the_replacement_pod() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    let pm = n.portmap();
    let maps = r#"[{"hostPort":5353,"containerPort":53,"protocol":"udp"}]"#;
    let pod_a = n.pod(1, "10.77.0.2");
    let pod_b = n.pod(2, "10.77.0.3");
    let rx_a = udp_bind(&pod_a, "0.0.0.0:53");
    let rx_b = udp_bind(&pod_b, "0.0.0.0:53");
    let tx = udp_bind(&n.client, "10.78.0.2:40000");
    let send = |msg: &str| {
        tx.send_to(msg.as_bytes(), "10.78.0.1:5353").unwrap();
    };

    let ca = conf(&pod_a, "10.77.0.2", maps, "");
    run(&pm, "ADD", "cid-udp-a", &pod_a, &ca);
    assert!(wait_until(Duration::from_secs(3), || {
        send("one");
        udp_recv(&rx_a).as_deref() == Some("one")
    }));

    // Pod A goes, pod B takes the host port; the client never stops.
    run(&pm, "DEL", "cid-udp-a", &pod_a, &ca);
    // DEL flushed the flow (beyond the reference, which only flushes on
    // ADD): nothing reaches the deleted pod in between.
    while udp_recv(&rx_a).is_some() {}
    send("after-del");
    assert_eq!(udp_recv(&rx_a), None, "the deleted pod still gets traffic");
    let cb = conf(&pod_b, "10.77.0.3", maps, "");
    run(&pm, "ADD", "cid-udp-b", &pod_b, &cb);
    assert!(
        wait_until(Duration::from_secs(3), || {
            send("two");
            udp_recv(&rx_b).as_deref() == Some("two")
        }),
        "datagrams still go to the old pod"
    );
    while udp_recv(&rx_a).is_some() {}
    send("three");
    assert_eq!(udp_recv(&rx_b).as_deref(), Some("three"));
    assert_eq!(udp_recv(&rx_a), None);
    run(&pm, "DEL", "cid-udp-b", &pod_b, &cb);
}

#[test]
fn ipv6_from_other_host_node_and_hairpin() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    n.node.sysctl("net.ipv6.conf.all.forwarding", "1");
    n.node
        .ip(&["addr", "add", "fd77::1/64", "dev", "br0", "nodad"]);
    n.node
        .ip(&["addr", "add", "fd78::1/64", "dev", "up0", "nodad"]);
    n.client
        .ip(&["addr", "add", "fd78::2/64", "dev", "eth0", "nodad"]);
    n.client
        .ip(&["-6", "route", "add", "default", "via", "fd78::1"]);
    let pod = n.pod(1, "10.77.0.2");
    pod.ip(&["addr", "add", "fd77::2/64", "dev", "eth0", "nodad"]);
    pod.ip(&["-6", "route", "add", "default", "via", "fd77::1"]);
    let _srv4 = TcpServer::start(&pod, "0.0.0.0:80", "pod1");
    let _srv6 = TcpServer::start(&pod, "[::]:8000", "pod1v6");
    let pm = n.portmap();
    let c = format!(
        r#"{{"cniVersion":"1.0.0","name":"pmtest","type":"portmap",
            "runtimeConfig":{{"portMappings":[{{"hostPort":8080,"containerPort":8000,"protocol":"tcp"}}]}},
            "prevResult":{{"cniVersion":"1.0.0",
              "interfaces":[{{"name":"eth0","sandbox":"{}"}}],
              "ips":[{{"address":"fd77::2/64","interface":0}}]}}}}"#,
        pod.path()
    );
    run(&pm, "ADD", "cid-v6", &pod, &c);
    // Link-local addresses are still tentative (DAD) right after the links
    // came up, and the node's neighbour solicitation for fd77::2 goes
    // unanswered until they are not: wait, as a real pod start does.
    for ns in [&n.node, &pod, &n.client] {
        assert!(wait_until(Duration::from_secs(5), || ns
            .ip(&["-6", "addr", "show", "tentative"])
            .trim()
            .is_empty()));
    }
    for (from, addr) in [
        (&n.client, "[fd78::1]:8080"),
        (&n.node, "[fd78::1]:8080"),
        (&n.node, "[fd77::1]:8080"),
        (&pod, "[fd77::1]:8080"),
    ] {
        let got = tcp_get(from, addr).unwrap_or_else(|e| {
            panic!(
                "{addr} from {}: {e}\n{}\n{}\n{}",
                from.name,
                n.node.exec_ok(&["nft", "list", "ruleset"]),
                pod.ip(&["-6", "addr"]),
                n.node.ip(&["-6", "addr"])
            )
        });
        assert!(got.starts_with("pod1v6 "), "{got}");
    }
    // v6 only: no v4 path.
    assert!(tcp_get(&n.client, "10.78.0.1:8080").is_err());
    run(&pm, "CHECK", "cid-v6", &pod, &c);
    run(&pm, "DEL", "cid-v6", &pod, &c);
    assert_eq!(owned_rules(&n.node, "cid-v6"), 0);
    assert!(tcp_get(&n.client, "[fd78::1]:8080").is_err());
}

#[test]
fn conditions_and_masq_all() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    let pod = n.pod(1, "10.77.0.2");
    let _srv = TcpServer::start(&pod, "0.0.0.0:80", "pod1");
    let pm = n.portmap();
    // Only clients of 10.78.0.0/24 are forwarded; everything masqueraded.
    let c = conf(
        &pod,
        "10.77.0.2",
        r#"[{"hostPort":8082,"containerPort":80,"protocol":"tcp"}]"#,
        r#","masqAll":true,"conditionsV4":["ip","saddr","10.78.0.0/24"]"#,
    );
    run(&pm, "ADD", "cid-cond", &pod, &c);
    let got = tcp_get(&n.client, "10.78.0.1:8082").unwrap();
    // masqAll: the pod sees the node (its br0 address), not the client.
    assert!(got.starts_with("pod1 10.77.0.1:"), "{got}");
    // The condition keeps the node's own (127.0.0.1) traffic out.
    assert!(tcp_get(&n.node, "127.0.0.1:8082").is_err());
    run(&pm, "CHECK", "cid-cond", &pod, &c);
    run(&pm, "DEL", "cid-cond", &pod, &c);
    assert_eq!(owned_rules(&n.node, "cid-cond"), 0);
}
