//! flannel + portmap end to end, as a node's `10-flannel.conflist` runs them:
//! our `cnitool` (run inside a fresh "node" namespace, so the bridge and the
//! rules are created there, never on the host) with a plugin directory of
//! our binaries (bridge and host-local are the Go reference's until ours
//! are built in this workspace). Checked with `ip -j`, `bridge -j`, `nft -j`
//! and real TCP traffic. Skipped unless root.
//!
//! `default_conflist_at_default_paths` uses the exact conflist, `cni0` and
//! the real `/run/flannel/subnet.env` (saved and restored) and the default
//! data directories; it is `#[ignore]`d and runs alone:
//! `cargo test -p cni-plugins --test plugins flannel_e2e:: -- --ignored --test-threads=1`.
//! `custom_paths_in_parallel` runs the same scenario with a private
//! subnetFile, bridge, dataDirs and network name, in the normal suite.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::nodenet::{suffix, tcp_get, workspace_bin, Ns, PluginDir, TcpServer};
use serde_json::Value;

const SUBNET_ENV: &str =
    "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n";
const EXACT_CONFLIST: &str = r#"{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#;

/// A file the test overwrites, restored (or removed) on drop.
struct SavedFile {
    path: PathBuf,
    original: Option<Vec<u8>>,
    created_dir: Option<PathBuf>,
}

impl SavedFile {
    fn replace(path: &Path, content: &str) -> SavedFile {
        let original = std::fs::read(path).ok();
        let dir = path.parent().expect("parent");
        let created_dir = (!dir.exists()).then(|| dir.to_path_buf());
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::write(path, content).expect("write");
        SavedFile {
            path: path.to_path_buf(),
            original,
            created_dir,
        }
    }
}

impl Drop for SavedFile {
    fn drop(&mut self) {
        match &self.original {
            Some(b) => {
                let _ = std::fs::write(&self.path, b);
            }
            None => {
                let _ = std::fs::remove_file(&self.path);
                if let Some(d) = &self.created_dir {
                    let _ = std::fs::remove_dir(d);
                }
            }
        }
    }
}

/// The default data directories as they were before the test: restored
/// exactly on drop (files the test created removed, changed ones rewritten,
/// directories it created removed), whether the test passed or not.
struct DefaultDirsSnapshot {
    /// Each directory with its files and their content (`None`: absent).
    dirs: Vec<(PathBuf, Option<Files>)>,
}

type Files = Vec<(PathBuf, Vec<u8>)>;

const DEFAULT_DIRS: [&str; 4] = [
    "/var/lib/cni",
    "/var/lib/cni/networks",
    "/var/lib/cni/networks/cbr0",
    "/var/lib/cni/flannel",
];

impl DefaultDirsSnapshot {
    fn take() -> DefaultDirsSnapshot {
        let dirs = DEFAULT_DIRS
            .iter()
            .map(|d| {
                let d = PathBuf::from(d);
                let files = std::fs::read_dir(&d).ok().map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.is_file())
                        .map(|p| {
                            let b = std::fs::read(&p).unwrap_or_default();
                            (p, b)
                        })
                        .collect()
                });
                (d, files)
            })
            .collect();
        DefaultDirsSnapshot { dirs }
    }
}

impl Drop for DefaultDirsSnapshot {
    fn drop(&mut self) {
        for (dir, files) in self.dirs.iter().rev() {
            match files {
                None => {
                    let _ = std::fs::remove_dir_all(dir);
                }
                Some(files) => {
                    if dir == Path::new("/var/lib/cni") || dir == Path::new("/var/lib/cni/networks")
                    {
                        continue;
                    }
                    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                        let p = entry.path();
                        if p.is_file() && !files.iter().any(|(f, _)| *f == p) {
                            let _ = std::fs::remove_file(&p);
                        }
                    }
                    for (p, b) in files {
                        if std::fs::read(p).ok().as_deref() != Some(b.as_slice()) {
                            let _ = std::fs::write(p, b);
                        }
                    }
                }
            }
        }
    }
}

/// Files of `dir` whose name or content mentions one of `cids`.
fn files_mentioning(dir: &Path, cids: &[String]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let content = std::fs::read_to_string(p).unwrap_or_default();
            cids.iter()
                .any(|c| name.starts_with(c.as_str()) || content.starts_with(c.as_str()))
        })
        .collect()
}

struct Scenario {
    conflist: String,
    subnet_file: PathBuf,
    network: String,
    bridge: String,
    flannel_data_dir: PathBuf,
    ipam_data_dir: PathBuf,
}

struct Chain {
    node: Ns,
    plugins: PluginDir,
    confdir: tempfile::TempDir,
    cachedir: tempfile::TempDir,
    cnitool: PathBuf,
    network: String,
}

impl Chain {
    fn cnitool(&self, cmd: &str, cid: &str, pod: &Ns, cap_args: &str) -> (bool, String) {
        let mut c = Command::new(&self.cnitool);
        c.args([cmd, &self.network, &pod.path()])
            .env("NETCONFPATH", self.confdir.path())
            .env("CNI_PATH", self.plugins.path())
            .env("CNI_CACHEDIR", self.cachedir.path())
            .env("CNI_CONTAINERID", cid)
            .env("CAP_ARGS", cap_args);
        let out = self.node.output(c, b"");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn ok(&self, cmd: &str, cid: &str, pod: &Ns, cap_args: &str) -> String {
        let (ok, text) = self.cnitool(cmd, cid, pod, cap_args);
        assert!(ok, "cnitool {cmd} {cid}: {text}");
        text
    }
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

fn run(s: Scenario) {
    let node = Ns::new("flnode");
    node.sysctl("net.ipv4.ip_forward", "1");
    let pod1 = Ns::new("flpod");
    let pod2 = Ns::new("flpod");
    let confdir = tempfile::tempdir().unwrap();
    std::fs::write(confdir.path().join("10-flannel.conflist"), &s.conflist).unwrap();
    let chain = Chain {
        node,
        plugins: PluginDir::new(&[
            ("flannel", env!("CARGO_BIN_EXE_flannel")),
            ("portmap", env!("CARGO_BIN_EXE_portmap")),
        ]),
        confdir,
        cachedir: tempfile::tempdir().unwrap(),
        cnitool: workspace_bin("cni-exec", "cnitool"),
        network: s.network.clone(),
    };
    let sfx = suffix();
    let cid1 = format!("e2e-a-{sfx}");
    let cid2 = format!("e2e-b-{sfx}");
    let maps = r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#;

    let r1 = json(&chain.ok("add", &cid1, &pod1, maps));
    let r2 = json(&chain.ok("add", &cid2, &pod2, ""));
    let ip1 = r1["ips"][0]["address"].as_str().unwrap().to_string();
    let ip2 = r2["ips"][0]["address"].as_str().unwrap().to_string();
    for ip in [&ip1, &ip2] {
        assert!(ip.starts_with("10.244.1.") && ip.ends_with("/24"), "{ip}");
    }
    assert_eq!(r1["ips"][0]["gateway"], "10.244.1.1");

    // The pod: address, MTU 1450, default route and the cluster route.
    let addrs = json(&pod1.ip(&["-j", "addr", "show", "eth0"]));
    assert_eq!(addrs[0]["mtu"], 1450);
    let local = format!(
        "{}/{}",
        addrs[0]["addr_info"][0]["local"].as_str().unwrap(),
        addrs[0]["addr_info"][0]["prefixlen"]
    );
    assert_eq!(local, ip1);
    let routes = json(&pod1.ip(&["-j", "route"]));
    let routes = routes.as_array().unwrap();
    assert!(
        routes
            .iter()
            .any(|r| r["dst"] == "default" && r["gateway"] == "10.244.1.1"),
        "{routes:?}"
    );
    assert!(
        routes
            .iter()
            .any(|r| r["dst"] == "10.244.0.0/16" && r["gateway"] == "10.244.1.1"),
        "{routes:?}"
    );

    // The node: the bridge with its gateway address and hairpin ports.
    let br = json(&chain.node.ip(&["-j", "addr", "show", &s.bridge]));
    assert_eq!(br[0]["addr_info"][0]["local"], "10.244.1.1");
    let ports = json(&chain.node.exec_ok(&["bridge", "-j", "-d", "link", "show"]));
    let ports: Vec<&Value> = ports
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["master"] == s.bridge.as_str())
        .collect();
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert!(ports.iter().all(|p| p["hairpin"] == true), "{ports:?}");

    // The saved delegate configs.
    let saved = s.flannel_data_dir.join(format!("{cid1}@eth0"));
    let delegate = json(&std::fs::read_to_string(&saved).unwrap());
    assert_eq!(delegate["type"], "bridge");
    assert_eq!(delegate["mtu"], 1450);
    assert_eq!(delegate["ipMasq"], false);
    assert_eq!(delegate["hairpinMode"], true);
    assert_eq!(
        std::fs::read(s.flannel_data_dir.join(&cid1)).unwrap(),
        std::fs::read(&saved).unwrap()
    );

    // Real traffic to hostPort 8080 -> pod1:80.
    let _srv = TcpServer::start(&pod1, "0.0.0.0:80", "pod1");
    for (from, addr) in [
        (&chain.node, "127.0.0.1:8080"),
        (&chain.node, "10.244.1.1:8080"),
        (&pod2, "10.244.1.1:8080"),
        (&pod1, "10.244.1.1:8080"),
    ] {
        let got = tcp_get(from, addr).unwrap_or_else(|e| panic!("{addr} from {}: {e}", from.name));
        assert!(got.starts_with("pod1 "), "{got}");
    }

    // CHECK is not in 0.3.1: the runtime refuses it before any plugin runs.
    let (ok, text) = chain.cnitool("check", &cid1, &pod1, maps);
    assert!(
        !ok && text.contains("does not support the CHECK command"),
        "{text}"
    );

    // DEL leaves nothing behind, also once subnet.env is gone (flanneld
    // stopped): it works from the saved delegate config.
    std::fs::remove_file(&s.subnet_file).unwrap();
    chain.ok("del", &cid1, &pod1, maps);
    chain.ok("del", &cid2, &pod2, "");
    chain.ok("del", &cid1, &pod1, maps);
    let cids = vec![cid1.clone(), cid2.clone()];
    assert!(files_mentioning(&s.ipam_data_dir, &cids).is_empty());
    assert!(files_mentioning(&s.flannel_data_dir, &cids).is_empty());
    let comments = chain.node.nft_rule_comments();
    assert!(!comments.iter().any(|c| c.contains(&cid1)), "{comments:?}");
    let links = json(&chain.node.ip(&["-j", "link"]));
    assert!(
        !links
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["link_type"] == "ether" && l["master"] == s.bridge.as_str()),
        "{links:?}"
    );
    assert!(tcp_get(&chain.node, "127.0.0.1:8080").is_err());
}

#[test]
#[ignore = "uses /run/flannel/subnet.env and the default data dirs: run alone with --ignored --test-threads=1"]
fn default_conflist_at_default_paths() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let _dirs = DefaultDirsSnapshot::take();
    let _env = SavedFile::replace(Path::new("/run/flannel/subnet.env"), SUBNET_ENV);
    run(Scenario {
        conflist: EXACT_CONFLIST.into(),
        subnet_file: "/run/flannel/subnet.env".into(),
        network: "cbr0".into(),
        bridge: "cni0".into(),
        flannel_data_dir: "/var/lib/cni/flannel".into(),
        ipam_data_dir: "/var/lib/cni/networks/cbr0".into(),
    });
}

#[test]
fn custom_paths_in_parallel() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let subnet_file = dir.path().join("subnet.env");
    std::fs::write(&subnet_file, SUBNET_ENV).unwrap();
    let network = format!("cbr-{}", suffix());
    let bridge = format!("fl{}", &suffix()[..6]);
    let flannel_data_dir = dir.path().join("flannel");
    let ipam_data_dir = dir.path().join("ipam");
    let conflist = serde_json::json!({
        "name": network,
        "cniVersion": "0.3.1",
        "plugins": [
            {
                "type": "flannel",
                "subnetFile": &subnet_file,
                "dataDir": flannel_data_dir,
                "ipam": {"dataDir": ipam_data_dir},
                "delegate": {"hairpinMode": true, "isDefaultGateway": true, "bridge": bridge}
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string();
    run(Scenario {
        conflist,
        subnet_file,
        network: network.clone(),
        bridge,
        flannel_data_dir,
        ipam_data_dir: ipam_data_dir.join(&network),
    });
}
