//! Go's `ipam.ConfigureIface`: put an IPAM result on an interface.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::addr::{AddressOptions, DAD_TIMEOUT};
use crate::error::{Error, Result};
use crate::kernel::NetnsHandle;
use crate::link::Link;
use crate::route::KernelRoute;
use crate::sysctl;
use cni_types::step_span;
use cni_types::trace::in_step;

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
///
/// The interface's DAD is the namespace's ([`Dad::Kernel`]); see
/// [`configure_interface_with`] for the others.
pub fn configure_interface<H: NetnsHandle + ?Sized>(
    handle: &H,
    ifname: &str,
    addresses: &[(IpNetwork, Option<IpAddr>)],
    routes: &[KernelRoute],
) -> Result<()> {
    configure_interface_with(handle, ifname, addresses, routes, Dad::Kernel)
}

/// IPv6 duplicate address detection (DAD) on a pod interface: what
/// [`set_dad`] writes in `net/ipv6/conf/<ifname>/` and how
/// [`configure_interface_with`] adds the addresses and waits for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dad {
    /// The namespace's settings, untouched; the addresses are waited for
    /// (Go's `ConfigureIface`).
    #[default]
    Kernel,
    /// On, with enhanced DAD (RFC 7527): `accept_dad` 1, `enhanced_dad`
    /// 1; the addresses are waited for (Go's bridge with `enabledad`).
    On,
    /// Off: `accept_dad` 0, the addresses added with `IFA_F_NODAD` (also
    /// where `conf/all/accept_dad` keeps DAD on), nothing waited for. For
    /// a link whose only neighbour is our own (a veth's pod end), where
    /// DAD cannot find a duplicate.
    Off,
    /// Optimistic (RFC 4429): `optimistic_dad` 1 and `use_optimistic` 1,
    /// the addresses added with `IFA_F_OPTIMISTIC`, usable at once while
    /// the kernel still detects a duplicate (it then flags the address
    /// `dadfailed` and stops using it). For a link on a shared L2 segment
    /// (macvlan, ipvlan, a host device). An address the kernel did not
    /// make optimistic is waited for; on a kernel without optimistic DAD
    /// (`CONFIG_IPV6_OPTIMISTIC_DAD`: the sysctls are absent) [`set_dad`]
    /// gives [`Dad::Kernel`].
    Optimistic,
}

impl Dad {
    /// The sysctls of `net/ipv6/conf/<ifname>/` it writes, in order.
    pub fn sysctls(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Dad::Kernel => &[],
            Dad::On => &[("enhanced_dad", "1"), ("accept_dad", "1")],
            Dad::Off => &[("accept_dad", "0")],
            Dad::Optimistic => &[("optimistic_dad", "1"), ("use_optimistic", "1")],
        }
    }

    /// Whether [`configure_interface_with`] waits for the addresses'
    /// DAD (as Go, only with an IPv6 gateway): all but [`Dad::Off`]; an
    /// optimistic address ends the wait at once.
    pub fn waits(self) -> bool {
        self != Dad::Off
    }

    /// The flags an IPv6 address is added with.
    fn address_options(self) -> AddressOptions {
        AddressOptions {
            nodad: self == Dad::Off,
            optimistic: self == Dad::Optimistic,
            ..AddressOptions::default()
        }
    }

    /// What the interface got, `results` being those of writing
    /// [`Dad::sysctls`]: optimistic DAD only where its sysctls exist and
    /// took the value; otherwise as asked (a failed write is ignored, as
    /// Go's bridge does: IPv6 may be off).
    fn outcome<T>(self, results: &[Result<T>]) -> Dad {
        if self == Dad::Optimistic
            && (results.len() < self.sysctls().len() || results.iter().any(|r| r.is_err()))
        {
            Dad::Kernel
        } else {
            self
        }
    }
}

/// Writes the sysctls of `dad` ([`Dad::sysctls`]) on `ifname` and returns
/// the DAD the interface has: [`Dad::Kernel`] for [`Dad::Optimistic`]
/// where the kernel lacks optimistic DAD (its sysctls are absent). Call
/// it before the link comes up, so that the IPv6 link-local address the
/// kernel then makes follows it too; [`configure_interface_with`] writes
/// them itself (only what differs) before the first IPv6 address.
pub fn set_dad<H: NetnsHandle + ?Sized>(handle: &H, ifname: &str, dad: Dad) -> Dad {
    if dad.sysctls().is_empty() {
        return dad;
    }
    let results = handle
        .sysctl_set_in(&format!("net/ipv6/conf/{ifname}"), dad.sysctls())
        .unwrap_or_else(|e| vec![Err(e)]);
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        tracing::debug!("DAD of {ifname}: {e}");
    }
    dad.outcome(&results)
}

/// [`configure_interface`] with the interface's IPv6 DAD `dad` (see
/// [`Dad`]): its sysctls are written with step 1 ([`set_dad`]), the IPv6
/// addresses added with its flags, and step 4 waits only where
/// [`Dad::waits`]. With [`Dad::Optimistic`] the link comes up (step 3)
/// before the first IPv6 address goes on: the kernel makes an optimistic
/// address's routes at once only on a link that is up.
pub fn configure_interface_with<H: NetnsHandle + ?Sized>(
    handle: &H,
    ifname: &str,
    addresses: &[(IpNetwork, Option<IpAddr>)],
    routes: &[KernelRoute],
    dad: Dad,
) -> Result<()> {
    let mut dad = dad;
    let link = handle.link_by_name(ifname)?;
    let mut v4gw = None;
    let mut v6gw = None;
    let mut ipv6_enabled = false;
    let mut up = link.is_up();
    let span = step_span!("address.add", link.name = %ifname, address.count = addresses.len());
    in_step(span, || {
        for &(addr, gw) in addresses {
            if addr.is_ipv6() && !ipv6_enabled {
                dad = enable_ipv6(handle, ifname, dad)?;
                ipv6_enabled = true;
                // An optimistic address gets its routes (its `local` one, its
                // prefix's) at once only on a link that is up: on a down one
                // the kernel starts its DAD when the link comes up, and adds
                // them when DAD ends.
                if dad == Dad::Optimistic && !up {
                    handle.set_up(link.index)?;
                    up = true;
                }
            }
            let options = match addr {
                IpNetwork::V6(_) => dad.address_options(),
                IpNetwork::V4(_) => AddressOptions::default(),
            };
            handle
                .add_address(link.index, addr, options)
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
        Ok(())
    })?;
    // Go sets it up unconditionally; a link already up (the bridge's pod
    // end) needs no request.
    if !up {
        handle.set_up(link.index)?;
    }
    if v6gw.is_some() && dad.waits() {
        let assigned: Vec<IpAddr> = addresses
            .iter()
            .map(|(a, _)| a.ip())
            .filter(IpAddr::is_ipv6)
            .collect();
        let span = step_span!("dad.settle", link.name = %ifname, dad.mode = ?dad);
        in_step(span, || {
            handle.settle_addresses(link.index, &assigned, DAD_TIMEOUT)
        })?;
    }
    if routes.is_empty() {
        return Ok(());
    }
    let span = step_span!("route.add", link.name = %ifname, route.count = routes.len());
    in_step(span, || add_routes(handle, &link, routes, v4gw, v6gw))
}

/// Step 5: `routes` on `link`, a route's gateway defaulting to its
/// family's first gateway.
fn add_routes<H: NetnsHandle + ?Sized>(
    handle: &H,
    link: &Link,
    routes: &[KernelRoute],
    v4gw: Option<IpAddr>,
    v6gw: Option<IpAddr>,
) -> Result<()> {
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

/// Step 1: IPv6 on for `lo` and `ifname`, `keep_addr_on_down`, and the
/// sysctls of `dad`, written in one pass over `ifname`'s directory.
/// Returns the DAD `ifname` has ([`set_dad`]).
fn enable_ipv6<H: NetnsHandle + ?Sized>(handle: &H, ifname: &str, dad: Dad) -> Result<Dad> {
    // Go only logs a sysctl it cannot read (IPv6 compiled out, or the
    // interface vanished) and carries on; a failed write of
    // `disable_ipv6` fails.
    let write_fails = |r: Result<bool>| match r {
        Ok(_) => Ok(()),
        Err(e @ Error::Sysctl { op: "write", .. }) => Err(e),
        Err(e) => {
            tracing::debug!("configure {ifname}: {e}");
            Ok(())
        }
    };
    write_fails(handle.sysctl_set(&sysctl::disable_ipv6("lo"), "0"))?;
    let mut entries = vec![("disable_ipv6", "0"), ("keep_addr_on_down", "1")];
    entries.extend_from_slice(dad.sysctls());
    let mut results = handle
        .sysctl_set_in(&format!("net/ipv6/conf/{ifname}"), &entries)?
        .into_iter();
    if let Some(r) = results.next() {
        write_fails(r)?;
    }
    if let Some(Err(e)) = results.next() {
        tracing::debug!("configure {ifname}: {e}");
    }
    let results: Vec<_> = results.collect();
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        tracing::debug!("DAD of {ifname}: {e}");
    }
    Ok(dad.outcome(&results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Errno, FakeKernel, KernelOp, NetKernel};

    #[test]
    fn optimistic_dad_falls_back_to_the_kernel_s_where_its_sysctls_fail() {
        let kernel = FakeKernel::new();
        kernel.add_netns("/run/netns/pod");
        let host = kernel.current().unwrap();
        let pod = kernel.open("/run/netns/pod").unwrap();
        host.setup_veth("eth0", pod.netns(), None, None).unwrap();
        assert_eq!(set_dad(&pod, "eth0", Dad::Optimistic), Dad::Optimistic);
        assert_eq!(
            kernel.sysctl("/run/netns/pod", "net/ipv6/conf/eth0/use_optimistic"),
            Some("1".into())
        );
        // A kernel without CONFIG_IPV6_OPTIMISTIC_DAD has no such file.
        kernel.fail_next(KernelOp::WriteSysctl, "/run/netns/pod", Errno::ENOENT);
        assert_eq!(set_dad(&pod, "eth0", Dad::Optimistic), Dad::Kernel);
        assert!(Dad::Kernel.waits() && !Dad::Off.waits());
        // Off and On stay as asked (their addresses' flags make Off hold).
        kernel.fail_next(KernelOp::WriteSysctl, "/run/netns/pod", Errno::ENOENT);
        assert_eq!(set_dad(&pod, "eth0", Dad::Off), Dad::Off);
        assert_eq!(set_dad(&pod, "eth0", Dad::Kernel), Dad::Kernel);
    }
}
