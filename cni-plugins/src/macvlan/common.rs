//! Steps the main plugins share (macvlan, ipvlan, ptp, host-device): the
//! IPAM delegation, the pod side of an IPAM result, DEL's tolerance of a
//! vanished namespace, and CHECK's comparison of a previous result with the
//! kernel (Go's `ip.ValidateExpectedInterfaceIPs` and
//! `ip.ValidateExpectedRoute`).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use cni_exec::{delegate_add, delegate_check, delegate_del, delegate_gc, delegate_status, Request};
use cni_netns::{configure_interface, sysctl, Family, Handle, Link, Netns};
use cni_types::{CniResult, Interface};

use crate::{Error, Result};

/// A delegated plugin's failure, passed on as its own error reply.
pub(crate) fn delegate(e: cni_exec::Error) -> Error {
    Error::Delegate(e.into())
}

/// The IPAM plugin's ADD, with Go's check that it gave addresses.
pub(crate) fn ipam_add(req: &Request) -> Result<CniResult> {
    let result = delegate_add(req.config.ipam_type(), &req.stdin, req).map_err(delegate)?;
    if result.ips.is_empty() {
        return Err(Error::Internal(
            "IPAM plugin returned missing IP config".into(),
        ));
    }
    Ok(result)
}

/// The IPAM plugin's DEL; nothing without an IPAM section.
pub(crate) fn ipam_del(req: &Request) -> Result<()> {
    match req.config.ipam_type() {
        "" => Ok(()),
        ipam => delegate_del(ipam, &req.stdin, req).map_err(delegate),
    }
}

/// The IPAM plugin's CHECK; nothing without an IPAM section.
pub(crate) fn ipam_check(req: &Request) -> Result<()> {
    match req.config.ipam_type() {
        "" => Ok(()),
        ipam => delegate_check(ipam, &req.stdin, req).map_err(delegate),
    }
}

/// STATUS: the plugin is ready when its IPAM plugin is (the reference's
/// 1.1 plugins delegate the same way).
pub(crate) fn ipam_status(req: &Request) -> Result<()> {
    match req.config.ipam_type() {
        "" => Ok(()),
        ipam => delegate_status(ipam, &req.stdin, req).map_err(delegate),
    }
}

/// GC: the plugin's links die with their pods, so only the IPAM plugin
/// has anything to collect (the leases of attachments not in the valid
/// list).
pub(crate) fn ipam_gc(req: &Request) -> Result<()> {
    match req.config.ipam_type() {
        "" => Ok(()),
        ipam => delegate_gc(ipam, &req.stdin, req).map_err(delegate),
    }
}

/// Undoes an IPAM ADD after a later step failed; the ADD's own error is
/// what the runtime sees.
pub(crate) fn undo_ipam(req: &Request) {
    if let Err(e) = ipam_del(req) {
        tracing::warn!("undo ADD: IPAM DEL: {e}");
    }
}

/// The pod's namespace for DEL: `None` when `CNI_NETNS` is empty or the
/// namespace is already gone (nothing to remove inside it).
pub(crate) fn pod_for_del(req: &Request) -> Result<Option<(Netns, Handle)>> {
    if req.netns.is_empty() {
        return Ok(None);
    }
    match Netns::open(&req.netns) {
        Ok(netns) => {
            let pod = Handle::in_netns(&netns)?;
            Ok(Some((netns, pod)))
        }
        Err(e) if netns_gone(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A namespace that no longer exists (or whose bind mount is gone, leaving
/// a plain file).
pub(crate) fn netns_gone(e: &cni_netns::Error) -> bool {
    matches!(
        e,
        cni_netns::Error::NetnsNotFound { .. } | cni_netns::Error::NotANetns { .. }
    )
}

/// True for the IPAM plugins that use the pod interface itself, so that
/// ADD must run after it exists and DEL before it is deleted (Go's order
/// for every IPAM plugin): dhcp sends its DHCPRELEASE from the leased
/// address on that interface.
pub(crate) fn ipam_uses_pod_link(ipam_type: &str) -> bool {
    ipam_type == "dhcp"
}

/// Deletes `ifname` in the pod (a missing link is not an error) while
/// `release` runs: deleting a link takes the kernel 10-30 ms (RCU grace
/// periods), enough for the IPAM plugin's process and the firewall. Both
/// run to completion; the link's error is reported first. When the IPAM
/// plugin `ipam_type` uses the link ([`ipam_uses_pod_link`]), the release
/// runs first and the link is deleted after it.
pub(crate) fn delete_pod_link_while(
    pod: Option<&Handle>,
    ifname: &str,
    ipam_type: &str,
    release: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if ipam_uses_pod_link(ipam_type) {
        let released = release();
        if let Some(pod) = pod {
            pod.delete_link_by_name(ifname)?;
        }
        return released;
    }
    std::thread::scope(|s| {
        let deleted = pod.map(|pod| s.spawn(move || pod.delete_link_by_name(ifname)));
        let released = release();
        if let Some(d) = deleted {
            d.join()
                .map_err(|_| Error::Internal("delete link thread panicked".into()))??;
        }
        released
    })
}

/// A result interface for `link`.
pub(crate) fn interface(link: &Link, sandbox: &str) -> Interface {
    Interface {
        name: link.name.clone(),
        mac: link.mac.map(|m| m.to_string()).unwrap_or_default(),
        sandbox: sandbox.to_owned(),
        ..Default::default()
    }
}

/// A temporary link name (`veth` + 8 hex digits, as Go's
/// `ip.RandomVethName`): a link created straight into the pod may clash
/// with a host link of the final name, so it is renamed once inside.
pub(crate) fn temp_link_name() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("veth{:08x}", h.finish() as u32)
}

/// The kernel route for a result route (the gateway defaults later, in
/// [`configure_interface`]).
pub(crate) fn kernel_route(r: &cni_types::Route) -> cni_netns::Route {
    cni_netns::Route {
        gateway: r.gw,
        priority: r.priority,
        table: r.table,
        scope: r.scope.and_then(|s| u8::try_from(s).ok()),
        ..cni_netns::Route::new(r.dst)
    }
}

/// macvlan's and ipvlan's pod side: announce the new address (ARP and
/// unsolicited neighbour advertisements; either may be missing, as Go
/// ignores), then Go's `ipam.ConfigureIface` with every address of the
/// result.
pub(crate) fn configure_announced(pod: &Handle, ifname: &str, result: &CniResult) -> Result<()> {
    pod.run(|| {
        let _ = sysctl::set(&sysctl::arp_notify(ifname), "1");
        let _ = sysctl::set(&format!("net/ipv6/conf/{ifname}/ndisc_notify"), "1");
    })?;
    configure(pod, ifname, result)
}

/// Go's `ipam.ConfigureIface` for a result whose addresses all belong to
/// `ifname`.
pub(crate) fn configure(pod: &Handle, ifname: &str, result: &CniResult) -> Result<()> {
    let addresses: Vec<_> = result
        .ips
        .iter()
        .map(|ip| (ip.address, ip.gateway))
        .collect();
    let routes: Vec<_> = result.routes.iter().map(kernel_route).collect();
    configure_interface(pod, ifname, &addresses, &routes)?;
    Ok(())
}

/// The previous result CHECK compares against; Go's message when missing.
pub(crate) fn prev_result(req: &Request) -> Result<CniResult> {
    req.config
        .prev_result()?
        .ok_or_else(|| Error::Config("Required prevResult missing".into()))
}

/// The previous result's interface for this attachment (`CNI_IFNAME` in
/// `CNI_NETNS`), with Go's message when there is none.
pub(crate) fn prev_container<'a>(req: &Request, prev: &'a CniResult) -> Result<&'a Interface> {
    prev.interfaces
        .iter()
        .find(|i| i.name == req.ifname && i.sandbox == req.netns)
        .ok_or_else(|| {
            fail(format!(
                "Sandbox in prevResult  doesn't match configured netns: {}",
                req.netns
            ))
        })
}

/// A CHECK failure (code 999, as the Go plugins' plain errors).
pub(crate) fn fail(msg: String) -> Error {
    Error::Internal(msg)
}

/// Go's `validateCniContainerInterface` common part: the link exists in
/// the pod, has the expected kind, and the MAC the result names.
pub(crate) fn check_container_link(
    pod: &Handle,
    intf: &Interface,
    kind: Option<&str>,
) -> Result<Link> {
    let link = pod.link_by_name(&intf.name).map_err(|_| {
        fail(format!(
            "Container Interface name in prevResult: {} not found",
            intf.name
        ))
    })?;
    if let Some(kind) = kind {
        if link.kind.as_deref() != Some(kind) {
            return Err(fail(format!(
                "Error: Container interface {} not of type {kind}",
                link.name
            )));
        }
    }
    let mac = link.mac.map(|m| m.to_string()).unwrap_or_default();
    if !intf.mac.is_empty() && intf.mac != mac {
        return Err(fail(format!(
            "Interface {} Mac {} doesn't match container Mac: {mac}",
            intf.name, intf.mac
        )));
    }
    Ok(link)
}

/// Go's `ip.ValidateExpectedInterfaceIPs` and `ip.ValidateExpectedRoute`
/// for the pod interface `link`.
pub(crate) fn check_addresses_and_routes(
    pod: &Handle,
    link: &Link,
    prev: &CniResult,
) -> Result<()> {
    let present = pod.addresses(Some(link.index), Family::All)?;
    for ip in &prev.ips {
        if !present.iter().any(|a| a.address == ip.address) {
            return Err(fail(format!(
                "Failed to match addr {} on interface {}",
                ip.address, link.name
            )));
        }
    }
    if prev.routes.is_empty() {
        return Ok(());
    }
    let routes = pod.routes(Family::All)?;
    for r in &prev.routes {
        let found = routes
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

/// The master link: named in the config, else the device of the default
/// route; looked up in the pod's namespace with `linkInContainer`.
pub(crate) fn find_master(
    master: &str,
    in_container: bool,
    host: &Handle,
    pod: &Handle,
) -> Result<Link> {
    let ns = if in_container { pod } else { host };
    if master.is_empty() {
        return ns
            .default_route_link()?
            .ok_or_else(|| fail("no default route interface found".into()));
    }
    ns.link_by_name(master).map_err(|e| {
        if e.is_not_found() {
            fail(format!(
                "failed to lookup master {master:?}: Link not found"
            ))
        } else {
            e.into()
        }
    })
}

/// The plugin's own section of the config, its keys matched to `keys`
/// case-insensitively as Go's `encoding/json` does (the tap docs spell
/// `selinuxcontext` what the Go struct tags `selinuxContext`).
pub(crate) fn go_conf<T: serde::de::DeserializeOwned>(
    config: &cni_types::NetworkConfig,
    keys: &[&str],
) -> Result<T> {
    let mut raw = config.specific().clone();
    cni_types::json::canonicalize_keys(&mut raw, keys);
    T::deserialize(serde_json::Value::Object(raw))
        .map_err(|e| cni_types::Error::InvalidConfig(format!("failed to load netconf: {e}")).into())
}

/// A link stacked on a master (macvlan, ipvlan, vlan; tap reuses it for
/// the rename), created under a temporary name
/// ([`temp_link_name`]) by `create(creator, name, target)`: from the host
/// straight into the pod (`target` is the pod's namespace), or, with
/// `linkInContainer`, inside the pod next to its master; then renamed to
/// `ifname` inside the pod. A failed rename deletes the link.
pub(crate) fn create_stacked_link(
    link_in_container: bool,
    host: &Handle,
    netns: &Netns,
    pod: &Handle,
    ifname: &str,
    create: impl FnOnce(&Handle, String, Option<&Netns>) -> cni_netns::Result<()>,
) -> Result<Link> {
    let tmp = temp_link_name();
    let (creator, target) = if link_in_container {
        (pod, None)
    } else {
        (host, Some(netns))
    };
    create(creator, tmp.clone(), target)?;
    let link = pod.link_by_name(&tmp)?;
    let renamed = pod
        .rename(link.index, ifname)
        .and_then(|()| pod.link_by_index(link.index));
    if renamed.is_err() {
        let _ = pod.delete_link(link.index);
    }
    Ok(renamed?)
}

/// Sets the IPAM result's addresses on the pod's only interface (index
/// 0) and names that interface, as Go's single-interface plugins do.
pub(crate) fn single_interface_result(ipam: CniResult, link: &Link, sandbox: &str) -> CniResult {
    let mut result = ipam;
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    result.interfaces = vec![interface(link, sandbox)];
    result
}

/// The pod link's MAC as macvlan and tap pick it: the config's `mac`,
/// overridden by `CNI_ARGS` `MAC`, overridden by `runtimeConfig.mac`.
pub(crate) fn requested_mac(
    config: &cni_types::NetworkConfig,
    cni_args: &str,
    conf_mac: String,
) -> Result<Option<cni_netns::MacAddr>> {
    let mut mac = conf_mac;
    let args = cni_types::CniArgs::parse(cni_args)?;
    args.check_known(&["MAC"])?;
    if let Some(m) = args.get("MAC").filter(|m| !m.is_empty()) {
        mac = m.to_owned();
    }
    if let Some(m) = config.runtime_config.as_ref().and_then(|r| r.mac.as_ref()) {
        if !m.is_empty() {
            mac.clone_from(m);
        }
    }
    match mac.as_str() {
        "" => Ok(None),
        m => Ok(Some(m.parse().map_err(|_| {
            fail(format!(
                "invalid args {m} for MAC addr: invalid MAC address"
            ))
        })?)),
    }
}
