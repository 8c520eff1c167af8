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
//! # Ok::<(), cni_plugins::Error>(())
//! ```

use cni_exec::{Plugin, Request};
use cni_netns::{Handle, IpvlanMode, IpvlanSpec, Link, Netns};
use cni_types::{CniError, CniResult, Dns, NetworkConfig};
use serde::Deserialize;

use crate::macvlan::common::{self, fail, interface};
use crate::Result;

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
}

impl IpvlanConf {
    /// Reads the config (the master itself is resolved in ADD).
    pub fn load(config: &NetworkConfig) -> Result<IpvlanConf> {
        let raw: Raw = config.parse_as()?;
        let mode = raw
            .mode
            .parse()
            .map_err(|_| fail(format!("unknown ipvlan mode: {:?}", raw.mode)))?;
        let mtu = u32::try_from(raw.mtu)
            .map_err(|_| fail(format!("invalid MTU {}, must be >= 0", raw.mtu)))?;
        Ok(IpvlanConf {
            master: raw.master,
            mode,
            mtu,
            link_in_container: raw.link_in_container,
            dns: config.dns.clone().unwrap_or_default(),
        })
    }
}

/// The ipvlan plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ipvlan;

impl Ipvlan {
    fn cmd_add(&self, req: &Request) -> Result<CniResult> {
        let conf = IpvlanConf::load(&req.config)?;
        let prev = req.config.prev_result()?;
        let netns = Netns::open(&req.netns)?;
        let (host, pod) = (Handle::current()?, Handle::in_netns(&netns)?);
        let master = chained_master(&conf, prev.as_ref())?;
        let master = common::find_master(&master, conf.link_in_container, &host, &pod)?;
        let link = create_ipvlan(&conf, &master, &host, &netns, &pod, &req.ifname)?;
        let mut ipam_done = false;
        let added = attach(req, &conf, prev, &pod, &link, &mut ipam_done);
        if added.is_err() {
            if ipam_done {
                common::undo_ipam(req);
            }
            if let Err(e) = pod.delete_link(link.index) {
                tracing::warn!("undo ADD: {e}");
            }
        }
        added
    }

    fn cmd_del(&self, req: &Request) -> Result<()> {
        IpvlanConf::load(&req.config)?;
        let pod = common::pod_for_del(req)?;
        common::delete_pod_link_while(pod.as_ref().map(|p| &p.1), &req.ifname, || {
            common::ipam_del(req)
        })
    }

    fn cmd_check(&self, req: &Request) -> Result<()> {
        let conf = IpvlanConf::load(&req.config)?;
        let netns = Netns::open(&req.netns)?;
        common::ipam_check(req)?;
        let prev = common::prev_result(req)?;
        let intf = common::prev_container(req, &prev)?;
        let (host, pod) = (Handle::current()?, Handle::in_netns(&netns)?);
        // As Go's CHECK: an empty master is looked up as such (and fails).
        if !conf.master.is_empty() {
            common::find_master(&conf.master, conf.link_in_container, &host, &pod)?;
        }
        let link = common::check_container_link(&pod, intf, Some("ipvlan"))?;
        let mode = pod.link_details(&link.name)?.ipvlan_mode;
        if mode != Some(conf.mode) {
            return Err(fail(format!(
                "Container IPVlan mode {} does not match expected value: {}",
                mode.map(|m| m.to_string()).unwrap_or_default(),
                conf.mode
            )));
        }
        common::check_addresses_and_routes(&pod, &link, &prev)
    }
}

/// Go's `loadConf`: without `master`, a chained ipvlan takes the previous
/// result's only named interface.
fn chained_master(conf: &IpvlanConf, prev: Option<&CniResult>) -> Result<String> {
    match prev {
        Some(prev) if conf.master.is_empty() => match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => Ok(only.name.clone()),
            _ => Err(fail(
                "chained master failure. PrevResult lacks a single named interface".into(),
            )),
        },
        _ => Ok(conf.master.clone()),
    }
}

/// Creates the ipvlan under a temporary name directly in the pod (or, with
/// `linkInContainer`, next to its master there) and renames it inside.
fn create_ipvlan(
    conf: &IpvlanConf,
    master: &Link,
    host: &Handle,
    netns: &Netns,
    pod: &Handle,
    ifname: &str,
) -> Result<Link> {
    let tmp = common::temp_link_name();
    let (creator, target) = if conf.link_in_container {
        (pod, None)
    } else {
        (host, Some(netns))
    };
    creator.add_ipvlan(&IpvlanSpec {
        name: tmp.clone(),
        parent: master.index,
        mode: conf.mode,
        mtu: (conf.mtu > 0).then_some(conf.mtu),
        netns: target,
    })?;
    let link = pod.link_by_name(&tmp)?;
    let renamed = pod
        .rename(link.index, ifname)
        .and_then(|()| pod.link_by_index(link.index));
    if renamed.is_err() {
        let _ = pod.delete_link(link.index);
    }
    Ok(renamed?)
}

/// Addresses from the previous result (chained, no IPAM) or from IPAM, put
/// on the link, and the result.
fn attach(
    req: &Request,
    conf: &IpvlanConf,
    prev: Option<CniResult>,
    pod: &Handle,
    link: &Link,
    ipam_done: &mut bool,
) -> Result<CniResult> {
    let chained = prev.filter(|p| req.config.ipam_type().is_empty() && !p.ips.is_empty());
    let mut result = match chained {
        Some(prev) => prev,
        None => {
            let r = common::ipam_add(req)?;
            *ipam_done = true;
            r
        }
    };
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    result.interfaces = vec![interface(link, &req.netns)];
    common::configure_announced(pod, &req.ifname, &result)?;
    result.dns = conf.dns.clone();
    Ok(result)
}

impl Plugin for Ipvlan {
    fn add(&self, req: &Request) -> std::result::Result<CniResult, CniError> {
        Ok(self.cmd_add(req)?)
    }

    fn del(&self, req: &Request) -> std::result::Result<(), CniError> {
        Ok(self.cmd_del(req)?)
    }

    fn check(&self, req: &Request) -> std::result::Result<(), CniError> {
        Ok(self.cmd_check(req)?)
    }

    fn status(&self, req: &Request) -> std::result::Result<(), CniError> {
        Ok(common::ipam_status(req)?)
    }

    fn gc(&self, req: &Request) -> std::result::Result<(), CniError> {
        Ok(common::ipam_gc(req)?)
    }

    fn about(&self) -> String {
        format!("CNI ipvlan plugin v{}", env!("CARGO_PKG_VERSION"))
    }
}
