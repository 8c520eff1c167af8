//! The vrf plugin (chained): puts the pod's interface into a VRF of the
//! pod's namespace, creating the VRF when it does not exist — Go's
//! `plugins/meta/vrf` (main.go, vrf.go), with the v1.9.1 route handling:
//! the interface's routes (but not its connected and local ones) move into
//! the VRF's table, and its global IPv6 addresses, which the kernel drops
//! when the link changes master, are put back. DEL releases the interface
//! and deletes the VRF once it has no member left. A failed ADD takes
//! back what it did: the interface leaves the VRF (its dropped addresses
//! and moved routes put back) and a VRF it created is deleted.
//!
//! A kernel without VRF ("Unknown device type") fails ADD with a CNI error
//! naming the `vrf` link type; the interface is left as it was.
//!
//! ```
//! use cni_plugins::vrf::VrfConf;
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"vrf","vrfname":"blue","table":1001}"#,
//! )?;
//! let vrf = VrfConf::load(&conf)?;
//! assert_eq!((vrf.vrf_name.as_str(), vrf.table), ("blue", 1001));
//! # Ok::<(), cni_plugins::vrf::Error>(())
//! ```

mod error;

use std::time::Duration;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{free_vrf_table, AddressFamilyFilter, AddressOptions, KernelRoute, Link, Vrf};
use cni_types::{CniResult, NetworkConfig, Version};
use serde::Deserialize;

use crate::steps::{self, iface, Undo};
pub use error::{Error, Result};

/// The vrf plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VrfConf {
    /// `vrfname`: the VRF to put the interface in (required).
    pub vrf_name: String,
    /// `table`: the routing table of a VRF the plugin creates (0: the
    /// smallest one no VRF of the namespace uses).
    pub table: u32,
}

const KEYS: &[&str] = &["vrfname", "table"];

#[derive(Deserialize)]
pub(crate) struct Raw {
    #[serde(default)]
    vrfname: String,
    #[serde(default)]
    table: u32,
}

impl VrfConf {
    /// Go's `parseConf`: `vrfname` is required.
    pub fn load(config: &NetworkConfig) -> Result<VrfConf> {
        let raw: Raw = config.parse_specific_as_go(KEYS)?;
        if raw.vrfname.is_empty() {
            return Err(Error::NameMissing);
        }
        Ok(VrfConf {
            vrf_name: raw.vrfname,
            table: raw.table,
        })
    }
}

/// The vrf plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root)
/// with [`VrfPlugin::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct VrfPlugin<K = LinuxKernel> {
    kernel: K,
}

impl VrfPlugin {
    /// The plugin on the real kernel.
    pub fn new() -> VrfPlugin {
        VrfPlugin::default()
    }
}

impl<K: NetKernel> VrfPlugin<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> VrfPlugin<K> {
        VrfPlugin { kernel }
    }
}

/// Go's messages wrap every failure inside the namespace this way.
fn add_failed<'a>(conf: &'a VrfConf, ifname: &'a str) -> impl FnOnce(Error) -> Error + 'a {
    move |e| Error::Add {
        vrf: conf.vrf_name.clone(),
        ifname: ifname.to_owned(),
        source: Box::new(e),
    }
}

impl<K: NetKernel> Plugin for VrfPlugin<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "vrf"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = VrfConf::load(&req.config)?;
        let prev = req.config.prev_result()?.ok_or(Error::PrevResultMissing)?;
        let pod = self.kernel.open(&req.netns)?;
        let mut undo = Undo::<Error>::new();
        let vrf = ensure_vrf(&pod, &conf, &mut undo).map_err(add_failed(&conf, &req.ifname))?;
        add_interface(&pod, &vrf, &req.ifname, &mut undo)
            .map_err(add_failed(&conf, &req.ifname))?;
        undo.commit();
        Ok(prev)
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = VrfConf::load(&req.config)?;
        let Some(pod) = iface::pod_for_del_in(&self.kernel, req)? else {
            return Ok(());
        };
        let Some(vrf) = find_vrf(&pod, &conf.vrf_name)? else {
            return Ok(());
        };
        // Go fails DEL when the interface is gone ("resetMaster: could not
        // get link by name"); a repeated DEL must succeed, so we go on to
        // the VRF itself.
        match pod.link_by_name(&req.ifname) {
            Ok(link) => pod.set_nomaster(link.index)?,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        if pod.links_with_master(vrf.link.index)?.is_empty() {
            match pod.delete_link(vrf.link.index) {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = VrfConf::load(&req.config)?;
        req.config.prev_result()?.ok_or(Error::PrevResultMissing)?;
        let pod = self.kernel.open(&req.netns)?;
        let vrf = find_vrf(&pod, &conf.vrf_name)?.ok_or_else(|| Error::NotFound {
            vrf: conf.vrf_name.clone(),
        })?;
        let members = pod.links_with_master(vrf.link.index)?;
        if !members.iter().any(|l| l.name == req.ifname) {
            return Err(Error::MemberMissing {
                ifname: req.ifname.clone(),
                vrf: conf.vrf_name,
            });
        }
        Ok(())
    }
    fn supported_versions(&self) -> Vec<Version> {
        Version::ALL
            .into_iter()
            .filter(|v| *v >= Version::V0_3_1)
            .collect()
    }
}

/// Go's `findVRF`: `None` when no link has the name; an error when the
/// link is not a VRF.
fn find_vrf(pod: &impl NetnsHandle, name: &str) -> Result<Option<Vrf>> {
    pod.vrf_by_name(name).map_err(|e| match e {
        cni_netns::Error::WrongLinkKind { .. } => Error::NotAVrf {
            name: name.to_owned(),
        },
        other => other.into(),
    })
}

/// The VRF to use: the existing one (its table must match a configured
/// one), or a new one on the configured or the first free table, deleted
/// by `undo`.
fn ensure_vrf<'a, H: NetnsHandle>(
    pod: &'a H,
    conf: &VrfConf,
    undo: &mut Undo<'a, Error>,
) -> Result<Vrf> {
    if let Some(vrf) = find_vrf(pod, &conf.vrf_name)? {
        if conf.table != 0 && vrf.table != conf.table {
            return Err(Error::TableMismatch {
                vrf: conf.vrf_name.clone(),
                table: vrf.table,
                configured: conf.table,
            });
        }
        return Ok(vrf);
    }
    let table = match conf.table {
        0 => {
            let used: Vec<u32> = pod.vrfs()?.iter().map(|v| v.table).collect();
            free_vrf_table(&used).ok_or_else(|| Error::TablesExhausted {
                vrf: conf.vrf_name.clone(),
            })?
        }
        t => t,
    };
    let vrf = pod.add_vrf(&conf.vrf_name, table)?;
    let index = vrf.link.index;
    // As DEL: a VRF another interface joined meanwhile stays.
    undo.push(move || -> Result<()> {
        if pod.links_with_master(index)?.is_empty() {
            pod.delete_link(index)?;
        }
        Ok(())
    });
    Ok(vrf)
}

/// Go's `addInterface`: enslave `ifname` to the VRF, then restore the
/// global IPv6 addresses the kernel dropped and move the interface's
/// routes into the VRF's table. `undo` releases the interface and puts
/// back what the kernel dropped then.
fn add_interface<'a, H: NetnsHandle>(
    pod: &'a H,
    vrf: &Vrf,
    ifname: &str,
    undo: &mut Undo<'a, Error>,
) -> Result<()> {
    let link = pod
        .link_by_name(ifname)
        .map_err(|source| Error::MemberLookup {
            ifname: ifname.to_owned(),
            source: source.into(),
        })?;
    if let Some(master) = link.master {
        let name = pod
            .link_by_index(master)
            .map(|m| m.name)
            .unwrap_or_else(|_| format!("#{master}"));
        return Err(Error::MasterAlreadySet {
            ifname: ifname.to_owned(),
            master: name,
        });
    }
    let v6_before = global_addresses(pod, &link)?;
    let routes = movable_routes(pod, &link)?;
    pod.set_master(link.index, vrf.link.index)?;
    let (index, saved, main_routes) = (link.index, v6_before.clone(), routes.clone());
    undo.push(move || -> Result<()> {
        pod.set_nomaster(index)?;
        // Leaving the VRF cycles the link too: the same losses again. Every
        // address and route is put back even when one fails.
        let addresses = saved
            .iter()
            .map(|a| restore_addresses(pod, index, std::slice::from_ref(a), |_| Ok(())));
        let routes = main_routes
            .iter()
            .map(|r| pod.replace_route(r).map_err(Error::from));
        steps::all_errors(addresses.chain(routes))
    });
    restore_addresses(pod, link.index, &v6_before, |ip| {
        wait_for_local_route(pod, vrf, &link, ip)
    })?;
    for r in routes {
        pod.replace_route(&KernelRoute {
            table: Some(vrf.table),
            ..r
        })?;
    }
    Ok(())
}

/// Adds back those of `saved` the link `index` lost, each followed by
/// `then(its IP)`.
fn restore_addresses(
    pod: &impl NetnsHandle,
    index: u32,
    saved: &[SavedAddress],
    mut then: impl FnMut(std::net::IpAddr) -> Result<()>,
) -> Result<()> {
    let present = pod.addresses(Some(index), AddressFamilyFilter::V6)?;
    for addr in saved
        .iter()
        .filter(|a| !present.iter().any(|b| b.address == a.address))
    {
        pod.add_address(index, addr.address, addr.options)?;
        then(addr.address.ip())?;
    }
    Ok(())
}

#[derive(Clone)]
struct SavedAddress {
    address: cni_netns::IpNetwork,
    options: AddressOptions,
}

/// The link's IPv6 addresses of global scope (Go's `getGlobalAddresses`).
fn global_addresses(pod: &impl NetnsHandle, link: &Link) -> Result<Vec<SavedAddress>> {
    const IFA_F_NODAD: u32 = 0x02; // linux/if_addr.h
    const IFA_F_NOPREFIXROUTE: u32 = 0x200; // linux/if_addr.h
    Ok(pod
        .addresses(Some(link.index), AddressFamilyFilter::V6)?
        .into_iter()
        .filter(|a| a.scope == cni_netns::SCOPE_UNIVERSE)
        .map(|a| SavedAddress {
            address: a.address,
            options: AddressOptions {
                nodad: a.flags & IFA_F_NODAD != 0,
                noprefixroute: a.flags & IFA_F_NOPREFIXROUTE != 0,
                ..AddressOptions::default()
            },
        })
        .collect())
}

/// The routes through the link in the main table, but not its connected
/// and local ones (scope universe), as Go lists them before enslaving.
fn movable_routes(pod: &impl NetnsHandle, link: &Link) -> Result<Vec<KernelRoute>> {
    Ok(pod
        .routes(AddressFamilyFilter::All)?
        .into_iter()
        .filter(|r| {
            r.oif == Some(link.index)
                && r.scope == Some(cni_netns::SCOPE_UNIVERSE)
                && r.table == Some(cni_netns::TABLE_MAIN)
        })
        .collect())
}

/// Go waits (10 ms doubling, 9 tries) for the kernel to install a
/// restored IPv6 address's /128 route in the VRF's table.
fn wait_for_local_route(
    pod: &impl NetnsHandle,
    vrf: &Vrf,
    link: &Link,
    ip: std::net::IpAddr,
) -> Result<()> {
    for attempt in 0..=8u32 {
        let present = pod.routes(AddressFamilyFilter::V6)?.into_iter().any(|r| {
            r.table == Some(vrf.table)
                && r.oif == Some(link.index)
                && r.dst.ip() == ip
                && r.dst.prefix() == 128
        });
        if present {
            return Ok(());
        }
        if attempt < 8 {
            std::thread::sleep(Duration::from_millis(10 << attempt));
        }
    }
    Err(Error::LocalRouteMissing {
        ifname: link.name.clone(),
        table: vrf.table,
        address: ip,
    })
}
