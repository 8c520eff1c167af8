//! The ipvlan plugin: gives the pod an ipvlan of a node link (the master's
//! MAC, its own addresses) — Go's `plugins/main/ipvlan/ipvlan.go`, plus
//! STATUS and GC (delegated to IPAM) and a rollback that also removes the
//! link. Chained after another plugin without `master`, it takes the
//! previous result's single interface as master; without IPAM, it uses the
//! previous result's addresses.
//!
//! A kernel without ipvlan ("Unknown device type") fails ADD with a CNI
//! error that says so, before anything is allocated.
//!
//! ```
//! use cni_plugins::ipvlan::IpvlanConf;
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"ipvlan","master":"eth0","mode":"l3"}"#,
//! )?;
//! let ipv = IpvlanConf::load(&conf)?;
//! assert_eq!((ipv.master.as_str(), ipv.mode.to_string().as_str()), ("eth0", "l3"));
//! # Ok::<(), cni_plugins::ipvlan::Error>(())
//! ```

mod error;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{IpvlanMode, IpvlanSpec, Link};
use cni_types::{CniResult, Dns, NetworkConfig};
use serde::Deserialize;

use crate::steps::iface::{self, interface};
use crate::steps::{check, conf, ipam, Undo};
pub use error::{Error, Result};

/// The ipvlan plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IpvlanConf {
    /// `master`: the parent link; empty means the previous result's single
    /// interface when chained, else the default route's device.
    pub master: String,
    /// `mode` (l2, l3, l3s).
    pub mode: IpvlanMode,
    /// `mtu` (0: the kernel's choice, the master's).
    pub mtu: u32,
    /// `linkInContainer`: the master is in the pod's namespace.
    pub link_in_container: bool,
    /// `dns`, copied into the result.
    pub dns: Dns,
    /// `optimisticDad` (default true): the pod's IPv6 addresses use
    /// optimistic DAD ([`cni_netns::Dad::Optimistic`]), usable as soon as
    /// the ADD returns; false gives Go's (the ADD waits for DAD).
    pub optimistic_dad: bool,
}

#[derive(Deserialize)]
pub(crate) struct Raw {
    #[serde(default)]
    master: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
    #[serde(rename = "optimisticDad", default = "conf::yes")]
    optimistic_dad: bool,
}

impl IpvlanConf {
    /// Reads the config (the master itself is resolved in ADD).
    pub fn load(config: &NetworkConfig) -> Result<IpvlanConf> {
        let raw: Raw = config.parse_as()?;
        let mode = conf::link_mode("ipvlan", &raw.mode)?;
        let mtu = conf::link_mtu(raw.mtu)?;
        Ok(IpvlanConf {
            master: raw.master,
            mode,
            mtu,
            link_in_container: raw.link_in_container,
            dns: config.dns.clone().unwrap_or_default(),
            optimistic_dad: raw.optimistic_dad,
        })
    }

    /// The pod interface's IPv6 DAD: optimistic unless `optimisticDad` is
    /// false (then Go's: the namespace's DAD, waited for).
    pub fn dad(&self) -> cni_netns::Dad {
        conf::shared_segment_dad(self.optimistic_dad)
    }
}

/// The ipvlan plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root)
/// with [`Ipvlan::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Ipvlan<K = LinuxKernel> {
    kernel: K,
}

impl Ipvlan {
    /// The plugin on the real kernel.
    pub fn new() -> Ipvlan {
        Ipvlan::default()
    }
}

impl<K: NetKernel> Ipvlan<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> Ipvlan<K> {
        Ipvlan { kernel }
    }
}

impl<K: NetKernel> Plugin for Ipvlan<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "ipvlan"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = IpvlanConf::load(&req.config)?;
        let prev = req.config.prev_result()?;
        let pod = self.kernel.open(&req.netns)?;
        let host = self.kernel.current()?;
        let master = chained_master(&conf, prev.as_ref())?;
        let master = iface::find_master(&master, conf.link_in_container, &host, &pod)?;
        let link = create_ipvlan(&conf, &master, &host, &pod, &req.ifname)?;
        let mut undo = Undo::<Error>::new();
        undo.push(|| pod.delete_link(link.index));
        // Chained without IPAM: the previous result's addresses.
        let chained = prev.filter(|p| req.config.ipam_type().is_empty() && !p.ips.is_empty());
        let mut result = match chained {
            Some(prev) => prev,
            None => ipam::add(req, &mut undo)?,
        };
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        result.interfaces = vec![interface(&link, &req.netns)];
        iface::configure_announced(&pod, &req.ifname, &result, conf.dad())?;
        result.dns = conf.dns.clone();
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        IpvlanConf::load(&req.config)?;
        Ok(iface::del_link_and_lease_in(&self.kernel, req)?)
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = IpvlanConf::load(&req.config)?;
        let pod = self.kernel.open(&req.netns)?;
        ipam::check(req)?;
        let prev = check::prev_result(req)?;
        let intf = check::prev_container(req, &prev)?;
        let host = self.kernel.current()?;
        // As Go's CHECK: an empty master is looked up as such (and fails).
        if !conf.master.is_empty() {
            iface::find_master(&conf.master, conf.link_in_container, &host, &pod)?;
        }
        let link = check::container_link(&pod, intf, Some("ipvlan"))?;
        let mode = pod.link_details(&link.name)?.ipvlan_mode;
        if mode != Some(conf.mode) {
            return Err(Error::ModeMismatch {
                found: mode.map(|m| m.to_string()).unwrap_or_default(),
                expected: conf.mode.to_string(),
            });
        }
        Ok(check::addresses_and_routes(&pod, &link, &prev)?)
    }

    fn status(&self, req: &Request) -> Result<()> {
        Ok(ipam::status(req)?)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        Ok(ipam::gc(req)?)
    }
}

/// Go's `loadConf`: without `master`, a chained ipvlan takes the previous
/// result's only named interface.
fn chained_master(conf: &IpvlanConf, prev: Option<&CniResult>) -> Result<String> {
    match prev {
        Some(prev) if conf.master.is_empty() => match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => Ok(only.name.clone()),
            _ => Err(Error::ChainedMasterMissing),
        },
        _ => Ok(conf.master.clone()),
    }
}

/// Creates the ipvlan under a temporary name directly in the pod (or, with
/// `linkInContainer`, next to its master there) and renames it inside.
fn create_ipvlan<H: NetnsHandle>(
    conf: &IpvlanConf,
    master: &Link,
    host: &H,
    pod: &H,
    ifname: &str,
) -> Result<Link> {
    Ok(iface::create_stacked_link(
        conf.link_in_container,
        host,
        pod.netns(),
        pod,
        ifname,
        |creator, name, target| {
            creator.add_ipvlan(&IpvlanSpec {
                name,
                parent: master.index,
                mode: conf.mode,
                mtu: (conf.mtu > 0).then_some(conf.mtu),
                netns: target,
            })
        },
    )?)
}
