//! CHECK, as Go's `cmdCheck` (bridge.go): the bridge, the pod's veth and
//! its host peer on the bridge, and the previous result's addresses and
//! routes in the pod; plus our own rules (masquerade, MAC spoof check).

use cni_exec::Request;
use cni_firewall::Firewall;
use cni_netns::kernel::{NetKernel, NetnsHandle};
use cni_netns::Link;
use cni_types::Interface;

use super::error::{Error, Result};
use super::{spoof_check, BridgeConf};
use crate::steps::{addresses, attachment, check, ipam, masquerade};

pub(crate) fn check(kernel: &impl NetKernel, firewall: &dyn Firewall, req: &Request) -> Result<()> {
    let conf = BridgeConf::load(&req.config, &req.args_raw)?;
    let pod = kernel.open(&req.netns)?;
    ipam::check(req)?;
    let prev = check::prev_result(req)?;
    let host = kernel.current()?;

    let bridge_if = prev.interfaces.iter().find(|i| i.name == conf.bridge);
    let bridge = check_bridge(&host, bridge_if, &conf)?;
    let container_if = check::prev_container(req, &prev)?;
    let container = pod
        .link_by_name(&container_if.name)
        .map_err(|_| Error::CheckLinkMissing {
            name: container_if.name.clone(),
        })?;
    check::container_matches(&container, container_if, Some("veth"))?;
    let host_veth = prev
        .interfaces
        .iter()
        .filter(|i| i.name != conf.bridge && i.name != container_if.name)
        .find_map(|i| host_peer(&host, i, &bridge, &container).transpose())
        .transpose()?
        .ok_or_else(|| Error::CheckHostVethMissing {
            bridge: conf.bridge.clone(),
        })?;
    check::addresses_and_routes(&pod, &container, &prev)?;

    let id = attachment(req);
    if conf.ip_masq && !req.config.ipam_type().is_empty() {
        firewall.check(&masquerade(&id, addresses(&prev)))?;
    }
    if conf.mac_spoof_chk {
        firewall.check(&spoof_check(&id, &host_veth, &container))?;
    }
    Ok(())
}

fn mac_matches(want: &str, link: &Link) -> bool {
    want.is_empty() || link.mac.map(|m| m.to_string()).as_deref() == Some(want)
}

fn check_bridge(
    host: &impl NetnsHandle,
    intf: Option<&Interface>,
    conf: &BridgeConf,
) -> Result<Link> {
    let intf = intf.ok_or(Error::CheckBridgeMissing)?;
    let link = host
        .link_by_name(&intf.name)
        .map_err(|_| Error::CheckLinkMissing {
            name: intf.name.clone(),
        })?;
    if !intf.sandbox.is_empty() {
        return Err(Error::CheckLinkInSandbox {
            name: intf.name.clone(),
        });
    }
    if link.kind.as_deref() != Some("bridge") {
        return Err(Error::CheckNotABridge {
            name: intf.name.clone(),
        });
    }
    if !mac_matches(&intf.mac, &link) {
        return Err(Error::CheckBridgeMac {
            name: intf.name.clone(),
            mac: intf.mac.clone(),
        });
    }
    if link.is_promisc() != conf.promisc_mode {
        return Err(Error::CheckBridgePromisc {
            name: intf.name.clone(),
            configured: conf.promisc_mode,
            current: link.is_promisc(),
        });
    }
    Ok(link)
}

/// The host veth `intf` if it is the container's peer and a port of the
/// bridge; `None` for anything else in the result.
fn host_peer(
    host: &impl NetnsHandle,
    intf: &Interface,
    bridge: &Link,
    container: &Link,
) -> Result<Option<Link>> {
    if !intf.sandbox.is_empty() {
        return Err(Error::CheckLinkInSandbox {
            name: intf.name.clone(),
        });
    }
    let link = host
        .link_by_name(&intf.name)
        .map_err(|_| Error::CheckLinkMissing {
            name: intf.name.clone(),
        })?;
    if link.kind.as_deref() != Some("veth") {
        return Ok(None);
    }
    let is_peer = container.parent_index == Some(link.index)
        && link.parent_index == Some(container.index)
        && link.master == Some(bridge.index);
    if !is_peer {
        return Ok(None);
    }
    if !mac_matches(&intf.mac, &link) {
        return Err(Error::CheckHostVethMac {
            name: intf.name.clone(),
            mac: intf.mac.clone(),
        });
    }
    Ok(Some(link))
}
