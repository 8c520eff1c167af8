//! Capability arguments through multus to real delegates of ours, in real
//! namespaces: the `multus` binary runs in a "node" namespace the test
//! made (with the in-repo API server), the pod's selection element asks
//! for `portMappings`, `bandwidth`, `mac` and `deviceID`, and the kernel
//! says whether they took effect: a TCP connection from a "client"
//! namespace to the mapped node port reaches a listener in the pod (our
//! portmap's DNAT), `tc -j qdisc show` has the token buckets our bandwidth
//! set, `ip -j link` shows the MAC our tuning set. A recording delegate
//! (a script: the exec path is libcni's, as for any plugin) gets
//! `deviceID`, and at DEL exactly the bytes it got at ADD. Needs root.
#![cfg(feature = "multus")]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::nodenet::{tcp_get, wait_until, Ns, TcpServer};
use cni_multus::selection::NETWORKS_ANNOTATION;
use cni_testkit::KubeApiServer;
use serde_json::{json, Value};

/// Our plugin binaries, linked into one directory with the recorder.
fn plugin_dir(rec_dir: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, path) in [
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("host-local", env!("CARGO_BIN_EXE_host-local")),
        ("portmap", env!("CARGO_BIN_EXE_portmap")),
        ("bandwidth", env!("CARGO_BIN_EXE_bandwidth")),
        ("tuning", env!("CARGO_BIN_EXE_tuning")),
    ] {
        std::os::unix::fs::symlink(path, dir.path().join(name)).unwrap();
    }
    let script = format!(
        "#!/bin/sh\n/bin/cat > '{d}/'\"$CNI_COMMAND.$CNI_IFNAME.stdin\"\n\
         case \"$CNI_COMMAND\" in\n\
         ADD) printf '{{\"cniVersion\":\"0.3.1\",\"interfaces\":[{{\"name\":\"%s\",\"sandbox\":\"%s\"}}]}}' \"$CNI_IFNAME\" \"$CNI_NETNS\" ;;\n\
         VERSION) printf '{{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.1\",\"0.4.0\",\"1.0.0\"]}}' ;;\n\
         esac\n",
        d = rec_dir.display()
    );
    let p = dir.path().join("recorder");
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The recorder's delegate config: odd key order, keys no schema knows,
/// numbers in unusual spellings. DEL must hand it over as ADD did.
const RECORDER_NAD: &str = r#"{"type":"recorder","zeta":1.50,"cniVersion":"0.3.1","name":"rec-net","alpha":{"z":1e3,"a":-0.0,"big":18446744073709551616,"neg":-12},"capabilities":{"deviceID":true,"mac":true},"unicode":"\u00e9\ud83d\ude00","list":[3,2,1,{"b":null,"a":[]}]}"#;

struct Node {
    node: Ns,
    pod: Ns,
    client: Ns,
    server: KubeApiServer,
    dir: tempfile::TempDir,
    rec: tempfile::TempDir,
    plugins: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let node = Ns::new("mcnode");
        let pod = Ns::new("mcpod");
        let client = Ns::new("mccli");
        node.sysctl("net.ipv4.ip_forward", "1");
        node.uplink(&client, "10.241.0");
        let server = KubeApiServer::start_in_netns(Path::new(&node.path())).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let rec = tempfile::tempdir().unwrap();
        let plugins = plugin_dir(rec.path());
        let ipam = dir.path().join("ipam");
        // The cluster network: no default route (the pod's replies to the
        // client leave through the port-mapped network).
        server.add_nad(
            "kube-system",
            "cluster",
            &json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": "mcb0", "isGateway": true,
                "ipam": {"type": "host-local", "subnet": "10.242.0.0/24", "dataDir": ipam}})
            .to_string(),
        );
        server.add_nad(
            "ns1",
            "pm-net",
            &json!({"cniVersion": "1.0.0", "name": "pm-net", "plugins": [
                {"type": "bridge", "bridge": "mpb0", "isGateway": true,
                 "ipam": {"type": "host-local", "subnet": "10.243.0.0/24", "dataDir": ipam,
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "tuning", "capabilities": {"mac": true}},
                {"type": "portmap", "capabilities": {"portMappings": true}},
                {"type": "bandwidth", "capabilities": {"bandwidth": true}}]})
            .to_string(),
        );
        server.add_nad("ns1", "rec-net", RECORDER_NAD);
        // No cniVersion: Go hands DEL the same (only a conflist gets
        // multus's version).
        server.add_nad(
            "ns1",
            "rec-nover",
            r#"{"type":"recorder","name":"rec-nover","x":0.10}"#,
        );
        Node {
            node,
            pod,
            client,
            server,
            dir,
            rec,
            plugins,
        }
    }

    fn conf(&self) -> Vec<u8> {
        json!({"cniVersion": "1.0.0", "name": "multus-net", "type": "multus",
            "kubeconfig": self.server.kubeconfig_path(), "clusterNetwork": "cluster",
            "binDir": self.plugins.path(), "cniDir": self.dir.path().join("cni"),
            "confDir": self.dir.path().join("conf"),
            "deviceInfoDir": self.dir.path().join("devinfo")})
        .to_string()
        .into_bytes()
    }

    fn multus(&self, command: &str, cid: &str, pod: &str) -> (bool, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_multus"));
        cmd.env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", self.pod.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", self.plugins.path())
            .env(
                "CNI_ARGS",
                format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME={pod};K8S_POD_UID=uid-{pod}"),
            );
        let out = self.node.output(cmd, &self.conf());
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    fn recorded(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.rec.path().join(name)).ok()
    }

    /// Every tbf's rate (bytes/s) in the node namespace.
    fn tbf_rates(&self) -> Vec<u64> {
        let out = self.node.exec_ok(&["tc", "-j", "qdisc", "show"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        let mut r: Vec<u64> = v
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["kind"] == "tbf")
            .filter_map(|q| q["options"]["rate"].as_u64())
            .collect();
        r.sort_unstable();
        r
    }

    fn pod_link(&self, ifname: &str) -> Option<Value> {
        let out = self.pod.ip(&["-j", "link", "show"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v.as_array()?
            .iter()
            .find(|l| l["ifname"] == ifname)
            .cloned()
    }
}

fn selection() -> String {
    json!([
        {"name": "pm-net", "interface": "net1", "mac": "c2:11:22:33:44:55",
         "portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}],
         "bandwidth": {"ingressRate": 8000000, "ingressBurst": 80000,
                       "egressRate": 16000000, "egressBurst": 80000}},
        {"name": "rec-net", "interface": "rec1", "deviceID": "0000:00:1f.6",
         "mac": "c2:11:22:33:44:66"},
        {"name": "rec-nover", "interface": "rec2"}
    ])
    .to_string()
}

#[test]
fn capabilities_reach_real_delegates_and_del_gets_the_add_bytes() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let n = Node::new();
    n.server.add_pod(
        "ns1",
        "web",
        "uid-web",
        &[(NETWORKS_ANNOTATION, &selection())],
    );
    let (ok, out) = n.multus("ADD", "cid-caps", "web");
    assert!(ok, "ADD: {out}");

    // mac (tuning, through the selection's `mac`): the kernel has it.
    let net1 = n.pod_link("net1").expect("net1 in the pod");
    assert_eq!(net1["address"], "c2:11:22:33:44:55", "{net1}");

    // portMappings (portmap's DNAT): client -> node:18080 -> pod:80.
    let _srv = TcpServer::start(&n.pod, "0.0.0.0:80", "pod-web");
    let mut got = Err(String::new());
    assert!(
        wait_until(Duration::from_secs(3), || {
            got = tcp_get(&n.client, "10.241.0.1:18080");
            got.is_ok()
        }),
        "{got:?}"
    );
    let got = got.unwrap();
    assert!(got.starts_with("pod-web 10.241.0.2:"), "{got}");

    // bandwidth: ingress 8 Mbit/s on the host veth and egress 16 Mbit/s
    // on the IFB, as tc reports them (bytes per second).
    assert_eq!(n.tbf_rates(), [1_000_000, 2_000_000]);

    // deviceID and mac reach the recorder's runtimeConfig (its declared
    // capabilities), with the device-info file multus names for it.
    let add = n.recorded("ADD.rec1.stdin").expect("recorder ADD");
    let v: Value = serde_json::from_slice(&add).unwrap();
    assert_eq!(
        v["runtimeConfig"],
        json!({"deviceID": "0000:00:1f.6", "mac": "c2:11:22:33:44:66"})
    );
    // (CNIDeviceInfoFile is passed only to delegates declaring it.)
    assert_eq!(v["zeta"], 1.5);

    let (ok, out) = n.multus("DEL", "cid-caps", "web");
    assert!(ok, "DEL: {out}");
    // Exactly the bytes of ADD (0.3.1: no prevResult on DEL), whatever
    // the key order, unknown keys and number spellings.
    let del = n.recorded("DEL.rec1.stdin").expect("recorder DEL");
    assert_eq!(
        String::from_utf8_lossy(&del),
        String::from_utf8_lossy(&add),
        "DEL got other bytes than ADD"
    );
    let add2 = n.recorded("ADD.rec2.stdin").expect("recorder ADD rec2");
    let del2 = n.recorded("DEL.rec2.stdin").expect("recorder DEL rec2");
    assert_eq!(
        String::from_utf8_lossy(&del2),
        String::from_utf8_lossy(&add2)
    );
    // And every effect is gone.
    assert!(tcp_get(&n.client, "10.241.0.1:18080").is_err());
    assert!(n.tbf_rates().is_empty(), "{:?}", n.tbf_rates());
    assert!(n.pod_link("net1").is_none());
}
