//! The macvlan plugin: gives the pod a macvlan of a node link (its own MAC
//! on the master's wire), addressed by the IPAM plugin — Go's
//! `plugins/main/macvlan/macvlan.go`, plus STATUS and GC (delegated to
//! IPAM) and a rollback that also removes the link.
//!
//! ```
//! use cni_plugins::macvlan::MacvlanConf;
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"macvlan","master":"eth0",
//!          "mode":"vepa","mac":"02:00:00:00:00:01",
//!          "runtimeConfig":{"mac":"02:00:00:00:00:02"}}"#,
//! )?;
//! let mv = MacvlanConf::load(&conf, "MAC=02:00:00:00:00:03")?;
//! assert_eq!(mv.mode.to_string(), "vepa");
//! // runtimeConfig wins over CNI_ARGS, which wins over the config.
//! assert_eq!(mv.mac.unwrap().to_string(), "02:00:00:00:00:02");
//! # Ok::<(), cni_plugins::macvlan::Error>(())
//! ```

mod error;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{Link, MacAddr, MacvlanMode, MacvlanSpec};
use cni_types::{CniResult, Dns, NetworkConfig};
use serde::Deserialize;

use crate::steps::iface::{self, interface};
use crate::steps::{check, conf, ipam, Undo};
pub use error::{Error, Result};

/// The macvlan plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MacvlanConf {
    /// `master`: the parent link; empty means the default route's device.
    pub master: String,
    /// `mode` (bridge, private, vepa, passthru).
    pub mode: MacvlanMode,
    /// `mtu` (0: the kernel's choice, the master's).
    pub mtu: u32,
    /// The pod link's MAC: `mac`, overridden by `CNI_ARGS` `MAC`, then by
    /// `runtimeConfig.mac`.
    pub mac: Option<MacAddr>,
    /// `linkInContainer`: the master is in the pod's namespace.
    pub link_in_container: bool,
    /// `bcqueuelen`: the parent's broadcast queue length.
    pub bc_queue_len: Option<u32>,
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
    #[serde(default)]
    mac: String,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
    #[serde(default)]
    bcqueuelen: Option<u32>,
    #[serde(rename = "optimisticDad", default = "conf::yes")]
    optimistic_dad: bool,
}

impl MacvlanConf {
    /// Reads the config and `CNI_ARGS` as Go's `loadConf` does (the master
    /// and MTU checks need the kernel and happen in ADD and CHECK).
    pub fn load(config: &NetworkConfig, cni_args: &str) -> Result<MacvlanConf> {
        let raw: Raw = config.parse_as()?;
        let mode = conf::link_mode("macvlan", &raw.mode)?;
        let mtu = conf::link_mtu(raw.mtu)?;
        let mac = conf::requested_mac(config, cni_args, raw.mac)?;
        Ok(MacvlanConf {
            master: raw.master,
            mode,
            mtu,
            mac,
            link_in_container: raw.link_in_container,
            bc_queue_len: raw.bcqueuelen,
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

/// The macvlan plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root)
/// with [`Macvlan::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Macvlan<K = LinuxKernel> {
    kernel: K,
}

impl Macvlan {
    /// The plugin on the real kernel.
    pub fn new() -> Macvlan {
        Macvlan::default()
    }
}

impl<K: NetKernel> Macvlan<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> Macvlan<K> {
        Macvlan { kernel }
    }
}

impl<K: NetKernel> Plugin for Macvlan<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "macvlan"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = MacvlanConf::load(&req.config, &req.args_raw)?;
        let pod = self.kernel.open(&req.netns)?;
        let host = self.kernel.current()?;
        let master = iface::find_master(&conf.master, conf.link_in_container, &host, &pod)?;
        if conf.mtu > master.mtu {
            return Err(crate::Error::InvalidMtu {
                mtu: i64::from(conf.mtu),
                master_mtu: Some(master.mtu),
            }
            .into());
        }
        let link = create_macvlan(&conf, &master, &host, &pod, &req.ifname)?;
        let mut undo = Undo::<Error>::new();
        undo.push(|| pod.delete_link(link.index));
        if let Some(len) = conf.bc_queue_len {
            pod.set_macvlan_bc_queue_len(link.index, len)?;
        }
        let mut result = CniResult {
            interfaces: vec![interface(&link, &req.netns)],
            ..Default::default()
        };
        if req.config.ipam_type().is_empty() {
            pod.set_up(link.index)?;
        } else {
            let ipam = ipam::add(req, &mut undo)?;
            result.ips = ipam.ips;
            result.routes = ipam.routes;
            for ip in &mut result.ips {
                ip.interface = Some(0);
            }
            iface::configure_announced(&pod, &req.ifname, &result, conf.dad())?;
        }
        result.dns = conf.dns.clone();
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        Ok(iface::del_link_and_lease_in(&self.kernel, req)?)
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = MacvlanConf::load(&req.config, &req.args_raw)?;
        let pod = self.kernel.open(&req.netns)?;
        ipam::check(req)?;
        let prev = check::prev_result(req)?;
        let intf = check::prev_container(req, &prev)?;
        let host = self.kernel.current()?;
        iface::find_master(&conf.master, conf.link_in_container, &host, &pod)?;
        let link = check::container_link(&pod, intf, Some("macvlan"))?;
        let mode = pod.link_details(&link.name)?.macvlan_mode;
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

/// Creates the macvlan under a temporary name directly in the pod (or, with
/// `linkInContainer`, next to its master there) and renames it inside.
fn create_macvlan<H: NetnsHandle>(
    conf: &MacvlanConf,
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
            creator.add_macvlan(&MacvlanSpec {
                name,
                parent: master.index,
                mode: conf.mode,
                mtu: (conf.mtu > 0).then_some(conf.mtu),
                mac: conf.mac,
                netns: target,
            })
        },
    )?)
}
