//! vlan, vrf, dummy, tap and passthru, run as processes from a "node"
//! namespace against "pod" namespaces the tests create; the oracle is
//! `ip -j -d`. Where this kernel lacks a link type (vlan, vrf, dummy here),
//! the test takes the clean error path: a CNI error naming the type, and
//! nothing left behind (no link, no IPAM reservation); where it has it,
//! the real path. vlan and vrf are also compared with the Go reference
//! (Debian's 1.1.1 in /usr/lib/cni, which has no dummy or tap). The last
//! test runs multus with an auxiliary chain (passthru + tuning).

use std::path::{Path, PathBuf};

use crate::common::*;
use cni_netns::OwnedNetns;
use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

fn ours(name: &str) -> PathBuf {
    let var = match name {
        "vlan" => env!("CARGO_BIN_EXE_vlan"),
        "vrf" => env!("CARGO_BIN_EXE_vrf"),
        "dummy" => env!("CARGO_BIN_EXE_dummy"),
        "tap" => env!("CARGO_BIN_EXE_tap"),
        "passthru" => env!("CARGO_BIN_EXE_passthru"),
        "tuning" => env!("CARGO_BIN_EXE_tuning"),
        "host-local" => env!("CARGO_BIN_EXE_host-local"),
        #[cfg(feature = "multus")]
        "multus" => env!("CARGO_BIN_EXE_multus"),
        other => panic!("no binary {other}"),
    };
    PathBuf::from(var)
}

fn go(name: &str) -> PathBuf {
    Path::new(GO_PLUGINS).join(name)
}

/// A node namespace, a pod namespace and a data dir for host-local.
struct World {
    node: OwnedNetns,
    pod: OwnedNetns,
    data: tempfile::TempDir,
    ours: CniPath,
    go: CniPath,
}

impl World {
    fn new() -> World {
        let node = netns("lpnode");
        let pod = netns("lppod");
        // The VLAN master: one end of a veth pair in the node.
        sh(&[
            "ip",
            "-n",
            node.name(),
            "link",
            "add",
            "up0",
            "mtu",
            "1500",
            "type",
            "veth",
            "peer",
            "name",
            "up0p",
        ]);
        sh(&["ip", "-n", node.name(), "link", "set", "up0", "up"]);
        let hl = ours("host-local");
        World {
            node,
            pod,
            data: tempfile::tempdir().expect("tempdir"),
            ours: CniPath::new(&[("host-local", hl.as_path())]),
            go: CniPath::new(&[("host-local", go("host-local").as_path())]),
        }
    }

    fn ipam(&self, subnet: &str) -> Value {
        json!({"type": "host-local", "subnet": subnet,
               "dataDir": self.data.path().join("ipam")})
    }

    fn reservations(&self, network: &str) -> Vec<String> {
        reserved_ips(&self.data.path().join("ipam"), network)
    }

    fn call(&self, plugin: &Path, command: &str, ifname: &str, conf: &Value) -> Reply {
        self.call_in(plugin, command, ifname, &netns_path(&self.pod), "", conf)
    }

    fn call_in(
        &self,
        plugin: &Path,
        command: &str,
        ifname: &str,
        netns: &str,
        args: &str,
        conf: &Value,
    ) -> Reply {
        let go_side = plugin.starts_with(GO_PLUGINS);
        let cni_path = if go_side {
            self.go.path()
        } else {
            self.ours.path()
        };
        run(
            &self.node,
            &Call {
                plugin,
                cni_path,
                command,
                container_id: "ctr1",
                netns,
                ifname,
                args,
            },
            conf,
        )
    }

    /// `ip -j -d link show <name>` in the pod.
    fn pod_link(&self, name: &str) -> Value {
        ip(&self.pod, &["-d", "link", "show", name])[0].clone()
    }
}

/// Whether this kernel creates links of `kind` (tried in a throwaway
/// namespace).
fn kernel_has(kind: &str) -> bool {
    let ns = netns("lpprobe");
    let n = ns.name();
    let ok = match kind {
        "vlan" => {
            sh(&[
                "ip", "-n", n, "link", "add", "p0", "type", "veth", "peer", "name", "p1",
            ]);
            sh_ok(&[
                "ip", "-n", n, "link", "add", "v0", "link", "p0", "type", "vlan", "id", "5",
            ])
        }
        "vrf" => sh_ok(&[
            "ip", "-n", n, "link", "add", "v0", "type", "vrf", "table", "10",
        ]),
        _ => sh_ok(&["ip", "-n", n, "link", "add", "d0", "type", kind]),
    };
    eprintln!("kernel {kind} support: {ok}");
    ok
}

fn expect_err(r: &Reply, code: u64, needle: &str) {
    assert!(!r.ok, "expected a failure: {:?}", r.json);
    assert_eq!(r.json["code"], code, "{:?}", r.json);
    assert!(r.msg().contains(needle), "{:?} lacks {needle:?}", r.msg());
}

fn vlan_conf(w: &World, extra: Value) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "vlannet", "type": "vlan",
        "master": "up0", "vlanId": 42, "ipam": w.ipam("10.93.0.0/24")});
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}

#[test]
fn vlan_add_check_del_or_clean_refusal() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    let c = vlan_conf(&w, json!({"mtu": 1400}));
    let node_before = link_names(&w.node);
    let add = w.call(&ours("vlan"), "ADD", "eth1", &c);
    if kernel_has("vlan") {
        assert!(add.ok, "{:?}", add.json);
        let l = w.pod_link("eth1");
        assert_eq!(l["linkinfo"]["info_kind"], "vlan", "{l}");
        assert_eq!(l["linkinfo"]["info_data"]["id"], 42, "{l}");
        assert_eq!(l["mtu"], 1400);
        assert_eq!(add.json["interfaces"][0]["mac"], l["address"]);
        assert_eq!(add.json["ips"][0]["interface"], 0);
        let mut chk = c.clone();
        chk["prevResult"] = add.json.clone();
        let r = w.call(&ours("vlan"), "CHECK", "eth1", &chk);
        assert!(r.ok, "{:?}", r.json);
        chk["vlanId"] = json!(43);
        assert!(!w.call(&ours("vlan"), "CHECK", "eth1", &chk).ok);
    } else {
        expect_err(&add, 999, "vlan is not supported by this kernel");
        assert!(add.msg().contains("up0"), "{}", add.msg());
        assert!(link_names(&w.pod).is_empty(), "{:?}", link_names(&w.pod));
        assert_eq!(link_names(&w.node), node_before);
        assert!(w.reservations("vlannet").is_empty());
        // Go refuses with the same code.
        let go_add = w.call(&go("vlan"), "ADD", "eth1", &c);
        assert_eq!(go_add.json["code"], add.json["code"], "{:?}", go_add.json);
        assert!(link_names(&w.pod).is_empty());
    }
    // DEL: idempotent, and fine once the link or the namespace is gone.
    for _ in 0..2 {
        let r = w.call(&ours("vlan"), "DEL", "eth1", &c);
        assert!(r.ok, "{:?}", r.json);
    }
    assert!(link_names(&w.pod).is_empty());
    assert!(w.reservations("vlannet").is_empty());
    let r = w.call_in(
        &ours("vlan"),
        "DEL",
        "eth1",
        "/run/netns/lp-gone-ns",
        "",
        &c,
    );
    assert!(r.ok, "{:?}", r.json);
}

#[test]
fn vlan_bad_config_matches_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    let cases = [
        (
            json!({"master": ""}),
            "\"master\" field is required. It specifies the host interface name to create the VLAN for",
        ),
        (
            json!({"vlanId": 4095}),
            "invalid VLAN ID 4095 (must be between 0 and 4095 inclusive)",
        ),
        (
            json!({"vlanId": -1}),
            "invalid VLAN ID -1 (must be between 0 and 4095 inclusive)",
        ),
        (
            json!({"mtu": 1600}),
            "invalid MTU 1600, must be [0, master MTU(1500)]",
        ),
        (
            json!({"mtu": -100}),
            "invalid MTU -100, must be [0, master MTU(1500)]",
        ),
    ];
    for (extra, msg) in cases {
        let c = vlan_conf(&w, extra.clone());
        let mine = w.call(&ours("vlan"), "ADD", "eth1", &c);
        let theirs = w.call(&go("vlan"), "ADD", "eth1", &c);
        expect_err(&mine, 999, msg);
        // v1.1.1 ends the master message with a period; HEAD does not.
        assert_eq!(theirs.msg().trim_end_matches('.'), msg, "{extra}");
        assert_eq!(mine.json["code"], theirs.json["code"], "{extra}");
    }
    // A master that does not exist: both refuse with 999; ours names it.
    let c = vlan_conf(&w, json!({"master": "nosuch0"}));
    let mine = w.call(&ours("vlan"), "ADD", "eth1", &c);
    let theirs = w.call(&go("vlan"), "ADD", "eth1", &c);
    expect_err(&mine, 999, "nosuch0");
    assert_eq!(mine.json["code"], theirs.json["code"]);
    // linkInContainer looks the master up in the pod, where it is not.
    let c = vlan_conf(&w, json!({"linkInContainer": true}));
    expect_err(&w.call(&ours("vlan"), "ADD", "eth1", &c), 999, "up0");
    assert!(link_names(&w.pod).is_empty());
    assert!(w.reservations("vlannet").is_empty());
    // STATUS (1.1.0) asks IPAM only.
    let mut st = vlan_conf(&w, json!({}));
    st["cniVersion"] = json!("1.1.0");
    assert!(w.call(&ours("vlan"), "STATUS", "eth1", &st).ok);
}

fn vrf_conf(extra: Value) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "vrfnet", "type": "vrf",
        "vrfname": "blue",
        "prevResult": {"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth1", "sandbox": "x"}],
            "ips": [{"address": "10.94.0.2/24", "interface": 0}]}});
    for (k, v) in extra.as_object().expect("object") {
        if v.is_null() {
            c.as_object_mut().expect("object").remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

#[test]
fn vrf_add_del_or_clean_refusal() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    sh(&[
        "ip",
        "-n",
        w.pod.name(),
        "link",
        "add",
        "eth1",
        "type",
        "veth",
        "peer",
        "name",
        "eth1p",
    ]);
    sh(&[
        "ip",
        "-n",
        w.pod.name(),
        "addr",
        "add",
        "10.94.0.2/24",
        "dev",
        "eth1",
    ]);
    sh(&["ip", "-n", w.pod.name(), "link", "set", "eth1", "up"]);
    // A route through the interface and a global IPv6 address: ADD moves
    // the one into the VRF's table and keeps the other.
    sh(&[
        "ip",
        "-n",
        w.pod.name(),
        "route",
        "add",
        "10.200.0.0/24",
        "via",
        "10.94.0.1",
        "dev",
        "eth1",
    ]);
    sh(&[
        "ip",
        "-n",
        w.pod.name(),
        "-6",
        "addr",
        "add",
        "2001:db8:94::2/64",
        "dev",
        "eth1",
        "nodad",
    ]);
    let c = vrf_conf(json!({}));
    let pod_before = link_names(&w.pod);
    let add = w.call(&ours("vrf"), "ADD", "eth1", &c);
    if kernel_has("vrf") {
        assert!(add.ok, "{:?}", add.json);
        // The previous result passes through.
        assert_eq!(add.json["ips"], c["prevResult"]["ips"]);
        let vrf = w.pod_link("blue");
        assert_eq!(vrf["linkinfo"]["info_kind"], "vrf", "{vrf}");
        assert_eq!(vrf["linkinfo"]["info_data"]["table"], 1);
        assert_eq!(w.pod_link("eth1")["master"], "blue");
        let routes = ip(&w.pod, &["route", "show", "table", "1"]);
        assert!(
            routes
                .as_array()
                .expect("routes")
                .iter()
                .any(|r| r["dst"] == "10.200.0.0/24"),
            "{routes}"
        );
        let v6 = ip(
            &w.pod,
            &["-6", "addr", "show", "dev", "eth1", "scope", "global"],
        );
        assert_eq!(v6[0]["addr_info"][0]["local"], "2001:db8:94::2", "{v6}");
        assert!(w.call(&ours("vrf"), "CHECK", "eth1", &c).ok);
        // Another table for the same VRF is refused.
        let r = w.call(&ours("vrf"), "ADD", "eth1", &vrf_conf(json!({"table": 7})));
        expect_err(&r, 999, "already exist with different routing table 1");
        // DEL releases the interface and removes the empty VRF.
        assert!(w.call(&ours("vrf"), "DEL", "eth1", &c).ok);
        assert!(w.pod_link("eth1").get("master").is_none());
        assert!(!link_names(&w.pod).contains(&"blue".to_string()));
    } else {
        expect_err(&add, 999, "vrf is not supported by this kernel");
        assert!(add.msg().contains("blue"), "{}", add.msg());
        let go_add = w.call(&go("vrf"), "ADD", "eth1", &c);
        assert_eq!(go_add.json["code"], add.json["code"], "{:?}", go_add.json);
        // Nothing changed: no VRF, the interface has no master.
        assert_eq!(link_names(&w.pod), pod_before);
        assert!(!link_names(&w.pod).contains(&"blue".to_string()));
        assert!(w.pod_link("eth1").get("master").is_none());
    }
    // DEL without a VRF, twice, and with the namespace gone: success.
    for _ in 0..2 {
        let r = w.call(&ours("vrf"), "DEL", "eth1", &c);
        assert!(r.ok, "{:?}", r.json);
    }
    let r = w.call_in(&ours("vrf"), "DEL", "eth1", "/run/netns/lp-gone-ns", "", &c);
    assert!(r.ok, "{:?}", r.json);
}

#[test]
fn vrf_bad_config_matches_go() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    let cases = [
        (
            vrf_conf(json!({"vrfname": ""})),
            "configuration is expected to have a valid vrf name",
        ),
        (
            vrf_conf(json!({"prevResult": null})),
            "missing prevResult from earlier plugin",
        ),
    ];
    for (c, msg) in cases {
        let mine = w.call(&ours("vrf"), "ADD", "eth1", &c);
        let theirs = w.call(&go("vrf"), "ADD", "eth1", &c);
        expect_err(&mine, 999, msg);
        assert_eq!(theirs.msg(), msg);
        assert_eq!(mine.json["code"], theirs.json["code"]);
    }
    // Versions before 0.3.1 are refused, as Go's.
    let c = vrf_conf(json!({"cniVersion": "0.3.0", "prevResult": null}));
    let mine = w.call(&ours("vrf"), "ADD", "eth1", &c);
    let theirs = w.call(&go("vrf"), "ADD", "eth1", &c);
    expect_err(&mine, 1, "");
    assert_eq!(theirs.json["code"], 1);
    // A link of that name that is not a VRF.
    sh(&[
        "ip",
        "-n",
        w.pod.name(),
        "link",
        "add",
        "blue",
        "type",
        "bridge",
    ]);
    let mine = w.call(&ours("vrf"), "ADD", "eth1", &vrf_conf(json!({})));
    let theirs = w.call(&go("vrf"), "ADD", "eth1", &vrf_conf(json!({})));
    expect_err(&mine, 999, "Netlink blue is not a VRF");
    assert!(
        theirs.msg().contains("Netlink blue is not a VRF"),
        "{}",
        theirs.msg()
    );
}

#[test]
fn dummy_add_check_del_or_clean_refusal() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    // Without IPAM: Go's refusal.
    let bare = json!({"cniVersion": "1.0.0", "name": "dnet", "type": "dummy"});
    expect_err(
        &w.call(&ours("dummy"), "ADD", "dummy0", &bare),
        999,
        "dummy interface requires an IPAM configuration",
    );
    let c = json!({"cniVersion": "1.0.0", "name": "dnet", "type": "dummy",
        "ipam": w.ipam("10.95.0.0/24")});
    let add = w.call(&ours("dummy"), "ADD", "dummy0", &c);
    if kernel_has("dummy") {
        assert!(add.ok, "{:?}", add.json);
        let l = w.pod_link("dummy0");
        assert_eq!(l["linkinfo"]["info_kind"], "dummy", "{l}");
        assert_eq!(add.json["interfaces"][0]["sandbox"], netns_path(&w.pod));
        let mut chk = c.clone();
        chk["prevResult"] = add.json.clone();
        assert!(w.call(&ours("dummy"), "CHECK", "dummy0", &chk).ok);
    } else {
        expect_err(&add, 999, "dummy is not supported by this kernel");
        assert!(link_names(&w.pod).is_empty());
        assert!(w.reservations("dnet").is_empty());
    }
    for _ in 0..2 {
        let r = w.call(&ours("dummy"), "DEL", "dummy0", &c);
        assert!(r.ok, "{:?}", r.json);
    }
    assert!(link_names(&w.pod).is_empty());
    assert!(w.reservations("dnet").is_empty());
    let r = w.call_in(
        &ours("dummy"),
        "DEL",
        "dummy0",
        "/run/netns/lp-gone-ns",
        "",
        &c,
    );
    assert!(r.ok, "{:?}", r.json);
}

fn tap_conf(w: &World, extra: Value) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "tapnet", "type": "tap"});
    for (k, v) in extra.as_object().expect("object") {
        c[k] = if k == "ipam" {
            w.ipam("10.96.0.0/24")
        } else {
            v.clone()
        };
    }
    c
}

#[test]
fn tap_is_created_in_the_pod_with_go_flags() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    sh(&[
        "ip",
        "-n",
        w.pod.name(),
        "link",
        "add",
        "tbr0",
        "type",
        "bridge",
    ]);
    // Owner and group (Go's netlink path): vnet_hdr; multi-queue implies no pi.
    let c = tap_conf(
        &w,
        json!({"multiQueue": true, "owner": 1234, "group": 4321, "mtu": 1400,
               "mac": "02:00:00:00:aa:01", "bridge": "tbr0", "ipam": true,
               "dns": {"nameservers": ["10.96.0.53"]}}),
    );
    let add = w.call(&ours("tap"), "ADD", "tap0", &c);
    assert!(add.ok, "{:?}", add.json);
    let l = w.pod_link("tap0");
    let info = &l["linkinfo"]["info_data"];
    assert_eq!(l["linkinfo"]["info_kind"], "tun", "{l}");
    assert_eq!(info["type"], "tap", "{l}");
    assert_eq!(info["multi_queue"], true, "{l}");
    assert_eq!(info["vnet_hdr"], true, "{l}");
    assert_eq!(info["pi"], false, "{l}");
    assert_eq!(info["persist"], true, "{l}");
    assert_eq!(info["user"].to_string().trim_matches('"'), "1234", "{l}");
    assert_eq!(info["group"].to_string().trim_matches('"'), "4321", "{l}");
    assert_eq!(l["mtu"], 1400);
    assert_eq!(l["address"], "02:00:00:00:aa:01");
    assert_eq!(l["master"], "tbr0");
    assert!(
        l["flags"].as_array().expect("flags").contains(&json!("UP")),
        "{l}"
    );
    assert_eq!(add.json["interfaces"][0]["mac"], "02:00:00:00:aa:01");
    assert_eq!(add.json["ips"][0]["interface"], 0);
    assert_eq!(add.json["dns"]["nameservers"][0], "10.96.0.53");
    let addr = ip(&w.pod, &["addr", "show", "tap0"]);
    assert_eq!(
        addr[0]["addr_info"][0]["local"],
        add.json["ips"][0]["address"]
            .as_str()
            .expect("ip")
            .split('/')
            .next()
            .expect("ip")
    );
    assert_eq!(w.reservations("tapnet").len(), 1);
    let mut chk = c.clone();
    chk["prevResult"] = add.json.clone();
    let r = w.call(&ours("tap"), "CHECK", "tap0", &chk);
    assert!(r.ok, "{:?}", r.json);
    // GC (1.1.0) goes to IPAM: an attachment not in the valid list loses
    // its address; the device stays until DEL.
    let mut gc = c.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    let r = w.call(&ours("tap"), "GC", "", &gc);
    assert!(r.ok, "{:?}", r.json);
    assert!(w.reservations("tapnet").is_empty());
    for _ in 0..2 {
        let r = w.call(&ours("tap"), "DEL", "tap0", &c);
        assert!(r.ok, "{:?}", r.json);
    }
    assert_eq!(link_names(&w.pod), ["tbr0"]);
    assert!(w.reservations("tapnet").is_empty());

    // No owner (Go's `ip tuntap` path): neither vnet_hdr nor pi; L2 only.
    let c = tap_conf(&w, json!({"group": 100}));
    let add = w.call(&ours("tap"), "ADD", "tap1", &c);
    assert!(add.ok, "{:?}", add.json);
    assert!(add.json.get("ips").is_none(), "{:?}", add.json);
    let l = w.pod_link("tap1");
    let info = &l["linkinfo"]["info_data"];
    assert_eq!(
        (
            info["vnet_hdr"].clone(),
            info["pi"].clone(),
            info["multi_queue"].clone()
        ),
        (json!(false), json!(false), json!(false)),
        "{l}"
    );
    assert!(info.get("user").is_none(), "{l}");
    assert!(w.call(&ours("tap"), "DEL", "tap1", &c).ok);
    assert_eq!(link_names(&w.pod), ["tbr0"]);
    let r = w.call_in(&ours("tap"), "DEL", "tap1", "/run/netns/lp-gone-ns", "", &c);
    assert!(r.ok, "{:?}", r.json);
}

#[test]
fn tap_bad_input_leaves_nothing() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    let cases = [
        // Go's text; code 7 (Go's 999) as every wrong type (#31.5).
        (json!({"owner": -1}), 7, "NetConf.owner"),
        (json!({"group": 4294967296u64}), 7, "NetConf.group"),
        (json!({"mac": "zz"}), 999, "invalid args zz for MAC addr"),
        (
            json!({"bridge": "nosuchbr"}),
            999,
            "failed to get bridge nosuchbr",
        ),
    ];
    for (extra, code, msg) in cases {
        let c = tap_conf(&w, extra.clone());
        expect_err(&w.call(&ours("tap"), "ADD", "tap0", &c), code, msg);
        assert!(
            link_names(&w.pod).is_empty(),
            "{extra}: {:?}",
            link_names(&w.pod)
        );
        assert!(w.reservations("tapnet").is_empty(), "{extra}");
    }
    // selinuxContext (Go's docs spell it selinuxcontext): where SELinux is
    // off, as here, the exec context cannot be set and ADD says so.
    let c = tap_conf(
        &w,
        json!({"selinuxcontext": "system_u:system_r:svirt_t:s0"}),
    );
    let r = w.call(&ours("tap"), "ADD", "tap0", &c);
    if Path::new("/sys/fs/selinux/enforce").exists() {
        assert!(r.ok, "{:?}", r.json);
        assert!(w.call(&ours("tap"), "DEL", "tap0", &c).ok);
    } else {
        expect_err(&r, 999, "set SELinux exec context");
        assert!(r.msg().contains("is SELinux enabled"), "{}", r.msg());
    }
    assert!(link_names(&w.pod).is_empty());
    // The MAC precedence: runtimeConfig over CNI_ARGS over the config.
    let mut c = tap_conf(&w, json!({"mac": "02:00:00:00:aa:01"}));
    c["runtimeConfig"] = json!({"mac": "02:00:00:00:aa:03"});
    let r = w.call_in(
        &ours("tap"),
        "ADD",
        "tap0",
        &netns_path(&w.pod),
        "MAC=02:00:00:00:aa:02",
        &c,
    );
    assert!(r.ok, "{:?}", r.json);
    assert_eq!(w.pod_link("tap0")["address"], "02:00:00:00:aa:03");
    assert!(w.call(&ours("tap"), "DEL", "tap0", &c).ok);
}

#[test]
fn passthru_passes_the_previous_result_in_every_version() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let mut c = json!({"cniVersion": v, "name": "aux", "type": "passthru"});
        // Go prints `"dns":{}` (omitempty does not omit a struct); our
        // encoder omits an empty dns from 1.0.0 on: both are empty results.
        let empty = |r: &Reply| {
            r.ok && r.json["cniVersion"] == v
                && r.json
                    .as_object()
                    .is_some_and(|o| o.keys().all(|k| k == "cniVersion" || k == "dns"))
                && r.json.get("dns").is_none_or(|d| d == &json!({}))
        };
        let r = w.call(&ours("passthru"), "ADD", "net1", &c);
        assert!(empty(&r), "{v}: {:?}", r.json);
        c["prevResult"] =
            json!({"cniVersion": v, "ips": [{"address": "10.1.0.2/24", "version": "4"}]});
        let r = w.call(&ours("passthru"), "ADD", "net1", &c);
        // Passed through (multus's passthru prints an empty result; it is
        // first in its chain, where the two agree).
        assert!(r.ok, "{v}: {:?}", r.json);
        assert_eq!(r.json["ips"][0]["address"], "10.1.0.2/24", "{v}");
        assert!(w.call(&ours("passthru"), "DEL", "net1", &c).ok);
        if v != "0.3.0" && v != "0.3.1" {
            assert!(w.call(&ours("passthru"), "CHECK", "net1", &c).ok, "{v}");
        }
    }
    let c = json!({"cniVersion": "1.1.0", "name": "aux", "type": "passthru"});
    assert!(w.call(&ours("passthru"), "STATUS", "net1", &c).ok);
    let gc = json!({"cniVersion": "1.1.0", "name": "aux", "type": "passthru",
        "cni.dev/valid-attachments": []});
    assert!(w.call(&ours("passthru"), "GC", "net1", &gc).ok);
    let old = json!({"cniVersion": "0.2.0", "name": "aux", "type": "passthru"});
    expect_err(&w.call(&ours("passthru"), "ADD", "net1", &old), 1, "");
    assert!(link_names(&w.pod).is_empty());
}

#[cfg(feature = "multus")]
#[test]
fn multus_auxiliary_chain_runs_passthru_then_tuning() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("host-local")]) {
        return;
    }
    let w = World::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let netd = dir.path().join("net.d");
    std::fs::create_dir_all(netd.join("vendor-cni-chain")).expect("mkdir");
    let bridge = bridge_name();
    let cluster = netd.join("10-cluster.conflist");
    std::fs::write(
        &cluster,
        json!({"cniVersion": "1.0.0", "name": "cluster", "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": true,
             "ipam": w.ipam("10.97.0.0/24")}]})
        .to_string(),
    )
    .expect("write cluster");
    // The chain's folder: plugins appended after passthru, in file order.
    std::fs::write(
        netd.join("vendor-cni-chain/10-tuning.conf"),
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"},
               "dataDir": dir.path().join("tuning")})
        .to_string(),
    )
    .expect("write tuning");
    std::fs::write(netd.join("vendor-cni-chain/README"), "not a .conf").expect("write");
    let bins = CniPath::new(&[
        ("multus", ours("multus").as_path()),
        ("passthru", ours("passthru").as_path()),
        ("tuning", ours("tuning").as_path()),
        ("host-local", ours("host-local").as_path()),
        ("bridge", go("bridge").as_path()),
    ]);
    let conf = json!({"cniVersion": "1.0.0", "name": "multus-net", "type": "multus",
        "clusterNetwork": cluster, "auxiliaryCNIChainName": "vendor-cni-chain",
        "binDir": bins.path(), "cniDir": dir.path().join("cache")});
    let call = |command: &str| {
        run(
            &w.node,
            &Call {
                plugin: &bins.path().join("multus"),
                cni_path: bins.path(),
                command,
                container_id: "ctr-aux",
                netns: &netns_path(&w.pod),
                ifname: "eth0",
                args: "",
            },
            &conf,
        )
    };
    assert_eq!(sysctl(&w.pod, "net.ipv4.conf.all.arp_filter"), "0");
    let add = call("ADD");
    assert!(add.ok, "{:?} {}", add.json, add.stderr);
    // The result is the cluster network's; the aux chain adds nothing.
    let names: Vec<&str> = add.json["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert!(names.contains(&"eth0"), "{:?}", add.json);
    assert!(!names.contains(&"net1"), "{:?}", add.json);
    // tuning ran in the pod, on the interface it names.
    assert_eq!(sysctl(&w.pod, "net.ipv4.conf.eth0.arp_filter"), "1");
    // No CHECK here: our multus CHECKs every cached delegate, the aux
    // chain included, and tuning's CHECK needs the link `net1` (Go's thin
    // multus CHECKs only the delegates inlined in its config).
    // DEL runs the aux chain too (from the cache): tuning restores.
    let del = call("DEL");
    assert!(del.ok, "{:?} {}", del.json, del.stderr);
    assert!(link_names(&w.pod).is_empty(), "{:?}", link_names(&w.pod));
    assert!(w.reservations("cluster").is_empty());
    assert!(call("DEL").ok);
    // A chain that does not load is skipped (logged), as multus-cni does:
    // ADD succeeds and tuning does not run.
    std::fs::write(netd.join("vendor-cni-chain/05-broken.conf"), "{not json").expect("write");
    let add = call("ADD");
    assert!(add.ok, "{:?} {}", add.json, add.stderr);
    assert_eq!(sysctl(&w.pod, "net.ipv4.conf.eth0.arp_filter"), "0");
    assert!(call("DEL").ok);
    assert!(link_names(&w.pod).is_empty(), "{:?}", link_names(&w.pod));
    sh_ok(&["ip", "-n", w.node.name(), "link", "del", &bridge]);
}

/// The attributes of the first `RTM_NEWLINK` request `plugin` sends (seen
/// with `strace -e write=all`), flattened as (path of attribute types,
/// payload), normalised for what legitimately differs between two runs or
/// two netlink libraries: the random temporary name, the namespace fd
/// number, the attribute order, the NUL after `IFLA_INFO_KIND` (Go's
/// netlink omits it, the kernel accepts both) and an `IFLA_TXQLEN` of 0
/// (Go v1.1.1's netlink library sent it; v1.9's does not).
fn newlink_attrs(w: &World, plugin: &Path, ifname: &str, conf: &Value) -> Vec<(Vec<u16>, Vec<u8>)> {
    let trace = w.data.path().join(format!("strace-{}", hex6()));
    let wrapper = w.data.path().join(format!("traced-{}", hex6()));
    let script = format!(
        "#!/bin/sh\nexec strace -f -o {} -s 0 -e trace=sendto -e write=all {}\n",
        trace.display(),
        plugin.display()
    );
    // Written by a child process: a file this multi-threaded test process
    // had open for writing could leak into a child another test thread
    // forks meanwhile, and exec'ing it would then fail with ETXTBSY.
    sh(&[
        "sh",
        "-c",
        "printf %s \"$1\" >\"$2\" && chmod 755 \"$2\"",
        "sh",
        &script,
        &wrapper.display().to_string(),
    ]);
    let r = w.call_in(&wrapper, "ADD", ifname, &netns_path(&w.pod), "", conf);
    let text = std::fs::read_to_string(&trace).expect("strace output");

    // Every sendto's dump, then the first RTM_NEWLINK (16) with
    // NLM_F_CREATE | NLM_F_EXCL (0x600; linux/rtnetlink.h, netlink.h).
    let mut sent: Vec<Vec<u8>> = Vec::new();
    for l in text.lines() {
        if l.contains("sendto(") {
            sent.push(Vec::new());
        } else if let (Some(buf), true) = (sent.last_mut(), l.starts_with(" | ")) {
            let hex = l.get(10..58).unwrap_or_else(|| &l[10..]);
            buf.extend(
                hex.split_whitespace()
                    .map(|b| u8::from_str_radix(b, 16).expect("hex byte")),
            );
        }
    }
    let bytes = sent
        .into_iter()
        .find(|m| {
            m.len() > 32
                && u16::from_ne_bytes([m[4], m[5]]) == 16
                && u16::from_ne_bytes([m[6], m[7]]) & 0x600 == 0x600
        })
        .unwrap_or_else(|| panic!("no RTM_NEWLINK request in {text}\n{r:?}"));
    assert!(bytes.len() > 32, "{text}");
    let mut out = Vec::new();
    walk(&bytes[32..], &mut Vec::new(), &mut out);
    out.retain(|(path, payload)| !(path == &[13] && payload == &[0, 0, 0, 0])); // IFLA_TXQLEN 0
    for (path, payload) in &mut out {
        match path.as_slice() {
            [3] | [28] => payload.clear(), // IFLA_IFNAME, IFLA_NET_NS_FD
            [18, 1] if payload.last() == Some(&0) => {
                payload.pop(); // IFLA_LINKINFO / IFLA_INFO_KIND
            }
            _ => {}
        }
    }
    out.sort();
    out
}

/// Flattens nested attributes (IFLA_LINKINFO and IFLA_INFO_DATA).
fn walk(mut buf: &[u8], path: &mut Vec<u16>, out: &mut Vec<(Vec<u16>, Vec<u8>)>) {
    while buf.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & 0x3fff;
        let payload = &buf[4..len];
        path.push(kind);
        // linux/if_link.h: IFLA_LINKINFO = 18, IFLA_INFO_DATA = 2.
        if path.as_slice() == [18] || path.as_slice() == [18, 2] {
            walk(payload, path, out);
        } else {
            out.push((path.clone(), payload.to_vec()));
        }
        path.pop();
        buf = &buf[((len + 3) & !3).min(buf.len())..];
    }
}

#[test]
fn vlan_and_vrf_requests_match_go_on_the_wire() {
    if !premise::require_all(&[
        Need::Root,
        Need::GoPlugin("host-local"),
        Need::That(
            Path::new("/usr/bin/strace").exists(),
            "strace (Debian package strace) to see Go's netlink requests",
        ),
    ]) {
        return;
    }
    let w = World::new();
    let c = vlan_conf(&w, json!({"mtu": 1400}));
    let mine = newlink_attrs(&w, &ours("vlan"), "eth1", &c);
    let theirs = newlink_attrs(&w, &go("vlan"), "eth1", &c);
    assert_eq!(mine, theirs);
    // IFLA_INFO_DATA / IFLA_VLAN_ID = 42, and IFLA_MTU 1400 are there.
    assert!(
        mine.contains(&(vec![18, 2, 1], 42u16.to_ne_bytes().to_vec())),
        "{mine:?}"
    );
    assert!(
        mine.contains(&(vec![4], 1400u32.to_ne_bytes().to_vec())),
        "{mine:?}"
    );
    sh(&[
        "ip",
        "-n",
        w.pod.name(),
        "link",
        "add",
        "eth1",
        "type",
        "veth",
        "peer",
        "name",
        "eth1p",
    ]);
    let c = vrf_conf(json!({"table": 1001}));
    let mine = newlink_attrs(&w, &ours("vrf"), "eth1", &c);
    let theirs = newlink_attrs(&w, &go("vrf"), "eth1", &c);
    assert_eq!(mine, theirs);
    // IFLA_VRF_TABLE = 1001.
    assert!(
        mine.contains(&(vec![18, 2, 1], 1001u32.to_ne_bytes().to_vec())),
        "{mine:?}"
    );
}
