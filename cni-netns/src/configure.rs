//! Go's `ipam.ConfigureIface`: put an IPAM result on an interface.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::addr::{AddressOptions, DAD_TIMEOUT};
use crate::error::{Error, Result};
use crate::kernel::NetnsHandle;
use crate::link::Link;
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
/// 4. if there is an IPv6 gateway, waits for DAD of the IPv6 addresses it
///    added ([`Handle::settle_addresses`](crate::Handle::settle_addresses), [`DAD_TIMEOUT`]);
/// 5. every route is added ECMP-style (`Handle::add_route_ecmp`) on
///    `ifname`, its gateway defaulting to the first gateway of the same
///    family; `priority`, `table` and `scope` are applied, and like Go the
///    route's `mtu`/`advmss` are not.
///
/// `addresses` holds the IPs whose result `interface` names `ifname` (the
/// caller filters, as the bridge plugin does when mapping a CNI result).
pub fn configure_interface<H: NetnsHandle + ?Sized>(
    handle: &H,
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
        handle
            .add_address(link.index, addr, AddressOptions::default())
            .map_err(|e| match addr {
                IpNetwork::V6(_) => ipv6_unavailable(handle, &link, addr, e),
                IpNetwork::V4(_) => e,
            })?;
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
        let assigned: Vec<IpAddr> = addresses
            .iter()
            .map(|(a, _)| a.ip())
            .filter(IpAddr::is_ipv6)
            .collect();
        handle.settle_addresses(link.index, &assigned, DAD_TIMEOUT)?;
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

/// `e`, the kernel's refusal of IPv6 address `addr` on `link`, named for
/// what it is when the link has no IPv6: the kernel answers only "invalid
/// argument" or "permission denied".
fn ipv6_unavailable<H: NetnsHandle + ?Sized>(
    handle: &H,
    link: &Link,
    addr: IpNetwork,
    e: Error,
) -> Error {
    use nix::errno::Errno;
    if !matches!(
        e.errno(),
        Some(Errno::EINVAL | Errno::EACCES | Errno::EAFNOSUPPORT | Errno::EOPNOTSUPP)
    ) {
        return e;
    }
    // Whether IPv6 is on, the link has IPv6 state, and its disable_ipv6.
    let conf = format!("net/ipv6/conf/{}/disable_ipv6", link.name);
    let (ipv6, disabled) = match (
        handle.sysctl_get("net/ipv6/conf/all/disable_ipv6"),
        handle.sysctl_get(&conf),
    ) {
        (Ok(all), Ok(disabled)) => (all.is_some(), disabled),
        _ => return e,
    };
    let iface = disabled.is_some();
    let reason = if !ipv6 {
        "IPv6 is off in the kernel (booted with ipv6.disable=1, or built without IPv6)".to_owned()
    } else if !iface && link.mtu < IPV6_MIN_MTU {
        format!(
            "its MTU {} is below IPv6's minimum of {IPV6_MIN_MTU}, so the kernel keeps no IPv6 on it",
            link.mtu
        )
    } else if !iface {
        "the kernel keeps no IPv6 state for it".to_owned()
    } else if disabled.as_deref().map(str::trim) == Some("1") {
        format!("net.ipv6.conf.{}.disable_ipv6 is 1", link.name)
    } else {
        return e;
    };
    Error::Ipv6Unavailable {
        address: addr.to_string(),
        ifname: link.name.clone(),
        netns: handle.netns_name().to_owned(),
        reason,
    }
}

/// The smallest MTU on which Linux keeps IPv6 (`IPV6_MIN_MTU`).
const IPV6_MIN_MTU: u32 = 1280;

fn enable_ipv6<H: NetnsHandle + ?Sized>(handle: &H, ifname: &str) -> Result<()> {
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
