//! The bandwidth meta-plugin (chained only): limits the traffic of the
//! container interface found in `prevResult` with token buckets programmed
//! over netlink.
//!
//! * ingress (towards the container): a TBF root qdisc on the host veth;
//! * egress (from the container): the host veth's ingress qdisc redirects
//!   every frame to an IFB device `bwp<hash>` whose root qdisc is a TBF.
//!
//! Behaviour and kernel state follow containernetworking/plugins
//! `plugins/meta/bandwidth` (v1.1.1, the TBF version). Beyond it: DEL also
//! removes the qdiscs it added on the host veth when that veth still exists
//! (Go's DEL leaves a redirect to a deleted IFB, which drops the pod's
//! egress traffic until the veth goes), ADD rolls back on failure, the IFB
//! carries an alias naming its network and container so that GC removes
//! only the IFBs of dead attachments of its own network, and CHECK also
//! verifies the redirect.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::bandwidth::Bandwidth;
//!
//! // No limits: nothing is touched and prevResult is passed through.
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let stdin = br#"{"cniVersion":"1.0.0","name":"net","type":"bandwidth",
//!     "prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}]}}"#;
//! let out = dispatch(&Bandwidth::new(), &env, stdin);
//! assert_eq!(out.exit_code, 0);
//! assert!(String::from_utf8(out.stdout).unwrap().contains("10.1.0.5/24"));
//!
//! // A rate without a burst is refused, as in the reference.
//! let stdin = br#"{"cniVersion":"1.0.0","name":"net","type":"bandwidth",
//!     "ingressRate":1000000}"#;
//! let out = dispatch(&Bandwidth::new(), &env, stdin);
//! assert_ne!(out.exit_code, 0);
//! assert!(String::from_utf8(out.stdout).unwrap()
//!     .contains("if rate is set, burst must also be set"));
//! ```

mod error;

use std::path::PathBuf;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{Errno, LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::tc::{self, PschedClock, RedirectFilterKind, Tbf};
use cni_netns::Link;
use cni_types::step_span;
use cni_types::trace::in_step;
use cni_types::{Bandwidth as BandwidthEntry, CniResult, Interface, Version};
use serde_json::Value;
use sha2::{Digest, Sha512};

use crate::steps::{self, Undo};
pub use error::{Error, Result};

/// Maximum length of the IFB device name (`IFNAMSIZ - 1`).
pub const MAX_IFB_NAME_LEN: usize = 15;
/// Prefix of the IFB device names.
pub const IFB_PREFIX: &str = "bwp";
const ENTRY_KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];
const ALIAS_PREFIX: &str = "cni-bandwidth";
// IFALIASZ - 1.
const MAX_ALIAS_LEN: usize = 255;

/// The bandwidth plugin.
///
/// By default it programs the network namespace it runs in (the node's),
/// as an exec'd plugin does; [`Bandwidth::in_netns`] points it at another
/// one (a runtime embedding it, or a test's node namespace). It works on
/// the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root) with
/// [`Bandwidth::with_kernel`].
#[derive(Debug, Clone, Default)]
pub struct Bandwidth<K = LinuxKernel> {
    host_netns: Option<PathBuf>,
    kernel: K,
}

/// The limits in effect for one attachment: the top-level keys when any is
/// present (Go's embedded `*BandwidthEntry`), else the `bandwidth`
/// capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandwidthConf {
    /// The network name.
    pub network: String,
    /// The limits, `None` when neither source gives any.
    pub limits: Option<BandwidthEntry>,
}

/// Go's `validateRateAndBurst`, same messages.
pub fn validate_rate_and_burst(rate: u64, burst: u64) -> Result<()> {
    let reason = if burst == 0 && rate != 0 {
        "if rate is set, burst must also be set"
    } else if rate == 0 && burst != 0 {
        "if burst is set, rate must also be set"
    } else if burst / 8 >= u32::MAX as u64 {
        "burst cannot be more than 4GB"
    } else {
        return Ok(());
    };
    Err(Error::RateBurstInvalid { reason })
}

fn field_u64(raw: &serde_json::Map<String, Value>, key: &str) -> Result<u64> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| Error::LimitNotInteger {
            key: key.to_owned(),
            found: v.to_string(),
        }),
    }
}

/// Parses and validates the plugin's configuration (Go's `parseConfig`).
pub fn parse_config(config: &cni_types::NetworkConfig) -> Result<BandwidthConf> {
    let raw = config.specific();
    let limits = if ENTRY_KEYS.iter().any(|k| raw.contains_key(*k)) {
        Some(BandwidthEntry {
            ingress_rate: field_u64(raw, "ingressRate")?,
            ingress_burst: field_u64(raw, "ingressBurst")?,
            egress_rate: field_u64(raw, "egressRate")?,
            egress_burst: field_u64(raw, "egressBurst")?,
        })
    } else {
        config
            .runtime_config
            .as_ref()
            .and_then(|rc| rc.bandwidth.clone())
    };
    if let Some(l) = &limits {
        validate_rate_and_burst(l.ingress_rate, l.ingress_burst)?;
        validate_rate_and_burst(l.egress_rate, l.egress_burst)?;
    }
    Ok(BandwidthConf {
        network: config.name.clone(),
        limits,
    })
}

fn is_zero(b: &BandwidthEntry) -> bool {
    b.ingress_rate == 0 && b.ingress_burst == 0 && b.egress_rate == 0 && b.egress_burst == 0
}

/// The IFB device name of an attachment: `bwp` and the first hex digits of
/// SHA-512(network name + container id), 15 characters in all (Go's
/// `utils.MustFormatHashWithPrefix`).
pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let mut name = String::from(IFB_PREFIX);
    for b in digest.iter() {
        if name.len() >= MAX_IFB_NAME_LEN {
            break;
        }
        name.push_str(&format!("{b:02x}"));
    }
    name.truncate(MAX_IFB_NAME_LEN);
    name
}

fn ifb_alias(network: &str, container_id: &str) -> Option<String> {
    let alias = format!("{ALIAS_PREFIX}/{network}/{container_id}");
    (alias.len() <= MAX_ALIAS_LEN).then_some(alias)
}

fn load(req: &Request) -> Result<(BandwidthConf, Option<CniResult>)> {
    let conf = parse_config(&req.config)?;
    let prev = req.config.prev_result().map_err(|e| match e {
        // Code 1: the version error names prevResult already.
        e @ cni_types::Error::PrevResultVersion { .. } => Error::from(e),
        source => Error::PrevResultParse { source },
    })?;
    Ok((conf, prev))
}

impl Bandwidth {
    /// bandwidth acting on the current network namespace.
    pub fn new() -> Self {
        Bandwidth::default()
    }

    /// bandwidth acting on the network namespace at `path` as the host.
    pub fn in_netns(path: impl Into<PathBuf>) -> Self {
        Bandwidth {
            host_netns: Some(path.into()),
            kernel: LinuxKernel,
        }
    }
}

impl<K: NetKernel> Bandwidth<K> {
    /// bandwidth on another kernel, acting on its current namespace as
    /// the host.
    pub fn with_kernel(kernel: K) -> Bandwidth<K> {
        Bandwidth {
            host_netns: None,
            kernel,
        }
    }

    fn host(&self) -> Result<K::Handle> {
        match &self.host_netns {
            Some(p) => self.kernel.open(&p.to_string_lossy()),
            None => self.kernel.current(),
        }
        .map_err(Error::from)
    }

    /// The pod's namespace (`CNI_NETNS`).
    fn pod(&self, req: &Request) -> Result<K::Handle> {
        self.kernel
            .open(&req.netns)
            .map_err(|source| Error::NetnsOpen {
                path: req.netns.clone(),
                source: source.into(),
            })
    }
}

impl<K: NetKernel> Plugin for Bandwidth<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "bandwidth"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let (conf, prev) = load(req)?;
        let limits = match conf.limits {
            Some(l) if !is_zero(&l) => l,
            _ => return prev.ok_or(Error::PrevResultMissing),
        };
        let mut result = prev.ok_or(Error::PrevResultMissing)?;
        let host = &self.host()?;
        let pod = self.pod(req)?;
        let veth = host_interface(host, &pod, &result, &req.ifname)?;
        let clock = PschedClock::read();
        let mut undo = Undo::<Error>::new();
        let span = step_span!(
            "tc.apply",
            link.name = %veth.name,
            tc.ingress_rate = limits.ingress_rate,
            tc.egress_rate = limits.egress_rate
        );
        in_step(span, || -> Result<()> {
            if limits.ingress_rate > 0 && limits.ingress_burst > 0 {
                let tbf =
                    Tbf::from_rate_and_burst(limits.ingress_rate, limits.ingress_burst, clock);
                host.add_tbf(veth.index, &tbf)
                    .map_err(tc_failed("create qdisc", &veth.name))?;
                undo.push(|| host.delete_qdisc(veth.index, tc::HANDLE_ROOT));
            }
            if limits.egress_rate > 0 && limits.egress_burst > 0 {
                let name = ifb_name(&conf.network, &req.container_id);
                let alias = ifb_alias(&conf.network, &req.container_id);
                let ifb = match host.add_ifb(&name, veth.mtu, alias.as_deref()) {
                    Ok(ifb) => ifb,
                    Err(source) => {
                        // Several requests: one failing after the creation
                        // leaves the IFB, ours unless it was there before.
                        if !source.is_errno(Errno::EEXIST) {
                            let _ = host.delete_link_by_name(&name);
                        }
                        return Err(Error::IfbCreate {
                            ifname: name.clone(),
                            source: source.into(),
                        });
                    }
                };
                let ifb_index = ifb.index;
                undo.push(move || host.delete_link(ifb_index));
                result.interfaces.push(Interface {
                    name: ifb.name.clone(),
                    mac: ifb.mac.map(|m| m.to_string()).unwrap_or_default(),
                    ..Interface::default()
                });
                host.add_ingress_qdisc(veth.index)
                    .map_err(tc_failed("create ingress qdisc", &veth.name))?;
                undo.push(|| host.delete_qdisc(veth.index, tc::HANDLE_INGRESS));
                host.add_redirect_filter(
                    veth.index,
                    ifb.index,
                    RedirectFilterKind::U32GoCompatible,
                )
                .map_err(tc_failed("add filter", &veth.name))?;
                let tbf = Tbf::from_rate_and_burst(limits.egress_rate, limits.egress_burst, clock);
                host.add_tbf(ifb.index, &tbf)
                    .map_err(tc_failed("create ifb qdisc: create qdisc", &ifb.name))?;
            }
            Ok(())
        })?;
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        let (conf, prev) = load(req)?;
        let host = self.host()?;
        // Every step runs: a failed IFB delete must not leave our qdiscs
        // on the veth, nor a failed tbf delete the ingress qdisc.
        let ifb = host
            .delete_link_by_name(&ifb_name(&conf.network, &req.container_id))
            .map(drop)
            .map_err(Error::from);
        // Beyond the reference: take our qdiscs off the host veth when it
        // is still there (the pod namespace is alive), so that DEL leaves
        // the veth as the main plugin made it.
        let (Some(limits), Some(prev)) = (conf.limits, prev) else {
            return ifb;
        };
        let Ok(pod) = self.kernel.open(&req.netns) else {
            return ifb;
        };
        let Ok(veth) = host_interface(&host, &pod, &prev, &req.ifname) else {
            return ifb;
        };
        let ingress = || -> Result<()> {
            if limits.ingress_rate > 0 && limits.ingress_burst > 0 {
                let ours = host
                    .qdiscs(veth.index)?
                    .iter()
                    .any(|q| q.parent == tc::HANDLE_ROOT && q.kind == "tbf");
                if ours {
                    host.delete_qdisc(veth.index, tc::HANDLE_ROOT)?;
                }
            }
            Ok(())
        };
        let egress = || -> Result<()> {
            if limits.egress_rate > 0 && limits.egress_burst > 0 {
                host.delete_qdisc(veth.index, tc::HANDLE_INGRESS)?;
            }
            Ok(())
        };
        steps::all_errors([ifb, ingress(), egress()])
    }

    fn check(&self, req: &Request) -> Result<()> {
        let (conf, prev) = load(req)?;
        let prev = prev.ok_or(Error::CheckPrevResultMissing)?;
        let Some(limits) = conf.limits else {
            return Ok(());
        };
        let host = self.host()?;
        let pod = self.pod(req)?;
        let veth = host_interface(&host, &pod, &prev, &req.ifname)?;
        let clock = PschedClock::read();
        if limits.ingress_rate > 0 && limits.ingress_burst > 0 {
            let want = Tbf::from_rate_and_burst(limits.ingress_rate, limits.ingress_burst, clock);
            check_tbf(&host, veth.index, &want)?;
        }
        if limits.egress_rate > 0 && limits.egress_burst > 0 {
            let name = ifb_name(&conf.network, &req.container_id);
            let ifb = host
                .link_by_name(&name)
                .map_err(|source| Error::IfbLookup {
                    ifname: name.clone(),
                    source: source.into(),
                })?;
            let want = Tbf::from_rate_and_burst(limits.egress_rate, limits.egress_burst, clock);
            check_tbf(&host, ifb.index, &want)?;
            let redirected = host
                .filters(veth.index, tc::INGRESS_QDISC_HANDLE)?
                .iter()
                .any(|f| f.redirects.contains(&ifb.index));
            if !redirected {
                return Err(Error::RedirectMissing {
                    veth: veth.name,
                    ifb: name,
                });
            }
        }
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<()> {
        let conf = parse_config(&req.config)?;
        let Some(valid) = req.config.valid_attachments()? else {
            return Ok(());
        };
        let host = self.host()?;
        let prefix = format!("{ALIAS_PREFIX}/{}/", conf.network);
        // Every stale IFB is deleted even when one of them fails.
        let mut results = Vec::new();
        for link in host.links()? {
            if link.kind.as_deref() != Some("ifb") || !link.name.starts_with(IFB_PREFIX) {
                continue;
            }
            let alias = match host.link_alias(link.index) {
                Ok(Some(alias)) => alias,
                Ok(None) => continue,
                // Gone meanwhile (another GC or a DEL).
                Err(e) if e.is_not_found() => continue,
                Err(e) => {
                    results.push(Err(e.into()));
                    continue;
                }
            };
            let Some(cid) = alias.strip_prefix(&prefix) else {
                continue;
            };
            if valid.iter().any(|a| a.container_id == cid) {
                continue;
            }
            tracing::info!("gc: deleting {} of container {cid}", link.name);
            results.push(
                host.delete_link_by_name(&link.name)
                    .map(drop)
                    .map_err(Error::from),
            );
        }
        steps::all_errors(results)
    }

    /// 0.3.0 on, as the reference: the host veth is found through the
    /// result's interfaces, which older results do not have.
    fn supported_versions(&self) -> Vec<Version> {
        Version::ALL
            .iter()
            .copied()
            .filter(|v| *v >= Version::new(0, 3, 0))
            .collect()
    }
}

/// Go's `getHostInterface`: the prevResult host-side interface that is the
/// veth peer of the container's `ifname`.
fn host_interface<H: NetnsHandle>(
    host: &H,
    in_pod: &H,
    result: &CniResult,
    ifname: &str,
) -> Result<Link> {
    if result.interfaces.is_empty() {
        return Err(Error::PrevResultNoInterfaces);
    }
    let peer = in_pod
        .link_by_name(ifname)
        .and_then(|l| in_pod.veth_peer_index(l.index))
        .map_err(|source| Error::VethPeerLookup {
            ifname: ifname.to_owned(),
            source: source.into(),
        })?;
    let link = host
        .link_by_index(peer)
        .map_err(|source| Error::VethPeerNotOnHost {
            ifname: ifname.to_owned(),
            index: peer,
            source: source.into(),
        })?;
    if result
        .interfaces
        .iter()
        .any(|i| i.sandbox.is_empty() && i.name == link.name)
    {
        Ok(link)
    } else {
        Err(Error::VethPeerNotInResult {
            ifname: ifname.to_owned(),
            peer: link.name,
        })
    }
}

/// A failed traffic-control step on `link`, with Go's name for it.
fn tc_failed<'a>(op: &'static str, link: &'a str) -> impl FnOnce(cni_netns::Error) -> Error + 'a {
    move |source| Error::TrafficControl {
        op,
        link: link.to_owned(),
        source: source.into(),
    }
}

/// Go's CHECK of one TBF: the first qdisc (pfifo_fast skipped) must be a
/// TBF with the expected rate, limit and buffer.
fn check_tbf<H: NetnsHandle>(host: &H, index: u32, want: &Tbf) -> Result<()> {
    let qdiscs: Vec<_> = host
        .qdiscs(index)?
        .into_iter()
        .filter(|q| q.kind != "pfifo_fast")
        .collect();
    let first = qdiscs
        .first()
        .ok_or(Error::TbfMissing { index, found: None })?;
    let Some(got) = first.tbf.filter(|_| first.kind == "tbf") else {
        return Err(Error::TbfMissing {
            index,
            found: Some(first.kind.clone()),
        });
    };
    let differs = [
        ("Rate", got.rate != want.rate),
        ("Limit", got.limit != want.limit),
        ("Buffer", got.buffer != want.buffer),
    ];
    match differs.into_iter().find(|(_, d)| *d) {
        Some((field, _)) => Err(Error::TbfMismatch { index, field }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifb_names_match_the_reference_hash() {
        let n = ifb_name("net", "c1");
        assert_eq!(n.len(), MAX_IFB_NAME_LEN);
        assert!(n.starts_with("bwp"));
        // sha512("netc1") starts with these hex digits.
        let d = Sha512::digest(b"netc1");
        assert_eq!(&n[3..5], format!("{:02x}", d[0]));
    }

    #[test]
    fn rate_and_burst_go_together() {
        assert!(validate_rate_and_burst(0, 0).is_ok());
        assert!(validate_rate_and_burst(1, 1).is_ok());
        assert_eq!(
            validate_rate_and_burst(1, 0).unwrap_err().to_string(),
            "if rate is set, burst must also be set"
        );
        assert_eq!(
            validate_rate_and_burst(0, 1).unwrap_err().to_string(),
            "if burst is set, rate must also be set"
        );
        assert_eq!(
            validate_rate_and_burst(1, (u32::MAX as u64) * 8)
                .unwrap_err()
                .to_string(),
            "burst cannot be more than 4GB"
        );
    }

    #[test]
    fn top_level_limits_win_over_the_capability() {
        let c = cni_types::NetworkConfig::from_slice(
            br#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth","egressRate":0,
            "runtimeConfig":{"bandwidth":{"ingressRate":8,"ingressBurst":8}}}"#,
        )
        .unwrap();
        assert_eq!(
            parse_config(&c).unwrap().limits,
            Some(BandwidthEntry::default())
        );
        let c = cni_types::NetworkConfig::from_slice(
            br#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth",
            "runtimeConfig":{"bandwidth":{"ingressRate":8,"ingressBurst":8}}}"#,
        )
        .unwrap();
        assert_eq!(parse_config(&c).unwrap().limits.unwrap().ingress_rate, 8);
    }
}
