//! The host-device plugin: moves an existing node link into the pod, named
//! `CNI_IFNAME`, and back on DEL under its original name (kept in the
//! link's alias meanwhile) — Go's `plugins/main/host-device/host-device.go`,
//! plus STATUS and GC (delegated to IPAM), a DEL that tolerates a vanished
//! namespace or link, and a rollback that also moves the link back.
//!
//! The link is found by `device` (name), `hwaddr`, `kernelpath` (a
//! `/sys/devices/...` directory whose `net/` holds it) or `pciBusID` (also
//! the `deviceID` capability, `runtimeConfig.deviceID`). A PCI device bound
//! to a userspace (DPDK) driver has no link: it is reported without moving
//! anything.
//!
//! ```
//! use cni_plugins::host_device::{HostDeviceConf, Selector};
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"host-device","device":"eth1"}"#,
//! )?;
//! assert_eq!(HostDeviceConf::load(&conf)?.selector, Selector::Device("eth1".into()));
//! let none = NetworkConfig::from_slice(br#"{"cniVersion":"1.0.0","name":"n","type":"host-device"}"#)?;
//! assert!(HostDeviceConf::load(&none).is_err());
//! # Ok::<(), cni_plugins::host_device::Error>(())
//! ```

mod error;

use std::path::{Path, PathBuf};

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{Dad, Link, MacAddr};
use cni_types::{CniResult, Dns, NetworkConfig};
use serde::Deserialize;

use crate::steps::iface::{self, interface};
use crate::steps::{check, conf, ipam, Undo};
pub use error::{Error, Result};

/// Where PCI devices are listed (Go's `sysBusPCI`).
pub const SYS_BUS_PCI: &str = "/sys/bus/pci/devices";

/// Drivers that take a NIC away from the kernel's network stack (DPDK).
const USERSPACE_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

/// How the node link is named in the config, in Go's order of precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `device`: the link's name.
    Device(String),
    /// `hwaddr`: the link's MAC.
    HwAddr(String),
    /// `kernelpath`: its device directory under `/sys/devices/`.
    KernelPath(String),
    /// `pciBusID` (or the `deviceID` capability): its PCI address.
    Pci(String),
}

/// The host-device plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostDeviceConf {
    /// Which link.
    pub selector: Selector,
    /// `dns`, copied into the result when there is IPAM.
    pub dns: Dns,
    /// `optimisticDad` (default true): with IPAM, the pod's IPv6
    /// addresses use optimistic DAD ([`cni_netns::Dad::Optimistic`]),
    /// usable as soon as the ADD returns; false gives Go's (the ADD waits
    /// for DAD).
    pub optimistic_dad: bool,
}

#[derive(Deserialize)]
pub(crate) struct Raw {
    #[serde(default)]
    device: String,
    #[serde(default)]
    hwaddr: String,
    #[serde(default)]
    kernelpath: String,
    #[serde(rename = "pciBusID", default)]
    pci_bus_id: String,
    #[serde(rename = "optimisticDad", default = "conf::yes")]
    optimistic_dad: bool,
}

impl HostDeviceConf {
    /// Reads the config; the `deviceID` capability replaces `pciBusID`.
    pub fn load(config: &NetworkConfig) -> Result<HostDeviceConf> {
        let raw: Raw = config.parse_as()?;
        let device_id = config
            .runtime_config
            .as_ref()
            .and_then(|r| r.device_id.clone())
            .filter(|d| !d.is_empty());
        let pci = device_id.unwrap_or(raw.pci_bus_id);
        let selector = if !raw.device.is_empty() {
            Selector::Device(raw.device)
        } else if !raw.hwaddr.is_empty() {
            Selector::HwAddr(raw.hwaddr)
        } else if !raw.kernelpath.is_empty() {
            Selector::KernelPath(raw.kernelpath)
        } else if !pci.is_empty() {
            Selector::Pci(pci)
        } else {
            // A plain error in Go (code 999), not a config error.
            return Err(Error::Unspecified);
        };
        Ok(HostDeviceConf {
            selector,
            dns: config.dns.clone().unwrap_or_default(),
            optimistic_dad: raw.optimistic_dad,
        })
    }

    /// Go's `DPDKMode`: the PCI device is bound to a userspace driver.
    fn dpdk_mode(&self) -> Result<bool> {
        let Selector::Pci(pci) = &self.selector else {
            return Ok(false);
        };
        let driver = Path::new(SYS_BUS_PCI).join(pci).join("driver");
        let target = std::fs::canonicalize(&driver).map_err(|source| Error::PciDriverLookup {
            path: driver.clone(),
            source,
        })?;
        let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("");
        Ok(USERSPACE_DRIVERS.contains(&name))
    }
}

/// The host-device plugin, on the real kernel by default; on another one
/// (a `cni_netns::kernel::FakeKernel` in tests without
/// root) with [`HostDevice::with_kernel`]. The `kernelpath` and
/// `pciBusID` selectors and the DPDK check read sysfs (`/sys/devices`,
/// [`SYS_BUS_PCI`]) directly, whatever the kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostDevice<K = LinuxKernel> {
    kernel: K,
}

impl HostDevice {
    /// The plugin on the real kernel.
    pub fn new() -> HostDevice {
        HostDevice::default()
    }
}

impl<K: NetKernel> HostDevice<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> HostDevice<K> {
        HostDevice { kernel }
    }
}

impl<K: NetKernel> Plugin for HostDevice<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "host-device"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = HostDeviceConf::load(&req.config)?;
        let dpdk = conf.dpdk_mode()?;
        let pod = self.kernel.open(&req.netns)?;
        let host = self.kernel.current()?;
        // The node link as it was, once it is in the pod.
        let mut interfaces = Vec::new();
        // With IPAM, the DAD of its addresses; set before the link comes
        // up in the pod, so that its link-local address follows it too.
        let dad = (!req.config.ipam_type().is_empty())
            .then(|| conf::shared_segment_dad(conf.optimistic_dad));
        let moved = if dpdk {
            None
        } else {
            let dev = find_link(&host, &conf.selector).map_err(|e| Error::DeviceLookup {
                source: Box::new(e),
            })?;
            let link = move_in(&host, &dev, &pod, &req.ifname, dad)?;
            interfaces.push(interface(&link, &req.netns));
            Some(dev)
        };
        if req.config.ipam_type().is_empty() {
            return Ok(CniResult {
                interfaces,
                ..Default::default()
            });
        }
        let mut undo = Undo::<Error>::new();
        if let Some(dev) = &moved {
            // Back as it came: its name, no alias, up if it was.
            undo.push(|| -> Result<()> {
                move_out(&pod, &host, &req.ifname)?;
                let index = host.link_by_name(&dev.name)?.index;
                host.set_alias(index, "")?;
                if dev.is_up() {
                    host.set_up(index)?;
                }
                Ok(())
            });
        }
        let mut result = ipam::add(req, &mut undo)?;
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        result.interfaces = interfaces;
        if moved.is_some() {
            let dad = dad.unwrap_or_default();
            iface::configure_with(&pod, &req.ifname, &result, dad)?;
        }
        result.dns = conf.dns.clone();
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = HostDeviceConf::load(&req.config)?;
        let dpdk = conf.dpdk_mode()?;
        let Some(pod) = iface::pod_for_del_in(&self.kernel, req)? else {
            // The kernel already returned the link to the initial namespace
            // with the pod's; only the addresses are left to release.
            return Ok(ipam::del(req)?);
        };
        ipam::del(req)?;
        if !dpdk {
            move_out(&pod, &self.kernel.current()?, &req.ifname)?;
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = HostDeviceConf::load(&req.config)?;
        let dpdk = conf.dpdk_mode()?;
        let pod = self.kernel.open(&req.netns)?;
        ipam::check(req)?;
        let prev = check::prev_result(req)?;
        if dpdk {
            return Ok(());
        }
        let intf = check::prev_container(req, &prev)?;
        let link = check::container_link(&pod, intf, None)?;
        Ok(check::addresses_and_routes(&pod, &link, &prev)?)
    }

    fn status(&self, req: &Request) -> Result<()> {
        Ok(ipam::status(req)?)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        Ok(ipam::gc(req)?)
    }
}

/// Go's `getLink`.
fn find_link(host: &impl NetnsHandle, selector: &Selector) -> Result<Link> {
    match selector {
        Selector::Device(name) => Ok(host.link_by_name(name)?),
        Selector::HwAddr(mac) => {
            let parsed: MacAddr = mac
                .parse()
                .map_err(|_| Error::MacInvalid { mac: mac.clone() })?;
            host.link_by_mac(parsed)?
                .ok_or_else(|| Error::PhysicalInterfaceNotFound {
                    selector: format!("hwaddr {mac}"),
                })
        }
        Selector::KernelPath(path) => {
            if !path.starts_with("/sys/devices/") {
                return Err(Error::KernelPathInvalid { path: path.clone() });
            }
            let dir = Path::new(path).join("net");
            let names = dir_entries(&dir).map_err(|source| Error::KernelPathNetDir {
                dir: dir.clone(),
                source,
            })?;
            let links = host.links()?;
            names
                .iter()
                .find_map(|n| links.iter().find(|l| &l.name == n).cloned())
                .ok_or_else(|| Error::PhysicalInterfaceNotFound {
                    selector: format!("kernelpath {path}"),
                })
        }
        Selector::Pci(pci) => {
            let dir = pci_net_dir(pci)?;
            let names = dir_entries(&dir).map_err(|source| Error::PciNetDirRead {
                dir: dir.clone(),
                source,
            })?;
            match names.first() {
                Some(name) => Ok(host.link_by_name(name)?),
                None => Err(Error::PciNetdevMissing { pci: pci.clone() }),
            }
        }
    }
}

/// `<pci>/net`, or for a virtio device `<pci>/virtio*/net`.
fn pci_net_dir(pci: &str) -> Result<PathBuf> {
    let dev = Path::new(SYS_BUS_PCI).join(pci);
    let net = dev.join("net");
    if net.symlink_metadata().is_ok() {
        return Ok(net);
    }
    let no_net = || Error::PciNetDirMissing {
        pci: pci.to_owned(),
    };
    let mut virtio: Vec<PathBuf> = dir_entries(&dev)
        .map_err(|_| no_net())?
        .into_iter()
        .filter(|n| n.starts_with("virtio"))
        .map(|n| dev.join(n).join("net"))
        .filter(|p| p.exists())
        .collect();
    virtio.sort();
    virtio.into_iter().next().ok_or_else(no_net)
}

/// A directory's entry names, sorted as Go's `os.ReadDir`.
fn dir_entries(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Go's `moveLinkIn`: into the pod, down, original name saved in the
/// alias, renamed to `CNI_IFNAME`, its IPv6 DAD set (`dad`, if any), up.
fn move_in<H: NetnsHandle>(
    host: &H,
    dev: &Link,
    pod: &H,
    ifname: &str,
    dad: Option<Dad>,
) -> Result<Link> {
    host.move_to_netns(dev.index, pod.netns())?;
    let inside = pod.link_by_name(&dev.name)?;
    let configured = (|| -> Result<Link> {
        pod.set_down(inside.index)?;
        pod.set_alias(inside.index, &dev.name)?;
        pod.rename(inside.index, ifname)?;
        if let Some(dad) = dad {
            cni_netns::set_dad(pod, ifname, dad);
        }
        pod.set_up(inside.index)?;
        Ok(pod.link_by_index(inside.index)?)
    })();
    if configured.is_err() {
        // Back to the node under its own name, as it came.
        let _ = pod.set_down(inside.index);
        let _ = pod.set_alias(inside.index, "");
        let _ = pod.rename(inside.index, &dev.name);
        if pod.move_to_netns(inside.index, host.netns()).is_ok() && dev.is_up() {
            let _ = host.set_up(dev.index);
        }
    }
    configured
}

/// Go's `moveLinkOut`: down, original name back from the alias, into the
/// namespace the plugin runs in. A link already gone is not an error (a
/// repeated DEL); a failed move leaves it as it was, so DEL can be retried.
fn move_out<H: NetnsHandle>(pod: &H, host: &H, ifname: &str) -> Result<()> {
    let dev = match pod.link_details(ifname) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let index = dev.link.index;
    let original = dev.alias.clone().unwrap_or_else(|| ifname.to_owned());
    pod.set_down(index)?;
    let moved = pod
        .rename(index, &original)
        .and_then(|()| pod.move_to_netns(index, host.netns()));
    if let Err(e) = moved {
        let _ = pod.rename(index, ifname);
        if dev.link.is_up() {
            let _ = pod.set_up(index);
        }
        return Err(Error::MoveOut {
            ifname: ifname.to_owned(),
            original,
            source: e.into(),
        });
    }
    Ok(())
}
