//! The leak census's oracles: everything a plugin could leave in a network
//! namespace and in its state directories, read with independent tools
//! (`ip -j -d link`, `ip -j addr`, `ip -j route show table all`, `ip -j
//! rule`, `nft -j list ruleset`, `iptables-save`, `ip6tables-save`, reads of
//! `/proc/sys/net` from a thread inside the namespace, a recursive listing
//! of the state directories with contents), one entry per object, with
//! what changes without anyone changing it normalized away (each such
//! normalization says why).
//!
//! Include with `#[path = "census_support/mod.rs"] mod census_support;`
//! next to `reliability_support`.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde_json::Value;

use crate::nodenet::{sh, Ns};
use crate::reliability_support::{json_out, strip_handles, walk_with_dirs};

/// One object of a namespace or state directory: `kind name...` (e.g.
/// `link cb1a2b3c`, `addr cb1a2b3c 10.130.0.1/16`, `nft elem inet
/// cni_rs_masq masq_nets4 {...}`, `sysctl net/ipv4/ip_forward`, `file
/// ipam/net/lock`) and its normalized value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Key to value.
    pub entries: BTreeMap<String, String>,
}

/// One difference between two censuses.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// In the later census only.
    Added(String, String),
    /// In the earlier census only.
    Removed(String, String),
    /// In both, with another value (key, before, after).
    Changed(String, String, String),
}

impl Change {
    /// The object's key.
    pub fn key(&self) -> &str {
        match self {
            Change::Added(k, _) | Change::Removed(k, _) | Change::Changed(k, _, _) => k,
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = |v: &str| {
            if v.chars().count() > 300 {
                format!("{}...", v.chars().take(300).collect::<String>())
            } else {
                v.to_string()
            }
        };
        match self {
            Change::Added(k, v) if v.is_empty() => write!(f, "+ {k}"),
            Change::Added(k, v) => write!(f, "+ {k} = {}", short(v)),
            Change::Removed(k, v) if v.is_empty() => write!(f, "- {k}"),
            Change::Removed(k, v) => write!(f, "- {k} = {}", short(v)),
            Change::Changed(k, a, b) => write!(f, "~ {k}: {} -> {}", short(a), short(b)),
        }
    }
}

/// Removes `keys` from every object in `v`, at any depth.
fn drop_keys(v: &mut Value, keys: &[&str]) {
    match v {
        Value::Object(m) => {
            for k in keys {
                m.remove(*k);
            }
            m.values_mut().for_each(|x| drop_keys(x, keys));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| drop_keys(x, keys)),
        _ => {}
    }
}

/// Removes the strings `flags` from the array `v[key]`.
fn drop_flags(v: &mut Value, key: &str, flags: &[&str]) {
    if let Some(Value::Array(a)) = v.get_mut(key) {
        a.retain(|f| !f.as_str().is_some_and(|f| flags.contains(&f)));
    }
}

impl Census {
    fn insert(&mut self, key: String, value: String) {
        // Objects listed twice (two equal rules in one chain) stay apart.
        let mut k = key.clone();
        let mut n = 1;
        while self.entries.contains_key(&k) {
            n += 1;
            k = format!("{key} #{n}");
        }
        self.entries.insert(k, value);
    }

    /// The census of namespace `ns` and, when given, of the state
    /// directory `state` (paths relative to it).
    pub fn read(ns: &Ns, state: Option<&Path>) -> Census {
        settle(ns);
        let mut c = Census::default();
        c.links(ns);
        c.addresses(ns);
        c.routes_and_rules(ns);
        c.nft(ns);
        c.iptables(ns);
        c.sysctls(ns);
        if let Some(dir) = state {
            c.files(dir);
        }
        c
    }

    /// `ip -j -d link show`. Normalized: counters; the timers of a bridge
    /// and of its ports (they count); the operational state and the carrier flags, which the
    /// kernel's linkwatch updates asynchronously (a bridge whose last port
    /// just left is `UP,LOWER_UP` for up to a second more).
    fn links(&mut self, ns: &Ns) {
        let links = json_out(&["ip", "-n", &ns.name, "-j", "-d", "link", "show"]);
        for mut l in links.as_array().cloned().unwrap_or_default() {
            let name = l["ifname"].as_str().unwrap_or("?").to_string();
            drop_keys(
                &mut l,
                &[
                    "stats",
                    "stats64",
                    "operstate",
                    "hello_timer",
                    "tcn_timer",
                    "topology_change_timer",
                    "gc_timer",
                    "forward_delay_timer",
                    "hold_timer",
                    "message_age_timer",
                ],
            );
            drop_flags(&mut l, "flags", &["LOWER_UP", "NO-CARRIER", "M-DOWN"]);
            self.insert(format!("link {name}"), l.to_string());
        }
    }

    /// `ip -j addr show`, one entry per address. Normalized: lifetimes
    /// (they count down), the `tentative` flag (DAD runs on the kernel's
    /// clock, and on a bridge without carrier it waits for one), and the
    /// value of IPv6 link-local addresses (the kernel makes one per link
    /// from its MAC, and a bridge's MAC follows its ports: it is keyed
    /// `<link> link-local`).
    fn addresses(&mut self, ns: &Ns) {
        let links = json_out(&["ip", "-n", &ns.name, "-j", "addr", "show"]);
        for l in links.as_array().cloned().unwrap_or_default() {
            let name = l["ifname"].as_str().unwrap_or("?").to_string();
            for mut a in l["addr_info"].as_array().cloned().unwrap_or_default() {
                let local = a["local"].as_str().unwrap_or("?").to_string();
                let link_local = a["family"] == "inet6" && a["scope"] == "link";
                let addr = if link_local {
                    "link-local".to_string()
                } else {
                    format!("{local}/{}", a["prefixlen"].as_u64().unwrap_or(0))
                };
                drop_keys(&mut a, &["valid_life_time", "preferred_life_time"]);
                if let Value::Object(m) = &mut a {
                    m.remove("tentative");
                    if link_local {
                        m.remove("local");
                    }
                }
                self.insert(format!("addr {name} {addr}"), a.to_string());
            }
        }
    }

    /// `ip -j route show table all` and `ip -j rule show`, both families.
    /// Normalized: `expires`, the `linkdown` flag (the carrier again), and
    /// IPv6's local and anycast routes of the local table, which the kernel
    /// derives from the addresses (already in the census) when their DAD
    /// completes, on its own clock.
    fn routes_and_rules(&mut self, ns: &Ns) {
        for (fam, kind) in [("-4", "route4"), ("-6", "route6")] {
            let routes = json_out(&[
                "ip", "-n", &ns.name, "-j", fam, "route", "show", "table", "all",
            ]);
            for mut r in routes.as_array().cloned().unwrap_or_default() {
                let derived = kind == "route6"
                    && r["table"] == "local"
                    && (r["type"] == "local" || r["type"] == "anycast");
                if derived {
                    continue;
                }
                drop_keys(&mut r, &["expires"]);
                drop_flags(&mut r, "flags", &["linkdown"]);
                self.insert(format!("{kind} {r}"), String::new());
            }
        }
        for (fam, kind) in [("-4", "rule4"), ("-6", "rule6")] {
            let rules = json_out(&["ip", "-n", &ns.name, "-j", fam, "rule", "show"]);
            for r in rules.as_array().cloned().unwrap_or_default() {
                self.insert(format!("{kind} {r}"), String::new());
            }
        }
    }

    /// `nft -j list ruleset`: tables, chains, sets and maps (without their
    /// elements), each element, each rule. Normalized: handles, element
    /// countdowns (`strip_handles`) and counters' values (the node's own
    /// IPv6 traffic, DAD and MLD, passes its chains).
    fn nft(&mut self, ns: &Ns) {
        let mut v = json_out(&[
            "ip", "netns", "exec", &ns.name, "nft", "-j", "list", "ruleset",
        ]);
        strip_handles(&mut v);
        zero_counters(&mut v);
        for obj in v["nftables"].as_array().cloned().unwrap_or_default() {
            let Some((kind, body)) = obj.as_object().and_then(|m| m.iter().next()) else {
                continue;
            };
            let s = |k: &str| body[k].as_str().unwrap_or("?").to_string();
            match kind.as_str() {
                "table" => self.insert(
                    format!("nft table {} {}", s("family"), s("name")),
                    body.to_string(),
                ),
                "chain" => self.insert(
                    format!("nft chain {} {} {}", s("family"), s("table"), s("name")),
                    body.to_string(),
                ),
                "set" | "map" => {
                    let mut body = body.clone();
                    let elems = body
                        .as_object_mut()
                        .and_then(|m| m.remove("elem"))
                        .and_then(|e| e.as_array().cloned())
                        .unwrap_or_default();
                    let name = format!("{} {} {}", s("family"), s("table"), s("name"));
                    self.insert(format!("nft {kind} {name}"), body.to_string());
                    for e in elems {
                        self.insert(format!("nft elem {name} {e}"), String::new());
                    }
                }
                "rule" => {
                    let key = format!(
                        "nft rule {} {} {} {}{}",
                        s("family"),
                        s("table"),
                        s("chain"),
                        body["expr"],
                        body.get("comment")
                            .and_then(Value::as_str)
                            .map(|c| format!(" comment {c:?}"))
                            .unwrap_or_default()
                    );
                    self.insert(key, String::new());
                }
                _ => self.insert(format!("nft {obj}"), String::new()),
            }
        }
    }

    /// `iptables-save` and `ip6tables-save` (Go's plugins write there):
    /// one entry per chain and rule, with its table. Normalized: the
    /// timestamp comments and chain counters.
    fn iptables(&mut self, ns: &Ns) {
        for (tool, kind) in [
            ("iptables-save", "iptables"),
            ("ip6tables-save", "ip6tables"),
        ] {
            let text = ns.exec_ok(&[tool]);
            let mut table = String::new();
            for line in text.lines() {
                if line.starts_with('#') || line == "COMMIT" || line.is_empty() {
                    continue;
                }
                if let Some(t) = line.strip_prefix('*') {
                    table = t.to_string();
                    continue;
                }
                let line = match line.strip_prefix(':') {
                    // ":CHAIN POLICY [packets:bytes]"
                    Some(chain) => format!(":{}", chain.split(" [").next().unwrap_or(chain)),
                    None => line.to_string(),
                };
                self.insert(format!("{kind} {table} {line}"), String::new());
            }
        }
    }

    /// `/proc/sys/net` as a thread inside the namespace sees it: IPv4
    /// forwarding, `net.core.somaxconn` (tuning's sysctl) and every
    /// per-interface setting of both families (`all`, `default` and each
    /// link: bridge, ptp, portmap and the pod end write there).
    fn sysctls(&mut self, ns: &Ns) {
        let read = || {
            let mut out = Vec::new();
            let mut one = |path: String| {
                let v = std::fs::read_to_string(format!("/proc/sys/{path}"))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_else(|e| format!("<unreadable: {e}>"));
                out.push((path, v));
            };
            one("net/ipv4/ip_forward".into());
            one("net/core/somaxconn".into());
            for fam in ["ipv4", "ipv6"] {
                let conf = format!("/proc/sys/net/{fam}/conf");
                let mut ifs: Vec<String> = std::fs::read_dir(&conf)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                ifs.sort();
                for i in ifs {
                    let mut keys: Vec<String> = std::fs::read_dir(format!("{conf}/{i}"))
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect();
                    keys.sort();
                    for k in keys {
                        one(format!("net/{fam}/conf/{i}/{k}"));
                    }
                }
            }
            out
        };
        let values = ns.netns().run(read).expect("read sysctls in the namespace");
        for (k, v) in values {
            self.insert(format!("sysctl {k}"), v);
        }
    }

    /// Every directory and file under `dir` (relative paths), files with
    /// their content. Normalized: the content of host-local's
    /// `last_reserved_ip.<n>` (its round-robin position moves with every
    /// reservation, by design; Go's too).
    fn files(&mut self, dir: &Path) {
        let (mut files, mut dirs) = (Vec::new(), Vec::new());
        walk_with_dirs(dir, &mut files, &mut dirs);
        let rel = |p: &Path| p.strip_prefix(dir).unwrap_or(p).display().to_string();
        for d in dirs {
            self.insert(format!("dir {}", rel(&d)), String::new());
        }
        for f in files {
            let volatile = f
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("last_reserved_ip."));
            let content = if volatile {
                "<the last address reserved>".to_string()
            } else {
                format!(
                    "{:?}",
                    String::from_utf8_lossy(&std::fs::read(&f).unwrap_or_default())
                )
            };
            self.insert(format!("file {}", rel(&f)), content);
        }
    }

    /// What changed from `self` to `later`. Per-interface sysctls of a
    /// link that came or went are left out: the link's own entry says it.
    pub fn diff(&self, later: &Census) -> Vec<Change> {
        let links = |c: &Census| -> BTreeSet<String> {
            c.entries
                .keys()
                .filter_map(|k| k.strip_prefix("link "))
                .map(str::to_string)
                .collect()
        };
        let (a, b) = (links(self), links(later));
        let moved: BTreeSet<&String> = a.symmetric_difference(&b).collect();
        let of_moved_link = |k: &str| {
            k.strip_prefix("sysctl net/ipv")
                .and_then(|r| r.get(2..))
                .and_then(|r| r.strip_prefix("conf/"))
                .and_then(|r| r.split('/').next())
                .is_some_and(|i| moved.contains(&i.to_string()))
        };
        let mut out = Vec::new();
        for (k, v) in &self.entries {
            if of_moved_link(k) {
                continue;
            }
            match later.entries.get(k) {
                None => out.push(Change::Removed(k.clone(), v.clone())),
                Some(w) if w != v => out.push(Change::Changed(k.clone(), v.clone(), w.clone())),
                Some(_) => {}
            }
        }
        for (k, v) in &later.entries {
            if !self.entries.contains_key(k) && !of_moved_link(k) {
                out.push(Change::Added(k.clone(), v.clone()));
            }
        }
        out
    }
}

/// Waits (up to 5 s) until the kernel's linkwatch has caught up with every
/// link's carrier: an up link's operational state agrees with its
/// `LOWER_UP` flag. A bridge whose last port just left has lost its carrier
/// at once, but its operational state, and what follows from it (IPv6
/// routes flagged or dropped), changes up to a second later.
fn settle(ns: &Ns) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let links = json_out(&["ip", "-n", &ns.name, "-j", "link", "show"]);
        let settled = links.as_array().into_iter().flatten().all(|l| {
            let flags: Vec<&str> = l["flags"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !flags.contains(&"UP") {
                return true;
            }
            let carrier = flags.contains(&"LOWER_UP");
            let oper = l["operstate"].as_str().unwrap_or("UNKNOWN");
            match oper {
                "UP" | "UNKNOWN" => carrier,
                "DOWN" | "LOWERLAYERDOWN" => !carrier,
                _ => true,
            }
        });
        if settled || std::time::Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `{"counter": {"packets": N, "bytes": M}}` becomes `{"counter": {}}`.
fn zero_counters(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(c)) = m.get_mut("counter") {
                c.remove("packets");
                c.remove("bytes");
            }
            m.values_mut().for_each(zero_counters);
        }
        Value::Array(a) => a.iter_mut().for_each(zero_counters),
        _ => {}
    }
}

/// Whether the `nft` and `iptables-save` tools the census reads with are
/// there (`sh` panics with the spawn error otherwise).
pub fn tools_present() -> bool {
    ["nft", "iptables-save", "ip6tables-save", "ip"]
        .iter()
        .all(|t| {
            sh(&["sh", "-c", &format!("command -v {t}")])
                .status
                .success()
        })
}
