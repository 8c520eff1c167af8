//! `cni-gc` under a real containerd (issue 30, item 3): the collector of
//! leaked attachments run as operators run it, against the runtime that
//! made them.
//!
//! Each test starts a private containerd (`cni_testkit::containerd`) in a
//! node network namespace of its own, with this build's plugins (symlinks
//! in a plugin directory of the test's) and networks whose names, bridges
//! and subnets are unique to the test. Sandboxes are leaked the way a
//! runtime loses them: [`Containerd::forget_sandboxes`] removes them from
//! containerd's metadata and restarts it, so it no longer lists them while
//! their libcni cache files, host-local reservations, veths and nftables
//! elements stay; one also loses its network namespace behind
//! containerd's back (as after a reboot), one its cache files (as after a
//! crash before the runtime wrote them). Then `cni-gc` runs in the node
//! namespace (where containerd runs its plugins) with containerd's socket,
//! the test's conf dir and plugin directory, and `--cache-dir
//! /var/lib/cni`: containerd 1.6 writes libcni's cache there and nowhere
//! else. Other tests' files in that cache belong to networks that are not
//! in this test's conf dir: `cni-gc` leaves them alone (and the tests
//! check it says so), and the fixture removes only its sandboxes' files.
//!
//! The oracles are the leak census (`census_support`: `ip -j`, `nft -j`,
//! sysctls and host-local's files of the node, before the leaked
//! sandboxes existed and after `cni-gc`), host-local's reservation files,
//! `nft -j` (port mappings, masquerade elements), `ip -j` for veths, the
//! cache directory's bytes, and ping and TCP between the live sandboxes.
//!
//! containerd 1.6's libcni reads no result of CNI 1.1.0, so every network
//! is at 1.0.0 while containerd attaches sandboxes; where a test needs
//! phase 2 (GC), it then rewrites the configs at 1.1.0, as on a node whose
//! runtime was upgraded to one whose libcni reads them (containerd 2).
#![cfg(feature = "gc")] // the cni-gc binary

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cni_cri::v1::{LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxState};
use cni_cri::RuntimeClient;
use cni_testkit::containerd::{Containerd, ContainerdOptions};
use ipnetwork::IpNetwork;
use serde_json::{json, Value};

use crate::census_support::{Census, Change};
use crate::common::{hex6, reserved_ips, sh, CniPath};
use crate::containerd_cri::{
    assert_pings, host_port, needs, nft_maps_port, run_sandbox, tcp_get, wait_until, Sandbox,
    PATIENCE, POD_PORT,
};
use crate::nodenet::{Ns, TcpServer};
use crate::prom_support::Scrape;

const CNI_GC: &str = env!("CARGO_BIN_EXE_cni-gc");
/// libcni's cache as containerd 1.6 writes it (not configurable there).
const CACHE_DIR: &str = "/var/lib/cni";

/// One network of a test node: a bridge (its own, with host-local and an
/// IPv4 /24, optionally an IPv6 /64, masquerade and portmap), or one
/// plugin of a given type alone.
struct Net {
    name: String,
    /// The config file's name (libcni's order is the names' order).
    file: String,
    bridge: String,
    v4: IpNetwork,
    v6: Option<IpNetwork>,
    full: bool,
    plugin: Option<String>,
    data_dir: PathBuf,
}

impl Net {
    /// A bridge network `gc<role>-<tag>`, config file `<order>-<role>`;
    /// `full`: dual-stack, isGateway, ipMasq and portmap.
    fn bridge(order: u8, role: &str, state: &Path, full: bool) -> Net {
        let tag = hex6();
        let b = |i: usize| u8::from_str_radix(&tag[i..i + 2], 16).unwrap();
        Net {
            name: format!("gc{role}-{tag}"),
            file: format!("{order}-{role}.conflist"),
            bridge: format!("g{}{tag}", &role[..1]),
            v4: format!("10.{}.{}.0/24", 100 + b(0) % 100, b(2))
                .parse()
                .unwrap(),
            v6: full.then(|| {
                format!("fd{:02x}:{}:{}::/64", b(4), &tag[..4], &tag[2..])
                    .parse()
                    .unwrap()
            }),
            full,
            plugin: None,
            data_dir: state.join("ipam"),
        }
    }

    /// A network of one plugin, `plugin`, alone.
    fn single(order: u8, role: &str, plugin: &str, state: &Path) -> Net {
        Net {
            plugin: Some(plugin.into()),
            ..Net::bridge(order, role, state, false)
        }
    }

    fn conflist(&self, version: &str, extra: Value) -> Value {
        let plugins = match &self.plugin {
            Some(t) => json!([{ "type": t }]),
            None => {
                let mut ranges = vec![json!([{"subnet": self.v4.to_string()}])];
                let mut routes = vec![json!({"dst": "0.0.0.0/0"})];
                if let Some(v6) = self.v6 {
                    ranges.push(json!([{"subnet": v6.to_string()}]));
                    routes.push(json!({"dst": "::/0"}));
                }
                let mut p = vec![json!({
                    "type": "bridge", "bridge": self.bridge,
                    "isGateway": self.full, "ipMasq": self.full,
                    "ipam": {"type": "host-local", "dataDir": self.data_dir,
                             "ranges": ranges, "routes": routes}
                })];
                if self.full {
                    p.push(json!({"type": "portmap", "capabilities": {"portMappings": true}}));
                }
                Value::Array(p)
            }
        };
        let mut conf = json!({"cniVersion": version, "name": self.name, "plugins": plugins});
        if let (Value::Object(c), Value::Object(e)) = (&mut conf, extra) {
            c.extend(e);
        }
        conf
    }

    /// The addresses host-local reserved for sandbox `id` in this network
    /// (the reservation files naming it).
    fn reserved_by(&self, id: &str) -> Vec<String> {
        reserved_ips(&self.data_dir, &self.name)
            .into_iter()
            .filter(|a| {
                std::fs::read_to_string(self.data_dir.join(&self.name).join(a))
                    .is_ok_and(|owner| owner.lines().next() == Some(id))
            })
            .collect()
    }

    /// The cache file of `id`'s attachment on `ifname`.
    fn cache_file(&self, id: &str, ifname: &str) -> PathBuf {
        Path::new(CACHE_DIR)
            .join("results")
            .join(format!("{}-{id}-{ifname}", self.name))
    }
}

/// What one `cni-gc` run printed, and its exit status.
struct GcRun {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

impl GcRun {
    /// The lines naming one of `nets` (other tests' networks may be in the
    /// cache too).
    fn lines_of(&self, nets: &[&Net]) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| nets.iter().any(|n| l.contains(&n.name)))
            .collect()
    }

    /// (deleted, networks collected, failed) from the summary line.
    fn summary(&self) -> (usize, usize, usize) {
        let last = self.stdout.lines().last().unwrap_or_default();
        let count = |what: &str| {
            last.split(", ")
                .find_map(|part| part.strip_suffix(what)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {what:?} in the summary {last:?}\n{self}"))
        };
        (
            count(" deleted"),
            count(" network(s) collected"),
            count(" failed"),
        )
    }

    fn has(&self, line: &str) -> bool {
        self.stdout.lines().any(|l| l.starts_with(line))
    }
}

impl std::fmt::Display for GcRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cni-gc exited {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// A test node: its namespace, a private containerd running in it with
/// every network of `nets` (each sandbox joins all, on eth0, eth1, ...),
/// the plugin and config directories, and host-local's data. containerd
/// goes down first (its sandboxes' DELs run in the node).
struct Node {
    ctd: Containerd,
    ns: Ns,
    nets: Vec<Net>,
    conf_dir: tempfile::TempDir,
    bin: CniPath,
    state: tempfile::TempDir,
}

impl Node {
    /// Starts containerd on the networks `nets(state dir)` made, with our
    /// bridge, host-local, portmap and loopback plus `extra` plugins
    /// (name, binary) in the plugin directory.
    fn start(nets: impl FnOnce(&Path) -> Vec<Net>, extra: &[(&str, &Path)]) -> Node {
        let ns = Ns::new("gcnode");
        let state = tempfile::tempdir().expect("tempdir");
        let conf_dir = tempfile::tempdir().expect("tempdir");
        let nets = nets(state.path());
        let mut plugins: Vec<(&str, &Path)> = vec![
            ("bridge", Path::new(env!("CARGO_BIN_EXE_bridge"))),
            ("host-local", Path::new(env!("CARGO_BIN_EXE_host-local"))),
            ("portmap", Path::new(env!("CARGO_BIN_EXE_portmap"))),
            ("loopback", Path::new(env!("CARGO_BIN_EXE_loopback"))),
        ];
        plugins.extend_from_slice(extra);
        let bin = CniPath::new(&plugins);
        for n in &nets {
            // In place: containerd 1.6 ignores a file moved in.
            std::fs::write(
                conf_dir.path().join(&n.file),
                n.conflist("1.0.0", json!({})).to_string(),
            )
            .expect("write conflist");
        }
        let ctd = Containerd::start(
            ContainerdOptions::new(bin.path(), conf_dir.path())
                .netns(ns.path())
                .max_conf_num(nets.len())
                .timeout(PATIENCE),
        )
        .unwrap_or_else(|e| panic!("start containerd: {e}"));
        let node = Node {
            ctd,
            ns,
            nets,
            conf_dir,
            bin,
            state,
        };
        let mut cri = node.cri();
        assert!(
            wait_until(|| cri.status(false).unwrap().network_ready() == Some(true)),
            "NetworkReady not true; containerd's log:\n{}",
            node.ctd.log_tail(20)
        );
        node
    }

    fn cri(&self) -> RuntimeClient {
        self.ctd.client().expect("CRI client")
    }

    fn sandbox(&self, cri: &mut RuntimeClient, name: &str, ports: &[(u16, u16)]) -> Sandbox {
        run_sandbox(&self.ctd, cri, name, ports)
    }

    /// Rewrites network `i`'s config in place.
    fn rewrite(&self, i: usize, text: &str) {
        std::fs::write(self.conf_dir.path().join(&self.nets[i].file), text).expect("rewrite");
    }

    /// `cni-gc ARGS` against this node's containerd.
    fn gc(&self, args: &[&str]) -> GcRun {
        self.gc_on(self.ctd.socket(), args)
    }

    /// `cni-gc` in the node namespace (as containerd runs the plugins),
    /// with this node's conf dir and plugins, the runtime at `socket`.
    fn gc_on(&self, socket: &Path, args: &[&str]) -> GcRun {
        let mut cmd = self.gc_command(socket, args);
        let out = self
            .ns
            .netns()
            .run(move || cmd.output())
            .expect("enter the node namespace")
            .expect("run cni-gc");
        GcRun {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The `cni-gc` command line of [`Node::gc_on`].
    fn gc_command(&self, socket: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(CNI_GC);
        cmd.arg("--cri-socket")
            .arg(socket)
            .arg("--conf-dir")
            .arg(self.conf_dir.path())
            .args(["--cache-dir", CACHE_DIR, "--timeout", "30s"])
            .arg("--bin-dir")
            .arg(self.bin.path())
            .args(args);
        cmd
    }

    /// `cni-gc --interval ... --metrics-address 127.0.0.1:0 ARGS` started
    /// in the node namespace; the agent and the URL it serves metrics at.
    fn gc_agent(&self, socket: &Path, args: &[&str]) -> (Agent, String) {
        let mut cmd = self.gc_command(socket, args);
        cmd.args(["--metrics-address", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = self
            .ns
            .netns()
            .run(move || cmd.spawn())
            .expect("enter the node namespace")
            .expect("start cni-gc");
        let stderr = child.stderr.take().expect("stderr");
        let agent = Agent(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("cni-gc: metrics at ") {
                    let _ = tx.send(url.to_string());
                }
                eprintln!("agent: {line}");
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("cni-gc never said where its metrics are");
        (agent, url)
    }

    /// Scrapes `url` from the node namespace and parses it.
    fn scrape(&self, url: &str) -> Scrape {
        let mut cmd = crate::prom_support::scrape_command(url);
        let out = self
            .ns
            .netns()
            .run(move || cmd.output())
            .expect("enter the node namespace")
            .expect("run python3");
        Scrape::from_output(&out)
    }

    /// The leak census of the node: its namespace and host-local's files.
    fn census(&self) -> Census {
        Census::read(&self.ns, Some(self.state.path()))
    }

    /// The cache files of this node's networks, with their bytes.
    fn cache(&self) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(Path::new(CACHE_DIR).join("results"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| {
                self.nets
                    .iter()
                    .any(|n| f.starts_with(&format!("{}-", n.name)))
            })
            .map(|f| {
                let bytes = std::fs::read(Path::new(CACHE_DIR).join("results").join(&f))
                    .unwrap_or_default();
                (f, bytes)
            })
            .collect()
    }

    /// `nft -j list ruleset` in the node.
    fn ruleset(&self) -> Value {
        serde_json::from_str(&self.ns.exec_ok(&["nft", "-j", "list", "ruleset"])).expect("nft json")
    }

    fn links(&self) -> Vec<String> {
        let v: Value = serde_json::from_str(&self.ns.ip(&["-j", "link", "show"])).expect("ip json");
        crate::containerd_cri::link_names(&v)
    }
}

/// A `cni-gc --interval` process, killed when dropped.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Elements of our nftables sets and maps that carry `addr` (masquerade
/// sources, DNAT destinations).
fn nft_elements_with(ruleset: &Value, addr: IpAddr) -> Vec<String> {
    let needle = format!("\"{addr}\"");
    ruleset["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("map").or_else(|| o.get("set")))
        .filter(|m| {
            m["table"]
                .as_str()
                .is_some_and(|t| t.starts_with("cni_rs_"))
        })
        .flat_map(|m| m["elem"].as_array().cloned().unwrap_or_default())
        .map(|e| e.to_string())
        .filter(|e| e.contains(&needle))
        .collect()
}

/// Unmounts and removes a sandbox's netns file (its pause process is
/// gone: the namespace, and the pod end of its veth with it, go away).
fn delete_netns(netns: &Path) {
    sh(&["umount", "-l", &netns.display().to_string()]);
    std::fs::remove_file(netns).expect("remove the netns file");
}

/// Removes the test's own files from the shared cache directory.
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The census after must equal the one before (the changes printed, a
/// changed object by the keys whose values differ). host-local's index
/// beside its files (`.cni-ipam-index/`: owner lines, a pool of released
/// files) moves with every reservation and release while the network has
/// any, by design (cni-ipam's `store/disk.rs`): the reservations are
/// what is compared.
fn assert_same(before: &Census, after: &Census, when: &str) {
    let changes: Vec<Change> = before
        .diff(after)
        .into_iter()
        .filter(|c| !c.key().contains("/.cni-ipam-index/"))
        .collect();
    let show = |c: &Change| match c {
        Change::Changed(k, a, b) => {
            let (a, b): (Value, Value) = (
                serde_json::from_str(a).unwrap_or(Value::Null),
                serde_json::from_str(b).unwrap_or(Value::Null),
            );
            let keys: Vec<String> = a
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, v)| b.get(k.as_str()) != Some(v))
                .map(|(k, v)| format!("{k}: {v} -> {}", b[k.as_str()]))
                .collect();
            format!("~ {k}: {}", keys.join("; "))
        }
        other => other.to_string(),
    };
    assert!(
        changes.is_empty(),
        "{when}, the node changed:\n{}",
        changes.iter().map(show).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn leaked_sandboxes_are_reclaimed_and_live_ones_keep_their_network() {
    if !cni_testkit::premise::require_all(&needs()) {
        return;
    }
    let mut node = Node::start(|s| vec![Net::bridge(10, "pods", s, true)], &[]);
    let net = &node.nets[0];
    let (name, v4, v6) = (net.name.clone(), net.v4, net.v6);
    let mut cri = node.cri();
    let port = host_port().min(65000);
    let a = node.sandbox(&mut cri, "live-a", &[(port, POD_PORT)]);
    let b = node.sandbox(&mut cri, "live-b", &[]);
    let (veth_a, veth_b) = (a.veth(&node.ns.name, "eth0"), b.veth(&node.ns.name, "eth0"));
    let pristine = node.census();

    // Two sandboxes leaked: containerd forgets them, their network stays.
    let c = node.sandbox(&mut cri, "leak-c", &[(port + 1, POD_PORT)]);
    let d = node.sandbox(&mut cri, "leak-d", &[(port + 2, POD_PORT)]);
    let (veth_c, veth_d) = (c.veth(&node.ns.name, "eth0"), d.veth(&node.ns.name, "eth0"));
    node.ctd
        .forget_sandboxes(&[c.id.clone(), d.id.clone()])
        .expect("forget two sandboxes");
    let listed: BTreeMap<String, i32> = cri
        .list_pod_sandbox(None)
        .expect("ListPodSandbox")
        .into_iter()
        .map(|s| (s.id, s.state))
        .collect();
    let ready = PodSandboxState::SandboxReady as i32;
    assert_eq!(
        listed,
        BTreeMap::from([(a.id.clone(), ready), (b.id.clone(), ready)])
    );
    // d's namespace goes behind containerd's back (a reboot's tmpfs).
    delete_netns(&d.netns);
    assert!(
        wait_until(|| !node.links().contains(&veth_d)),
        "{veth_d} outlived its namespace"
    );
    let net = &node.nets[0];
    let ruleset = node.ruleset();
    for (sb, veth) in [(&c, Some(&veth_c)), (&d, None)] {
        assert!(
            net.cache_file(&sb.id, "eth0").is_file(),
            "{} not cached",
            sb.id
        );
        assert_eq!(net.reserved_by(&sb.id).len(), 2, "{}", sb.id);
        assert!(nft_maps_port(&ruleset, sb.ports[0]));
        assert!(!nft_elements_with(&ruleset, sb.ip(false)).is_empty());
        if let Some(v) = veth {
            assert!(node.links().contains(v), "{v} is gone already");
        }
    }
    let leaked = node.census();
    let cached = node.cache();
    let untouched = |when: &str| {
        assert_same(&leaked, &node.census(), when);
        assert_eq!(cached, node.cache(), "{when}: the cache changed");
    };

    // A runtime that lists nothing while attachments are young: refused.
    let empty_conf = tempfile::tempdir().expect("tempdir");
    let empty = Containerd::start(
        ContainerdOptions::new(node.bin.path(), empty_conf.path())
            .netns(node.ns.path())
            .timeout(PATIENCE),
    )
    .expect("start a second containerd");
    let r = node.gc_on(empty.socket(), &[]);
    assert_eq!(r.status, Some(2), "{r}");
    assert!(r.stderr.contains("lists no sandbox"), "{r}");
    assert!(r.stdout.is_empty(), "{r}");
    drop(empty);
    untouched("after a refusal for an empty runtime");
    // A socket that never answers, and a path with nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    let hang = dir.path().join("hang.sock");
    let _listener = UnixListener::bind(&hang).expect("bind");
    let r = node.gc_on(&hang, &["--min-age", "0s", "--timeout", "2s"]);
    assert_eq!(r.status, Some(2), "{r}");
    assert!(r.stderr.contains("no answer within 2s"), "{r}");
    let r = node.gc_on(&dir.path().join("absent.sock"), &["--min-age", "0s"]);
    assert_eq!(r.status, Some(2), "{r}");
    assert!(r.stderr.contains("No such file"), "{r}");
    untouched("after refusals for a silent and an absent socket");
    // Attachments younger than the default hour are never judged dead.
    let r = node.gc(&[]);
    assert_eq!(r.status, Some(0), "{r}");
    assert_eq!(r.summary(), (0, 0, 0), "{r}");
    assert!(
        r.has(&format!("skip {name}/{}/eth0: cached less than", c.id)),
        "{r}"
    );
    // --dry-run says what it would do, and does nothing.
    let r = node.gc(&["--min-age", "0s", "--dry-run"]);
    assert_eq!(r.status, Some(0), "{r}");
    for sb in [&c, &d] {
        assert!(
            r.has(&format!("del {name}/{}/eth0: would run (dry run)", sb.id)),
            "{r}"
        );
    }
    assert!(r.stdout.contains("2 left to a real run (dry run)"), "{r}");
    untouched("after --dry-run");

    // The collection.
    let r = node.gc(&["--min-age", "0s"]);
    assert_eq!(r.status, Some(0), "{r}");
    let net = &node.nets[0];
    let mut mine = r.lines_of(&[net]);
    mine.sort();
    let mut want = vec![
        format!("del {name}/{}/eth0: ok", c.id),
        format!("del {name}/{}/eth0: ok", d.id),
        format!("skip gc {name}: cniVersion \"1.0.0\" has no GC: DEL of cached attachments only"),
    ];
    want.sort();
    assert_eq!(mine, want, "{r}");
    assert_eq!(r.summary(), (2, 0, 0), "{r}");
    // Everything the leaked sandboxes held is gone, nothing else changed.
    assert_same(&pristine, &node.census(), "after cni-gc");
    let ruleset = node.ruleset();
    for sb in [&c, &d] {
        assert!(!net.cache_file(&sb.id, "eth0").exists());
        assert_eq!(net.reserved_by(&sb.id), Vec::<String>::new());
        assert!(!nft_maps_port(&ruleset, sb.ports[0]));
        for v6 in [false, true] {
            assert_eq!(nft_elements_with(&ruleset, sb.ip(v6)), Vec::<String>::new());
        }
    }
    assert!(!node.links().contains(&veth_c));
    // The live ones keep theirs, and still talk.
    for (sb, veth) in [(&a, &veth_a), (&b, &veth_b)] {
        assert!(net.cache_file(&sb.id, "eth0").is_file());
        assert_eq!(net.reserved_by(&sb.id).len(), 2);
        assert!(node.links().contains(veth));
        for v6 in [false, true] {
            assert!(!nft_elements_with(&ruleset, sb.ip(v6)).is_empty());
        }
    }
    assert!(v4.contains(a.ip(false)) && v6.is_some_and(|n| n.contains(a.ip(true))));
    for v6 in [false, true] {
        for (from, to) in [(&a, &b), (&b, &a)] {
            assert_pings(&from.netns, to.ip(v6));
        }
    }
    let _srv = TcpServer::answering(
        &a.netns,
        SocketAddr::new("0.0.0.0".parse().unwrap(), POD_PORT),
        "still here",
    );
    let got = tcp_get(
        Path::new(&node.ns.path()),
        SocketAddr::new("127.0.0.1".parse().unwrap(), port),
    );
    assert_eq!(got.as_deref(), Ok("still here"));
    // A second pass finds nothing of ours to do.
    let r = node.gc(&["--min-age", "0s"]);
    assert_eq!((r.status, r.summary()), (Some(0), (0, 0, 0)), "{r}");
}

#[test]
fn each_network_is_collected_by_its_own_rules_and_bad_input_is_kept() {
    if !cni_testkit::premise::require_all(&needs()) {
        return;
    }
    let gone_type = format!("gcgone{}", hex6());
    let passthru = Path::new(env!("CARGO_BIN_EXE_passthru"));
    let mut node = Node::start(
        |s| {
            vec![
                Net::bridge(10, "main", s, true),
                Net::bridge(20, "off", s, false),
                Net::bridge(30, "old", s, false),
                Net::bridge(40, "bad", s, false),
                Net::single(50, "gone", &gone_type, s),
            ]
        },
        &[(&gone_type, passthru)],
    );
    let mut cri = node.cri();
    let port = host_port().min(65000);
    let live = node.sandbox(&mut cri, "live", &[(port, POD_PORT)]);
    let x = node.sandbox(&mut cri, "leak-x", &[(port + 1, POD_PORT)]);
    let y = node.sandbox(&mut cri, "leak-y", &[(port + 2, POD_PORT)]);
    let ifs = ["eth0", "eth1", "eth2", "eth3", "eth4"];
    let veths = |sb: &Sandbox| -> Vec<String> {
        ifs[..4].iter().map(|i| sb.veth(&node.ns.name, i)).collect()
    };
    let (live_veths, x_veths) = (veths(&live), veths(&x));
    node.ctd
        .forget_sandboxes(&[x.id.clone(), y.id.clone()])
        .expect("forget two sandboxes");
    // y also lost its namespace and, in main and old, its cache files (a
    // crash before the runtime wrote them): only a GC can find those.
    delete_netns(&y.netns);
    let [main, off, old, bad, gone] = [0, 1, 2, 3, 4].map(|i| &node.nets[i]);
    for (net, i) in [(main, 0), (old, 2)] {
        std::fs::remove_file(net.cache_file(&y.id, ifs[i])).expect("remove y's cache file");
    }
    // The node's configs change under the runtime: main and off at
    // 1.1.0 (off with disableGC), bad unparsable, gone's plugin removed.
    node.rewrite(0, &main.conflist("1.1.0", json!({})).to_string());
    node.rewrite(
        1,
        &off.conflist("1.1.0", json!({"disableGC": true}))
            .to_string(),
    );
    node.rewrite(3, r#"{"cniVersion": "1.0.0", "name": "#);
    std::fs::remove_file(node.bin.path().join(&gone_type)).expect("remove the plugin");
    // And a cache file of main's that is not a cache record.
    let corrupt = Path::new(CACHE_DIR).join("results").join(format!(
        "{}-{}{}-eth0",
        main.name,
        hex6(),
        hex6()
    ));
    let _guard = RemoveOnDrop(vec![corrupt.clone()]);
    std::fs::write(&corrupt, b"{\"kind\": \"cniCacheV1\", \"containerId\": ").expect("write");
    let held = |net: &Net, sb: &Sandbox| !net.reserved_by(&sb.id).is_empty();
    for net in [main, off, old, bad] {
        for sb in [&live, &x, &y] {
            assert!(held(net, sb), "{} holds nothing in {}", sb.id, net.name);
        }
    }
    let y_v4 = y.ip(false);
    assert!(!nft_elements_with(&node.ruleset(), y_v4).is_empty());

    let r = node.gc(&["--min-age", "0s"]);
    assert_eq!(r.status, Some(1), "{r}");
    assert_eq!(r.summary(), (2, 0, 2), "{r}");
    let conf = node.conf_dir.path().display().to_string();
    let expected = [
        format!("del {}/{}/eth0: ok", main.name, x.id),
        format!("del {}/{}/eth2: ok", old.name, x.id),
        format!("del {}/{}/eth4: error", gone.name, x.id),
        format!("del {}/{}/eth4: error", gone.name, y.id),
        format!("skip gc {}: cache file {}", main.name, corrupt.display()),
        format!("skip gc {}: disableGC", off.name),
        format!("skip gc {}: cniVersion \"1.0.0\" has no GC", old.name),
        format!("skip {conf}/40-bad.conflist: unreadable config"),
        format!(
            "skip network \"{}\": not in the conf dir: 3 cached attachment(s) left alone",
            bad.name
        ),
        format!("skip {}: not a cache record", corrupt.display()),
    ];
    for want in &expected {
        assert!(r.has(want), "no line {want:?}\n{r}");
    }
    for sb in [&x, &y] {
        let line = format!("del {}/{}/eth4: error", gone.name, sb.id);
        let line = r.stdout.lines().find(|l| l.starts_with(&line)).unwrap();
        assert!(
            line.contains(&format!("failed to find plugin \"{gone_type}\""))
                && line.ends_with("(cache kept)"),
            "{line}"
        );
    }
    let lines = r.lines_of(&[main, off, old, bad, gone]);
    assert!(
        !lines.iter().any(|l| l.contains(&live.id)),
        "the live sandbox was named: {lines:#?}"
    );
    // Phase 1 took x's main and old attachments (veths too: x's namespace
    // is still there); gc main waits for the corrupt file.
    assert!(!held(main, &x) && !held(old, &x));
    assert!(!main.cache_file(&x.id, "eth0").exists());
    let links = node.links();
    assert!(!links.contains(&x_veths[0]) && !links.contains(&x_veths[2]));
    assert!(
        held(main, &y),
        "main's GC ran while a cache file is unreadable"
    );
    // disableGC, unparsable config, missing plugin: everything kept.
    for sb in [&x, &y] {
        assert!(held(off, sb) && held(bad, sb), "{}", sb.id);
        for (net, i) in [(off, 1), (bad, 3), (gone, 4)] {
            assert!(net.cache_file(&sb.id, ifs[i]).is_file(), "{}", net.name);
        }
    }
    assert!(links.contains(&x_veths[1]) && links.contains(&x_veths[3]));
    assert!(corrupt.is_file(), "the corrupt cache file was removed");

    // The operator removes the corrupt file: main gets its GC, which
    // releases what y held there with no cache file (address, masquerade,
    // host port); old, at 1.0.0, gets none: y's address there stays.
    std::fs::remove_file(&corrupt).expect("remove the corrupt file");
    // A network namespace made meanwhile by another test's containerd (the
    // mount table is the node's) postpones main's GC, as it must: a sandbox
    // may be starting. Ask again until none is that young (repeated passes
    // change nothing else: x is collected, gone's DELs fail each time).
    let postponed = format!("skip gc {}: network namespace", main.name);
    let mut r = node.gc(&["--min-age", "0s"]);
    for _ in 0..60 {
        if !r.has(&postponed) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        r = node.gc(&["--min-age", "0s"]);
    }
    assert_eq!(r.status, Some(1), "{r}");
    assert_eq!(r.summary(), (0, 1, 2), "{r}");
    assert!(r.has(&format!("gc {}: ok", main.name)), "{r}");
    assert!(!held(main, &y), "y's address in main outlived the GC");
    let ruleset = node.ruleset();
    assert_eq!(nft_elements_with(&ruleset, y_v4), Vec::<String>::new());
    assert!(!nft_maps_port(&ruleset, port + 2));
    assert!(held(old, &y), "a 1.0.0 network got a GC");
    // The live sandbox holds all it held.
    for net in [main, off, old, bad] {
        assert!(held(net, &live), "{}", net.name);
    }
    for (net, i) in [(main, 0), (off, 1), (old, 2), (bad, 3), (gone, 4)] {
        assert!(net.cache_file(&live.id, ifs[i]).is_file(), "{}", net.name);
    }
    let links = node.links();
    for v in &live_veths {
        assert!(links.contains(v), "{v} is gone");
    }
    assert!(nft_maps_port(&ruleset, port));
    assert!(!nft_elements_with(&ruleset, live.ip(false)).is_empty());

    // --network: only old (nothing left to do there); the others, gone's
    // failing DELs included, are left alone. A name no config has: refused.
    let cached = node.cache();
    let r = node.gc(&["--min-age", "0s", "--network", &old.name]);
    assert_eq!((r.status, r.summary()), (Some(0), (0, 0, 0)), "{r}");
    for net in [main, off, gone] {
        let line = format!("skip network \"{}\": not selected (--network)", net.name);
        assert!(r.has(&line), "no line {line:?}\n{r}");
    }
    assert!(!r.stdout.contains(&format!("del {}", gone.name)), "{r}");
    let r = node.gc(&[
        "--min-age",
        "0s",
        "--network",
        &format!("{},typo", old.name),
    ]);
    assert_eq!(r.status, Some(2), "{r}");
    assert!(r.stderr.contains("--network typo: no config"), "{r}");
    assert_eq!(cached, node.cache(), "--network runs changed the cache");
}

/// `cni-gc ARGS`, again while a network namespace made meanwhile by another
/// test's containerd (the mount table is the node's) postpones `net`'s GC:
/// a sandbox may be starting, as the collector must assume.
fn gc_unpostponed_by_netns(node: &Node, net: &Net, args: &[&str]) -> GcRun {
    let postponed = format!("skip gc {}: network namespace", net.name);
    let mut r = node.gc(args);
    for _ in 0..60 {
        if !r.has(&postponed) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        r = node.gc(args);
    }
    r
}

/// Issue 36, items 1 and 2: where cni-gc cannot tie what the runtime says
/// is alive to the cache, it refuses (exit 2) or postpones the GC, and
/// nothing alive changes: (b) `--cache-dir` naming an empty directory (or
/// one whose `results/` is empty) while live pods run; (c) a live pod whose
/// cache record was lost, on a 1.1.0 network: no GC, the pod keeps its
/// address (a hostNetwork sandbox, which no record names either, does not
/// stop the GC); (a) containerd restarted without its state while pods
/// older than `--min-age` hold addresses: refused, until the operator asks
/// for it with `--delete-unlisted-networks`.
#[test]
fn where_the_runtime_and_the_cache_disagree_nothing_alive_is_taken() {
    if !cni_testkit::premise::require_all(&needs()) {
        return;
    }
    let mut node = Node::start(|s| vec![Net::bridge(10, "tie", s, false)], &[]);
    let mut cri = node.cri();
    let a = node.sandbox(&mut cri, "live-a", &[]);
    let b = node.sandbox(&mut cri, "live-b", &[]);
    // A hostNetwork sandbox: containerd attaches no network, caches nothing.
    let mut config = node.ctd.pod_config("host");
    // The node's UTS namespace too (as kubelet's hostNetwork pods): no
    // hostname of its own.
    config.hostname.clear();
    if let Some(linux) = config.linux.as_mut() {
        linux.security_context = Some(LinuxSandboxSecurityContext {
            namespace_options: Some(NamespaceOption {
                network: NamespaceMode::Node as i32,
                ..Default::default()
            }),
        });
    }
    let host = node
        .ctd
        .run_pod_sandbox(&mut cri, config)
        .expect("run a hostNetwork sandbox");
    let status = cri.pod_sandbox_status(&host, false).expect("status");
    assert!(
        status
            .status
            .as_ref()
            .is_some_and(|s| s.uses_node_network()),
        "containerd does not report the sandbox's network mode as NODE"
    );
    // The runtime upgraded: the network is collected by GC too.
    let net = &node.nets[0];
    node.rewrite(0, &net.conflist("1.1.0", json!({})).to_string());
    let net = &node.nets[0];
    let held = |sb: &Sandbox| net.reserved_by(&sb.id).len();
    assert_eq!((held(&a), held(&b)), (1, 1));
    let before = node.census();
    let cached = node.cache();
    let untouched = |when: &str| {
        assert_same(&before, &node.census(), when);
        assert_eq!(cached, node.cache(), "{when}: the cache changed");
        assert_eq!((held(&a), held(&b)), (1, 1), "{when}");
    };

    // (b) A cache directory that is empty (a typo, a missing mount).
    let empty = tempfile::tempdir().expect("tempdir");
    let empty_dir = empty.path().display().to_string();
    let r = node.gc(&["--min-age", "0s", "--cache-dir", &empty_dir]);
    assert_eq!(r.status, Some(2), "{r}");
    assert!(r.stderr.contains("has no results/ directory"), "{r}");
    assert!(r.stdout.is_empty(), "{r}");
    untouched("after --cache-dir naming an empty directory");
    // One with an empty results/ (another runtime's cache): the live
    // sandboxes have no record there, so the GC is postponed.
    std::fs::create_dir(empty.path().join("results")).expect("mkdir");
    let r = node.gc(&["--min-age", "0s", "--cache-dir", &empty_dir]);
    assert_eq!(r.status, Some(0), "{r}");
    assert!(
        r.has(&format!("skip gc {}: sandbox ", net.name))
            && r.stdout
                .contains("is ready but has no cache record on this network"),
        "{r}"
    );
    untouched("after --cache-dir naming an empty cache");

    // As it should be: the GC runs, the hostNetwork sandbox is no reason to
    // wait, the live ones keep their addresses.
    let r = gc_unpostponed_by_netns(&node, net, &["--min-age", "0s"]);
    assert_eq!(r.status, Some(0), "{r}");
    assert!(r.has(&format!("gc {}: ok", net.name)), "{r}");
    assert!(!r.stdout.contains(&host), "{r}");
    untouched("after a pass on a consistent node");

    // (c) b's cache record lost (a crash between its ADD and the cache).
    let b_file = net.cache_file(&b.id, "eth0");
    let b_record = std::fs::read(&b_file).expect("b's cache record");
    std::fs::remove_file(&b_file).expect("remove b's cache record");
    let r = gc_unpostponed_by_netns(&node, net, &["--min-age", "0s"]);
    assert_eq!(r.status, Some(0), "{r}");
    assert!(
        r.has(&format!(
            "skip gc {}: sandbox {} is ready but has no cache record on this network",
            net.name, b.id
        )),
        "{r}"
    );
    assert_eq!(r.summary(), (0, 0, 0), "{r}");
    assert_eq!((held(&a), held(&b)), (1, 1), "b lost its address\n{r}");
    assert_same(&before, &node.census(), "after a pass with b's record lost");
    std::fs::write(&b_file, &b_record).expect("restore b's cache record");

    // (a) containerd restarted without its state: it lists none of the
    // cached containers, all older than --min-age.
    node.ctd
        .forget_sandboxes(&[a.id.clone(), b.id.clone(), host.clone()])
        .expect("forget every sandbox");
    let listed = cri.list_pod_sandbox(None).expect("ListPodSandbox");
    assert!(listed.is_empty(), "{listed:?}");
    let cached = node.cache();
    let leaked = node.census();
    for args in [
        &["--min-age", "0s"][..],
        &["--min-age", "0s", "--network", &net.name],
    ] {
        let r = node.gc(args);
        assert_eq!(r.status, Some(2), "{r}");
        assert!(
            r.stderr
                .contains("lists none of the 2 container(s) cached on this node's networks")
                && r.stderr.contains("--delete-unlisted-networks"),
            "{r}"
        );
        assert_same(&leaked, &node.census(), "after the refusal");
        assert_eq!(cached, node.cache(), "the refusal changed the cache");
        assert_eq!((held(&a), held(&b)), (1, 1));
    }
    // Asked for explicitly: both DELeted, their addresses released (one
    // pass: phase 1 runs even when another test's young namespace
    // postpones the GC).
    let r = node.gc(&["--min-age", "0s", "--delete-unlisted-networks"]);
    assert_eq!(r.status, Some(0), "{r}");
    for sb in [&a, &b] {
        assert!(
            r.has(&format!("del {}/{}/eth0: ok", net.name, sb.id)),
            "{r}"
        );
        assert_eq!(held(sb), 0, "{}", sb.id);
        assert!(!net.cache_file(&sb.id, "eth0").exists());
    }
}

/// Issue 36, item 3: a cache record copied under another name (a backup)
/// is DELeted once and removed, not DELeted on every pass; a FIFO in the
/// conf dir does not block a pass.
#[test]
fn a_copied_cache_record_is_removed_and_a_fifo_in_the_conf_dir_is_skipped() {
    if !cni_testkit::premise::require_all(&needs()) {
        return;
    }
    let mut node = Node::start(|s| vec![Net::bridge(10, "copy", s, false)], &[]);
    let mut cri = node.cri();
    let live = node.sandbox(&mut cri, "live", &[]);
    let gone = node.sandbox(&mut cri, "gone", &[]);
    node.ctd
        .forget_sandboxes(std::slice::from_ref(&gone.id))
        .expect("forget a sandbox");
    let net = &node.nets[0];
    let real = net.cache_file(&gone.id, "eth0");
    let copy = real.with_file_name(format!("{}-{}-eth0.bak", net.name, gone.id));
    let _guard = RemoveOnDrop(vec![copy.clone()]);
    std::fs::copy(&real, &copy).expect("copy the cache record");
    let fifo = node.conf_dir.path().join("05-fifo.conflist");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    // One pass (phase 1 runs even when another test's young namespace
    // postpones the GC).
    let r = node.gc(&["--min-age", "0s", "--timeout", "30s"]);
    // containerd watches the conf dir and its libcni opens the FIFO
    // (blocking, as Go does): a writer end releases it (it reads an empty
    // file, not a config), then the FIFO goes.
    drop(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .expect("open the FIFO"),
    );
    std::fs::remove_file(&fifo).expect("remove the FIFO");
    assert_eq!(r.status, Some(0), "{r}");
    assert!(!r.stdout.contains("05-fifo"), "{r}");
    assert_eq!(r.summary().0, 2, "the record and its copy: {r}");
    assert!(!real.exists() && !copy.exists(), "{r}");
    assert_eq!(net.reserved_by(&gone.id), Vec::<String>::new());
    assert_eq!(net.reserved_by(&live.id).len(), 1);
    let r = node.gc(&["--min-age", "0s"]);
    assert_eq!((r.status, r.summary()), (Some(0), (0, 0, 0)), "{r}");
}

/// The families both the endpoint and the textfile carry, with their types
/// as Prometheus' parser names them.
const GC_FAMILIES: &[(&str, &str)] = &[
    ("cni_gc_build_info", "gauge"),
    ("cni_gc_passes", "counter"),
    ("cni_gc_refusals", "counter"),
    ("cni_gc_attachments_deleted", "counter"),
    ("cni_gc_networks_collected", "counter"),
    ("cni_gc_skipped", "counter"),
    ("cni_gc_dry_run_actions", "counter"),
    ("cni_gc_failures", "counter"),
    ("cni_gc_pass_duration_seconds", "histogram"),
    ("cni_gc_last_pass_timestamp_seconds", "gauge"),
    ("cni_gc_last_success_timestamp_seconds", "gauge"),
    ("cni_gc_last_pass_success", "gauge"),
];

/// Issue 39, item 4: `cni-gc --interval` serves its metrics; scraped with
/// a real HTTP client and read with Prometheus' own parser, its counters
/// move as it acts: a pass that DELetes a leaked attachment counts it on
/// its network; a refused pass counts its reason. The textfile of a
/// one-shot run (and of the agent) is written atomically, parses, and has
/// the same families.
#[test]
fn metrics_move_as_the_collector_acts() {
    if !cni_testkit::premise::require_all(&needs()) || !crate::prom_support::require_parser() {
        return;
    }
    let mut node = Node::start(|s| vec![Net::bridge(10, "met", s, false)], &[]);
    let mut cri = node.cri();
    let live = node.sandbox(&mut cri, "live", &[]);
    let gone = node.sandbox(&mut cri, "gone", &[]);
    node.ctd
        .forget_sandboxes(std::slice::from_ref(&gone.id))
        .expect("forget a sandbox");
    let net = &node.nets[0];
    assert!(net.cache_file(&gone.id, "eth0").exists());
    let textfiles = tempfile::tempdir().expect("tempdir");
    let agent_dir = textfiles.path().join("agent");
    std::fs::create_dir(&agent_dir).expect("mkdir");
    let agent_dir_arg = agent_dir.to_str().expect("utf-8 path");
    let (agent, url) = node.gc_agent(
        node.ctd.socket(),
        &[
            "--interval",
            "1s",
            "--min-age",
            "0s",
            "--network",
            &net.name,
            "--textfile-dir",
            agent_dir_arg,
        ],
    );
    let deleted = |m: &Scrape| {
        m.sum(
            "cni_gc_attachments_deleted_total",
            &[("network", net.name.as_str())],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let m = loop {
        let m = node.scrape(&url);
        if deleted(&m) >= 1.0 && m.sum("cni_gc_passes_total", &[]) >= 2.0 {
            break m;
        }
        assert!(Instant::now() < deadline, "no DEL counted: {m:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // Exactly the one leaked attachment, on its network; the live one
    // kept; later passes found nothing more to do.
    assert_eq!(deleted(&m), 1.0, "{m:?}");
    assert!(!net.cache_file(&gone.id, "eth0").exists());
    assert_eq!(net.reserved_by(&gone.id), Vec::<String>::new());
    assert_eq!(net.reserved_by(&live.id).len(), 1);
    for (family, kind) in GC_FAMILIES {
        assert_eq!(m.family_type(family), Some(*kind), "{family}: {m:?}");
    }
    assert!(
        m.sum("cni_gc_passes_total", &[("outcome", "success")]) >= 2.0,
        "{m:?}"
    );
    assert_eq!(m.sum("cni_gc_passes_total", &[("outcome", "refused")]), 0.0);
    assert_eq!(
        m.sum("cni_gc_failures_total", &[("network", net.name.as_str())]),
        0.0
    );
    assert!(m.sum("cni_gc_pass_duration_seconds_count", &[]) >= 2.0);
    assert_eq!(
        m.sum("cni_gc_pass_duration_seconds_bucket", &[("le", "+Inf")]),
        m.sum("cni_gc_pass_duration_seconds_count", &[])
    );
    assert!(m.sum("cni_gc_last_pass_timestamp_seconds", &[]) > 1.7e9);
    assert_eq!(
        m.sum(
            "cni_gc_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    drop(agent);
    // The agent's textfile: parses, the same families, nothing left
    // beside it (the temporary file was renamed).
    let agent_file = agent_dir.join("cni_gc.prom");
    let t = Scrape::get(&format!("file://{}", agent_file.display()));
    assert_eq!(t.families, m.families);
    assert_eq!(
        std::fs::read_dir(&agent_dir).expect("read dir").count(),
        1,
        "only cni_gc.prom"
    );

    // A refused one-shot pass (a --network no config names): its textfile
    // counts the refusal by reason.
    let typo = format!("{}-typo", net.name);
    let once_dir = textfiles.path().join("once");
    let once_arg = once_dir.to_str().expect("utf-8 path");
    std::fs::create_dir(&once_dir).expect("mkdir");
    let r = node.gc(&["--network", &typo, "--textfile-dir", once_arg]);
    assert_eq!(r.status, Some(2), "{r}");
    let t = Scrape::get(&format!("file://{once_arg}/cni_gc.prom"));
    assert_eq!(t.families, m.families);
    assert_eq!(
        t.sum("cni_gc_refusals_total", &[("reason", "unknown_network")]),
        1.0
    );
    assert_eq!(t.sum("cni_gc_refusals_total", &[]), 1.0);
    assert_eq!(t.sum("cni_gc_passes_total", &[("outcome", "refused")]), 1.0);
    assert_eq!(t.sum("cni_gc_last_pass_success", &[]), 0.0);
    assert_eq!(std::fs::read_dir(&once_dir).expect("read dir").count(), 1);

    // An agent whose runtime cannot be asked: each pass counts
    // runtime_unavailable.
    let (_agent, url) = node.gc_agent(
        &node.state.path().join("no-runtime.sock"),
        &["--interval", "1s"],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = node.scrape(&url);
        let refused = m.sum(
            "cni_gc_refusals_total",
            &[("reason", "runtime_unavailable")],
        );
        if refused >= 2.0 {
            assert_eq!(
                m.sum("cni_gc_passes_total", &[("outcome", "refused")]),
                refused
            );
            assert_eq!(m.sum("cni_gc_passes_total", &[("outcome", "success")]), 0.0);
            break;
        }
        assert!(Instant::now() < deadline, "no refusal counted: {m:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
