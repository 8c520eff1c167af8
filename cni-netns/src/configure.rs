//! Go's `ipam.ConfigureIface`: put an IPAM result on an interface.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::addr::{AddressOptions, DAD_TIMEOUT};
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::route::KernelRoute;
use crate::sysctl;

/// Configures `ifname` in the handle's namespace the way Go's
/// `ipam.ConfigureIface` (containernetworking/plugins
/// `pkg/ipam/ipam_linux.go`) does:
///
/// 1. before the first IPv6 address, `disable_ipv6=0` on `lo` and `ifname`
///    (only where it is not already 0) and `keep_addr_on_down=1` on
///    `ifname`;
/// 2. every address is added, remembering the first gateway of each
///    family;
/// 3. the link is set up;
/// 4. if there is an IPv6 gateway, waits for DAD ([`DAD_TIMEOUT`]);
/// 5. every route is added ECMP-style (`Handle::add_route_ecmp`) on
///    `ifname`, its gateway defaulting to the first gateway of the same
///    family; `priority`, `table` and `scope` are applied, and like Go the
///    route's `mtu`/`advmss` are not.
///
/// `addresses` holds the IPs whose result `interface` names `ifname` (the
/// caller filters, as the bridge plugin does when mapping a CNI result).
pub fn configure_interface(
    handle: &Handle,
    ifname: &str,
    addresses: &[(IpNetwork, Option<IpAddr>)],
    routes: &[KernelRoute],
) -> Result<()> {
    let link = handle.link_by_name(ifname)?;
    let mut v4gw = None;
    let mut v6gw = None;
    let mut ipv6_enabled = false;
    for &(addr, gw) in addresses {
        if addr.is_ipv6() && !ipv6_enabled {
            enable_ipv6(handle, ifname)?;
            ipv6_enabled = true;
        }
        handle.add_address(link.index, addr, AddressOptions::default())?;
        match gw {
            Some(g @ IpAddr::V4(_)) if v4gw.is_none() => v4gw = Some(g),
            Some(g @ IpAddr::V6(_)) if v6gw.is_none() => v6gw = Some(g),
            _ => {}
        }
    }
    // Go sets it up unconditionally; a link already up (the bridge's pod
    // end) needs no request.
    if !link.is_up() {
        handle.set_up(link.index)?;
    }
    if v6gw.is_some() {
        handle.wait_for_dad(link.index, DAD_TIMEOUT)?;
    }
    for r in routes {
        let gateway = r.gateway.or(if r.dst.is_ipv4() { v4gw } else { v6gw });
        let route = KernelRoute {
            gateway,
            oif: Some(link.index),
            table: r.table,
            scope: r.scope,
            priority: r.priority,
            ..KernelRoute::new(r.dst)
        };
        handle.add_route_ecmp(&route)?;
    }
    Ok(())
}

fn enable_ipv6(handle: &Handle, ifname: &str) -> Result<()> {
    for iface in ["lo", ifname] {
        // Go only logs a sysctl it cannot read (IPv6 compiled out, or the
        // interface vanished) and carries on; a failed write fails.
        match handle.sysctl_set(&sysctl::disable_ipv6(iface), "0") {
            Ok(_) => {}
            Err(e @ Error::Sysctl { op: "write", .. }) => return Err(e),
            Err(e) => tracing::debug!("configure {ifname}: {e}"),
        }
    }
    if let Err(e) = handle.sysctl_set(&sysctl::keep_addr_on_down(ifname), "1") {
        tracing::debug!("configure {ifname}: {e}");
    }
    Ok(())
}
