//! The bridge plugin: connects the pod to a Linux bridge on the node with a
//! veth pair, gets addresses from the IPAM plugin, and optionally makes the
//! bridge the pod's gateway, masquerades the pod's traffic and checks its
//! source MAC — Go's `plugins/main/bridge/bridge.go`, step for step, with
//! two additions: a failed ADD also removes the veth, and GC collects the
//! masquerade and MAC spoof check rules of dead attachments.
//!
//! The binary is `src/bin/bridge.rs`; the config loads without root:
//!
//! ```
//! use cni_plugins::bridge::BridgeConf;
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"bridge","isDefaultGateway":true,
//!          "args":{"cni":{"mac":"02:00:00:00:00:01"}},
//!          "runtimeConfig":{"mac":"02:00:00:00:00:02"}}"#,
//! )?;
//! let bridge = BridgeConf::load(&conf, "MAC=02:00:00:00:00:03")?;
//! assert_eq!(bridge.bridge, "cni0");
//! assert!(bridge.is_gateway); // implied by isDefaultGateway
//! // runtimeConfig wins over args.cni, which wins over CNI_ARGS.
//! assert_eq!(bridge.mac.unwrap().to_string(), "02:00:00:00:00:02");
//! # Ok::<(), cni_plugins::bridge::Error>(())
//! ```

mod check;
pub mod config;
mod error;
mod gateway;

use std::sync::Arc;
use std::time::Duration;

use cni_exec::{Plugin, Request};
use cni_firewall::{AttachmentId, Backend, Firewall, MacSpoofCheckSpec, RuleKind, RuleSpec};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{
    sysctl, AddressFamilyFilter, BridgePortOptions, BridgeSpec, BridgeVlan, IpNetwork, Ipv4Conf,
    Link, MacAddr, OperState, VethSpec, SCOPE_UNIVERSE,
};
use cni_types::step_span;
use cni_types::trace::in_step;
use cni_types::CniResult;

pub use config::BridgeConf;
pub use error::{Error, Result};
use gateway::Gateways;

use crate::steps::iface::{self, interface};
use crate::steps::ipam::{self, IpamStart};
use crate::steps::{self, addresses, attachment, masquerade, Undo};

/// How long ADD waits for the host port to come up, and the gaps between
/// looks: Go sleeps 0, 50, 500, 1000, 1000 ms; looking more often ends the
/// wait as soon as the kernel reports the port up. The kernel's linkwatch
/// work that sets the port up takes 0.1-2 ms here and grows with the
/// node's ports (BENCHMARKS.md, "Node scale"): [`Handle::wait_oper_up`](cni_netns::Handle::wait_oper_up)
/// looks every 0.2 ms first, then less often (a look is one RTM_GETLINK,
/// about 20 µs), so the wait ends within 0.2 ms of the port coming up.
const PORT_UP_TIMEOUT: Duration = Duration::from_millis(2550);

/// The bridge plugin. Its kernel is the real one ([`LinuxKernel`]) and its
/// firewall nftables by default; tests may pass others
/// ([`Bridge::with_kernel`]: a `cni_netns::kernel::FakeKernel`
/// and a `cni_firewall::RecordingFirewall` (feature `recording`)
/// run its ADD and DEL without root).
#[derive(Debug, Clone)]
pub struct Bridge<K = LinuxKernel> {
    kernel: K,
    firewall: Arc<dyn Firewall>,
}

impl Default for Bridge {
    fn default() -> Self {
        Bridge::new()
    }
}

impl Bridge {
    /// The plugin with the native nf_tables firewall of the namespace it
    /// runs in.
    pub fn new() -> Bridge {
        Bridge::with_backend(Backend::default())
    }

    /// The plugin with the firewall `backend` of the namespace it runs in
    /// (the binary reads `CNI_FIREWALL_BACKEND`).
    pub fn with_backend(backend: Backend) -> Bridge {
        Bridge::with_firewall(Arc::from(backend.firewall(None, 0)))
    }

    /// The plugin with another firewall (a test double, or nftables in
    /// another namespace).
    pub fn with_firewall(firewall: Arc<dyn Firewall>) -> Bridge {
        Bridge::with_kernel(LinuxKernel, firewall)
    }
}

impl<K: NetKernel> Bridge<K> {
    /// The plugin on another kernel and firewall (test doubles).
    pub fn with_kernel(kernel: K, firewall: Arc<dyn Firewall>) -> Bridge<K> {
        Bridge { kernel, firewall }
    }
}

impl<K: NetKernel> Plugin for Bridge<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "bridge"
    }

    /// Go's `cmdAdd`.
    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = BridgeConf::load(&req.config, &req.args_raw)?;
        conf.validate_for_add(!req.config.ipam_type().is_empty())?;
        let id = attachment(req);
        // setupBridge, GetNS, setupVeth, and the IPAM plugin's ADD: while
        // they run, or after them when the IPAM plugin uses the pod link
        // (dhcp), as `IpamStart` decides from the config.
        let start = IpamStart::of(req);
        let (connected, allocated) = start.run(req, || connect(&self.kernel, req, &conf));
        // A failed connect drops the allocation: its addresses are released.
        let (host, bridge, pod, host_veth) = connected?;
        // Made after the handles its steps borrow, so it drops before them.
        let mut undo = Undo::<Error>::new();
        // Deleting the pod end deletes the pair. Made first, it is undone
        // last: after the IPAM DEL (dhcp releases over this link).
        undo.push(|| pod.delete_link_by_name(&req.ifname));
        let ipam = allocated?.map(|allocation| allocation.undo_on(&mut undo));
        // Go's SetupVeth turns off accept_ra on the host end (our routes, not
        // router advertisements'): `setup_veth_with` did.
        configure_port(
            &host,
            &host_veth,
            &conf,
            conf.native_vlan(),
            &conf.trunk_vlans,
        )?;
        let container = pod.link_by_name(&req.ifname)?;
        let mut result = CniResult {
            interfaces: vec![
                interface(&bridge, ""),
                interface(&host_veth, ""),
                interface(&container, &req.netns),
            ],
            ..Default::default()
        };
        if conf.mac_spoof_chk {
            self.firewall
                .add(&spoof_check(&id, &host_veth, &container))?;
            undo.push(|| self.firewall.delete_owned(RuleKind::MacSpoofCheck, &id));
        }
        if let Some(ipam) = ipam {
            result.ips = ipam.ips;
            result.routes = ipam.routes;
            result.dns = ipam.dns;
            let gateways = gateway::calc_gateways(&mut result, &conf);
            let masq = masquerade(&id, addresses(&result));
            // The masquerade commit runs while the pod and the bridge are
            // configured: the ADD takes the longer of the two, not their sum.
            let masquerading = conf.ip_masq.then_some(|| self.firewall.add(&masq));
            let (masqueraded, configured) = steps::concurrently(masquerading, || {
                iface::configure(&pod, &container.name, &result)?;
                if conf.is_gateway {
                    configure_gateways(&host, &bridge, &conf, &gateways, &mut result)?;
                }
                Ok::<_, Error>(())
            });
            if let Some(masqueraded) = masqueraded {
                masqueraded??;
                undo.push(|| self.firewall.delete_owned(RuleKind::Masquerade, &id));
            }
            configured?;
        }
        // A port whose pod end stays down never comes up.
        let host_veth = if conf.disable_container_interface {
            host.link_by_index(host_veth.index)?
        } else {
            wait_port_up(&host, host_veth.index)?
        };
        // Both MACs may have changed since creation: the host end's when
        // the pod end came up, the bridge's when its first port joined.
        result.interfaces[1] = interface(&host_veth, "");
        result.interfaces[0] = interface(&host.link_by_index(bridge.index)?, "");
        if let Some(dns) = req.config.dns.as_ref().filter(|d| !d.is_empty()) {
            result.dns = dns.clone();
        }
        undo.commit();
        Ok(result)
    }

    /// Go's `cmdDel`, which releases IPAM even when the netns is gone; the
    /// rules this attachment owns are found by its id, so they go too.
    fn del(&self, req: &Request) -> Result<()> {
        let conf = BridgeConf::load(&req.config, &req.args_raw)?;
        let id = attachment(req);
        let pod = iface::pod_for_del_in(&self.kernel, req)?;
        let addresses = match &pod {
            Some(pod) => global_addresses(pod, &req.ifname)?,
            None => Vec::new(),
        };
        // Rules go before the address is released, so a new pod given the
        // same address never has its rules removed by this DEL.
        iface::delete_pod_link_while(pod.as_ref(), req, || {
            if conf.mac_spoof_chk {
                // As Go: a spoof check teardown failure does not fail DEL.
                if let Err(e) = self.firewall.delete_owned(RuleKind::MacSpoofCheck, &id) {
                    tracing::warn!("DEL: {e}");
                }
            }
            // Every step runs: a failed rule deletion must not keep the
            // address reserved.
            let unmasqueraded = if conf.ip_masq && !req.config.ipam_type().is_empty() {
                self.firewall.delete(&masquerade(&id, addresses))
            } else {
                Ok(())
            };
            steps::all_errors([
                unmasqueraded.map_err(Error::from),
                ipam::del(req).map_err(Error::from),
            ])
        })
    }

    fn check(&self, req: &Request) -> Result<()> {
        check::check(&self.kernel, self.firewall.as_ref(), req)
    }

    fn status(&self, req: &Request) -> Result<()> {
        Ok(ipam::status(req)?)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        let conf = BridgeConf::load(&req.config, &req.args_raw)?;
        let Some(valid) = steps::valid_attachments(req)? else {
            return Ok(ipam::gc(req)?);
        };
        let network = &req.config.name;
        let gc = |on: bool, kind| -> Result<()> {
            if on {
                self.firewall.gc(kind, network, &valid)?;
            }
            Ok(())
        };
        steps::all_errors([
            gc(conf.ip_masq, RuleKind::Masquerade),
            gc(conf.mac_spoof_chk, RuleKind::MacSpoofCheck),
            ipam::gc(req).map_err(Error::from),
        ])
    }
}

/// Go's `setupBridge`, `ns.GetNS` and the start of `setupVeth`: the veth's
/// pod end is named `CNI_IFNAME` and made in the pod directly, its host end
/// is a port of the bridge. Returns the node's handle, the bridge, the
/// pod's handle and the host end.
fn connect<K: NetKernel>(
    kernel: &K,
    req: &Request,
    conf: &BridgeConf,
) -> Result<(K::Handle, Link, K::Handle, Link)> {
    let host = kernel.current()?;
    let bridge = ensure_bridge(&host, conf)?;
    let pod = kernel.open(&req.netns)?;
    let host_veth = host.setup_veth_with(&VethSpec {
        peer_name: req.ifname.clone(),
        peer_netns: Some(pod.netns()),
        mtu: conf.mtu(),
        peer_mac: conf.mac,
        up: true,
        master: Some(bridge.index),
        ..Default::default()
    })?;
    tracing::debug!(veth = %host_veth.name, "veth created");
    // Go's SetupVeth brings the host end up; the pod end comes up here,
    // before the IPAM result is configured, so that the kernel's carrier
    // work for the new bridge port (port state, IPv6 link-local, multicast)
    // runs while IPAM does. Its DAD and ARP settings go first: the IPv6
    // link-local address the kernel makes when the link comes up is then
    // not left tentative (with `accept_dad` 1 it would be for 1-2 s, and
    // the ADD waits for DAD). `disableContainerInterface` leaves it down.
    let layer3 = !req.config.ipam_type().is_empty();
    let prepared = match host_veth.parent_index {
        Some(peer) => Ok(peer),
        None => pod.link_by_name(&req.ifname).map(|l| l.index),
    }
    .and_then(|peer| {
        if layer3 {
            pod_settings(&pod, &req.ifname, peer, conf);
        }
        if conf.disable_container_interface {
            Ok(())
        } else {
            pod.set_up(peer)
        }
    });
    if let Err(e) = prepared {
        // Nothing holds the pair yet (the ADD's undo starts after
        // `connect`): deleting the host end deletes both.
        let _ = host.delete_link(host_veth.index);
        return Err(e.into());
    }
    Ok((host, bridge, pod, host_veth))
}

/// The MAC spoof check of `id`: frames from the host end of its veth must
/// carry the pod end's MAC.
fn spoof_check(id: &AttachmentId, host_veth: &Link, container: &Link) -> RuleSpec {
    RuleSpec::MacSpoofCheck(MacSpoofCheckSpec {
        attachment: id.clone(),
        host_ifname: host_veth.name.clone(),
        mac: container.mac.unwrap_or(MacAddr([0; 6])),
    })
}

/// The pod interface's global addresses (what its masquerade is keyed by);
/// none when it is gone.
fn global_addresses(pod: &impl NetnsHandle, ifname: &str) -> Result<Vec<IpNetwork>> {
    let link = match pod.link_by_name(ifname) {
        Ok(link) => link,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(pod
        .addresses(Some(link.index), AddressFamilyFilter::All)?
        .into_iter()
        .filter(|a| a.scope == SCOPE_UNIVERSE)
        .map(|a| a.address)
        .collect())
}

/// Go's gateway step: the gateway addresses go on the bridge (or, with a
/// VLAN, on the `<bridge>.<vlan>` gateway veth, listed in the result), and
/// forwarding is enabled for each family that has one.
fn configure_gateways(
    host: &impl NetnsHandle,
    bridge: &Link,
    conf: &BridgeConf,
    gateways: &Gateways,
    result: &mut CniResult,
) -> Result<()> {
    let target = match conf.native_vlan() {
        Some(vlan) => {
            let gw = ensure_vlan_gateway(host, bridge, conf, vlan)?;
            result.interfaces.push(interface(&gw, ""));
            gw
        }
        None => bridge.clone(),
    };
    let addresses = gateways.v4.len() + gateways.v6.len();
    let span = step_span!("address.add", link.name = %target.name, address.count = addresses);
    in_step(span, || {
        for gw in gateways.v4.iter().chain(&gateways.v6) {
            gateway::ensure_address(host, &target, *gw, conf.force_address)?;
        }
        Ok::<_, Error>(())
    })?;
    let (v4, v6) = (!gateways.v4.is_empty(), !gateways.v6.is_empty());
    host.enable_forwarding(v4, v6)?;
    Ok(())
}

/// Go's `ensureBridge`; the bridge's IPv6 routes are ours, not the
/// router advertisements'.
fn ensure_bridge(host: &impl NetnsHandle, conf: &BridgeConf) -> Result<Link> {
    let bridge = host.ensure_bridge(&BridgeSpec {
        name: conf.bridge.clone(),
        mtu: conf.mtu(),
        promisc: conf.promisc_mode,
        vlan_filtering: conf.vlan_filtering(),
    })?;
    // Go ignores this sysctl's failure (IPv6 may be disabled).
    let _ = host.sysctl_set(&sysctl::accept_ra(&bridge.name), "0");
    Ok(bridge)
}

/// The host port's bridge settings: hairpin, isolation, and its VLANs.
fn configure_port(
    host: &impl NetnsHandle,
    port: &Link,
    conf: &BridgeConf,
    native: Option<u16>,
    trunk: &[u16],
) -> Result<()> {
    if conf.hairpin_mode || conf.port_isolation {
        host.set_bridge_port(
            port.index,
            &BridgePortOptions {
                hairpin: conf.hairpin_mode.then_some(true),
                isolated: conf.port_isolation.then_some(true),
                learning: None,
            },
        )?;
    }
    let vlans = port_vlans(native, trunk);
    if !vlans.is_empty() && !conf.preserve_default_vlan {
        host.del_bridge_vlans(port.index, &[BridgeVlan::tagged(1)], false)?;
    }
    if !vlans.is_empty() {
        host.add_bridge_vlans(port.index, &vlans, false)?;
    }
    Ok(())
}

/// The native VLAN, then the trunk folded into ranges.
fn port_vlans(native: Option<u16>, trunk: &[u16]) -> Vec<BridgeVlan> {
    let mut vlans: Vec<BridgeVlan> = native.map(BridgeVlan::native).into_iter().collect();
    for &vid in trunk {
        match vlans.last_mut() {
            Some(last) if !last.pvid && last.vid_end.checked_add(1) == Some(vid) => {
                last.vid_end = vid;
            }
            _ => vlans.push(BridgeVlan::tagged(vid)),
        }
    }
    vlans
}

/// Go's `ensureVlanInterface`: a veth whose `<bridge>.<vlan>` end stays on
/// the node and whose other end is a port of the bridge in the VLAN.
fn ensure_vlan_gateway(
    host: &impl NetnsHandle,
    bridge: &Link,
    conf: &BridgeConf,
    vlan: u16,
) -> Result<Link> {
    let name = format!("{}.{vlan}", bridge.name);
    match host.link_by_name(&name) {
        Ok(link) => return Ok(link),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.into()),
    }
    let port = host.setup_veth_with(&VethSpec {
        peer_name: name.clone(),
        peer_netns: Some(host.netns()),
        mtu: Some(bridge.mtu),
        up: true,
        master: Some(bridge.index),
        ..Default::default()
    })?;
    let port_conf = BridgeConf {
        hairpin_mode: false,
        port_isolation: false,
        ..conf.clone()
    };
    configure_port(host, &port, &port_conf, Some(vlan), &[])?;
    let gw = host.link_by_name(&name)?;
    host.set_up(gw.index)?;
    Ok(gw)
}

/// The pod end's DAD and ARP settings, as Go's bridge writes them before
/// `ConfigureIface`. As Go: they may be missing (IPv6 disabled); not an
/// error. The IPv6 ones are sysctls (netlink cannot write them), the IPv4
/// one a netlink request: every `/proc/sys/net/ipv{4,6}` lookup grows with
/// the node's pods (see `Handle::sysctl_set`).
fn pod_settings(pod: &impl NetnsHandle, ifname: &str, index: u32, conf: &BridgeConf) {
    cni_netns::set_dad(pod, ifname, conf.dad());
    let _ = pod.set_ipv4_conf(index, &[(Ipv4Conf::ArpNotify, 1)]);
}

/// Go's port state wait: the host end must be operationally up.
fn wait_port_up(host: &impl NetnsHandle, index: u32) -> Result<Link> {
    let link = host.wait_oper_up(index, PORT_UP_TIMEOUT)?;
    if link.oper_state != OperState::Up {
        return Err(Error::PortNotUp {
            state: format!("{:?}", link.oper_state).to_lowercase(),
        });
    }
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trunk_vlans_fold_into_ranges_after_the_native_vlan() {
        let v = port_vlans(Some(100), &[101, 200, 201, 202, 300]);
        assert_eq!(
            v,
            [
                BridgeVlan::native(100),
                BridgeVlan::tagged(101),
                BridgeVlan::range(200, 202),
                BridgeVlan::tagged(300)
            ]
        );
        assert!(port_vlans(None, &[]).is_empty());
    }
}
