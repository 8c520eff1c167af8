//! flannel delegating to macvlan (`"delegate": {"type": "macvlan",
//! "master": ...}`) attaches a pod end to end. With a `flannel` binary in
//! this package the whole chain runs as processes (flannel, then our
//! macvlan found on `CNI_PATH`); without one (flannel not merged yet) the
//! delegate config is rendered by `cni_plugins::flannel` and handed to our
//! macvlan binary, which is what the flannel binary does. `CNI_PATH` holds
//! only this package's binaries (flannel, macvlan, host-local) once they
//! are all built here.

use std::path::Path;

use crate::ptp_common::*;
use cni_testkit::premise;
use serde_json::{json, Value};

#[test]
fn flannel_with_a_macvlan_delegate_attaches_a_pod() {
    if !premise::require_root() {
        return;
    }
    let mut node = Node::new();
    let subnet_env = node.data.path().join("subnet.env");
    std::fs::write(
        &subnet_env,
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    )
    .unwrap();
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "cbr0",
        "type": "flannel",
        "subnetFile": subnet_env,
        "dataDir": node.data.path().join("flannel"),
        "ipam": {"type": "host-local", "dataDir": node.data.path().join("ipam")},
        "delegate": {"type": "macvlan", "master": "uplink0"},
    });
    let pod = node.pod();
    let mut env = CniEnv::new(&pod);
    let ours = plugin_path(Impl::Ours, "macvlan");
    let our_dir = ours.parent().unwrap().display().to_string();
    // Ours only once our host-local is built here; Go's IPAM before that.
    env.cni_path = match option_env!("CARGO_BIN_EXE_host-local") {
        Some(_) => our_dir,
        None => format!("{our_dir}:{GO_DIR}"),
    };
    eprintln!("CNI_PATH={}", env.cni_path);

    let (bin, stdin): (std::path::PathBuf, Value) = match option_env!("CARGO_BIN_EXE_flannel") {
        Some(flannel) => (Path::new(flannel).to_path_buf(), conf.clone()),
        None => {
            eprintln!("no flannel binary in this package yet: rendering its delegate in-process");
            let fc: cni_plugins::flannel::FlannelConf =
                serde_json::from_value(conf.clone()).unwrap();
            let se = cni_plugins::flannel::subnet_env::SubnetEnv::load(&subnet_env).unwrap();
            (
                ours.clone(),
                cni_plugins::flannel::delegate::render(&fc, &se).unwrap(),
            )
        }
    };
    let r = node.exec(&bin, "ADD", &env, &stdin).expect_ok("ADD").json();
    assert_eq!(r["ips"][0]["address"], "10.244.1.2/24", "{r}");
    let pod_ns = ns_name(&pod);
    let link = ip_json_in(pod_ns, &["-d", "link", "show", "eth0"]);
    assert_eq!(link[0]["linkinfo"]["info_kind"], "macvlan", "{link}");
    assert_eq!(link[0]["mtu"], 1450);
    let routes = ip_json_in(pod_ns, &["route", "show"]);
    assert!(
        routes
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["dst"] == "10.244.0.0/16" && r["gateway"] == "10.244.1.1"),
        "{routes}"
    );
    node.exec(&bin, "DEL", &env, &stdin).expect_ok("DEL");
    assert!(ip_json_in(pod_ns, &["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["ifname"] != "eth0"));
}
