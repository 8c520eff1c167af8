//! The vlan plugin: gives the pod an 802.1Q VLAN link on a node link,
//! addressed by the IPAM plugin — Go's `plugins/main/vlan/vlan.go`, plus GC
//! (delegated to IPAM) and a rollback that also removes the link.
//!
//! A kernel without 802.1Q ("Unknown device type") fails ADD with a CNI
//! error naming the `vlan` link type, before anything is allocated.
//!
//! ```
//! use cni_plugins::vlan::VlanConf;
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"vlan","master":"eth0","vlanId":42}"#,
//! )?;
//! assert_eq!(VlanConf::load(&conf)?.vlan_id, 42);
//! let bad = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"vlan","master":"eth0","vlanId":4095}"#,
//! )?;
//! assert!(VlanConf::load(&bad).unwrap_err().to_string().contains("invalid VLAN ID 4095"));
//! # Ok::<(), cni_plugins::vlan::Error>(())
//! ```

mod error;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{Link, VlanSpec, VLAN_ID_MAX};
use cni_types::{CniResult, Dns, NetworkConfig};
use serde::Deserialize;

use crate::steps::{check, iface, ipam, Undo};
pub use error::{Error, Result};

/// The vlan plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VlanConf {
    /// `master`: the parent link (required, as in Go's code).
    pub master: String,
    /// `vlanId` (0..=4094).
    pub vlan_id: u16,
    /// `mtu` as given (0: the kernel's choice, the master's); ADD checks
    /// it is in 0..=the master's, as Go does.
    pub mtu: i64,
    /// `linkInContainer`: the master is in the pod's namespace.
    pub link_in_container: bool,
    /// `dns`, copied into the result.
    pub dns: Dns,
}

/// The plugin's own keys, as Go's struct tags spell them.
const KEYS: &[&str] = &["master", "vlanId", "mtu", "linkInContainer"];

#[derive(Deserialize)]
pub(crate) struct Raw {
    #[serde(default)]
    master: String,
    #[serde(rename = "vlanId", default)]
    vlan_id: i64,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
}

impl VlanConf {
    /// Go's `loadConf` without the kernel: `master` is required and
    /// `vlanId` must be in 0..=4094 (the MTU bound needs the master and is
    /// checked in ADD).
    pub fn load(config: &NetworkConfig) -> Result<VlanConf> {
        let raw: Raw = config.parse_specific_as_go(KEYS)?;
        if raw.master.is_empty() {
            return Err(Error::MasterMissing);
        }
        // Go's message says 4095 although it refuses 4095 (the kernel does).
        let vlan_id = u16::try_from(raw.vlan_id)
            .ok()
            .filter(|id| *id <= VLAN_ID_MAX)
            .ok_or(Error::IdInvalid { id: raw.vlan_id })?;
        Ok(VlanConf {
            master: raw.master,
            vlan_id,
            mtu: raw.mtu,
            link_in_container: raw.link_in_container,
            dns: config.dns.clone().unwrap_or_default(),
        })
    }
}

/// The vlan plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root)
/// with [`Vlan::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Vlan<K = LinuxKernel> {
    kernel: K,
}

impl Vlan {
    /// The plugin on the real kernel.
    pub fn new() -> Vlan {
        Vlan::default()
    }
}

impl<K: NetKernel> Vlan<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> Vlan<K> {
        Vlan { kernel }
    }
}

impl<K: NetKernel> Plugin for Vlan<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "vlan"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = VlanConf::load(&req.config)?;
        if req.config.ipam_type().is_empty() {
            return Err(Error::IpamRequired);
        }
        let pod = self.kernel.open(&req.netns)?;
        let host = self.kernel.current()?;
        let master = iface::find_master(&conf.master, conf.link_in_container, &host, &pod)?;
        let mtu = check_mtu(&conf, &master)?;
        let link = iface::create_stacked_link(
            conf.link_in_container,
            &host,
            pod.netns(),
            &pod,
            &req.ifname,
            |creator, name, target| {
                creator.add_vlan(&VlanSpec {
                    name,
                    parent: master.index,
                    vlan_id: conf.vlan_id,
                    mtu: (mtu > 0).then_some(mtu),
                    netns: target,
                })
            },
        )?;
        let mut undo = Undo::<Error>::new();
        undo.push(|| pod.delete_link(link.index));
        let ipam = ipam::add(req, &mut undo)?;
        let mut result = iface::single_interface_result(ipam, &link, &req.netns);
        iface::configure(&pod, &req.ifname, &result)?;
        result.dns = conf.dns.clone();
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        // Go's DEL also looks the master up and fails when it is gone;
        // ours succeeds, so that a node link removed first does not wedge
        // the pod's teardown.
        VlanConf::load(&req.config)?;
        Ok(iface::del_link_and_lease_in(&self.kernel, req)?)
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = VlanConf::load(&req.config)?;
        let pod = self.kernel.open(&req.netns)?;
        ipam::check(req)?;
        let prev = req.config.prev_result()?.ok_or(Error::PrevResultMissing)?;
        let intf = check::prev_container(req, &prev)?;
        let host = self.kernel.current()?;
        iface::find_master(&conf.master, conf.link_in_container, &host, &pod)?;
        let link = check::container_link(&pod, intf, Some("vlan"))?;
        let id = pod.vlan_id(&link.name)?;
        if id != Some(conf.vlan_id) {
            return Err(Error::IdMismatch {
                ifname: link.name,
                configured: conf.vlan_id,
                current: id,
            });
        }
        if conf.mtu != 0 && conf.mtu != i64::from(link.mtu) {
            return Err(Error::MtuMismatch {
                ifname: link.name,
                configured: conf.mtu,
                current: link.mtu,
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

/// Go's bound: the VLAN's MTU is in 0..=its master's.
fn check_mtu(conf: &VlanConf, master: &Link) -> Result<u32> {
    u32::try_from(conf.mtu)
        .ok()
        .filter(|m| *m <= master.mtu)
        .ok_or(
            crate::Error::InvalidMtu {
                mtu: conf.mtu,
                master_mtu: Some(master.mtu),
            }
            .into(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(extra: &str) -> Result<VlanConf> {
        let text = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"vlan"{extra}}}"#);
        VlanConf::load(&NetworkConfig::from_slice(text.as_bytes())?)
    }

    #[test]
    fn vlan_id_bounds_and_go_key_matching() {
        assert_eq!(load(r#","master":"eth0""#).unwrap().vlan_id, 0);
        assert_eq!(
            load(r#","master":"eth0","vlanId":4094"#).unwrap().vlan_id,
            4094
        );
        for bad in ["4095", "-1", "70000"] {
            let e = load(&format!(r#","master":"eth0","vlanId":{bad}"#)).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid VLAN ID {bad} (must be between 0 and 4095 inclusive)")
            );
            assert_eq!(cni_types::CniError::from(e).code.as_u32(), 999);
        }
        // Go's decoder matches keys case-insensitively.
        let c = load(r#","MASTER":"eth0","vlanid":7,"LinkInContainer":true"#).unwrap();
        assert_eq!(
            (c.master.as_str(), c.vlan_id, c.link_in_container),
            ("eth0", 7, true)
        );
        assert!(load("")
            .unwrap_err()
            .to_string()
            .starts_with("\"master\" field is required"));
        // A wrong type is a decoding failure that names the netconf.
        let e = load(r#","master":"eth0","vlanId":"x""#).unwrap_err();
        assert!(e.to_string().starts_with("failed to load netconf"), "{e}");
    }
}
