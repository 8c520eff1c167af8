//! Fault injection (issue #12): plugins SIGKILLed at random points of ADD
//! and of DEL, then the runtime's recovery, then independent oracles.
//!
//! Each chain runs in a fresh "node" namespace with our binaries, a temp
//! result cache, temp IPAM/flannel/multus directories and a unique bridge,
//! driven by the real runtime side ([`CniConfig`]) over [`KillingExec`],
//! which puts each plugin in its own process group and SIGKILLs the group
//! (the plugin and the delegates it exec'd) `delay` after the spawn, with
//! the call and the delay (0..1.2 x the call's measured duration) drawn
//! from a seeded RNG (the seed is printed; `RELIABILITY_SEED=<n>` replays).
//! One kill in four takes the plugin alone, as a runtime's timeout does:
//! delegates it exec'd finish as orphans before the recovery starts. Half
//! the iterations set `CNI_RS_EXEC_DELEGATES=1`, so delegates of the same
//! build are exec'd rather than run in the plugin's process.
//!
//! After each kill the runtime recovers as a node does: DEL of the
//! attachment, then GC with the valid set = the live attachments. Then:
//! the dead pod namespace has no interface left; the node's links, bridge
//! ports, nft ruleset (handles aside) and every file under the state
//! directories are exactly the baseline taken with only the live
//! attachments; the dead container id appears in no rule and no file; the
//! live attachments still answer ping from the node.
//!
//! Smoke size (normal suite): 20 kills per chain, or `RELIABILITY_KILLS`.
//! Full campaign: `RELIABILITY_KILLS=300 cargo test -p cni-plugins --test
//! reliability_faults -- --ignored --nocapture` (the `full_*` tests; 300
//! kills per chain unless `RELIABILITY_KILLS` says otherwise). Needs root;
//! skipped otherwise.
// Runs the multus binaries too: needs the `multus` feature.
#![cfg(feature = "multus")]

use crate::reliability_support as support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::nodenet::{suffix, Ns, PluginDir};
use cni_exec::{CniConfig, RuntimeConf};
use cni_testkit::KubeApiServer;
use cni_types::{GcAttachment, NetworkConfigList};
use serde_json::{json, Map, Value};
use support::{pings, pod_links, KillPlan, KillingExec, NodeState, Rng};

const SMOKE_KILLS: usize = 20;
const FULL_KILLS: usize = 300;

fn kills(default: usize) -> usize {
    std::env::var("RELIABILITY_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn plugin_dir() -> PluginDir {
    PluginDir::new(&[
        ("bridge", env!("CARGO_BIN_EXE_bridge")),
        ("host-local", env!("CARGO_BIN_EXE_host-local")),
        ("portmap", env!("CARGO_BIN_EXE_portmap")),
        ("flannel", env!("CARGO_BIN_EXE_flannel")),
        ("multus", env!("CARGO_BIN_EXE_multus")),
        ("loopback", env!("CARGO_BIN_EXE_loopback")),
    ])
}

type RtFn = Box<dyn Fn(&str, &Ns, u16) -> RuntimeConf + Send + Sync>;
type HookFn = Box<dyn Fn(&str) + Send + Sync>;

/// One chain on its own node, with what its recovery and oracles need.
struct Chain {
    label: &'static str,
    list: NetworkConfigList,
    cni: CniConfig,
    exec: Arc<KillingExec>,
    state_dirs: Vec<PathBuf>,
    make_rt: RtFn,
    before_add: HookFn,
    // Dropped after `node`'s users, before `node` (field order).
    _keep: Vec<Box<dyn std::any::Any + Send + Sync>>,
    node: Ns,
}

/// The tally of one campaign.
#[derive(Default, Debug)]
struct Stats {
    iterations: usize,
    injected: usize,
    survived: usize,
    leaked: usize,
    failed_recovery: usize,
    points: BTreeMap<String, usize>,
    /// Kills by when they landed, as a share of the call's typical duration.
    phases: BTreeMap<&'static str, usize>,
    problems: Vec<String>,
}

struct Live {
    cid: String,
    rt: RuntimeConf,
    ip: String,
    pod: Ns,
}

impl Chain {
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

    fn gc(&self, live: &[Live]) -> Result<(), String> {
        let valid: Vec<GcAttachment> = live
            .iter()
            .map(|l| GcAttachment {
                container_id: l.cid.clone(),
                ifname: "eth0".into(),
            })
            .collect();
        self.node
            .netns()
            .run(|| self.cni.gc_network_list(&self.list, Some(&valid)))
            .expect("enter node")
            .map_err(|e| e.to_string())
    }

    fn state(&self) -> NodeState {
        NodeState::read(&self.node, &self.state_dirs)
    }

    /// Runs `kills` SIGKILLs (or up to 5x as many tries when kills miss).
    fn campaign(&self, kills: usize, rng: &mut Rng) -> Stats {
        let sfx = suffix();
        // Live attachments, kept the whole time.
        let mut live = Vec::new();
        for i in 0..2u16 {
            let cid = format!("live{i}-{sfx}");
            let pod = Ns::new("rlive");
            (self.before_add)(&cid);
            self.exec.arm(None);
            let rt = (self.make_rt)(&cid, &pod, 18000 + i);
            let r = self
                .add(&rt)
                .unwrap_or_else(|e| panic!("{}: live ADD: {e}", self.label));
            let ip = r["ips"][0]["address"]
                .as_str()
                .and_then(|a| a.split('/').next())
                .expect("live ip")
                .to_string();
            live.push(Live { cid, rt, ip, pod });
        }
        // Warm-up: the calls of a clean ADD and DEL and how long they take.
        let mut typical: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        for w in 0..2 {
            let cid = format!("warm{w}-{sfx}");
            let pod = Ns::new("rwarm");
            let rt = (self.make_rt)(&cid, &pod, 19000);
            (self.before_add)(&cid);
            self.exec.arm(None);
            self.add(&rt)
                .unwrap_or_else(|e| panic!("{}: warm-up ADD: {e}", self.label));
            let add: Vec<Duration> = self.exec.calls().iter().map(|c| c.took).collect();
            self.exec.arm(None);
            self.del(&rt)
                .unwrap_or_else(|e| panic!("{}: warm-up DEL: {e}", self.label));
            let del: Vec<Duration> = self.exec.calls().iter().map(|c| c.took).collect();
            typical.insert("ADD", add);
            typical.insert("DEL", del);
        }
        self.gc(&live)
            .unwrap_or_else(|e| panic!("{}: baseline GC: {e}", self.label));
        let base = self.state();
        eprintln!(
            "{}: typical call durations {typical:?}; baseline {} links, {} files",
            self.label,
            base.links.len(),
            base.files.len()
        );

        let mut st = Stats::default();
        let mut i = 0usize;
        while st.injected < kills && st.iterations < kills * 5 {
            st.iterations += 1;
            i += 1;
            let op = if rng.below(2) == 0 { "ADD" } else { "DEL" };
            let durations = typical[op].clone();
            let call = rng.below(durations.len() as u64) as usize;
            let max = durations[call].as_micros() as u64 * 6 / 5 + 1;
            let delay = Duration::from_micros(rng.below(max));
            // One kill in four takes the plugin alone, leaving its
            // delegates to finish as orphans.
            let group = rng.below(4) != 0;
            // Same-build delegates run in the plugin's process unless told
            // otherwise (cni_exec::same_build): half the iterations exec
            // them, so kills land in delegate processes too.
            let exec_delegates = rng.below(2) == 0;
            self.exec.set_exec_delegates(exec_delegates);
            let plan = KillPlan { call, delay, group };
            let cid = format!("dead{i}-{sfx}");
            let pod = Ns::new("rdead");
            let rt = (self.make_rt)(&cid, &pod, 20000 + (i % 20000) as u16);
            (self.before_add)(&cid);
            let outcome = if op == "ADD" {
                self.exec.arm(Some(plan));
                self.add(&rt).map(|_| ())
            } else {
                self.exec.arm(None);
                if let Err(e) = self.add(&rt) {
                    st.problems
                        .push(format!("{cid}: ADD before the DEL kill failed: {e}"));
                    st.failed_recovery += 1;
                }
                self.exec.arm(Some(plan));
                self.del(&rt)
            };
            let killed = self.exec.killed();
            // Follow the machine's load: a moving average of the calls that
            // ran to completion.
            for (n, c) in self.exec.calls().iter().enumerate() {
                if let (false, Some(t)) = (c.killed, typical.get_mut(op).and_then(|v| v.get_mut(n)))
                {
                    *t = (*t * 4 + c.took) / 5;
                }
            }
            if let Some(k) = &killed {
                st.injected += 1;
                *st.points
                    .entry(format!(
                        "{op} {} {}, delegates {}",
                        k.plugin,
                        if group { "+ delegates" } else { "alone" },
                        if exec_delegates {
                            "exec'd"
                        } else {
                            "in-process"
                        }
                    ))
                    .or_default() += 1;
                let share = delay.as_secs_f64() / durations[call].as_secs_f64().max(1e-6);
                let phase = match share {
                    s if s < 0.25 => "0-25%",
                    s if s < 0.5 => "25-50%",
                    s if s < 0.75 => "50-75%",
                    _ => "75-120%",
                };
                *st.phases.entry(phase).or_default() += 1;
                if outcome.is_ok() {
                    st.problems.push(format!(
                        "{cid}: {op} succeeded though {} was killed",
                        k.plugin
                    ));
                }
            }
            // The runtime's recovery.
            self.exec.arm(None);
            let mut problems = Vec::new();
            if let Err(e) = self.del(&rt) {
                problems.push(format!("recovery DEL: {e}"));
            }
            if let Err(e) = self.gc(&live) {
                problems.push(format!("recovery GC: {e}"));
            }
            let recovery_failed = !problems.is_empty();
            // The oracles.
            let left = pod_links(&pod);
            if !left.is_empty() {
                problems.push(format!("pod namespace still has {left:?}"));
            }
            let now = self.state();
            problems.extend(now.diff(&base));
            problems.extend(now.mentions(&cid));
            for l in &live {
                if !pings(&self.node, &l.ip) {
                    problems.push(format!("live {} ({}) does not answer ping", l.cid, l.ip));
                }
                if pod_links(&l.pod).is_empty() {
                    problems.push(format!("live {} lost its interfaces", l.cid));
                }
            }
            drop(pod);
            if killed.is_some() {
                if problems.is_empty() {
                    st.survived += 1;
                } else if recovery_failed {
                    st.failed_recovery += 1;
                } else {
                    st.leaked += 1;
                }
            }
            if !problems.is_empty() {
                let point = killed
                    .as_ref()
                    .map(|k| format!("{op} {} killed after {:?}", k.plugin, k.took))
                    .unwrap_or_else(|| format!("{op} not killed ({plan:?})"));
                st.problems
                    .push(format!("{cid} [{point}]:\n    {}", problems.join("\n    ")));
                if st.problems.len() > 5 {
                    break;
                }
            }
        }
        // The live attachments leave cleanly too.
        self.exec.arm(None);
        for l in &live {
            if let Err(e) = self.del(&l.rt) {
                st.problems.push(format!("final DEL of {}: {e}", l.cid));
            }
            if !pod_links(&l.pod).is_empty() {
                st.problems.push(format!("{} kept interfaces", l.cid));
            }
        }
        let end = self.state();
        for l in &live {
            st.problems.extend(end.mentions(&l.cid));
        }
        st
    }
}

fn report(label: &str, kills: usize, st: &Stats, took: Duration) {
    eprintln!(
        "RELIABILITY chain={label} target={kills} iterations={} injected={} survived={} \
         leaked={} failed_recovery={} took={:.1}s points={:?} phases={:?}",
        st.iterations,
        st.injected,
        st.survived,
        st.leaked,
        st.failed_recovery,
        took.as_secs_f64(),
        st.points,
        st.phases
    );
    assert!(
        st.problems.is_empty(),
        "{label}: {} problem(s):\n{}",
        st.problems.len(),
        st.problems.join("\n")
    );
    assert_eq!(st.leaked, 0);
    assert!(
        st.injected >= kills,
        "{label}: only {} of {kills} kills landed in {} iterations",
        st.injected,
        st.iterations
    );
}

fn cni_for(plugins: &PluginDir, cache: &std::path::Path) -> (CniConfig, Arc<KillingExec>) {
    let exec = Arc::new(KillingExec::default());
    let cni =
        CniConfig::new(vec![plugins.dir.path().to_path_buf()], exec.clone()).with_cache_dir(cache);
    (cni, exec)
}

fn port_map(port: u16) -> Map<String, Value> {
    let mut caps = Map::new();
    caps.insert(
        "portMappings".into(),
        json!([{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]),
    );
    caps
}

fn node() -> Ns {
    let node = Ns::new("rnode");
    node.sysctl("net.ipv4.ip_forward", "1");
    node
}

/// bridge (ipMasq, host-local) + portmap.
fn bridge_chain() -> Chain {
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    let sfx = suffix();
    let ipam = dir.path().join("ipam");
    let cache = dir.path().join("cache");
    let list = json!({
        "cniVersion": "1.1.0",
        "name": format!("relbr-{sfx}"),
        "plugins": [
            {"type": "bridge", "bridge": format!("rb{}", &sfx[..6]), "isGateway": true,
             "ipMasq": true,
             "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": ipam,
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]
    });
    let list = NetworkConfigList::from_slice(list.to_string().as_bytes()).unwrap();
    let plugins = plugin_dir();
    let (cni, exec) = cni_for(&plugins, &cache);
    Chain {
        label: "bridge+host-local+portmap",
        list,
        cni,
        exec,
        state_dirs: vec![ipam, cache],
        make_rt: Box::new(|cid, pod, port| RuntimeConf {
            container_id: cid.into(),
            netns: pod.path(),
            ifname: "eth0".into(),
            args: Vec::new(),
            capability_args: port_map(port),
        }),
        before_add: Box::new(|_| {}),
        _keep: vec![Box::new(dir), Box::new(plugins)],
        node,
    }
}

/// flannel (bridge + host-local delegate) + portmap, private subnetFile.
fn flannel_chain() -> Chain {
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    let sfx = suffix();
    let subnet_file = dir.path().join("subnet.env");
    std::fs::write(
        &subnet_file,
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    )
    .unwrap();
    let ipam = dir.path().join("ipam");
    let fdata = dir.path().join("flannel");
    let cache = dir.path().join("cache");
    let list = json!({
        "cniVersion": "1.1.0",
        "name": format!("relfl-{sfx}"),
        "plugins": [
            {"type": "flannel", "subnetFile": subnet_file, "dataDir": fdata,
             "ipam": {"dataDir": ipam},
             "delegate": {"bridge": format!("rf{}", &sfx[..6]), "hairpinMode": true,
                          "isDefaultGateway": true}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    let list = NetworkConfigList::from_slice(list.to_string().as_bytes()).unwrap();
    let plugins = plugin_dir();
    let (cni, exec) = cni_for(&plugins, &cache);
    Chain {
        label: "flannel+portmap",
        list,
        cni,
        exec,
        state_dirs: vec![ipam, fdata, cache],
        make_rt: Box::new(|cid, pod, port| RuntimeConf {
            container_id: cid.into(),
            netns: pod.path(),
            ifname: "eth0".into(),
            args: Vec::new(),
            capability_args: port_map(port),
        }),
        before_add: Box::new(|_| {}),
        _keep: vec![Box::new(dir), Box::new(plugins)],
        node,
    }
}

/// multus (thin): the cluster network and one annotated NAD, both bridge +
/// host-local, through the test API server in the node namespace.
fn multus_chain() -> Chain {
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    let sfx = suffix();
    let ipam = dir.path().join("ipam");
    let cni_dir = dir.path().join("multus");
    let cache = dir.path().join("cache");
    let server = KubeApiServer::start_in_netns(std::path::Path::new(&node.path())).unwrap();
    let nad = |bridge: String, subnet: &str| {
        json!({"cniVersion": "1.1.0", "type": "bridge", "bridge": bridge, "isGateway": true,
               "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam,
                        "routes": [{"dst": "0.0.0.0/0"}]}})
        .to_string()
    };
    server.add_nad(
        "kube-system",
        "cluster",
        &nad(format!("rmc{}", &sfx[..6]), "10.210.0.0/24"),
    );
    server.add_nad(
        "ns1",
        "net-a",
        &nad(format!("rma{}", &sfx[..6]), "10.211.0.0/24"),
    );
    let plugins = plugin_dir();
    let list = json!({
        "cniVersion": "1.1.0",
        "name": format!("relmu-{sfx}"),
        "plugins": [
            {"type": "multus", "kubeconfig": server.kubeconfig_path(),
             "clusterNetwork": "cluster", "binDir": plugins.path(),
             "cniDir": cni_dir, "confDir": dir.path().join("conf")}
        ]
    });
    let list = NetworkConfigList::from_slice(list.to_string().as_bytes()).unwrap();
    let (cni, exec) = cni_for(&plugins, &cache);
    let server = Arc::new(server);
    let s2 = server.clone();
    Chain {
        label: "multus(cluster+net-a)",
        list,
        cni,
        exec,
        state_dirs: vec![ipam, cni_dir, cache],
        make_rt: Box::new(|cid, pod, _| RuntimeConf {
            container_id: cid.into(),
            netns: pod.path(),
            ifname: "eth0".into(),
            args: vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("K8S_POD_NAMESPACE".into(), "ns1".into()),
                ("K8S_POD_NAME".into(), cid.into()),
                ("K8S_POD_UID".into(), format!("uid-{cid}")),
            ],
            capability_args: Map::new(),
        }),
        before_add: Box::new(move |cid| {
            s2.add_pod(
                "ns1",
                cid,
                &format!("uid-{cid}"),
                &[("k8s.v1.cni.cncf.io/networks", "net-a")],
            )
        }),
        _keep: vec![Box::new(dir), Box::new(plugins), Box::new(server)],
        node,
    }
}

fn run(make: fn() -> Chain, kills: usize) {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let chain = make();
    let mut rng = Rng::from_env(chain.label);
    let start = Instant::now();
    let st = chain.campaign(kills, &mut rng);
    report(chain.label, kills, &st, start.elapsed());
}

#[test]
fn smoke_bridge_hostlocal_portmap() {
    run(bridge_chain, kills(SMOKE_KILLS));
}

#[test]
fn smoke_flannel_portmap() {
    run(flannel_chain, kills(SMOKE_KILLS));
}

#[test]
fn smoke_multus_two_delegates() {
    run(multus_chain, kills(SMOKE_KILLS));
}

#[test]
#[ignore = "full campaign: RELIABILITY_KILLS (default 300) kills"]
fn full_bridge_hostlocal_portmap() {
    run(bridge_chain, kills(FULL_KILLS));
}

#[test]
#[ignore = "full campaign: RELIABILITY_KILLS (default 300) kills"]
fn full_flannel_portmap() {
    run(flannel_chain, kills(FULL_KILLS));
}

#[test]
#[ignore = "full campaign: RELIABILITY_KILLS (default 300) kills"]
fn full_multus_two_delegates() {
    run(multus_chain, kills(FULL_KILLS));
}

/// The oracles are not vacuous: an attachment left without its DEL shows
/// up in every one of them.
#[test]
fn oracles_see_an_attachment_left_behind() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let chain = bridge_chain();
    let base = chain.state();
    let cid = format!("left-{}", suffix());
    let pod = Ns::new("rleft");
    let rt = (chain.make_rt)(&cid, &pod, 18500);
    chain.exec.arm(None);
    chain.add(&rt).expect("ADD");
    let now = chain.state();
    let diff = now.diff(&base).join("\n");
    for what in [
        "extra link",
        "extra bridge port",
        "nft ruleset differs",
        "extra file",
    ] {
        assert!(diff.contains(what), "{what} not seen in:\n{diff}");
    }
    let mentions = now.mentions(&cid).join("\n");
    assert!(mentions.contains("nft ruleset mentions"), "{mentions}");
    assert!(mentions.contains("/cache/results/"), "{mentions}");
    assert!(mentions.contains("/ipam/"), "{mentions}");
    assert_eq!(pod_links(&pod), ["eth0"]);
    chain.del(&rt).expect("DEL");
    assert!(chain.state().mentions(&cid).is_empty());
}

/// Regression (campaign finding): a plugin killed between creating its
/// temp file and renaming it left `.<name>.tmp.<pid>.<n>` forever — the
/// libcni result cache in multus's cniDir, flannel's saved delegate config,
/// multus's delegate cache. DEL of the attachment now removes them, and
/// only them.
#[test]
fn del_removes_temp_files_of_killed_writers() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    for make in [flannel_chain as fn() -> Chain, multus_chain] {
        let chain = make();
        let cid = format!("tmp-{}", suffix());
        let pod = Ns::new("rtmp");
        let rt = (chain.make_rt)(&cid, &pod, 18600);
        (chain.before_add)(&cid);
        let saved_dir = &chain.state_dirs[1];
        // multus's own libcni cache of its delegates, or the runtime's.
        let (results, delegate_net) = if chain.label.starts_with("multus") {
            (saved_dir.join("results"), "cluster".to_string())
        } else {
            (chain.state_dirs[2].join("results"), chain.list.name.clone())
        };
        std::fs::create_dir_all(&results).unwrap();
        std::fs::create_dir_all(saved_dir).unwrap();
        let leftovers = [
            saved_dir.join(format!(".{cid}@eth0.tmp.4242.0")),
            saved_dir.join(format!(".{cid}@eth0.tmp.4243.1")),
            results.join(format!(".{delegate_net}-{cid}-eth0.tmp.4242.3")),
        ];
        let others = [
            saved_dir.join(format!(".other-{cid}@eth0.tmp.4242.0")),
            saved_dir.join(format!(".{cid}@eth0.tmpx")),
        ];
        for p in leftovers.iter().chain(&others) {
            std::fs::write(p, b"").unwrap();
        }
        chain.exec.arm(None);
        chain.add(&rt).expect("ADD");
        chain.del(&rt).expect("DEL");
        for p in &leftovers {
            assert!(!p.exists(), "{}: {} left", chain.label, p.display());
        }
        for p in &others {
            assert!(p.exists(), "{}: {} removed", chain.label, p.display());
        }
    }
}
