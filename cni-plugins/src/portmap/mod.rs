//! The portmap meta-plugin (chained only): forwards host ports to the
//! container address found in `prevResult`, with nftables rules owned by the
//! attachment (network, container id, interface), one atomic batch per
//! call, and one map lookup per packet whatever the number of pods.
//!
//! Beyond the Go reference (containernetworking/plugins
//! `plugins/meta/portmap`): UDP conntrack entries of the mapped host ports
//! are flushed on DEL as well as ADD (a replaced pod otherwise stays
//! blackholed, kubernetes/kubernetes#58336), an ADD that fails setting
//! `route_localnet` takes its rules back, GC removes the rules of
//! attachments not in the valid list, and STATUS reports whether `nft` can
//! be run.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::portmap::Portmap;
//!
//! // No mappings: nothing is touched and prevResult is passed through.
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let stdin = br#"{"cniVersion":"1.0.0","name":"net","type":"portmap",
//!     "prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}]}}"#;
//! let out = dispatch(&Portmap::new(), &env, stdin);
//! assert_eq!(out.exit_code, 0);
//! assert!(String::from_utf8(out.stdout).unwrap().contains("10.1.0.5/24"));
//! ```

pub mod config;
mod error;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cni_exec::{Plugin, Request};
use cni_firewall::conntrack::{Conntrack, ConntrackFamily};
use cni_firewall::{AttachmentId, Backend, Firewall, PortMappingSpec, RuleKind, RuleSpec};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{AddressFamilyFilter, Ipv4Conf, Link};
use cni_types::step_span;
use cni_types::trace::in_step;
use cni_types::CniResult;

pub use config::{container_ips, PortmapConf, DEFAULT_MARK_BIT};

pub use error::{Error, Result};

/// The portmap plugin.
///
/// By default it programs the network namespace it runs in (the node's),
/// as an exec'd plugin does, with the native nf_tables firewall.
/// [`Portmap::in_netns`] points it at another namespace (a runtime
/// embedding it, or a test's node namespace), [`Portmap::with_backend`]
/// picks the firewall backend (the binary reads `CNI_FIREWALL_BACKEND`) and
/// [`Portmap::with_firewall`] replaces the firewall. It works on the real
/// kernel by default; on another one (a `cni_netns::kernel::FakeKernel`
/// in tests without root) with [`Portmap::with_kernel`].
#[derive(Debug, Clone, Default)]
pub struct Portmap<K = LinuxKernel> {
    host_netns: Option<PathBuf>,
    backend: Backend,
    firewall: Option<Arc<dyn Firewall>>,
    kernel: K,
}

impl Portmap {
    /// portmap acting on the current network namespace, with the native
    /// nf_tables backend.
    pub fn new() -> Self {
        Portmap::default()
    }

    /// portmap acting on the network namespace at `path` (rules, conntrack,
    /// `route_localnet`).
    pub fn in_netns(path: impl Into<PathBuf>) -> Self {
        Portmap {
            host_netns: Some(path.into()),
            ..Portmap::default()
        }
    }
}

impl<K: NetKernel> Portmap<K> {
    /// portmap on another kernel (`route_localnet`), acting on its
    /// current namespace as the node, with the native nf_tables backend
    /// (give it a firewall with [`Portmap::with_firewall`]).
    pub fn with_kernel(kernel: K) -> Portmap<K> {
        Portmap {
            host_netns: None,
            backend: Backend::default(),
            firewall: None,
            kernel,
        }
    }

    /// Uses the firewall `backend` (native nf_tables by default).
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Uses `firewall` instead of the selected backend (its masquerade mark is
    /// then its own business, `markMasqBit` is only validated).
    pub fn with_firewall(mut self, firewall: Arc<dyn Firewall>) -> Self {
        self.firewall = Some(firewall);
        self
    }

    fn firewall(&self, conf: &PortmapConf) -> Arc<dyn Firewall> {
        if let Some(fw) = &self.firewall {
            return fw.clone();
        }
        Arc::from(
            self.backend
                .firewall(self.host_netns.as_deref(), conf.masq_mark()),
        )
    }

    fn conntrack(&self) -> cni_firewall::Result<Conntrack> {
        match &self.host_netns {
            Some(p) => Conntrack::open_in(p),
            None => Conntrack::open(),
        }
    }

    /// Deletes the UDP conntrack entries of the mapped UDP host ports for
    /// each family. Failures are logged only, as in the reference: the
    /// rules are already in place and a stale entry expires eventually.
    fn flush_udp(&self, conf: &PortmapConf, families: &[ConntrackFamily]) {
        let ports = conf.udp_host_ports();
        if ports.is_empty() {
            return;
        }
        let mut ct = match self.conntrack() {
            Ok(ct) => ct,
            Err(e) => {
                tracing::warn!("failed to delete stale UDP conntrack entries: {e}");
                return;
            }
        };
        for &family in families {
            if let Err(e) = ct.delete_udp_by_dst_ports(family, &ports) {
                tracing::warn!("failed to delete stale UDP conntrack entries ({family:?}): {e}");
            }
        }
    }

    /// Go's `getRoutableHostIF` + `enableLocalnetRouting`: sets
    /// `route_localnet=1` on the interface the node routes `ip` through, so
    /// `127.0.0.1:<hostPort>` DNATed to the container may leave loopback.
    fn enable_route_localnet(&self, ip: IpAddr) -> Result<()> {
        // The calling thread's namespace without a thread of its own.
        let handle = match &self.host_netns {
            Some(p) => self.kernel.open(&p.to_string_lossy()),
            None => self.kernel.current(),
        }?;
        let Some(link) = routable_host_if(&handle, ip)? else {
            return Ok(());
        };
        // Over netlink: a path lookup under `/proc/sys/net/ipv4` grows with
        // the node's namespaces (see `Handle::sysctl_set`).
        handle
            .set_ipv4_conf(link.index, &[(Ipv4Conf::RouteLocalnet, 1)])
            .map_err(|source| Error::RouteLocalnet {
                ifname: link.name.clone(),
                source: source.into(),
            })
    }
}

/// The interface of the most specific main-table route to `ip` (lowest
/// metric among equals); `None` when there is no such route, which the
/// reference also skips silently.
fn routable_host_if<H: NetnsHandle>(handle: &H, ip: IpAddr) -> Result<Option<Link>> {
    let family = if ip.is_ipv4() {
        AddressFamilyFilter::V4
    } else {
        AddressFamilyFilter::V6
    };
    let routes = handle.routes(family)?;
    let best = routes
        .iter()
        .filter(|r| r.table == Some(cni_netns::TABLE_MAIN) && r.dst.contains(ip))
        .filter_map(|r| Some((r.dst.prefix(), r.priority.unwrap_or(0), r.oif?)))
        .min_by_key(|&(prefix, metric, _)| (std::cmp::Reverse(prefix), metric));
    match best {
        Some((_, _, oif)) => match handle.link_by_index(oif) {
            Ok(link) => Ok(Some(link)),
            Err(_) => Ok(None),
        },
        None => Ok(None),
    }
}

fn spec(conf: &PortmapConf, req: &Request, prev: Option<&CniResult>) -> PortMappingSpec {
    let mut spec = PortMappingSpec::new(AttachmentId::new(
        conf.network.clone(),
        req.container_id.clone(),
        req.ifname.clone(),
    ));
    if let Some(prev) = prev {
        let (v4, v6) = container_ips(prev, &req.ifname);
        spec.container_v4 = v4;
        spec.container_v6 = v6;
    }
    spec.mappings = conf.mappings.clone();
    spec.snat = conf.snat;
    spec.masq_all = conf.masq_all;
    spec.conditions_v4 = conf.conditions_v4.clone();
    spec.conditions_v6 = conf.conditions_v6.clone();
    spec
}

fn load(req: &Request) -> Result<(PortmapConf, Option<CniResult>)> {
    let conf = config::parse(&req.config).map_err(|e| Error::ConfigParse {
        source: Box::new(e),
    })?;
    let prev = req.config.prev_result().map_err(|e| match e {
        // Code 1: the version error names prevResult already.
        e @ cni_types::Error::PrevResultVersion { .. } => Error::from(e),
        source => Error::PrevResultParse { source },
    })?;
    Ok((conf, prev))
}

/// The address families the container has an address in.
fn families(spec: &PortMappingSpec) -> Vec<ConntrackFamily> {
    [
        spec.container_v4.map(|_| ConntrackFamily::V4),
        spec.container_v6.map(|_| ConntrackFamily::V6),
    ]
    .into_iter()
    .flatten()
    .collect()
}

impl<K: NetKernel> Plugin for Portmap<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "portmap"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let (conf, prev) = load(req)?;
        let prev = prev.ok_or(Error::PrevResultMissing)?;
        if conf.mappings.is_empty() {
            return Ok(prev);
        }
        let spec = spec(&conf, req, Some(&prev));
        if spec.container_v4.is_none() && spec.container_v6.is_none() {
            return Ok(prev);
        }
        let span = step_span!("portmap.apply", portmap.count = conf.mappings.len());
        in_step(span, || {
            let firewall = self.firewall(&conf);
            let rules = RuleSpec::PortMappings(spec.clone());
            firewall.add(&rules)?;
            self.flush_udp(&conf, &families(&spec));
            if let (true, Some(v4)) = (conf.snat, spec.container_v4) {
                if let Err(e) = self.enable_route_localnet(IpAddr::V4(v4.ip())) {
                    // Beyond the reference: a failed ADD leaves no mappings.
                    if let Err(undo) = firewall.delete(&rules) {
                        tracing::warn!("rollback: {undo}");
                    }
                    return Err(e);
                }
            }
            Ok(())
        })?;
        Ok(prev)
    }

    fn del(&self, req: &Request) -> Result<()> {
        let (conf, prev) = load(req)?;
        if conf.mappings.is_empty() {
            return Ok(());
        }
        // Without prevResult (or with one an ADD would refuse) the firewall
        // removes whatever the attachment owns, so DEL stays idempotent.
        let spec = spec(&conf, req, prev.as_ref());
        self.firewall(&conf)
            .delete(&RuleSpec::PortMappings(spec.clone()))?;
        // Beyond the reference: the pod's UDP flows die with it, so the
        // next owner of the host port is reached at once. Only the families
        // the pod had an address in can have flows (each flush is a dump of
        // the conntrack table); without prevResult, both.
        let families = match families(&spec) {
            f if prev.is_some() && !f.is_empty() => f,
            _ => vec![ConntrackFamily::V4, ConntrackFamily::V6],
        };
        self.flush_udp(&conf, &families);
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<()> {
        let (conf, prev) = load(req)?;
        let prev = prev.ok_or(Error::CheckPrevResultMissing)?;
        if conf.mappings.is_empty() {
            return Ok(());
        }
        let spec = spec(&conf, req, Some(&prev));
        if spec.container_v4.is_none() && spec.container_v6.is_none() {
            return Ok(());
        }
        self.firewall(&conf)
            .check(&RuleSpec::PortMappings(spec))
            .map_err(Error::from)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        let conf = config::parse(&req.config)?;
        // Without a valid list nothing is known to be dead.
        let Some(valid) = req.config.valid_attachments()? else {
            return Ok(());
        };
        let valid: Vec<AttachmentId> = valid
            .into_iter()
            .map(|a| AttachmentId::new(conf.network.clone(), a.container_id, a.ifname))
            .collect();
        let removed = self
            .firewall(&conf)
            .gc(RuleKind::PortMapping, &conf.network, &valid)?;
        for o in removed {
            tracing::info!("gc: removed port mappings of {}", o.attachment);
        }
        Ok(())
    }

    fn status(&self, req: &Request) -> Result<()> {
        config::parse(&req.config)?;
        // Only the `nft`-process backend needs a program; native needs none.
        if self.firewall.is_none() && self.backend == Backend::Nft && !nft_available() {
            return Err(crate::Error::NotAvailable(
                "portmap: the nft program is not installed (nftables backend)".into(),
            )
            .into());
        }
        Ok(())
    }
}

fn nft_available() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).any(|d| is_executable(&d.join("nft")))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
