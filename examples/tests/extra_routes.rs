//! The custom plugin example (`src/bin/extra-routes.rs`) chained after
//! bridge + host-local and run by our `cnitool`, inside a fresh node
//! namespace; the routes are checked in the pod with `ip -j route`.

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use cni_netns::OwnedNetns;
use cni_testkit::premise::{require_all, Need};

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_extra-routes"))
        .parent()
        .expect("bin dir")
        .to_path_buf()
}

fn pod_routes(pod: &OwnedNetns) -> Vec<serde_json::Value> {
    let out = Command::new("ip")
        .args(["-n", pod.name(), "-j", "route", "show"])
        .output()
        .expect("ip route");
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn has_route(routes: &[serde_json::Value], dst: &str, gw: Option<&str>) -> bool {
    routes
        .iter()
        .any(|r| r["dst"] == dst && r["dev"] == "eth0" && gw.is_none_or(|g| r["gateway"] == g))
}

#[test]
fn extra_routes_under_cnitool() {
    // cnitool is another package's binary: `cargo test -p cni-examples`
    // alone does not build it (the workspace's test build does).
    let cnitool = bin_dir().join("cnitool");
    let cnitool_built = format!(
        "{} (cargo build -p cni-exec --bin cnitool)",
        cnitool.display()
    );
    if !require_all(&[
        Need::Root,
        Need::That(cnitool.exists(), &cnitool_built),
        Need::GoPlugin("bridge"),
        Need::GoPlugin("host-local"),
    ]) {
        return;
    }
    let node = OwnedNetns::new("cniex-node").unwrap();
    let pod = OwnedNetns::new("cniex-pod").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let confdir = tmp.path().join("net.d");
    std::fs::create_dir_all(&confdir).unwrap();
    let conflist = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "extra",
        "plugins": [
            {"type": "bridge", "bridge": format!("ex{}", &node.name()[node.name().len() - 6..]),
             "isGateway": true,
             "ipam": {"type": "host-local", "dataDir": tmp.path().join("ipam"),
                      "ranges": [[{"subnet": "10.77.0.0/24"}]]}},
            {"type": "extra-routes",
             "routes": [{"dst": "192.0.2.0/24", "gw": "10.77.0.1"}, {"dst": "198.51.100.0/24"}]}
        ]
    });
    std::fs::write(confdir.join("10-extra.conflist"), conflist.to_string()).unwrap();
    // Our plugins first; the Go reference supplies anything not built here.
    let cni_path = format!("{}:/usr/lib/cni", bin_dir().display());
    let netns_path = format!("/run/netns/{}", pod.name());
    let cnitool = |cmd: &str| {
        Command::new("ip")
            .args(["netns", "exec", node.name()])
            .arg(&cnitool)
            .args([cmd, "extra", netns_path.as_str()])
            .env("NETCONFPATH", &confdir)
            .env("CNI_PATH", &cni_path)
            .env("CNI_CACHEDIR", tmp.path().join("cache"))
            .env("CNI_CONTAINERID", "extra-routes-test")
            .output()
            .expect("run cnitool")
    };

    let add = cnitool("add");
    assert!(
        add.status.success(),
        "ADD: {}",
        String::from_utf8_lossy(&add.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&add.stdout).unwrap();
    let dsts: Vec<&str> = result["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["dst"].as_str())
        .collect();
    assert!(
        dsts.contains(&"192.0.2.0/24") && dsts.contains(&"198.51.100.0/24"),
        "{result}"
    );

    let routes = pod_routes(&pod);
    assert!(
        has_route(&routes, "192.0.2.0/24", Some("10.77.0.1")),
        "{routes:?}"
    );
    assert!(has_route(&routes, "198.51.100.0/24", None), "{routes:?}");

    let check = cnitool("check");
    assert!(
        check.status.success(),
        "CHECK: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    for _ in 0..2 {
        let del = cnitool("del");
        assert!(
            del.status.success(),
            "DEL: {}",
            String::from_utf8_lossy(&del.stderr)
        );
    }
    let routes = pod_routes(&pod);
    assert!(!has_route(&routes, "192.0.2.0/24", None), "{routes:?}");
}
