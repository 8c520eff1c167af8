//! The ptp plugin: a veth pair whose node end is the pod's gateway, with
//! point-to-point style routing — Go's `plugins/main/ptp/ptp.go`, with the
//! masquerade in nftables (tagged with the attachment, so DEL and GC find
//! it), a rollback that also removes the veth, STATUS and GC.
//!
//! For each address `A/len` with gateway `G` from IPAM:
//! * pod: `A/len` on `CNI_IFNAME`, the subnet's link route replaced by
//!   `G/32 dev eth0 scope link src A` and `subnet via G src A`, plus the
//!   IPAM routes (the default route via `G`);
//! * node: `G/32` on the host veth and `A/32 dev veth scope host`.
//!
//! IPv6 duplicate address detection cannot find anything on the veth: its
//! pod end's only neighbour is its node end, which holds only the
//! gateways, and an address that is its own gateway is refused. So unless
//! `enabledad` asks for Go's behaviour, DAD is off on the pod end
//! ([`Dad::Off`]: `accept_dad` 0 before it comes up, the addresses and
//! the node's gateway added `nodad`) and the ADD does not wait for it.
//!
//! ```
//! use cni_plugins::ptp::PtpConf;
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"ptp","ipMasq":true,"mtu":1400}"#,
//! )?;
//! let ptp = PtpConf::load(&conf)?;
//! assert_eq!((ptp.ip_masq, ptp.mtu), (true, 1400));
//! # Ok::<(), cni_plugins::ptp::Error>(())
//! ```

mod error;

use std::net::IpAddr;
use std::sync::Arc;

use cni_exec::{Plugin, Request};
use cni_firewall::{Backend, Firewall, RuleKind};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{AddressOptions, Dad, IpNetwork, KernelRoute, Link, SCOPE_HOST};
use cni_types::{CniResult, Dns, NetworkConfig};
use serde::Deserialize;

use crate::steps::iface::{self, interface};
use crate::steps::{self, addresses, attachment, check, ipam, masquerade, Undo};
pub use error::{Error, Result};

/// The ptp plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PtpConf {
    /// `ipMasq`: masquerade the pod's traffic leaving its subnet.
    pub ip_masq: bool,
    /// `mtu` of both veth ends (0: the kernel's default).
    pub mtu: u32,
    /// `dns`: replaces the IPAM plugin's when any field is set.
    pub dns: Option<Dns>,
    /// `enabledad` (bridge's key): IPv6 DAD in the pod as Go's ptp does
    /// it (the namespace's setting, the ADD waiting for the addresses);
    /// by default it is off ([`Dad::Off`]).
    pub enable_dad: bool,
}

#[derive(Deserialize)]
pub(crate) struct Raw {
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "enabledad", default)]
    enable_dad: bool,
}

impl PtpConf {
    /// Reads the config.
    pub fn load(config: &NetworkConfig) -> Result<PtpConf> {
        let raw: Raw = config.parse_as()?;
        let mtu = u32::try_from(raw.mtu).map_err(|_| Error::MtuInvalid { mtu: raw.mtu })?;
        Ok(PtpConf {
            ip_masq: config.ip_masq,
            mtu,
            dns: config.dns.clone().filter(|d| !d.is_empty()),
            enable_dad: raw.enable_dad,
        })
    }

    /// The pod end's IPv6 DAD.
    pub fn dad(&self) -> Dad {
        if self.enable_dad {
            Dad::Kernel
        } else {
            Dad::Off
        }
    }
}

/// The ptp plugin. Its firewall is native nf_tables unless built
/// [`Ptp::with_backend`] (the binary reads `CNI_FIREWALL_BACKEND`); its
/// kernel the real one unless built [`Ptp::with_kernel`] (a
/// `cni_netns::kernel::FakeKernel` in tests without root).
#[derive(Debug, Clone)]
pub struct Ptp<K = LinuxKernel> {
    kernel: K,
    firewall: Arc<dyn Firewall>,
}

impl Default for Ptp {
    fn default() -> Self {
        Ptp::with_backend(Backend::default())
    }
}

impl Ptp {
    /// The plugin with the firewall `backend` of the namespace it runs in.
    pub fn with_backend(backend: Backend) -> Ptp {
        Ptp::with_firewall(Arc::from(backend.firewall(None, 0)))
    }

    /// The plugin with another firewall (a test double, or nftables in
    /// another namespace).
    pub fn with_firewall(firewall: Arc<dyn Firewall>) -> Ptp {
        Ptp::with_kernel(LinuxKernel, firewall)
    }
}

impl<K: NetKernel> Ptp<K> {
    /// The plugin on another kernel and firewall (test doubles).
    pub fn with_kernel(kernel: K, firewall: Arc<dyn Firewall>) -> Ptp<K> {
        Ptp { kernel, firewall }
    }
}

impl<K: NetKernel> Plugin for Ptp<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "ptp"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = PtpConf::load(&req.config)?;
        let pod = self.kernel.open(&req.netns)?;
        let host = self.kernel.current()?;
        let id = attachment(req);
        let mut undo = Undo::<Error>::new();
        let mut result = ipam::add(req, &mut undo)?;
        no_address_is_a_gateway(&result)?;
        let v4 = result.ips.iter().any(|ip| ip.address.is_ipv4());
        let v6 = result.ips.iter().any(|ip| ip.address.is_ipv6());
        host.enable_forwarding(v4, v6)?;

        let mtu = (conf.mtu > 0).then_some(conf.mtu);
        let host_veth = host.setup_veth(&req.ifname, pod.netns(), mtu, None)?;
        undo.push(|| pod.delete_link_by_name(&req.ifname));
        let container = pod.link_by_name(&req.ifname)?;
        for ip in &mut result.ips {
            ip.interface = Some(1);
        }
        result.interfaces = vec![interface(&host_veth, ""), interface(&container, &req.netns)];
        let dad = conf.dad();
        iface::configure_with(&pod, &req.ifname, &result, dad)?;
        for ip in &result.ips {
            let gw = ip.gateway.ok_or_else(|| Error::IpamNoGateway {
                address: ip.address.to_string(),
            })?;
            point_to_point(&pod, &container, ip.address, gw)?;
            gateway_on_host(&host, &host_veth, ip.address, gw, dad)?;
        }
        if conf.ip_masq {
            undo.push(|| self.firewall.delete_owned(RuleKind::Masquerade, &id));
            self.firewall.add(&masquerade(&id, addresses(&result)))?;
        }
        // The host end's MAC may change when the pod end comes up.
        result.interfaces[0] = interface(&host.link_by_index(host_veth.index)?, "");
        if let Some(dns) = &conf.dns {
            result.dns = dns.clone();
        }
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = PtpConf::load(&req.config)?;
        let pod = iface::pod_for_del_in(&self.kernel, req)?;
        // Deleting the pod end deletes the pair, and with it the node's
        // gateway address and host route. Meanwhile the rules, found by
        // their owner whether or not the pod's addresses can still be
        // read, go before the addresses are released, so that a new pod
        // given one never loses its rules.
        iface::delete_pod_link_while(pod.as_ref(), req, || {
            let unmasqueraded = if conf.ip_masq {
                self.firewall
                    .delete_owned(RuleKind::Masquerade, &attachment(req))
                    .map_err(Error::from)
            } else {
                Ok(())
            };
            steps::all_errors([unmasqueraded, ipam::del(req).map_err(Error::from)])
        })
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = PtpConf::load(&req.config)?;
        let pod = self.kernel.open(&req.netns)?;
        ipam::check(req)?;
        let prev = check::prev_result(req)?;
        let intf = check::prev_container(req, &prev)?;
        let link = check::container_link(&pod, intf, Some("veth"))?;
        check::addresses_and_routes(&pod, &link, &prev)?;
        if conf.ip_masq {
            self.firewall
                .check(&masquerade(&attachment(req), addresses(&prev)))?;
        }
        Ok(())
    }

    fn status(&self, req: &Request) -> Result<()> {
        Ok(ipam::status(req)?)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        let conf = PtpConf::load(&req.config)?;
        let masq = match (conf.ip_masq, steps::valid_attachments(req)?) {
            (true, Some(valid)) => self
                .firewall
                .gc(RuleKind::Masquerade, &req.config.name, &valid)
                .map(drop)
                .map_err(Error::from),
            _ => Ok(()),
        };
        steps::all_errors([masq, ipam::gc(req).map_err(Error::from)])
    }
}

/// The node end holds the gateways: an address that is a gateway of the
/// result would be on both ends (and, with DAD off, go unnoticed).
fn no_address_is_a_gateway(result: &CniResult) -> Result<()> {
    for ip in &result.ips {
        let own = ip.address.ip();
        if let Some(gw) = result
            .ips
            .iter()
            .filter_map(|i| i.gateway)
            .find(|g| *g == own)
        {
            return Err(Error::IpamAddressIsGateway {
                address: ip.address.to_string(),
                gateway: gw.to_string(),
            });
        }
    }
    Ok(())
}

/// A prefix derived from an IPAM address that is not one.
fn invalid_prefix(object: String, e: impl std::fmt::Display) -> Error {
    Error::InvalidPrefix {
        object,
        reason: e.to_string(),
    }
}

fn host_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// Go's ptp trick (a veth cannot be `IFF_POINTOPOINT`): the subnet route
/// the kernel added with the address is replaced by a link route to the
/// gateway alone and a route to the subnet through it, so that the pod
/// ARPs only for the gateway. Public for the kernel floor of the
/// end-to-end benchmark (`e2e --matrix`), which issues ptp's kernel
/// requests without the plugin.
pub fn point_to_point(
    pod: &impl NetnsHandle,
    container: &Link,
    address: IpNetwork,
    gw: IpAddr,
) -> Result<()> {
    let subnet = IpNetwork::new(address.network(), address.prefix())
        .map_err(|e| invalid_prefix(format!("subnet of {address}"), e))?;
    pod.del_route(&KernelRoute {
        oif: Some(container.index),
        ..KernelRoute::new(subnet)
    })?;
    let gw_net = IpNetwork::new(gw, host_prefix(gw))
        .map_err(|e| invalid_prefix(format!("host route to {gw}"), e))?;
    pod.add_route(&KernelRoute {
        oif: Some(container.index),
        scope: Some(cni_netns::SCOPE_LINK),
        src: Some(address.ip()),
        ..KernelRoute::new(gw_net)
    })?;
    pod.add_route(&KernelRoute {
        oif: Some(container.index),
        gateway: Some(gw),
        src: Some(address.ip()),
        ..KernelRoute::new(subnet)
    })?;
    Ok(())
}

/// The node side: the gateway address on the host veth and a host route to
/// the pod's address through it. With the pod's DAD off, the gateway is
/// added `nodad` too (its only neighbour is the pod, whose addresses are
/// not gateways), so that the pod can reach it as soon as the ADD returns.
/// Public for the same kernel floor as [`point_to_point`].
pub fn gateway_on_host(
    host: &impl NetnsHandle,
    veth: &Link,
    address: IpNetwork,
    gw: IpAddr,
    dad: Dad,
) -> Result<()> {
    let prefix = host_prefix(gw);
    let gw_net = IpNetwork::new(gw, prefix)
        .map_err(|e| invalid_prefix(format!("gateway {gw}/{prefix}"), e))?;
    let options = AddressOptions {
        nodad: dad == Dad::Off && gw.is_ipv6(),
        ..AddressOptions::default()
    };
    host.add_address(veth.index, gw_net, options)?;
    let pod_net = IpNetwork::new(address.ip(), prefix)
        .map_err(|e| invalid_prefix(format!("host route to {}", address.ip()), e))?;
    match host.add_route(&KernelRoute {
        oif: Some(veth.index),
        scope: Some(SCOPE_HOST),
        ..KernelRoute::new(pod_net)
    }) {
        Err(e) if !e.is_exists() => Err(e.into()),
        _ => Ok(()),
    }
}
