//! sbr: differential runs against Go's sbr on twin namespaces, table-ID
//! mode, the VRF error path, bad input and undo.

use cni_testkit::premise::{self, Need};
use serde_json::{json, Value};

use super::{normalized, plugin_cmd, reply, run};
use crate::nodenet::Ns;

const OURS: &str = env!("CARGO_BIN_EXE_sbr");
const GO: &str = "/usr/lib/cni/sbr";

/// A pod namespace like Go's test fixture: `net1` (a veth whose peer stays
/// in the namespace) with 192.168.1.209/24, fd00::5/64 and a route
/// 192.168.2.0/24 via 192.168.1.2; `eth0` with 10.0.0.2/24 and the
/// default route. MACs are fixed so that twin namespaces have the same
/// link-local addresses.
fn pod(prefix: &str) -> Ns {
    let ns = Ns::new(prefix);
    ns.ip(&[
        "link",
        "add",
        "net1",
        "address",
        "02:00:00:00:01:01",
        "type",
        "veth",
        "peer",
        "name",
        "peer1",
        "address",
        "02:00:00:00:01:02",
    ]);
    ns.ip(&[
        "link",
        "add",
        "eth0",
        "address",
        "02:00:00:00:02:01",
        "type",
        "veth",
        "peer",
        "name",
        "peer0",
        "address",
        "02:00:00:00:02:02",
    ]);
    for l in ["net1", "peer1", "eth0", "peer0"] {
        ns.ip(&["link", "set", l, "up"]);
    }
    ns.ip(&["addr", "add", "192.168.1.209/24", "dev", "net1"]);
    ns.ip(&["addr", "add", "192.168.101.209/24", "dev", "net1"]);
    ns.ip(&["addr", "add", "fd00::5/64", "dev", "net1", "nodad"]);
    ns.ip(&["addr", "add", "10.0.0.2/24", "dev", "eth0"]);
    ns.ip(&["route", "add", "192.168.2.0/24", "via", "192.168.1.2"]);
    ns.ip(&["route", "add", "default", "via", "10.0.0.1"]);
    // The kernel adds the IPv6 link-local addresses and routes when the
    // links come up (after DAD): wait for them, so that twin namespaces
    // compare equal and the routes to copy exist.
    let settled = crate::nodenet::wait_until(std::time::Duration::from_secs(10), || {
        let routes = ns.ip(&["-6", "route", "show", "table", "all"]);
        ns.ip(&["-6", "addr", "show", "tentative"])
            .trim()
            .is_empty()
            && ["net1", "peer1", "eth0", "peer0"].iter().all(|l| {
                routes.contains(&format!("fe80::/64 dev {l} "))
                    && routes.contains(&format!("ff00::/8 dev {l} "))
            })
            && routes.contains("local fd00::5 dev net1")
    });
    assert!(settled, "IPv6 link-local setup in {}", ns.name);
    ns
}

fn state(ns: &Ns) -> Value {
    let j = |args: &[&str]| -> Value { serde_json::from_str(&ns.ip(args)).expect("ip -j") };
    // Routes sorted: the kernel lists same-prefix routes of different
    // devices (the fe80::/64 of each link) in the order IPv6 autoconf
    // finished on them, which is timing, not the plugin's doing.
    let sorted = |v: Value| -> Value {
        let mut rows: Vec<Value> = v.as_array().cloned().unwrap_or_default();
        rows.sort_by_key(|r| r.to_string());
        Value::Array(rows)
    };
    json!({
        "rules4": j(&["-j", "-4", "rule"]),
        "rules6": j(&["-j", "-6", "rule"]),
        "routes4": sorted(j(&["-j", "-4", "route", "show", "table", "all"])),
        "routes6": sorted(j(&["-j", "-6", "route", "show", "table", "all"])),
    })
}

fn conf(version: &str, extra: Value, ips: Value) -> String {
    let mut c = json!({
        "cniVersion": version,
        "name": "sbrnet",
        "type": "sbr",
        "prevResult": {
            "cniVersion": version,
            "interfaces": [{"name": "net1", "sandbox": "/run/netns/pod"}],
            "ips": ips,
        }
    });
    if let (Some(o), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    c.to_string()
}

fn sbr(bin: &str, cmd: &str, ns: &str, stdin: &str) -> Result<Value, Value> {
    reply(&run(plugin_cmd(bin, cmd, ns, "net1", "cid"), stdin))
}

/// Go's and our ADD and DEL on twin namespaces, compared.
fn differential(version: &str, ips: Value, before: impl Fn(&Ns)) {
    let (go, us) = (pod("sbrgo"), pod("sbrrs"));
    before(&go);
    before(&us);
    let stdin = conf(version, json!({}), ips);
    let rgo = sbr(GO, "ADD", &go.path(), &stdin).expect("Go ADD");
    let rus = sbr(OURS, "ADD", &us.path(), &stdin).expect("our ADD");
    assert_eq!(normalized(rgo), normalized(rus), "result JSON");
    let after_add = state(&us);
    assert_eq!(state(&go), after_add, "rules and routes after ADD");

    let del = conf("1.0.0", json!({}), json!([]));
    sbr(GO, "DEL", &go.path(), &del).expect("Go DEL");
    sbr(OURS, "DEL", &us.path(), &del).expect("our DEL");
    let (sgo, sus) = (state(&go), state(&us));
    assert_eq!(sgo["rules4"], sus["rules4"], "rules after DEL");
    assert_eq!(sgo["rules6"], sus["rules6"], "rules after DEL");
    // Go leaves the tables' routes; ours removes those of the tables whose
    // rules it deleted (a rule for an address not on the interface stays,
    // in both).
    let ruled: Vec<String> = ["rules4", "rules6"]
        .iter()
        .flat_map(|f| sus[*f].as_array().unwrap().iter())
        .filter_map(|r| r["table"].as_str().map(str::to_owned))
        .collect();
    for fam in ["routes4", "routes6"] {
        let created: Vec<&Value> = sus[fam]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["table"]
                    .as_str()
                    .is_some_and(|t| t.parse::<u32>().is_ok_and(|t| (100..200).contains(&t)))
            })
            .filter(|r| r["dev"] == "net1")
            .filter(|r| !ruled.iter().any(|t| r["table"] == t.as_str()))
            .collect();
        assert!(created.is_empty(), "our DEL left {created:?}");
    }
    // DEL again is fine.
    sbr(OURS, "DEL", &us.path(), &del).expect("second DEL");
}

#[test]
fn sbr_matches_go_dual_stack() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("sbr")]) {
        return;
    }
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let mut ips = json!([
            {"address": "192.168.1.209/24", "gateway": "192.168.1.1", "interface": 0},
            {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0},
        ]);
        if version != "1.0.0" {
            ips[0]["version"] = json!("4");
            ips[1]["version"] = json!("6");
        }
        differential(version, ips, |_| {});
    }
}

#[test]
fn sbr_matches_go_multiple_ips_and_busy_tables() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("sbr")]) {
        return;
    }
    // Tables 100 and 102 are taken: the first IP gets 101, the next 103.
    differential(
        "1.0.0",
        json!([
            {"address": "192.168.1.209/24", "gateway": "192.168.1.1", "interface": 0},
            {"address": "192.168.101.209/24", "gateway": "192.168.101.1", "interface": 1},
            {"address": "10.0.0.2/24"},
        ]),
        |ns| {
            ns.ip(&["rule", "add", "from", "10.9.9.9", "lookup", "100"]);
            ns.ip(&["rule", "add", "from", "10.9.9.8", "lookup", "102"]);
        },
    );
}

#[test]
fn sbr_table_mode_adds_rules_only() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("sbr")]) {
        return;
    }
    let ns = pod("sbrtbl");
    let before = state(&ns);
    let ips = json!([
        {"address": "192.168.1.209/24", "gateway": "192.168.1.1", "interface": 0},
        {"address": "192.168.101.209/24", "interface": 0},
    ]);
    let stdin = conf("1.1.0", json!({"table": 5000}), ips.clone());
    sbr(OURS, "ADD", &ns.path(), &stdin).expect("ADD");
    let after = state(&ns);
    assert_eq!(before["routes4"], after["routes4"], "routes untouched");
    let to5000: Vec<&str> = after["rules4"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["table"] == "5000")
        .map(|r| r["src"].as_str().unwrap())
        .collect();
    assert_eq!(to5000, ["192.168.101.209", "192.168.1.209"]);
    sbr(OURS, "CHECK", &ns.path(), &stdin).expect("CHECK");
    sbr(OURS, "DEL", &ns.path(), &stdin).expect("DEL");
    let err = sbr(OURS, "CHECK", &ns.path(), &stdin).expect_err("CHECK after DEL");
    assert!(
        err["msg"].as_str().unwrap().contains("no rule from"),
        "{err}"
    );
    assert_eq!(before, state(&ns), "DEL restores the rules");

    // A table used by another interface's rule is refused, naming the field.
    ns.ip(&["rule", "add", "from", "10.0.0.2", "lookup", "5000"]);
    let before = state(&ns);
    let err = sbr(OURS, "ADD", &ns.path(), &stdin).expect_err("table in use");
    assert_eq!(err["code"], 7, "{err}");
    assert!(err["msg"].as_str().unwrap().starts_with("table:"), "{err}");
    assert_eq!(before, state(&ns), "a failed ADD leaves nothing");
}

#[test]
fn sbr_vrfname_error_path() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("sbr")]) {
        return;
    }
    let ns = pod("sbrvrf");
    let vrf = ns.exec(&[
        "ip", "link", "add", "vrf-blue", "type", "vrf", "table", "1001",
    ]);
    let stdin = conf(
        "1.0.0",
        json!({"vrfname": "vrf-blue"}),
        json!([{"address": "192.168.1.209/24"}]),
    );
    let before = state(&ns);
    if vrf.status.success() {
        // A kernel with VRF: the rule looks up the VRF's table.
        sbr(OURS, "ADD", &ns.path(), &stdin).expect("ADD");
        let after = state(&ns);
        assert!(after["rules4"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["table"] == "1001" && r["src"] == "192.168.1.209"));
        sbr(OURS, "DEL", &ns.path(), &stdin).expect("DEL");
        return;
    }
    // No vrf link type here: the device cannot exist, the error names it.
    let err = sbr(OURS, "ADD", &ns.path(), &stdin).expect_err("no VRF");
    assert_eq!(err["code"], 7, "{err}");
    let msg = err["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("vrfname:") && msg.contains("vrf-blue"),
        "{msg}"
    );
    assert_eq!(before, state(&ns));
}

#[test]
fn sbr_bad_input_and_undo() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("sbr")]) {
        return;
    }
    let ns = pod("sbrbad");
    let before = state(&ns);
    // No prevResult: Go's message, code 7.
    let bare = json!({"cniVersion": "1.0.0", "name": "n", "type": "sbr"}).to_string();
    let err = sbr(OURS, "ADD", &ns.path(), &bare).expect_err("no prevResult");
    assert_eq!(err["code"], 7);
    assert!(err["msg"].as_str().unwrap().contains("prevResult"), "{err}");
    let go = sbr(GO, "ADD", &ns.path(), &bare).expect_err("Go: no prevResult");
    assert!(
        err["msg"]
            .as_str()
            .unwrap()
            .starts_with(go["msg"].as_str().unwrap()),
        "{go}"
    );

    // The gateway is unreachable: the default route fails after the rule
    // was added; the rule goes again.
    let stdin = conf(
        "1.0.0",
        json!({}),
        json!([{"address": "192.168.1.209/24", "gateway": "10.77.0.1"}]),
    );
    let err = sbr(OURS, "ADD", &ns.path(), &stdin).expect_err("unreachable gateway");
    assert!(err["msg"].as_str().unwrap().contains("10.77.0.1"), "{err}");
    assert_eq!(before, state(&ns), "a failed ADD leaves nothing");

    // DEL: idempotent, also when the interface or the namespace is gone,
    // and it creates no file where the namespace was (Go's lock does).
    sbr(OURS, "DEL", &ns.path(), &stdin).expect("DEL with nothing to do");
    ns.ip(&["link", "del", "net1"]);
    sbr(OURS, "DEL", &ns.path(), &stdin).expect("DEL without the interface");
    let gone = format!("/run/netns/sbr-gone-{}", crate::nodenet::suffix());
    sbr(OURS, "DEL", &gone, &stdin).expect("DEL with the namespace gone");
    assert!(!std::path::Path::new(&gone).exists());
}

/// Go's unreleased `gateways` and `addSourceHints` (upstream test vectors).
#[test]
fn sbr_static_gateways_and_source_hints() {
    if !premise::require_all(&[Need::Root, Need::GoPlugin("sbr")]) {
        return;
    }
    let ns = pod("sbrgw");
    let ips = json!([
        {"address": "192.168.1.209/24", "gateway": "192.168.1.1", "interface": 0},
        {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0},
    ]);
    let stdin = conf(
        "1.0.0",
        json!({"gateways": ["192.168.1.254", "fd00::fe"], "addSourceHints": true}),
        ips,
    );
    sbr(OURS, "ADD", &ns.path(), &stdin).expect("ADD");
    let routes = |fam: &str, table: &str| -> Vec<Value> {
        serde_json::from_str::<Value>(&ns.ip(&["-j", fam, "route", "show", "table", table]))
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["dev"] == "net1")
            .cloned()
            .collect()
    };
    let t100 = routes("-4", "100");
    assert!(
        t100.iter()
            .any(|r| r["dst"] == "default" && r["gateway"] == "192.168.1.254"),
        "{t100:?}"
    );
    assert!(
        t100.iter().any(|r| r["dst"] == "192.168.1.0/24"),
        "{t100:?}"
    );
    let t101 = routes("-6", "101");
    assert!(
        t101.iter()
            .any(|r| r["dst"] == "default" && r["gateway"] == "fd00::fe"),
        "{t101:?}"
    );
    // Main keeps the link routes (with the source hint), loses the others.
    let main = routes("-4", "main");
    assert!(
        main.iter().any(|r| r["dst"] == "192.168.1.0/24"
            && r["prefsrc"] == "192.168.1.209"
            && r["scope"] == "link"),
        "{main:?}"
    );
    assert!(
        !main.iter().any(|r| r["dst"] == "192.168.2.0/24"),
        "{main:?}"
    );
    sbr(OURS, "DEL", &ns.path(), &stdin).expect("DEL");
    assert!(routes("-4", "100").is_empty() && routes("-6", "101").is_empty());
}
