//! The firewall meta plugin on in-memory node tables, without root, for
//! both backends' shapes (iptables: Go's chains plus a record per
//! attachment in `dataDir`; nftables: a chain of ours in the node's table):
//! ADD then DEL leaving tables and data dir as they were, a failure at each
//! table call of ADD taking back everything the ADD did, DEL on half-built
//! and vanished state, DEL twice, GC by the valid list. The real-tables
//! oracle: `sbr_firewall::firewall::`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cni_exec::{Command, Plugin, Request};
use cni_firewall::{NftForeignTable, NodeTables, RecordingTables, TableOp};
use cni_plugins::firewall::{Firewall, OWN_CHAIN};
use cni_types::{CniError, ErrorCode, NetworkConfig};
use serde_json::{json, Value};

const NETWORK: &str = "fwnet";
/// The pod's addresses (dual stack: both iptables programs, both nft
/// address families).
const IPS: [&str; 2] = ["10.1.0.2/24", "fd00::2/64"];
/// The addresses of a first pod, whose ADD and DEL set up what stays.
const PRIME: [&str; 2] = ["10.1.0.9/24", "fd00::9/64"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Iptables,
    Nftables,
}

/// Everything the plugin can leave behind: both iptables filter tables,
/// the node's nftables table, and the data dir's files with their content
/// (the lock file aside).
#[derive(Debug, PartialEq, Eq)]
struct State {
    iptables: BTreeMap<String, Vec<String>>,
    ip6tables: BTreeMap<String, Vec<String>>,
    nft: Option<BTreeMap<String, Vec<String>>>,
    files: BTreeMap<PathBuf, String>,
}

impl State {
    fn rules(&self) -> impl Iterator<Item = &String> {
        self.iptables
            .values()
            .chain(self.ip6tables.values())
            .chain(self.nft.iter().flat_map(|t| t.values()))
            .flatten()
    }

    /// The rules of `addr`: iptables' naming its host address, nft's
    /// naming it and tagged with container `cid`.
    fn rules_of(&self, addr: &str, cid: &str) -> Vec<String> {
        let ip = addr.split('/').next().unwrap_or(addr);
        self.rules()
            .filter(|r| {
                r.contains(&format!("{ip}/"))
                    || (r.contains(&tag(cid)) && r.contains(&format!("\"{ip}\"")))
            })
            .cloned()
            .collect()
    }
}

/// The start of the nft comment of container `cid`'s rules.
fn tag(cid: &str) -> String {
    format!("cni-rs firewall {cid} ")
}

struct Node {
    tables: RecordingTables,
    dir: tempfile::TempDir,
    shape: Shape,
}

fn node(shape: Shape) -> Node {
    let tables = RecordingTables::new();
    // The node's own nftables firewall (the nftables shape writes into it).
    tables.add_nft_chain("inet", "filter", "forward");
    Node {
        tables,
        dir: tempfile::tempdir().unwrap(),
        shape,
    }
}

fn files(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.file_name().is_some_and(|n| n != "lock") {
            out.insert(p.clone(), std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
}

impl Node {
    fn conf(&self, policy: &str, ips: &[&str]) -> Value {
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": NETWORK, "type": "firewall",
            "dataDir": self.dir.path().join("state"),
            "ingressPolicy": policy,
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [
                    {"name": "cni0"},
                    {"name": "eth0", "sandbox": "/run/netns/fake-pod"},
                ],
                "ips": ips.iter().map(|a| json!({"address": a, "interface": 1})).collect::<Vec<_>>(),
            },
        });
        if self.shape == Shape::Nftables {
            conf["backend"] = json!("nftables");
            conf["nftablesTable"] = json!("filter");
        }
        conf
    }

    fn request(&self, command: Command, cid: &str, conf: &Value) -> Request {
        let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
        let b = Request::builder(command, config).path("/nonexistent-cni-path");
        let b = if command == Command::Gc {
            b
        } else {
            b.container_id(cid)
                .netns("/run/netns/fake-pod")
                .ifname("eth0")
        };
        b.build().unwrap()
    }

    fn plugin(&self) -> Firewall<RecordingTables> {
        Firewall::with_tables(self.tables.clone())
    }

    fn add(&self, cid: &str, policy: &str, ips: &[&str]) -> Result<(), CniError> {
        let conf = self.conf(policy, ips);
        let prev = self
            .plugin()
            .add(&self.request(Command::Add, cid, &conf))
            .map_err(CniError::from)?;
        assert_eq!(prev.ips.len(), ips.len(), "the result is prevResult");
        Ok(())
    }

    fn del(&self, cid: &str, ips: &[&str]) {
        let conf = self.conf("", ips);
        self.plugin()
            .del(&self.request(Command::Del, cid, &conf))
            .unwrap_or_else(|e| panic!("DEL {cid}: {e}"));
    }

    /// DEL without `prevResult` (the runtime lost it).
    fn del_bare(&self, cid: &str) {
        let mut conf = self.conf("", &[]);
        conf.as_object_mut().unwrap().remove("prevResult");
        self.plugin()
            .del(&self.request(Command::Del, cid, &conf))
            .unwrap_or_else(|e| panic!("DEL {cid} without prevResult: {e}"));
    }

    fn check(&self, cid: &str, ips: &[&str]) -> Result<(), CniError> {
        let conf = self.conf("", ips);
        self.plugin()
            .check(&self.request(Command::Check, cid, &conf))
            .map_err(CniError::from)
    }

    fn gc(&self, valid: &[&str]) {
        let mut conf = self.conf("", &[]);
        conf.as_object_mut().unwrap().remove("prevResult");
        conf["cni.dev/valid-attachments"] = valid
            .iter()
            .map(|c| json!({"containerID": c, "ifname": "eth0"}))
            .collect();
        self.plugin()
            .gc(&self.request(Command::Gc, "", &conf))
            .unwrap_or_else(|e| panic!("GC: {e}"));
    }

    fn state(&self) -> State {
        let mut f = BTreeMap::new();
        files(self.dir.path(), &mut f);
        State {
            iptables: self.tables.iptables_rules(false),
            ip6tables: self.tables.iptables_rules(true),
            nft: self.tables.nft_rules("inet", "filter"),
            files: f,
        }
    }

    /// The attachment's record (iptables shape).
    fn record(&self, cid: &str) -> PathBuf {
        self.dir
            .path()
            .join("state")
            .join(NETWORK)
            .join(format!("{cid}_eth0"))
    }
}

/// Asserts that nothing of container `cid` with `ips` is left: no rule
/// of its addresses, no record.
fn assert_gone(state: &State, cid: &str, ips: &[&str], what: &str) {
    for ip in ips {
        assert_eq!(
            state.rules_of(ip, cid),
            Vec::<String>::new(),
            "{what}: rules of {ip} left"
        );
    }
    let tagged: Vec<_> = state.rules().filter(|r| r.contains(&tag(cid))).collect();
    assert!(tagged.is_empty(), "{what}: rules of {cid} left: {tagged:?}");
    assert!(
        !state
            .files
            .keys()
            .any(|p| p.ends_with(format!("{cid}_eth0"))),
        "{what}: record left: {:?}",
        state.files
    );
}

#[test]
fn firewall_add_then_del_leaves_tables_and_data_dir_as_before() {
    for shape in [Shape::Iptables, Shape::Nftables] {
        for policy in ["", "same-bridge", "isolated"] {
            let node = node(shape);
            let pristine = node.state();
            // A first pod sets up what stays for every pod: Go's chains and
            // jumps, the isolation chains (iptables, both shapes), the data
            // dir's network directory (removed with its last record).
            node.add("c0", policy, &PRIME).unwrap();
            node.del("c0", &PRIME);
            let before = node.state();
            if shape == Shape::Nftables {
                assert_eq!(before.nft, pristine.nft, "{shape:?} {policy}");
            }

            node.add("c1", policy, &IPS).unwrap();
            let added = node.state();
            for ip in IPS {
                assert_eq!(
                    added.rules_of(ip, "c1").len(),
                    2,
                    "{shape:?} {policy}: {added:#?}"
                );
            }
            if shape == Shape::Iptables {
                let record = std::fs::read_to_string(node.record("c1")).unwrap();
                assert!(record.contains("fd00::2"), "{record}");
            }
            node.check("c1", &IPS).unwrap();

            node.del("c1", &IPS);
            assert_eq!(node.state(), before, "{shape:?} {policy}");
            // CHECK now finds the rules missing (Go's error, code 999).
            let e = node.check("c1", &IPS).unwrap_err();
            assert_eq!(e.code, ErrorCode::Internal, "{e:?}");
            assert!(e.msg.contains("not found"), "{e:?}");
            // DEL again.
            node.del("c1", &IPS);
            node.del_bare("c1");
            assert_eq!(node.state(), before, "{shape:?} {policy}");
        }
    }
}

/// Every kind of table call ADD makes, failed at each of its occurrences:
/// the ADD fails with the fault (code 999) and takes back its rules and
/// record; on a node where the shared chains are already set up, the node
/// is exactly as before. A DEL after it passes and a retried ADD works.
#[test]
fn firewall_add_failing_at_each_table_call_rolls_back() {
    let ops = [
        TableOp::EnsureChain,
        TableOp::Exists,
        TableOp::Insert,
        TableOp::Append,
        TableOp::Delete,
        TableOp::NftRules,
        TableOp::NftApply,
    ];
    let mut failed = BTreeMap::new();
    for shape in [Shape::Iptables, Shape::Nftables] {
        for policy in ["", "isolated"] {
            for primed in [false, true] {
                for op in ops {
                    for n in 1.. {
                        let node = node(shape);
                        if primed {
                            node.add("c0", policy, &PRIME).unwrap();
                            node.del("c0", &PRIME);
                        }
                        let before = node.state();
                        node.tables.fail_nth(op, n);
                        let what = format!("{shape:?} {policy:?} primed {primed} {op:?} #{n}");
                        let Err(e) = node.add("c1", policy, &IPS) else {
                            // Fewer than n calls of this kind: next kind.
                            break;
                        };
                        *failed.entry((shape as u8, op)).or_insert(0) += 1;
                        assert_eq!(e.code, ErrorCode::Internal, "{what}: {e:?}");
                        assert!(e.msg.contains("injected fault"), "{what}: {e:?}");
                        let after = node.state();
                        assert_gone(&after, "c1", &IPS, &what);
                        if primed {
                            assert_eq!(after, before, "{what}");
                        }
                        node.del("c1", &IPS);
                        assert_gone(&node.state(), "c1", &IPS, &what);
                        node.add("c1", policy, &IPS).unwrap();
                        node.check("c1", &IPS).unwrap();
                    }
                }
            }
        }
    }
    // Each shape's ADD met faults of the kinds it uses.
    for (shape, op) in [
        (Shape::Iptables, TableOp::EnsureChain),
        (Shape::Iptables, TableOp::Exists),
        (Shape::Iptables, TableOp::Insert),
        (Shape::Iptables, TableOp::Append),
        (Shape::Nftables, TableOp::NftRules),
        (Shape::Nftables, TableOp::NftApply),
        // The isolation chains are iptables' in both shapes.
        (Shape::Nftables, TableOp::Insert),
    ] {
        assert!(
            failed.get(&(shape as u8, op)).copied().unwrap_or(0) > 0,
            "{shape:?} {op:?} never failed an ADD: {failed:?}"
        );
    }
}

#[test]
fn firewall_del_on_half_built_state_passes_and_cleans_up() {
    // iptables, a record without rules (the rules were flushed).
    let node = node(Shape::Iptables);
    node.add("c0", "", &PRIME).unwrap();
    node.del("c0", &PRIME);
    let before = node.state();
    node.add("c1", "", &IPS).unwrap();
    for v6 in [false, true] {
        let ipt = node.tables.iptables(v6);
        for rule in &node.tables.iptables_rules(v6)["CNI-FORWARD"] {
            if rule.contains("10.1.0.2/") || rule.contains("fd00::2/") {
                let args: Vec<&str> = rule.split(' ').collect();
                assert!(ipt.delete("CNI-FORWARD", &args).unwrap());
            }
        }
    }
    assert!(node.record("c1").exists());
    node.del_bare("c1");
    assert_eq!(node.state(), before);

    // iptables, rules without a record (killed before the write; or the
    // data dir was cleared): DEL with prevResult removes them.
    node.add("c1", "", &IPS).unwrap();
    std::fs::remove_file(node.record("c1")).unwrap();
    node.del("c1", &IPS);
    assert_eq!(node.state(), before);

    // iptables, the whole data dir gone and nothing ever set up.
    let node = self::node(Shape::Iptables);
    let before = node.state();
    node.del("c1", &IPS);
    node.del_bare("c1");
    assert_gone(&node.state(), "c1", &IPS, "vanished");
    assert_eq!(node.state().iptables, before.iptables);

    // nftables: our chain with rules but no jump.
    let node = self::node(Shape::Nftables);
    let pristine = node.state();
    node.add("c1", "", &IPS).unwrap();
    let table = NftForeignTable::new("inet", "filter");
    let live = node.tables.nft_table("inet", "filter");
    let jump = live.rules("forward").unwrap().unwrap();
    let cmds: Vec<Value> = jump
        .iter()
        .map(|r| table.delete_rule("forward", r.handle))
        .collect();
    live.apply("drop the jump", &cmds).unwrap();
    node.del("c1", &IPS);
    assert_eq!(node.state(), pristine);

    // nftables: the jump and an empty chain of ours (rules flushed).
    node.add("c1", "", &IPS).unwrap();
    let ours = live.rules(OWN_CHAIN).unwrap().unwrap();
    let cmds: Vec<Value> = ours
        .iter()
        .map(|r| table.delete_rule(OWN_CHAIN, r.handle))
        .collect();
    live.apply("flush ours", &cmds).unwrap();
    node.del_bare("c1");
    assert_eq!(node.state(), pristine);

    // nftables: the node's table itself gone.
    let node = RecordingTables::new();
    let gone = Node {
        tables: node,
        dir: tempfile::tempdir().unwrap(),
        shape: Shape::Nftables,
    };
    gone.del("c1", &IPS);
    gone.del_bare("c1");
    assert_eq!(gone.state().nft, None);
    // ... where ADD fails with the config's error (code 7), changing nothing.
    let e = gone.add("c1", "", &IPS).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidNetworkConfig, "{e:?}");
    assert_eq!(gone.state().nft, None);
}

#[test]
fn firewall_gc_removes_only_attachments_not_in_the_valid_list() {
    for shape in [Shape::Iptables, Shape::Nftables] {
        let node = node(shape);
        node.add("c0", "", &PRIME).unwrap();
        node.del("c0", &PRIME);
        let before = node.state();
        node.add("keep", "", &["10.1.0.2/24"]).unwrap();
        node.add("gone", "", &["10.1.0.3/24", "fd00::3/64"])
            .unwrap();
        // A stale attachment sharing the kept one's address (a reused IP):
        // the address's rules stay for the valid one.
        node.add("stale", "", &["10.1.0.2/24"]).unwrap();

        node.gc(&["keep"]);
        let after = node.state();
        assert_gone(&after, "gone", &["10.1.0.3/24", "fd00::3/64"], "GC");
        assert!(!after.files.keys().any(|p| p.ends_with("stale_eth0")));
        node.check("keep", &["10.1.0.2/24"]).unwrap();
        if shape == Shape::Iptables {
            assert!(node.record("keep").exists());
        }

        node.gc(&[]);
        assert_eq!(node.state(), before, "{shape:?}");
        // GC again: nothing to do.
        node.gc(&[]);
        assert_eq!(node.state(), before, "{shape:?}");
    }
}

/// A DEL (bare: the addresses come from the record) whose rule removal
/// fails: every rule is still tried, the DEL fails, and the record stays
/// so the runtime's retry (or GC) can still find the rules; the retry
/// then removes them and the record.
#[test]
fn firewall_del_failing_keeps_the_record_for_the_retry() {
    let node = node(Shape::Iptables);
    node.add("c0", "", &PRIME).unwrap();
    node.del("c0", &PRIME);
    let before = node.state();
    node.add("c1", "", &IPS).unwrap();
    // The first rule removal fails (iptables' lock held, say).
    node.tables.fail_nth(TableOp::Delete, 1);
    let mut conf = node.conf("", &[]);
    conf.as_object_mut().unwrap().remove("prevResult");
    let e = node
        .plugin()
        .del(&node.request(Command::Del, "c1", &conf))
        .map_err(CniError::from)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal, "{e:?}");
    assert!(
        node.record("c1").exists(),
        "the record went with rules left"
    );
    // Every other rule was removed on the way.
    let left: Vec<String> = IPS
        .iter()
        .flat_map(|ip| node.state().rules_of(ip, "c1"))
        .collect();
    assert_eq!(left.len(), 1, "only the failed rule stays: {left:?}");
    node.del_bare("c1");
    assert_eq!(node.state(), before);
}
