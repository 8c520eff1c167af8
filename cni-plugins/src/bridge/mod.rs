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
//! # Ok::<(), cni_plugins::Error>(())
//! ```

mod check;
pub mod config;
mod gateway;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_exec::{delegate_add, delegate_del, delegate_gc, delegate_status, Plugin, Request};
use cni_netns::firewall::{default_backend, AttachmentId, Firewall, MacSpoofCheckSpec, RuleKind};
use cni_netns::{
    configure_interface, sysctl, BridgePortOptions, BridgeSpec, BridgeVlan, Family, Handle,
    IpNetwork, Link, Netns, OperState, VethSpec, SCOPE_UNIVERSE,
};
use cni_types::{CniResult, Interface};

pub use config::BridgeConf;
use gateway::Gateways;

use crate::{Error, Result};

/// How long ADD waits for the host port to come up, and the gaps between
/// looks: Go sleeps 0, 50, 500, 1000, 1000 ms; looking more often ends the
/// wait as soon as the kernel reports the port up.
const PORT_UP_TIMEOUT: Duration = Duration::from_millis(2550);
const PORT_UP_MAX_POLL: Duration = Duration::from_millis(50);

/// The bridge plugin. Its firewall is nftables by default; tests may pass
/// another [`Firewall`].
#[derive(Debug, Clone)]
pub struct Bridge {
    firewall: Arc<dyn Firewall>,
}

impl Default for Bridge {
    fn default() -> Self {
        Bridge::new()
    }
}

/// Everything one attachment's steps share.
struct Attachment<'a> {
    req: &'a Request,
    conf: &'a BridgeConf,
    id: AttachmentId,
    ipam: &'a str,
}

/// The two namespaces of an ADD and the bridge between them.
struct Sides<'a> {
    host: &'a Handle,
    bridge: &'a Link,
    pod: &'a Handle,
}

/// What ADD has done so far, so that a failure undoes exactly that.
#[derive(Default)]
struct Done {
    veth: bool,
    spoof_check: bool,
    ipam: bool,
    masquerade: bool,
}

impl Bridge {
    /// The plugin with the firewall of the namespace it runs in: native
    /// nf_tables, or `nft` with `CNI_FIREWALL_BACKEND=nft`.
    pub fn new() -> Bridge {
        Bridge::with_firewall(Arc::from(default_backend(None)))
    }

    /// The plugin with another firewall (a test double, or nftables in
    /// another namespace).
    pub fn with_firewall(firewall: Arc<dyn Firewall>) -> Bridge {
        Bridge { firewall }
    }

    fn attach(
        &self,
        at: &Attachment<'_>,
        sides: &Sides<'_>,
        host_veth: Link,
        ipam: Option<CniResult>,
        done: &mut Done,
    ) -> Result<CniResult> {
        let (req, conf, host, pod) = (at.req, at.conf, sides.host, sides.pod);
        // As Go's SetupVeth: our routes, not router advertisements'; IPv6
        // may be off, which Go ignores too.
        let _ = host.run(|| sysctl::set(&sysctl::accept_ra(&host_veth.name), "0"));
        configure_port(
            host,
            &host_veth,
            conf,
            conf.native_vlan(),
            &conf.trunk_vlans,
        )?;
        let container = pod.link_by_name(&req.ifname)?;
        let mut result = CniResult {
            interfaces: vec![
                interface(sides.bridge, ""),
                interface(&host_veth, ""),
                interface(&container, &req.netns),
            ],
            ..Default::default()
        };
        if conf.mac_spoof_chk {
            let spec = spoof_check_spec(at, &host_veth.name, &container);
            self.firewall.add_mac_spoof_check(&spec)?;
            done.spoof_check = true;
        }
        match ipam {
            Some(ipam) => self.configure_addresses(at, sides, ipam, &mut result, done)?,
            None if !conf.disable_container_interface => pod.set_up(container.index)?,
            None => {}
        }
        // A port whose pod end stays down never comes up.
        let host_veth = if conf.disable_container_interface {
            host.link_by_index(host_veth.index)?
        } else {
            wait_port_up(host, host_veth.index)?
        };
        // Both MACs may have changed since creation: the host end's when
        // the pod end came up, the bridge's when its first port joined.
        result.interfaces[1] = interface(&host_veth, "");
        result.interfaces[0] = interface(&host.link_by_index(sides.bridge.index)?, "");
        if let Some(dns) = req.config.dns.as_ref().filter(|d| !d.is_empty()) {
            result.dns = dns.clone();
        }
        Ok(result)
    }

    /// The layer-3 part of ADD: the IPAM result goes into the result (all
    /// addresses on the pod interface, gateways computed), onto the pod,
    /// onto the bridge as gateway, and into the masquerade.
    fn configure_addresses(
        &self,
        at: &Attachment<'_>,
        sides: &Sides<'_>,
        ipam: CniResult,
        result: &mut CniResult,
        done: &mut Done,
    ) -> Result<()> {
        let conf = at.conf;
        result.ips = ipam.ips;
        result.routes = ipam.routes;
        result.dns = ipam.dns;
        if result.ips.is_empty() {
            return Err(Error::Internal(
                "IPAM plugin returned missing IP config".into(),
            ));
        }
        let gateways = gateway::calc_gateways(result, conf);
        let addresses: Vec<IpNetwork> = result.ips.iter().map(|ip| ip.address).collect();
        // The masquerade (an nft process) runs while the pod and the bridge
        // are configured: the ADD takes the longer of the two, not their
        // sum. Either failing fails the ADD.
        std::thread::scope(|s| -> Result<()> {
            let masquerade = conf
                .ip_masq
                .then(|| s.spawn(|| self.firewall.add_masquerades(&at.id, &addresses)));
            let configured =
                configure_container(sides.pod, &at.req.ifname, conf, result).and_then(|()| {
                    if conf.is_gateway {
                        self.configure_gateways(sides.host, sides.bridge, conf, &gateways, result)
                    } else {
                        Ok(())
                    }
                });
            tracing::debug!("pod and gateway configured");
            if let Some(m) = masquerade {
                m.join().map_err(|_| panicked("masquerade"))??;
                done.masquerade = true;
            }
            configured
        })?;
        tracing::debug!("pod, gateway and masquerade configured");
        Ok(())
    }

    /// Go's gateway step: the gateway addresses go on the bridge (or, with
    /// a VLAN, on the `<bridge>.<vlan>` gateway veth, listed in the
    /// result), and forwarding is enabled for each family that has one.
    fn configure_gateways(
        &self,
        host: &Handle,
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
        for gw in gateways.v4.iter().chain(&gateways.v6) {
            gateway::ensure_address(host, &target, *gw, conf.force_address)?;
        }
        let (v4, v6) = (!gateways.v4.is_empty(), !gateways.v6.is_empty());
        host.run(|| sysctl::enable_forwarding(v4, v6))??;
        Ok(())
    }

    /// Undoes a failed ADD, newest step first; errors are logged, the ADD's
    /// own error is what the runtime sees.
    fn undo(&self, at: &Attachment<'_>, pod: Option<&Handle>, done: &Done) {
        if done.masquerade {
            if let Err(e) = self
                .firewall
                .delete_attachment(RuleKind::Masquerade, &at.id)
            {
                tracing::warn!("undo ADD: {e}");
            }
        }
        if done.ipam {
            if let Err(e) = delegate_del(at.ipam, &at.req.stdin, at.req) {
                tracing::warn!("undo ADD: IPAM DEL: {e}");
            }
        }
        if done.spoof_check {
            if let Err(e) = self
                .firewall
                .delete_attachment(RuleKind::MacSpoofCheck, &at.id)
            {
                tracing::warn!("undo ADD: {e}");
            }
        }
        if let Some(pod) = pod.filter(|_| done.veth) {
            // Deleting the pod end deletes the pair.
            if let Err(e) = pod.delete_link_by_name(&at.req.ifname) {
                tracing::warn!("undo ADD: {e}");
            }
        }
    }

    fn del_rules(
        &self,
        at: &Attachment<'_>,
        conf: &BridgeConf,
        addresses: &[IpNetwork],
    ) -> Result<()> {
        if conf.mac_spoof_chk {
            // As Go: a spoof check teardown failure does not fail DEL.
            if let Err(e) = self
                .firewall
                .delete_attachment(RuleKind::MacSpoofCheck, &at.id)
            {
                tracing::warn!("DEL: {e}");
            }
        }
        if !at.ipam.is_empty() && conf.ip_masq {
            self.firewall.del_masquerades(&at.id, addresses)?;
        }
        Ok(())
    }
}

impl Plugin for Bridge {
    type Error = crate::Error;

    fn name(&self) -> &str {
        "bridge"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        tracing::debug!("ADD");
        let conf = BridgeConf::load(&req.config, &req.args_raw)?;
        let at = Attachment::new(req, &conf);
        conf.validate_for_add(!at.ipam.is_empty())?;
        let mut done = Done::default();
        // IPAM (a process, or a plugin of this build run in-process) runs
        // from the start, while the bridge, the namespace and the veth are
        // set up; whichever fails, `done` says what the other left to undo.
        // dhcp runs its client on the pod interface, so it waits for the
        // veth (Go's order for every IPAM plugin).
        let parallel = !crate::macvlan::common::ipam_uses_pod_link(at.ipam);
        let (connected, allocated) = std::thread::scope(|s| {
            let allocated = (!at.ipam.is_empty() && parallel).then(|| {
                s.spawn(|| {
                    let r = delegate_add(at.ipam, &req.stdin, req);
                    tracing::debug!("IPAM ADD returned");
                    r
                })
            });
            let connected = connect(&at, &mut done);
            (connected, allocated.map(|a| a.join()))
        });
        let allocated = match allocated {
            None if !parallel && connected.is_ok() => {
                Some(Ok(delegate_add(at.ipam, &req.stdin, req)))
            }
            other => other,
        };
        let ipam = match allocated {
            None => Ok(None),
            Some(Err(_)) => Err(panicked("IPAM ADD")),
            Some(Ok(r)) => {
                done.ipam = r.is_ok();
                r.map(Some).map_err(delegate)
            }
        };
        let c = match connected {
            Ok(c) => c,
            Err(e) => {
                self.undo(&at, None, &done);
                return Err(e);
            }
        };
        let sides = Sides {
            host: &c.host,
            bridge: &c.bridge,
            pod: &c.pod,
        };
        let added = ipam.and_then(|ipam| self.attach(&at, &sides, c.host_veth, ipam, &mut done));
        if added.is_err() {
            self.undo(&at, Some(&c.pod), &done);
        }
        added
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = BridgeConf::load(&req.config, &req.args_raw)?;
        let at = Attachment::new(req, &conf);
        // Go only releases IPAM when the netns is gone; the rules this
        // attachment owns are found by its id, so they go too.
        let pod = match req.netns.as_str() {
            "" => None,
            path => match Netns::open(path) {
                Ok(netns) => Some(Handle::in_netns(&netns)?),
                Err(e) if netns_gone(&e) => None,
                Err(e) => return Err(e.into()),
            },
        };
        let link = match pod.as_ref().map(|p| p.link_by_name(&req.ifname)) {
            Some(Ok(link)) => pod.as_ref().map(|p| (p, link)),
            Some(Err(e)) if e.is_not_found() => None,
            Some(Err(e)) => return Err(e.into()),
            None => None,
        };
        let addresses = match &link {
            Some((pod, link)) => global_addresses(pod, link)?,
            None => Vec::new(),
        };
        tracing::debug!(?addresses, "pod link found");
        // Deleting a veth takes the kernel 10-30 ms (RCU grace periods);
        // the rules and the IPAM release run meanwhile. Rules go before the
        // address is released, so a new pod given the same address never
        // has its rules removed by this DEL.
        // dhcp releases from the leased address on the pod link: the link
        // goes after the release.
        let (link, link_after) = if crate::macvlan::common::ipam_uses_pod_link(at.ipam) {
            (None, link)
        } else {
            (link, None)
        };
        let released = std::thread::scope(|s| -> Result<()> {
            let deleted = link.map(|(pod, link)| s.spawn(move || pod.delete_link(link.index)));
            let released = self.del_rules(&at, &conf, &addresses).and_then(|()| {
                tracing::debug!("rules removed");
                if at.ipam.is_empty() {
                    Ok(())
                } else {
                    delegate_del(at.ipam, &req.stdin, req).map_err(delegate)
                }
            });
            tracing::debug!("IPAM released");
            if let Some(d) = deleted {
                let deleted = d.join().map_err(|_| panicked("delete link"))?;
                tracing::debug!("link deleted");
                match deleted {
                    Err(e) if !e.is_not_found() => return Err(e.into()),
                    _ => {}
                }
            }
            released
        });
        if let Some((pod, link)) = link_after {
            match pod.delete_link(link.index) {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
        }
        released
    }

    fn check(&self, req: &Request) -> Result<()> {
        check::check(self.firewall.as_ref(), req)
    }

    fn status(&self, req: &Request) -> Result<()> {
        let ipam = req.config.ipam_type();
        if !ipam.is_empty() {
            delegate_status(ipam, &req.stdin, req).map_err(delegate)?;
        }
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<()> {
        let conf = BridgeConf::load(&req.config, &req.args_raw)?;
        let network = &req.config.name;
        // Without the valid list nothing is known to be dead.
        if let Some(valid) = req.config.valid_attachments()? {
            let valid: Vec<AttachmentId> = valid
                .into_iter()
                .map(|a| AttachmentId::new(network.clone(), a.container_id, a.ifname))
                .collect();
            if conf.ip_masq {
                self.firewall.gc(RuleKind::Masquerade, network, &valid)?;
            }
            if conf.mac_spoof_chk {
                self.firewall.gc(RuleKind::MacSpoofCheck, network, &valid)?;
            }
        }
        let ipam = req.config.ipam_type();
        if !ipam.is_empty() {
            delegate_gc(ipam, &req.stdin, req).map_err(delegate)?;
        }
        Ok(())
    }
}

impl<'a> Attachment<'a> {
    fn new(req: &'a Request, conf: &'a BridgeConf) -> Self {
        Attachment {
            req,
            conf,
            id: AttachmentId::new(
                req.config.name.clone(),
                req.container_id.clone(),
                req.ifname.clone(),
            ),
            ipam: req.config.ipam_type(),
        }
    }
}

fn panicked(what: &str) -> Error {
    Error::Internal(format!("{what} thread panicked"))
}

/// The pod interface's global addresses (what its masquerade is keyed by).
fn global_addresses(pod: &Handle, link: &Link) -> Result<Vec<IpNetwork>> {
    Ok(pod
        .addresses(Some(link.index), Family::All)?
        .into_iter()
        .filter(|a| a.scope == SCOPE_UNIVERSE)
        .map(|a| a.address)
        .collect())
}

fn delegate(e: cni_exec::Error) -> Error {
    Error::Delegate(e.into())
}

/// A namespace that no longer exists (or whose bind mount is gone, leaving
/// a plain file): DEL has nothing to remove inside it.
fn netns_gone(e: &cni_netns::Error) -> bool {
    matches!(
        e,
        cni_netns::Error::NetnsNotFound { .. } | cni_netns::Error::NotANetns { .. }
    )
}

fn interface(link: &Link, sandbox: &str) -> Interface {
    Interface {
        name: link.name.clone(),
        mac: link.mac.map(|m| m.to_string()).unwrap_or_default(),
        sandbox: sandbox.to_owned(),
        ..Default::default()
    }
}

fn spoof_check_spec(at: &Attachment<'_>, host_ifname: &str, container: &Link) -> MacSpoofCheckSpec {
    MacSpoofCheckSpec {
        attachment: at.id.clone(),
        host_ifname: host_ifname.to_owned(),
        mac: container.mac.unwrap_or(cni_netns::MacAddr([0; 6])),
    }
}

/// The kernel half of ADD's start: the bridge, the pod's namespace, and
/// the veth between them.
struct Connected {
    host: Handle,
    bridge: Link,
    pod: Handle,
    host_veth: Link,
}

/// Go's `ensureBridge` then `setupVeth`: the veth's pod end is named
/// `CNI_IFNAME` and made in the pod directly, its host end is a port of the
/// bridge.
fn connect(at: &Attachment<'_>, done: &mut Done) -> Result<Connected> {
    let (req, conf) = (at.req, at.conf);
    let host = Handle::current()?;
    let bridge = ensure_bridge(&host, conf)?;
    let netns = Netns::open(&req.netns)?;
    let pod = Handle::in_netns(&netns)?;
    let host_veth = host.setup_veth_with(&VethSpec {
        peer_name: req.ifname.clone(),
        peer_netns: Some(&netns),
        mtu: conf.mtu(),
        peer_mac: conf.mac,
        up: true,
        master: Some(bridge.index),
        ..Default::default()
    })?;
    done.veth = true;
    tracing::debug!(veth = %host_veth.name, "veth created");
    Ok(Connected {
        host,
        bridge,
        pod,
        host_veth,
    })
}

/// Go's `ensureBridge`; the bridge's IPv6 routes are ours, not the
/// router advertisements'.
fn ensure_bridge(host: &Handle, conf: &BridgeConf) -> Result<Link> {
    let bridge = host.ensure_bridge(&BridgeSpec {
        name: conf.bridge.clone(),
        mtu: conf.mtu(),
        promisc: conf.promisc_mode,
        vlan_filtering: conf.vlan_filtering(),
    })?;
    // Go ignores this sysctl's failure (IPv6 may be disabled).
    let _ = host.run(|| sysctl::set(&sysctl::accept_ra(&bridge.name), "0"));
    Ok(bridge)
}

/// The host port's bridge settings: hairpin, isolation, and its VLANs.
fn configure_port(
    host: &Handle,
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
fn ensure_vlan_gateway(host: &Handle, bridge: &Link, conf: &BridgeConf, vlan: u16) -> Result<Link> {
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

/// The pod side of an IPAM result: DAD and ARP sysctls, then Go's
/// `ConfigureIface`.
fn configure_container(
    pod: &Handle,
    ifname: &str,
    conf: &BridgeConf,
    result: &CniResult,
) -> Result<()> {
    let enable_dad = conf.enable_dad;
    pod.run(|| {
        // As Go: these may be missing (IPv6 disabled); not an error.
        if enable_dad {
            let _ = sysctl::set(&format!("net/ipv6/conf/{ifname}/enhanced_dad"), "1");
            let _ = sysctl::set(&sysctl::accept_dad(ifname), "1");
        } else {
            let _ = sysctl::set(&sysctl::accept_dad(ifname), "0");
        }
        let _ = sysctl::set(&sysctl::arp_notify(ifname), "1");
    })?;
    let addresses: Vec<_> = result
        .ips
        .iter()
        .map(|ip| (ip.address, ip.gateway))
        .collect();
    let routes: Vec<_> = result.routes.iter().map(gateway::kernel_route).collect();
    configure_interface(pod, ifname, &addresses, &routes)?;
    Ok(())
}

/// Go's port state wait: the host end must be operationally up.
fn wait_port_up(host: &Handle, index: u32) -> Result<Link> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let link = host.link_by_index(index)?;
        if link.oper_state == OperState::Up {
            tracing::debug!(waited = ?start.elapsed(), "bridge port up");
            return Ok(link);
        }
        if start.elapsed() >= PORT_UP_TIMEOUT {
            tracing::debug!(waited = ?start.elapsed(), "bridge port still down");
            return Err(Error::Internal(format!(
                "bridge port in error state: {}",
                format!("{:?}", link.oper_state).to_lowercase()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(PORT_UP_MAX_POLL);
    }
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
