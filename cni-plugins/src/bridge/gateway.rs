//! Gateways: Go's `calcGateways` and `ensureAddr` (bridge.go).

use std::net::IpAddr;

use cni_netns::kernel::NetnsHandle;
use cni_netns::{AddressFamilyFilter, IpNetwork, Link};
use cni_types::{CniResult, Route};

use super::error::{Error, Result};
use super::BridgeConf;

/// The bridge (gateway) addresses of each family, with the prefix of the
/// pod address they serve.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Gateways {
    pub(crate) v4: Vec<IpNetwork>,
    pub(crate) v6: Vec<IpNetwork>,
}

/// Go's `calcGateways`: every address is the pod interface's (index 2);
/// with `isGateway` a missing gateway is the subnet's first address; with
/// `isDefaultGateway` a default route via it is added unless IPAM already
/// returned one with a gateway.
pub(crate) fn calc_gateways(result: &mut CniResult, conf: &BridgeConf) -> Gateways {
    let mut gws = Gateways::default();
    let (mut default_v4, mut default_v6) = (false, false);
    for i in 0..result.ips.len() {
        let ip = &mut result.ips[i];
        ip.interface = Some(2);
        if ip.gateway.is_none() && conf.is_gateway {
            ip.gateway = first_address(ip.address);
        }
        let (address, gateway) = (ip.address, ip.gateway);
        let v4 = address.is_ipv4();
        let default_dst = default_route(v4);
        let found = if v4 { &mut default_v4 } else { &mut default_v6 };
        if conf.is_default_gateway {
            if !*found {
                *found = result
                    .routes
                    .iter()
                    .any(|r| r.gw.is_some() && r.dst == default_dst);
            }
            if !*found {
                result.routes.push(Route::new(default_dst, gateway));
                *found = true;
            }
        }
        if conf.is_gateway {
            if let Some(gw) = gateway.and_then(|g| IpNetwork::new(g, address.prefix()).ok()) {
                if v4 { &mut gws.v4 } else { &mut gws.v6 }.push(gw);
            }
        }
    }
    gws
}

fn default_route(v4: bool) -> IpNetwork {
    let any: IpAddr = if v4 {
        IpAddr::from([0u8; 4])
    } else {
        IpAddr::from([0u8; 16])
    };
    // A zero prefix is valid for both families.
    IpNetwork::new(any, 0).unwrap_or_else(|_| IpNetwork::from(any))
}

/// Go's `calcGatewayIP`: the address after the network address.
fn first_address(net: IpNetwork) -> Option<IpAddr> {
    Some(match net.network() {
        IpAddr::V4(a) => IpAddr::from(u32::from(a).checked_add(1)?.to_be_bytes()),
        IpAddr::V6(a) => IpAddr::from(u128::from(a).checked_add(1)?.to_be_bytes()),
    })
}

/// Go's `ensureAddr`: puts `gw` on `link`. Another IPv4 address, or an
/// overlapping IPv6 one, is replaced with `force`, an error otherwise;
/// then the link's MAC is set to itself so that it stays put when ports
/// come and go.
pub(crate) fn ensure_address(
    host: &impl NetnsHandle,
    link: &Link,
    gw: IpNetwork,
    force: bool,
) -> Result<()> {
    let family = if gw.is_ipv4() {
        AddressFamilyFilter::V4
    } else {
        AddressFamilyFilter::V6
    };
    for a in host.addresses(Some(link.index), family)? {
        let a = a.address;
        if a == gw {
            return Ok(());
        }
        if gw.is_ipv4() || a.contains(gw.ip()) || gw.contains(a.ip()) {
            if !force {
                return Err(Error::AddressTaken {
                    bridge: link.name.clone(),
                    gateway: gw.to_string(),
                });
            }
            host.del_address(link.index, a)?;
        }
    }
    match host.add_address(link.index, gw, Default::default()) {
        Err(e) if !e.is_exists() => return Err(e.into()),
        _ => {}
    }
    if let Some(mac) = link.mac {
        host.set_mac(link.index, mac)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::{IpConfig, NetworkConfig};

    fn conf(json: &str) -> BridgeConf {
        BridgeConf::load(&NetworkConfig::from_slice(json.as_bytes()).unwrap(), "").unwrap()
    }

    fn result(ips: &[&str]) -> CniResult {
        CniResult {
            ips: ips
                .iter()
                .map(|a| IpConfig::new(a.parse().unwrap()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn gateway_defaults_to_first_address_and_adds_default_routes() {
        let mut r = result(&["10.1.0.5/16", "fd00:1::5/64"]);
        let g = calc_gateways(&mut r, &conf(r#"{"name":"n","isDefaultGateway":true}"#));
        assert_eq!(g.v4, ["10.1.0.1/16".parse::<IpNetwork>().unwrap()]);
        assert_eq!(g.v6, ["fd00:1::1/64".parse::<IpNetwork>().unwrap()]);
        assert!(r.ips.iter().all(|ip| ip.interface == Some(2)));
        let routes: Vec<String> = r
            .routes
            .iter()
            .map(|r| format!("{} {:?}", r.dst, r.gw))
            .collect();
        assert_eq!(routes, ["0.0.0.0/0 Some(10.1.0.1)", "::/0 Some(fd00:1::1)"]);
    }

    #[test]
    fn ipam_default_route_with_gateway_is_kept() {
        let mut r = result(&["10.1.0.5/16"]);
        r.routes.push(Route::new(
            "0.0.0.0/0".parse().unwrap(),
            Some("10.1.0.254".parse().unwrap()),
        ));
        calc_gateways(&mut r, &conf(r#"{"name":"n","isDefaultGateway":true}"#));
        assert_eq!(r.routes.len(), 1);
    }

    #[test]
    fn without_is_gateway_nothing_is_computed() {
        let mut r = result(&["10.1.0.5/16"]);
        let g = calc_gateways(&mut r, &conf(r#"{"name":"n"}"#));
        assert_eq!(g, Gateways::default());
        assert_eq!(r.ips[0].gateway, None);
        assert!(r.routes.is_empty());
    }
}
