//! CHECK, as Go's `cmdCheck` (bridge.go): the bridge, the pod's veth and
//! its host peer on the bridge, and the previous result's addresses and
//! routes in the pod; plus our own rules (masquerade, MAC spoof check).

use cni_exec::{delegate_check, Request};
use cni_netns::firewall::{AttachmentId, Firewall, MacSpoofCheckSpec, RuleSpec};
use cni_netns::{Family, Handle, IpNetwork, Link, Netns};
use cni_types::{CniResult, Interface};

use super::{delegate, masquerade, BridgeConf};
use crate::{Error, Result};

pub(crate) fn check(firewall: &dyn Firewall, req: &Request) -> Result<()> {
    let conf = BridgeConf::load(&req.config, &req.args_raw)?;
    let netns = Netns::open(&req.netns)?;
    let ipam = req.config.ipam_type();
    if !ipam.is_empty() {
        delegate_check(ipam, &req.stdin, req).map_err(delegate)?;
    }
    let prev = req
        .config
        .prev_result()?
        .ok_or_else(|| Error::Config("Required prevResult missing".into()))?;
    let host = Handle::current()?;
    let pod = Handle::in_netns(&netns)?;

    let bridge_if = prev.interfaces.iter().find(|i| i.name == conf.bridge);
    let container_if = prev
        .interfaces
        .iter()
        .find(|i| i.name == req.ifname && i.sandbox == req.netns);
    let bridge = check_bridge(&host, bridge_if, &conf)?;
    let container_if = container_if.ok_or_else(|| {
        fail(format!(
            "Sandbox in prevResult  doesn't match configured netns: {}",
            req.netns
        ))
    })?;
    let container = check_container(&pod, container_if)?;
    let host_veth = prev
        .interfaces
        .iter()
        .filter(|i| i.name != conf.bridge && i.name != container_if.name)
        .find_map(|i| host_peer(&host, i, &bridge, &container).transpose())
        .transpose()?
        .ok_or_else(|| {
            fail(format!(
                "CNI veth created for bridge {} was not found",
                conf.bridge
            ))
        })?;
    check_addresses(&pod, &container, &prev)?;
    check_routes(&pod, &prev)?;

    let id = AttachmentId::new(
        req.config.name.clone(),
        req.container_id.clone(),
        req.ifname.clone(),
    );
    if conf.ip_masq && !ipam.is_empty() {
        let addresses: Vec<IpNetwork> = prev.ips.iter().map(|ip| ip.address).collect();
        firewall.check(&masquerade(&id, addresses))?;
    }
    if conf.mac_spoof_chk {
        firewall.check(&RuleSpec::MacSpoofCheck(MacSpoofCheckSpec {
            attachment: id,
            host_ifname: host_veth.name,
            mac: container.mac.unwrap_or(cni_netns::MacAddr([0; 6])),
        }))?;
    }
    Ok(())
}

fn fail(msg: String) -> Error {
    Error::Internal(msg)
}

fn mac_matches(want: &str, link: &Link) -> bool {
    want.is_empty() || link.mac.map(|m| m.to_string()).as_deref() == Some(want)
}

fn check_bridge(host: &Handle, intf: Option<&Interface>, conf: &BridgeConf) -> Result<Link> {
    let intf = intf.ok_or_else(|| fail("Interface name missing ".into()))?;
    let link = host
        .link_by_name(&intf.name)
        .map_err(|_| fail(format!("Interface name {} not found", intf.name)))?;
    if !intf.sandbox.is_empty() {
        return Err(fail(format!(
            "Interface {} should not be in sandbox",
            intf.name
        )));
    }
    if link.kind.as_deref() != Some("bridge") {
        return Err(fail(format!(
            "Interface {} does not have link type of bridge",
            intf.name
        )));
    }
    if !mac_matches(&intf.mac, &link) {
        return Err(fail(format!(
            "Bridge interface {} Mac doesn't match: {}",
            intf.name, intf.mac
        )));
    }
    if link.is_promisc() != conf.promisc_mode {
        return Err(fail(format!(
            "Bridge interface {} configured Promisc Mode {} doesn't match current state: {} ",
            intf.name,
            conf.promisc_mode,
            link.is_promisc()
        )));
    }
    Ok(link)
}

fn check_container(pod: &Handle, intf: &Interface) -> Result<Link> {
    let link = pod
        .link_by_name(&intf.name)
        .map_err(|_| fail(format!("Interface name {} not found", intf.name)))?;
    if link.kind.as_deref() != Some("veth") {
        return Err(fail(format!(
            "Error: Container interface {} not of type veth",
            link.name
        )));
    }
    if !mac_matches(&intf.mac, &link) {
        return Err(fail(format!(
            "Interface {} Mac {} doesn't match container Mac: {}",
            intf.name,
            intf.mac,
            link.mac.map(|m| m.to_string()).unwrap_or_default()
        )));
    }
    Ok(link)
}

/// The host veth `intf` if it is the container's peer and a port of the
/// bridge; `None` for anything else in the result.
fn host_peer(
    host: &Handle,
    intf: &Interface,
    bridge: &Link,
    container: &Link,
) -> Result<Option<Link>> {
    if !intf.sandbox.is_empty() {
        return Err(fail(format!(
            "Interface {} should not be in sandbox",
            intf.name
        )));
    }
    let link = host
        .link_by_name(&intf.name)
        .map_err(|_| fail(format!("Interface name {} not found", intf.name)))?;
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
        return Err(fail(format!(
            "Interface {} Mac doesn't match: {} not found",
            intf.name, intf.mac
        )));
    }
    Ok(Some(link))
}

/// Go's `ip.ValidateExpectedInterfaceIPs`.
fn check_addresses(pod: &Handle, container: &Link, prev: &CniResult) -> Result<()> {
    let present = pod.addresses(Some(container.index), Family::All)?;
    for ip in &prev.ips {
        if !present.iter().any(|a| a.address == ip.address) {
            return Err(fail(format!(
                "Failed to match addr {} on interface {}",
                ip.address, container.name
            )));
        }
    }
    Ok(())
}

/// Go's `ip.ValidateExpectedRoute`.
fn check_routes(pod: &Handle, prev: &CniResult) -> Result<()> {
    if prev.routes.is_empty() {
        return Ok(());
    }
    let present = pod.routes(Family::All)?;
    for r in &prev.routes {
        let found = present
            .iter()
            .any(|k| k.dst == r.dst && (r.gw.is_none() || k.gateway == r.gw));
        if !found {
            return Err(fail(format!(
                "Expected Route {{Dst: {} GW: {}}} not found in routing table",
                r.dst,
                r.gw.map(|g| g.to_string()).unwrap_or_default()
            )));
        }
    }
    Ok(())
}
