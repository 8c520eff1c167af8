//! Vanishing state (issue #12): what a node does to a runtime between and
//! during calls. The pod namespace deleted between ADD and DEL and during
//! ADD, the bridge deleted by someone else, host-local's dataDir on a full
//! tmpfs, a read-only result cache, and `CNI_NETNS=/proc/<pid>/ns/net` of a
//! process that has exited.
//!
//! Each test drives bridge (ipMasq) + host-local + portmap, our binaries,
//! through the runtime side ([`CniConfig`]) inside a fresh node namespace,
//! with temp dataDir and cache, and checks with `ip -j`, `bridge -j`,
//! `nft -j` and the files on disk. Needs root; skipped otherwise.

use crate::reliability_support as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::nodenet::{sh, sh_ok, suffix, wait_until, Ns, PluginDir};
use cni_exec::{CniConfig, RuntimeConf};
use cni_types::NetworkConfigList;
use serde_json::{json, Map, Value};
use support::{pings, pod_links, KillingExec, NodeState, Rng, Tmpfs};

struct Env {
    list: NetworkConfigList,
    cni: CniConfig,
    bridge: String,
    ipam: PathBuf,
    cache: PathBuf,
    _plugins: PluginDir,
    _dir: tempfile::TempDir,
    node: Ns,
}

fn plugin_dir() -> PluginDir {
    PluginDir::new(&[
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("host-local", env!("CARGO_BIN_EXE_host-local")),
        ("portmap", env!("CARGO_BIN_EXE_portmap")),
        ("loopback", env!("CARGO_BIN_EXE_loopback")),
    ])
}

impl Env {
    /// A node with the chain; `ipam`/`cache` default to temp dirs.
    fn new(ipam: Option<PathBuf>, cache: Option<PathBuf>) -> Env {
        let node = Ns::new("vnode");
        node.sysctl("net.ipv4.ip_forward", "1");
        let dir = tempfile::tempdir().unwrap();
        let sfx = suffix();
        let ipam = ipam.unwrap_or_else(|| dir.path().join("ipam"));
        let cache = cache.unwrap_or_else(|| dir.path().join("cache"));
        let bridge = format!("vb{}", &sfx[..6]);
        let list = json!({
            "cniVersion": "1.1.0",
            "name": format!("vanish-{sfx}"),
            "plugins": [
                {"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": true,
                 "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "dataDir": ipam,
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        });
        let list = NetworkConfigList::from_slice(list.to_string().as_bytes()).unwrap();
        let plugins = plugin_dir();
        let cni = CniConfig::new(
            vec![plugins.dir.path().to_path_buf()],
            Arc::new(KillingExec::default()),
        )
        .with_cache_dir(&cache);
        Env {
            list,
            cni,
            bridge,
            ipam,
            cache,
            _plugins: plugins,
            _dir: dir,
            node,
        }
    }

    fn rt(&self, cid: &str, netns: &str, port: u16) -> RuntimeConf {
        let mut caps = Map::new();
        caps.insert(
            "portMappings".into(),
            json!([{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]),
        );
        RuntimeConf {
            container_id: cid.into(),
            netns: netns.into(),
            ifname: "eth0".into(),
            args: Vec::new(),
            capability_args: caps,
        }
    }

    fn add(&self, rt: &RuntimeConf) -> Result<Value, String> {
        self.node
            .netns()
            .run(|| self.cni.add_network_list(&self.list, rt))
            .expect("enter node")
            .map_err(|e| e.to_string())
            .and_then(|r| r.to_value().map_err(|e| e.to_string()))
    }

    fn del(&self, rt: &RuntimeConf) -> Result<(), String> {
        self.node
            .netns()
            .run(|| self.cni.del_network_list(&self.list, rt))
            .expect("enter node")
            .map_err(|e| e.to_string())
    }

    fn state(&self) -> NodeState {
        NodeState::read(&self.node, &[self.ipam.clone(), self.cache.clone()])
    }

    /// veth links in the node namespace.
    fn veths(&self) -> Vec<String> {
        let out = sh_ok(&[
            "ip",
            "-n",
            &self.node.name,
            "-j",
            "link",
            "show",
            "type",
            "veth",
        ]);
        let v: Value = serde_json::from_str(&out).unwrap_or(json!([]));
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["ifname"].as_str().map(String::from))
            .collect()
    }

    /// Ports of our bridge.
    fn bridge_ports(&self) -> Vec<String> {
        self.state()
            .ports
            .into_iter()
            .filter(|(_, m)| *m == self.bridge)
            .map(|(p, _)| p)
            .collect()
    }

    /// Nothing of `cid` anywhere: no veth beyond `keep` ones (the kernel
    /// tears a dead namespace's veths down asynchronously, hence the wait),
    /// no bridge port beyond `keep`, no rule, no reservation, no cache.
    fn assert_gone(&self, cid: &str, keep: usize) {
        let settled = wait_until(Duration::from_secs(5), || {
            self.veths().len() == keep && self.bridge_ports().len() == keep
        });
        assert!(
            settled,
            "{cid}: veths {:?}, bridge ports {:?} (want {keep})",
            self.veths(),
            self.bridge_ports()
        );
        let mentions = self.state().mentions(cid);
        assert!(mentions.is_empty(), "{cid}: {mentions:?}");
    }

    fn reservation_files(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut paths = Vec::new();
        support::walk(&self.ipam.join(&self.list.name), &mut paths);
        for p in paths {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name == "lock" || name.starts_with("last_reserved_ip") {
                continue;
            }
            out.push((name, std::fs::read(&p).unwrap_or_default()));
        }
        out
    }
}

fn ip_of(result: &Value) -> String {
    result["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .expect("ip in result")
        .to_string()
}

macro_rules! need_root {
    () => {
        if !cni_testkit::premise::require_root() {
            return;
        }
    };
}

#[test]
fn netns_deleted_between_add_and_del() {
    need_root!();
    let env = Env::new(None, None);
    let keeper = Ns::new("vkeep");
    let krt = env.rt(&format!("keep-{}", suffix()), &keeper.path(), 18001);
    let kip = ip_of(&env.add(&krt).expect("keeper ADD"));

    let pod = Ns::new("vpod");
    let cid = format!("gone-{}", suffix());
    let rt = env.rt(&cid, &pod.path(), 18002);
    let ip = ip_of(&env.add(&rt).expect("ADD"));
    assert!(env.reservation_files().iter().any(|(n, _)| *n == ip));
    drop(pod); // ip netns del

    env.del(&rt).expect("DEL after the netns vanished");
    env.assert_gone(&cid, 1);
    assert!(!env.reservation_files().iter().any(|(n, _)| *n == ip));
    // Idempotent, and the keeper is untouched.
    env.del(&rt).expect("second DEL");
    assert!(pings(&env.node, &kip));
    // The freed address can be handed out again.
    let pod2 = Ns::new("vpod");
    let rt2 = env.rt(&format!("again-{}", suffix()), &pod2.path(), 18003);
    env.add(&rt2).expect("ADD after");
    env.del(&rt2).expect("DEL");
    env.del(&krt).expect("keeper DEL");
    env.assert_gone(&krt.container_id, 0);
}

#[test]
fn netns_deleted_during_add() {
    need_root!();
    let env = Env::new(None, None);
    let mut rng = Rng::from_env("netns_deleted_during_add");
    let (mut ok, mut failed) = (0, 0);
    for i in 0..16u16 {
        let pod = Ns::new("vrace");
        let cid = format!("race{i}-{}", suffix());
        let rt = env.rt(&cid, &pod.path(), 18100 + i);
        let delay = Duration::from_micros(rng.below(20_000));
        let outcome = std::thread::scope(|s| {
            let h = s.spawn(|| env.add(&rt));
            std::thread::sleep(delay);
            drop(pod);
            h.join().expect("ADD thread")
        });
        match &outcome {
            Ok(_) => ok += 1,
            Err(e) => {
                failed += 1;
                // A CNI error naming what failed, not a hang or a crash.
                assert!(e.contains("plugin type="), "{e}");
                assert!(!e.contains("signal"), "{e}");
            }
        }
        env.del(&rt)
            .unwrap_or_else(|e| panic!("{cid} (ADD {outcome:?}): DEL: {e}"));
        env.assert_gone(&cid, 0);
    }
    eprintln!("netns deleted during ADD: {ok} ADDs succeeded, {failed} failed cleanly");
}

#[test]
fn bridge_deleted_by_someone_else() {
    need_root!();
    let env = Env::new(None, None);
    let pod = Ns::new("vpod");
    let cid = format!("nobr-{}", suffix());
    let rt = env.rt(&cid, &pod.path(), 18201);
    let ip = ip_of(&env.add(&rt).expect("ADD"));
    env.node.ip(&["link", "del", &env.bridge]);

    env.del(&rt).expect("DEL without the bridge");
    env.assert_gone(&cid, 0);
    assert!(pod_links(&pod).is_empty(), "{:?}", pod_links(&pod));
    assert!(!env.reservation_files().iter().any(|(n, _)| *n == ip));

    // The next pod brings the bridge back, and it works.
    let pod2 = Ns::new("vpod");
    let rt2 = env.rt(&format!("back-{}", suffix()), &pod2.path(), 18202);
    let ip2 = ip_of(&env.add(&rt2).expect("ADD recreates the bridge"));
    assert_eq!(env.bridge_ports().len(), 1);
    assert!(pings(&env.node, &ip2));
    env.del(&rt2).expect("DEL");
    env.assert_gone(&rt2.container_id, 0);
}

/// No reservation file is empty, partial or temporary.
fn assert_reservations_whole(env: &Env) {
    for (name, content) in env.reservation_files() {
        assert!(
            name.parse::<std::net::IpAddr>().is_ok(),
            "stray file {name:?} ({:?})",
            String::from_utf8_lossy(&content)
        );
        let text = String::from_utf8_lossy(&content);
        let mut parts = text.split("\r\n");
        let (cid, ifname) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        assert!(
            !cid.is_empty() && ifname == "eth0",
            "{name}: partial content {text:?}"
        );
    }
}

#[test]
fn datadir_on_a_full_tmpfs() {
    need_root!();
    let fs = Tmpfs::mount("256k");
    let env = Env::new(Some(fs.dir.path().join("ipam")), None);
    // One pod before the disk fills: the directories and the lock exist.
    let keeper = Ns::new("vkeep");
    let krt = env.rt(&format!("keep-{}", suffix()), &keeper.path(), 18301);
    let kip = ip_of(&env.add(&krt).expect("keeper ADD"));
    fs.fill();

    for i in 0..3u16 {
        let pod = Ns::new("vfull");
        let cid = format!("full{i}-{}", suffix());
        let rt = env.rt(&cid, &pod.path(), 18310 + i);
        let err = env.add(&rt).expect_err("ADD on a full disk");
        assert!(
            err.to_lowercase().contains("no space left on device"),
            "unclear error: {err}"
        );
        assert_reservations_whole(&env);
        assert!(pod_links(&pod).is_empty() || env.del(&rt).is_ok());
        env.del(&rt).expect("DEL after the failed ADD");
        assert!(pod_links(&pod).is_empty(), "{:?}", pod_links(&pod));
        env.assert_gone(&cid, 1);
        assert_reservations_whole(&env);
    }
    assert!(pings(&env.node, &kip));

    // Space again: the next ADD works.
    std::fs::remove_file(fs.dir.path().join("filler")).unwrap();
    let pod = Ns::new("vfull");
    let rt = env.rt(&format!("after-{}", suffix()), &pod.path(), 18320);
    env.add(&rt).expect("ADD once there is space");
    env.del(&rt).expect("DEL");
    env.del(&krt).expect("keeper DEL");
    env.assert_gone(&krt.container_id, 0);
}

#[test]
fn datadir_full_before_the_first_add() {
    need_root!();
    let fs = Tmpfs::mount("64k");
    fs.fill();
    let env = Env::new(Some(fs.dir.path().join("ipam")), None);
    let pod = Ns::new("vfull");
    let cid = format!("first-{}", suffix());
    let rt = env.rt(&cid, &pod.path(), 18330);
    let err = env.add(&rt).expect_err("ADD on a full disk");
    assert!(
        err.to_lowercase().contains("no space left on device"),
        "unclear error: {err}"
    );
    assert_reservations_whole(&env);
    env.del(&rt).expect("DEL after the failed ADD");
    assert!(pod_links(&pod).is_empty(), "{:?}", pod_links(&pod));
    env.assert_gone(&cid, 0);
}

#[test]
fn read_only_result_cache() {
    need_root!();
    let fs = Tmpfs::mount("1m");
    // Root ignores file modes: only a read-only mount refuses it.
    sh_ok(&[
        "mount",
        "-o",
        "remount,ro",
        &fs.dir.path().to_string_lossy(),
    ]);
    let env = Env::new(None, Some(fs.dir.path().join("cache")));
    let pod = Ns::new("vro");
    let cid = format!("ro-{}", suffix());
    let rt = env.rt(&cid, &pod.path(), 18401);
    let err = env.add(&rt).expect_err("ADD cannot cache its result");
    // Reported, as libcni does (the runtime then DELs): names the network
    // and the reason.
    assert!(err.contains("cached result"), "{err}");
    assert!(err.contains(&env.list.name), "{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    // The plugins' work is there until the runtime's DEL, which works
    // without a cache and then leaves nothing.
    assert_eq!(pod_links(&pod), ["eth0"]);
    env.del(&rt).expect("DEL with a read-only cache");
    assert!(pod_links(&pod).is_empty());
    env.assert_gone(&cid, 0);
    // GC cannot list a cache that was never written; it still succeeds.
    env.node
        .netns()
        .run(|| env.cni.gc_network_list(&env.list, Some(&[])))
        .unwrap()
        .expect("GC");
}

/// A process in a fresh network namespace (`unshare -n`), killed on drop.
struct NsProcess(std::process::Child);

impl NsProcess {
    fn start() -> NsProcess {
        let child = Command::new("unshare")
            .args(["-n", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare");
        let p = NsProcess(child);
        let path = p.netns_path();
        // unshare execs sleep once the namespace exists.
        assert!(wait_until(Duration::from_secs(5), || {
            std::fs::read_link(&path).ok() != std::fs::read_link("/proc/self/ns/net").ok()
                && Path::new(&path).exists()
        }));
        p
    }

    fn netns_path(&self) -> String {
        format!("/proc/{}/ns/net", self.0.id())
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn proc_netns_of_an_exited_process() {
    need_root!();
    let env = Env::new(None, None);

    // ADD with the path of a process already gone: a clear error.
    let mut p = NsProcess::start();
    let path = p.netns_path();
    p.stop();
    let cid = format!("exited-{}", suffix());
    let rt = env.rt(&cid, &path, 18501);
    let err = env.add(&rt).expect_err("ADD into a vanished /proc netns");
    assert!(err.contains(&path), "error does not name the netns: {err}");
    env.del(&rt).expect("DEL");
    env.assert_gone(&cid, 0);

    // ADD while the process lives, then it exits: DEL succeeds, frees all.
    let mut p = NsProcess::start();
    let path = p.netns_path();
    let cid = format!("exits-{}", suffix());
    let rt = env.rt(&cid, &path, 18502);
    let ip = ip_of(&env.add(&rt).expect("ADD into a live /proc netns"));
    assert!(pings(&env.node, &ip));
    p.stop();
    env.del(&rt).expect("DEL after the process exited");
    env.assert_gone(&cid, 0);
    assert!(!env.reservation_files().iter().any(|(n, _)| *n == ip));
    let _ = sh(&["true"]);
}

/// Regression (full-tmpfs finding), without root: host-local DEL used to
/// fail when its owner index could not be rebuilt (`write index state …:
/// No space left on device`), so the address was never freed. Here the
/// index cannot be rebuilt because its `state` is a directory; DEL must
/// still free the address by scanning, as Go's backend does.
#[test]
fn host_local_del_when_the_owner_index_cannot_be_rebuilt() {
    use cni_ipam::host_local::{self, HostLocalConfig};
    let tmp = tempfile::tempdir().unwrap();
    let conf = json!({"cniVersion": "1.0.0", "name": "idx", "type": "bridge",
        "ipam": {"type": "host-local", "subnet": "10.9.0.0/24", "dataDir": tmp.path()}});
    let c = HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap();
    host_local::add(&c, "c1", "eth0").unwrap();
    let reservation = tmp.path().join("idx").join("10.9.0.2");
    assert!(reservation.exists());
    let state = tmp.path().join(".cni-ipam-index").join("idx").join("state");
    let _ = std::fs::remove_file(&state);
    std::fs::create_dir(&state).unwrap();
    // A reservation made behind the index's back forces the rebuild.
    std::fs::write(tmp.path().join("idx").join("10.9.0.9"), "other\r\neth0").unwrap();
    host_local::del(&c, "c1", "eth0").expect("DEL with an unusable index");
    assert!(!reservation.exists());
    assert!(tmp.path().join("idx").join("10.9.0.9").exists());
}
