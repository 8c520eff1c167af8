//! The `request` / `provide` option lists of the dhcp IPAM configuration
//! (Go's `plugins/ipam/dhcp/options.go`) and what a lease's ACK turns into
//! in a CNI result: address, gateway, routes (121, else 33 and 3), DNS
//! (6, 15, 119 when requested).

use std::net::{IpAddr, Ipv4Addr};

use cni_types::{Dns, IpConfig, Route};
use ipnetwork::{IpNetwork, Ipv4Network};
use serde::{Deserialize, Serialize};

use super::message::{opt, Message};
use crate::error::{Error, Result};

/// An option the client asks the server for (`request`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestOption {
    /// Option name (Go's six names) or decimal code; empty entries are skipped.
    #[serde(default)]
    pub option: String,
    /// When any entry sets it, the defaults (1 and 3) are not requested.
    #[serde(rename = "skipDefault", default)]
    pub skip_default: bool,
}

/// An option the client sends to the server (`provide`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvideOption {
    /// Option name or decimal code.
    #[serde(default)]
    pub option: String,
    /// A literal value, sent as its bytes.
    #[serde(default)]
    pub value: String,
    /// A `CNI_ARGS` key whose value is sent; it wins over `value`.
    #[serde(rename = "fromArg", default)]
    pub from_arg: String,
}

/// Parses an option name: Go's six names, or a decimal code 0..=255.
/// Anything else is Go's "Can not parse option" error.
pub(crate) fn parse_option_name(name: &str) -> Result<u8> {
    Ok(match name {
        "dhcp-client-identifier" => opt::CLIENT_ID,
        "subnet-mask" => opt::SUBNET_MASK,
        "routers" => opt::ROUTERS,
        "host-name" => opt::HOST_NAME,
        "user-class" => opt::USER_CLASS,
        "vendor-class-identifier" => opt::VENDOR_CLASS,
        _ => name
            .parse::<u8>()
            .map_err(|e| Error::InvalidConfig(format!("Can not parse option {name:?}: {e}")))?,
    })
}

/// The parameter request list: configured options plus the defaults
/// (routers, subnet mask) unless one entry says `skipDefault`, without
/// duplicates, in order.
pub fn parameter_request_list(request: &[RequestOption]) -> Result<Vec<u8>> {
    let mut list = Vec::new();
    let skip = request.iter().any(|r| r.skip_default);
    if !skip {
        list.extend([opt::ROUTERS, opt::SUBNET_MASK]);
    }
    for r in request.iter().filter(|r| !r.option.is_empty()) {
        let code = parse_option_name(&r.option)?;
        if !list.contains(&code) {
            list.push(code);
        }
    }
    Ok(list)
}

/// The options to send: each `provide` entry's `value`, then its `fromArg`
/// value from `CNI_ARGS` (`K=V;K=V`, pieces without `=` dropped, as Go's
/// parser), at most 255 bytes each.
pub fn provided_options(provide: &[ProvideOption], cni_args: &str) -> Result<Vec<(u8, Vec<u8>)>> {
    let mut out: Vec<(u8, Vec<u8>)> = Vec::new();
    for p in provide {
        let code = parse_option_name(&p.option)?;
        let mut value = (!p.value.is_empty()).then(|| p.value.clone());
        if !p.from_arg.is_empty() {
            let arg = cni_args
                .split(';')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == p.from_arg);
            if let Some((_, v)) = arg {
                value = Some(v.to_owned());
            }
        }
        let Some(value) = value else { continue };
        if value.len() > 255 {
            return Err(Error::InvalidConfig(format!(
                "value too long for option {:?}: {} bytes (at most 255)",
                p.option,
                value.len()
            )));
        }
        match out.iter_mut().find(|(c, _)| *c == code) {
            Some(slot) => slot.1 = value.into_bytes(),
            None => out.push((code, value.into_bytes())),
        }
    }
    Ok(out)
}

/// The IP entry of the result: `yiaddr` with option 1's prefix length,
/// gateway = first router.
pub fn ip_config(ack: &Message) -> Result<IpConfig> {
    let mask = ack
        .option_ipv4(opt::SUBNET_MASK)
        .ok_or_else(|| Error::DhcpPacket("DHCP option Subnet Mask not found in DHCPACK".into()))?;
    let prefix = u32::from(mask).leading_ones() as u8;
    let net = Ipv4Network::new(ack.yiaddr, prefix)
        .map_err(|e| Error::DhcpPacket(format!("subnet mask {mask}: {e}")))?;
    let mut ip = IpConfig::new(IpNetwork::V4(net));
    ip.gateway = ack.option_ipv4(opt::ROUTERS).map(IpAddr::V4);
    Ok(ip)
}

/// `0.0.0.0/0`, the route through a DHCP router (option 3).
const DEFAULT_V4: Ipv4Network = match Ipv4Network::new_checked(Ipv4Addr::UNSPECIFIED, 0) {
    Some(net) => net,
    None => unreachable!(),
};

/// The routes of the result, as Go computes them: option 121 when it
/// yields a route (an entry via 0.0.0.0 becomes a link-scope route), else
/// option 33's classful routes followed by a default route via the first
/// router. `priority` (when non-zero) is set on every route.
pub fn routes(ack: &Message, priority: u32) -> Vec<Route> {
    let mut routes = ack
        .option(opt::CLASSLESS_ROUTES)
        .map(classless_routes)
        .unwrap_or_default();
    if routes.is_empty() {
        routes = ack
            .option(opt::STATIC_ROUTES)
            .map(classful_routes)
            .unwrap_or_default();
        if let Some(router) = ack.option_ipv4(opt::ROUTERS) {
            routes.push(Route::new(
                IpNetwork::V4(DEFAULT_V4),
                Some(IpAddr::V4(router)),
            ));
        }
    }
    if priority != 0 {
        for r in &mut routes {
            r.priority = Some(priority);
        }
    }
    routes
}

/// RFC 3442: (width, significant destination octets, router) entries. A
/// malformed list yields what parsed before the fault.
pub(crate) fn classless_routes(b: &[u8]) -> Vec<Route> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let width = b[i];
        if width > 32 {
            break;
        }
        let n = usize::from(width).div_ceil(8);
        let (Some(dst), Some(gw)) = (b.get(i + 1..i + 1 + n), b.get(i + 1 + n..i + 5 + n)) else {
            break;
        };
        let mut octets = [0u8; 4];
        octets[..n].copy_from_slice(dst);
        let gw = Ipv4Addr::new(gw[0], gw[1], gw[2], gw[3]);
        let Ok(net) = Ipv4Network::new(Ipv4Addr::from(octets), width) else {
            break;
        };
        let mut route = Route::new(IpNetwork::V4(net), Some(IpAddr::V4(gw)));
        if gw.is_unspecified() {
            route.scope = Some(253);
        }
        out.push(route);
        i += 5 + n;
    }
    out
}

/// Option 33: (destination, router) pairs, the destination's mask being its
/// class's default.
pub(crate) fn classful_routes(b: &[u8]) -> Vec<Route> {
    b.chunks_exact(8)
        .filter_map(|c| {
            let dst = Ipv4Addr::new(c[0], c[1], c[2], c[3]);
            let gw = Ipv4Addr::new(c[4], c[5], c[6], c[7]);
            let prefix = match c[0] {
                0..=127 => 8,
                128..=191 => 16,
                _ => 24,
            };
            let net = Ipv4Network::new(dst, prefix).ok()?;
            Some(Route::new(IpNetwork::V4(net), Some(IpAddr::V4(gw))))
        })
        .collect()
}

/// DNS from options 6, 15 and 119, each only when `requested` lists it
/// (Go returns no DNS at all; a configuration that asks gets it).
pub fn dns(ack: &Message, requested: &[u8]) -> Dns {
    let mut dns = Dns::default();
    if requested.contains(&opt::DNS_SERVERS) {
        if let Some(v) = ack.option(opt::DNS_SERVERS) {
            dns.nameservers = v
                .chunks_exact(4)
                .map(|c| Ipv4Addr::new(c[0], c[1], c[2], c[3]).to_string())
                .collect();
        }
    }
    if requested.contains(&opt::DOMAIN_NAME) {
        if let Some(v) = ack.option(opt::DOMAIN_NAME) {
            dns.domain = String::from_utf8_lossy(v).trim_end_matches('\0').to_owned();
        }
    }
    if requested.contains(&opt::DOMAIN_SEARCH) {
        if let Some(v) = ack.option(opt::DOMAIN_SEARCH) {
            dns.search = domain_search(v);
        }
    }
    dns
}

/// RFC 3397 / RFC 1035 encoded names with compression pointers. Stops at
/// the first malformed name.
pub(crate) fn domain_search(b: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let Some((name, next)) = read_name(b, i) else {
            break;
        };
        out.push(name);
        i = next;
    }
    out
}

fn read_name(b: &[u8], start: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    let mut i = start;
    let mut end = None;
    // A pointer may only go backwards, so the jumps are bounded; the count
    // guards against a loop anyway.
    for _ in 0..128 {
        let len = *b.get(i)?;
        match len {
            0 => {
                let next = end.unwrap_or(i + 1);
                return Some((labels.join("."), next));
            }
            l if l & 0xc0 == 0xc0 => {
                let ptr = (usize::from(l & 0x3f) << 8) | usize::from(*b.get(i + 1)?);
                if ptr >= i {
                    return None;
                }
                end.get_or_insert(i + 2);
                i = ptr;
            }
            l if l < 64 => {
                let label = b.get(i + 1..i + 1 + usize::from(l))?;
                labels.push(String::from_utf8_lossy(label).into_owned());
                i += 1 + usize::from(l);
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::message::MessageType;

    #[test]
    fn option_names_match_go() {
        assert_eq!(parse_option_name("host-name").unwrap(), 12);
        assert_eq!(parse_option_name("12").unwrap(), 12);
        let e = parse_option_name("doNotparseMe").unwrap_err().to_string();
        assert!(
            e.starts_with("Can not parse option \"doNotparseMe\""),
            "{e}"
        );
        assert!(parse_option_name("classless-static-routes").is_err());
        assert!(parse_option_name("256").is_err());
    }

    #[test]
    fn request_list_defaults_and_skip() {
        let r = |o: &str, s| RequestOption {
            option: o.into(),
            skip_default: s,
        };
        assert_eq!(
            parameter_request_list(&[r("121", false)]).unwrap(),
            vec![3, 1, 121]
        );
        assert_eq!(
            parameter_request_list(&[r("6", true), r("", false)]).unwrap(),
            vec![6]
        );
        assert_eq!(
            parameter_request_list(&[r("routers", false)]).unwrap(),
            vec![3, 1]
        );
    }

    #[test]
    fn provide_from_arg_wins() {
        let p = ProvideOption {
            option: "host-name".into(),
            value: "fixed".into(),
            from_arg: "K8S_POD_NAME".into(),
        };
        let got = provided_options(
            std::slice::from_ref(&p),
            "IgnoreUnknown=1;K8S_POD_NAME=web-0;junk",
        )
        .unwrap();
        assert_eq!(got, vec![(12, b"web-0".to_vec())]);
        assert_eq!(
            provided_options(&[p], "").unwrap(),
            vec![(12, b"fixed".to_vec())]
        );
    }

    // Vectors from Go's options_test.go.
    #[test]
    fn route_vectors() {
        let want = ["10.0.0.0/8 via 10.1.2.3", "192.168.1.0/24 via 192.168.2.3"];
        let show = |r: Vec<Route>| -> Vec<String> {
            r.iter()
                .map(|r| format!("{} via {}", r.dst, r.gw.unwrap()))
                .collect()
        };
        let classful = [10, 0, 0, 0, 10, 1, 2, 3, 192, 168, 1, 0, 192, 168, 2, 3];
        assert_eq!(show(classful_routes(&classful)), want);
        let classless = [8, 10, 10, 1, 2, 3, 24, 192, 168, 1, 192, 168, 2, 3];
        assert_eq!(show(classless_routes(&classless)), want);
        let onlink = classless_routes(&[24, 10, 9, 8, 0, 0, 0, 0]);
        assert_eq!(onlink[0].scope, Some(253));
    }

    #[test]
    fn result_parts_from_ack() {
        let mut ack = Message::request(MessageType::Ack, 1, [0; 6]);
        ack.yiaddr = Ipv4Addr::new(192, 168, 1, 5);
        ack.set_option(opt::SUBNET_MASK, vec![255, 255, 255, 0]);
        ack.set_option(opt::ROUTERS, vec![192, 168, 1, 1]);
        ack.set_option(opt::DNS_SERVERS, vec![192, 168, 1, 1, 9, 9, 9, 9]);
        ack.set_option(
            opt::DOMAIN_SEARCH,
            b"\x03foo\x07example\x03com\x00\x03bar\xc0\x04".to_vec(),
        );
        let ip = ip_config(&ack).unwrap();
        assert_eq!(ip.address.to_string(), "192.168.1.5/24");
        assert_eq!(ip.gateway.unwrap().to_string(), "192.168.1.1");
        let r = routes(&ack, 10);
        assert_eq!(
            (r[0].dst.to_string(), r[0].priority),
            ("0.0.0.0/0".into(), Some(10))
        );
        assert!(dns(&ack, &[1, 3]).is_empty());
        let d = dns(&ack, &[6, 119]);
        assert_eq!(d.nameservers, ["192.168.1.1", "9.9.9.9"]);
        assert_eq!(d.search, ["foo.example.com", "bar.example.com"]);
    }
}
