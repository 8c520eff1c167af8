//! The firewall meta-plugin, chained only: opens the node's firewall for
//! the pod's traffic, for a node whose forward policy drops it. Run by the
//! runtime in the node's network namespace (where the rules go).
//!
//! Behaviour follows containernetworking/plugins `plugins/meta/firewall`:
//! the iptables backend writes Go's chains and rules exactly (`FORWARD` →
//! `CNI-FORWARD` → the admin chain, then per address
//! `-d <ip> -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT` and
//! `-s <ip> -j ACCEPT`), by running the system `iptables`/`ip6tables` (so
//! iptables-nft or iptables-legacy, as the node has it); `ingressPolicy`
//! `same-bridge`/`isolated` adds Go's `CNI-ISOLATION-STAGE-1/2` chains.
//! Ours: an `nftables` backend for nodes whose firewall is a native
//! nftables table; GC; unknown `backend`/`ingressPolicy` values refused up
//! front; a DEL or GC whose `iptables` fails (not a rule already gone)
//! tries every rule, fails, and keeps the attachment's record for the
//! retry, so the rules are never left in force unrecorded. The firewalld
//! backend needs D-Bus, which this build does not speak: it fails with a
//! clear error. The result is `prevResult`.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::firewall::Firewall;
//!
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let out = dispatch(&Firewall::new(), &env,
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"firewall","backend":"pf"}"#);
//! assert_eq!(out.exit_code, 1);
//! assert!(String::from_utf8(out.stdout).unwrap().contains("backend: unknown"));
//! ```

pub(crate) mod config;
mod error;
mod iptables;
mod nftables;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cni_exec::{Plugin, Request};
use cni_files::FileLock;
use cni_firewall::{NodeTables, SystemTables};
use cni_types::{CniResult, Version};
use serde::{Deserialize, Serialize};

pub use config::{
    Backend, FirewallConf, IngressPolicy, DEFAULT_ADMIN_CHAIN, DEFAULT_DATA_DIR, DEFAULT_ZONE,
};
pub use iptables::FORWARD_CHAIN;
pub use nftables::{tag, OWN_CHAIN};

pub use error::{Error, Result};

/// Where firewalld would be reached.
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// The firewall plugin, writing into the node's tables through `T`: the
/// node's `iptables`/`ip6tables` and `nft` unless built
/// [`Firewall::with_tables`] (a `cni_firewall::RecordingTables`, feature
/// `recording`, runs it without root).
#[derive(Debug, Clone, Copy, Default)]
pub struct Firewall<T = SystemTables> {
    tables: T,
}

/// The record the iptables backend keeps of one attachment (a file per
/// container and interface), for GC: the rules themselves are Go's,
/// untagged, so this is how GC finds what to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct IptablesRecord {
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
    ips: Vec<IpAddr>,
}

fn state_path(conf: &FirewallConf, container_id: &str, ifname: &str) -> PathBuf {
    Path::new(&conf.data_dir)
        .join(&conf.network)
        .join(format!("{container_id}_{ifname}"))
}

fn write_state(path: &Path, a: &IptablesRecord) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| crate::Error::io("create directory", dir, e))?;
    }
    let data = serde_json::to_vec(a).map_err(|source| crate::Error::Serialize {
        object: "attachment record",
        source,
    })?;
    cni_files::atomic::AtomicWrite::new()
        .mode(0o600)
        .write(path, &data)
        .map_err(|e| crate::Error::atomic_write(e).into())
}

fn read_state(path: &Path) -> Option<IptablesRecord> {
    std::fs::read(path)
        .ok()
        .and_then(|d| serde_json::from_slice(&d).ok())
}

/// Removes an attachment's record, and its network's directory once no
/// attachment is left in it (callers hold the lock, so no ADD is between
/// its `create_dir_all` and its write).
fn remove_state(path: &Path) {
    // A firewall killed inside `write_state` leaves its temp file behind.
    cni_files::atomic::remove_stale_temps(path);
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        // Fails (and is meant to) while other attachments are recorded.
        let _ = std::fs::remove_dir(dir);
    }
}

/// The node firewall a request works on: the configured backend, with
/// the nftables table resolved.
enum Node {
    Iptables,
    /// Unreachable in this build.
    Firewalld,
    Nftables(nftables::NodeTable),
}

impl Node {
    fn of(conf: &FirewallConf, tables: &dyn NodeTables) -> Node {
        match &conf.backend {
            Backend::Iptables => Node::Iptables,
            Backend::Firewalld => Node::Firewalld,
            Backend::Nftables {
                family,
                table,
                chain,
            } => Node::Nftables(nftables::NodeTable::new(tables, family, table, chain)),
        }
    }
}

/// The nftables comment of the request's attachment.
fn attachment_tag(conf: &FirewallConf, req: &Request) -> String {
    tag(&conf.network, &req.container_id, &req.ifname)
}

/// Removes the iptables rules of `ips`, then the attachment's record; a
/// record whose rules could not all be removed stays (DEL is retried, GC
/// finds it again).
fn forget_iptables_attachment(
    tables: &dyn NodeTables,
    record: &Path,
    ips: &[IpAddr],
) -> Result<()> {
    iptables::del(tables, ips)?;
    remove_state(record);
    Ok(())
}

fn addresses(prev: &CniResult) -> Vec<IpAddr> {
    prev.ips.iter().map(|ip| ip.address.ip()).collect()
}

/// The bridge of `same-bridge`/`isolated`: the first interface of
/// `prevResult` (the bridge plugin lists the bridge first), which must not
/// be in a sandbox.
fn bridge_name(conf: &FirewallConf, prev: &CniResult) -> Result<Option<String>> {
    if conf.ingress == IngressPolicy::Open {
        return Ok(None);
    }
    let policy = match conf.ingress {
        IngressPolicy::Isolated => "isolated",
        _ => "same-bridge",
    };
    match prev.interfaces.first() {
        None => Err(Error::IngressBridgeMissing { policy }),
        Some(i) if i.name.is_empty() => Err(Error::IngressBridgeNameEmpty),
        // An interface in a sandbox is the pod's, not the node's bridge: its
        // name (`eth0`) would make the isolation rules drop the node's own
        // interface of that name. Go takes it.
        Some(i) if !i.sandbox.is_empty() => Err(Error::IngressBridgeInSandbox {
            name: i.name.clone(),
            sandbox: i.sandbox.clone(),
            policy,
        }),
        Some(i) => Ok(Some(i.name.clone())),
    }
}

/// Serialises this plugin's read-modify-write of the node's firewall
/// (two first ADDs would both insert the jump; a DEL of the last pod could
/// remove the chain under a concurrent ADD).
fn lock(conf: &FirewallConf) -> Result<FileLock> {
    FileLock::create(Path::new(&conf.data_dir).join("lock"))
        .map_err(|e| crate::Error::atomic_write(e).into())
}

fn firewalld_unavailable() -> Error {
    if Path::new(SYSTEM_BUS).exists() {
        crate::Error::NotAvailable(format!(
            "firewalld backend: not supported by this build (no D-Bus client for {SYSTEM_BUS}); use backend \"iptables\" or \"nftables\""
        ))
        .into()
    } else {
        crate::Error::NotAvailable(format!(
            "firewalld backend: D-Bus system bus not reachable at {SYSTEM_BUS}"
        ))
        .into()
    }
}

impl Firewall {
    /// The plugin, on the node's tables (it has no state of its own).
    pub fn new() -> Self {
        Firewall {
            tables: SystemTables,
        }
    }
}

impl<T: NodeTables> Firewall<T> {
    /// The plugin, writing into `tables` instead of the node's.
    pub fn with_tables(tables: T) -> Firewall<T> {
        Firewall { tables }
    }

    /// The attachment's own rules go (Go's DEL); chains, jumps and
    /// isolation rules stay.
    fn remove(&self, conf: &FirewallConf, req: &Request, ips: &[IpAddr]) -> Result<()> {
        match Node::of(conf, &self.tables) {
            Node::Iptables => {
                let state = state_path(conf, &req.container_id, &req.ifname);
                let mut ips = ips.to_vec();
                if ips.is_empty() {
                    ips = read_state(&state).map(|a| a.ips).unwrap_or_default();
                }
                forget_iptables_attachment(&self.tables, &state, &ips)
            }
            // Nothing of ours can be in a firewalld we cannot reach.
            Node::Firewalld => Ok(()),
            Node::Nftables(t) => t.del(&attachment_tag(conf, req)),
        }
    }
}

impl<T: NodeTables> Plugin for Firewall<T> {
    type Error = Error;

    fn name(&self) -> &str {
        "firewall"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = FirewallConf::parse(req)?;
        let prev = config::required_prev(req)?;
        let ips = addresses(&prev);
        let bridge = bridge_name(&conf, &prev)?;
        if conf.backend == Backend::Firewalld {
            return Err(firewalld_unavailable());
        }
        let _lock = lock(&conf)?;
        let opened = match Node::of(&conf, &self.tables) {
            Node::Nftables(t) => t.add(&attachment_tag(&conf, req), &ips),
            Node::Iptables | Node::Firewalld => {
                let record = IptablesRecord {
                    container_id: req.container_id.clone(),
                    ifname: req.ifname.clone(),
                    ips: ips.clone(),
                };
                write_state(&state_path(&conf, &req.container_id, &req.ifname), &record)
                    .and_then(|()| iptables::add(&self.tables, &ips, &conf.admin_chain))
            }
        };
        let isolated = opened.and_then(|()| match &bridge {
            Some(br) => iptables::setup_isolation(&self.tables, &ips, br, conf.ingress),
            None => Ok(()),
        });
        if let Err(e) = isolated {
            // Every family's address rules go, not only the failed one's
            // (Go cleans up the failing family only).
            let _ = self.remove(&conf, req, &ips);
            return Err(e);
        }
        Ok(prev)
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = FirewallConf::parse(req)?;
        let prev = req.config.prev_result()?;
        let ips = prev.as_ref().map(addresses).unwrap_or_default();
        let _lock = lock(&conf)?;
        self.remove(&conf, req, &ips)
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = FirewallConf::parse(req)?;
        let prev = config::required_prev(req)?;
        let ips = addresses(&prev);
        match Node::of(&conf, &self.tables) {
            Node::Iptables => iptables::check(&self.tables, &ips, &conf.admin_chain),
            Node::Firewalld => Err(firewalld_unavailable()),
            Node::Nftables(t) => t.check(&attachment_tag(&conf, req), &ips),
        }
    }

    /// GC: the rules of this network's attachments that are not in
    /// `cni.dev/valid-attachments` go. An address still used by a valid
    /// attachment keeps its rules (Go's rules are per address, not per
    /// attachment).
    fn gc(&self, req: &Request) -> Result<()> {
        let conf = FirewallConf::parse(req)?;
        let valid: Vec<(String, String)> = req
            .config
            .valid_attachments()?
            .ok_or(Error::ValidAttachmentsMissing)?
            .into_iter()
            .map(|a| (a.container_id, a.ifname))
            .collect();
        let _lock = lock(&conf)?;
        match Node::of(&conf, &self.tables) {
            Node::Iptables => {
                let dir = Path::new(&conf.data_dir).join(&conf.network);
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    return Ok(());
                };
                let mut live = Vec::new();
                let mut dead = Vec::new();
                for e in entries.flatten() {
                    // Container ids and interface names may both hold `_`:
                    // the record, not the file name, says whose it is.
                    let Some(a) = read_state(&e.path()) else {
                        continue;
                    };
                    if valid
                        .iter()
                        .any(|(c, i)| *c == a.container_id && *i == a.ifname)
                    {
                        live.extend(a.ips);
                    } else {
                        dead.push((e.path(), a.ips));
                    }
                }
                // Every dead attachment is tried; the first failure is
                // the answer.
                let mut first = None;
                for (path, ips) in dead {
                    let ips: Vec<IpAddr> =
                        ips.into_iter().filter(|ip| !live.contains(ip)).collect();
                    if let Err(e) = forget_iptables_attachment(&self.tables, &path, &ips) {
                        first.get_or_insert(e);
                    }
                }
                first.map_or(Ok(()), Err)
            }
            Node::Firewalld => Ok(()),
            Node::Nftables(t) => t.gc(&conf.network, &valid),
        }
    }

    /// Ready, except with the firewalld backend, which this build cannot
    /// serve (code 50). Go registers no STATUS.
    fn status(&self, req: &Request) -> Result<()> {
        match FirewallConf::parse(req)?.backend {
            Backend::Firewalld => Err(firewalld_unavailable()),
            _ => Ok(()),
        }
    }

    /// 0.4.0 and later, as Go's `version.PluginSupports("0.4.0", ...)`.
    fn supported_versions(&self) -> Vec<Version> {
        Version::ALL
            .iter()
            .copied()
            .filter(|v| *v >= Version::V0_4_0)
            .collect()
    }
}
