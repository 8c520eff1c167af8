//! Helpers shared by the tuning and bandwidth tests: a node namespace and a
//! pod namespace joined by a veth, plugin runs (ours and Go's) inside the
//! node namespace, and the `ip`/`tc` oracles.
#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_netns::OwnedNetns;
use serde_json::Value;

pub const GO_DIR: &str = "/usr/lib/cni";

pub fn go_bin(name: &str) -> Option<String> {
    let p = format!("{GO_DIR}/{name}");
    // Without the Go plugin a differential test fails (or SKIPs under
    // CNI_TEST_ALLOW_SKIP=1): it never passes without comparing.
    cni_testkit::premise::require(
        Path::new(&p).exists(),
        &format!("needs the Go reference {p}"),
    )
    .then_some(p)
}

/// Runs a command, panicking with its stderr on failure; returns stdout.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn json(args: &[&str]) -> Value {
    let s = sh(args);
    if s.trim().is_empty() {
        return Value::Array(vec![]);
    }
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{args:?}: {e}: {s}"))
}

/// A node namespace and a pod namespace joined by a veth: `host_veth` in
/// the node, `eth0` in the pod, addresses `10.<a>.<b>.1/24` and `.2/24`.
pub struct Topo {
    pub node: OwnedNetns,
    pub pod: OwnedNetns,
    pub host_veth: String,
    pub node_ip: String,
    pub pod_ip: String,
}

impl Topo {
    pub fn new(prefix: &str) -> Topo {
        Topo::with_seed(prefix, rand_u32())
    }

    /// Two topologies made with the same seed have the same names and
    /// addresses (in different namespaces).
    pub fn with_seed(prefix: &str, r: u32) -> Topo {
        let node = OwnedNetns::new(&format!("{prefix}n")).unwrap();
        let pod = OwnedNetns::new(&format!("{prefix}p")).unwrap();
        let host_veth = format!("veth{:08x}", r);
        let (a, b) = (100 + (r >> 8) % 100, r % 250);
        let node_ip = format!("10.{a}.{b}.1");
        let pod_ip = format!("10.{a}.{b}.2");
        sh(&[
            "ip",
            "-n",
            node.name(),
            "link",
            "add",
            &host_veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod.name(),
        ]);
        for (ns, dev, ip) in [
            (node.name(), host_veth.as_str(), &node_ip),
            (pod.name(), "eth0", &pod_ip),
        ] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        Topo {
            node,
            pod,
            host_veth,
            node_ip,
            pod_ip,
        }
    }

    pub fn pod_path(&self) -> String {
        self.pod.path().display().to_string()
    }

    /// A prevResult as the main plugin (ptp/bridge) would write it.
    pub fn prev_result(&self, version: &str) -> Value {
        serde_json::json!({
            "cniVersion": version,
            "interfaces": [
                {"name": self.host_veth},
                {"name": "eth0", "sandbox": self.pod_path()}
            ],
            "ips": [{"address": format!("{}/24", self.pod_ip), "interface": 1,
                     "version": "4", "gateway": self.node_ip}]
        })
    }
}

pub fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    u32::from_ne_bytes(b)
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: {} {}", self.stdout, self.stderr))
    }

    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "{}\n{}", self.stdout, self.stderr);
        self
    }

    /// The `msg` of an error reply.
    pub fn msg(&self) -> String {
        assert_ne!(self.code, 0, "expected a failure: {}", self.stdout);
        self.json()["msg"].as_str().unwrap_or_default().to_owned()
    }
}

/// Execs `bin` with the CNI environment, from a thread inside `netns` (a
/// forked child inherits the forking thread's namespace).
pub fn run_plugin(
    bin: &str,
    netns: &OwnedNetns,
    command: &str,
    cid: &str,
    pod_path: &str,
    extra_env: &[(&str, &str)],
    stdin: &Value,
) -> Run {
    let input = serde_json::to_vec(stdin).unwrap();
    run_plugin_bytes(bin, netns, command, cid, pod_path, extra_env, input)
}

/// [`run_plugin`] with raw stdin bytes.
pub fn run_plugin_bytes(
    bin: &str,
    netns: &OwnedNetns,
    command: &str,
    cid: &str,
    pod_path: &str,
    extra_env: &[(&str, &str)],
    input: Vec<u8>,
) -> Run {
    let bin = bin.to_owned();
    let env: Vec<(String, String)> = [
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", cid),
        ("CNI_NETNS", pod_path),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", GO_DIR),
    ]
    .iter()
    .chain(extra_env)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    netns
        .run(move || {
            let start = Instant::now();
            let mut child = Command::new(&bin)
                .env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .envs(env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&input).unwrap();
            let out = child.wait_with_output().unwrap();
            Run {
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                elapsed: start.elapsed(),
            }
        })
        .unwrap()
}

/// Removes what legitimately differs between two runs: the sandbox path,
/// the host veth name, generated MACs, and `dns: {}` (Go prints an empty
/// DNS object, ours leaves it out).
pub fn normalise_result(mut v: Value, topo: &Topo, keep_macs: bool) -> Value {
    if let Some(o) = v.as_object_mut() {
        if o.get("dns") == Some(&serde_json::json!({})) {
            o.remove("dns");
        }
    }
    if let Some(ifs) = v.get_mut("interfaces").and_then(Value::as_array_mut) {
        for i in ifs {
            let o = i.as_object_mut().unwrap();
            if o.get("sandbox").is_some() {
                o.insert("sandbox".into(), "<pod>".into());
            }
            if o.get("name") == Some(&Value::String(topo.host_veth.clone())) {
                o.insert("name".into(), "<veth>".into());
            }
            if !keep_macs && o.contains_key("mac") {
                o.insert("mac".into(), "<mac>".into());
            }
        }
    }
    v
}
