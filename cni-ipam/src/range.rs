//! Address ranges and range sets, canonicalised and validated like the Go
//! reference (containernetworking/plugins `backend/allocator/range.go`,
//! `range_set.go`).

use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::parse::{ip_to_u128, parse_cidr, u128_to_ip};

/// One range as written in the configuration (`ranges[i][j]`, the legacy
/// top-level fields, or `runtimeConfig.ipRanges[i][j]`); every field is kept
/// as text so that errors carry the Go reference's messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeConfig {
    /// `subnet`: CIDR of the network (must be the network address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// `rangeStart`: first allocatable address (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_start: Option<String>,
    /// `rangeEnd`: last allocatable address (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_end: Option<String>,
    /// `gateway`: returned in the result and never allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// A canonical range: network address subnet, inclusive bounds, gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    subnet: IpNetwork,
    range_start: IpAddr,
    range_end: IpAddr,
    gateway: IpAddr,
}

/// Go's `net.ParseIP` failure text (through `encoding/json`).
fn parse_ip_field(s: &str) -> Result<Option<IpAddr>, String> {
    if s.is_empty() {
        // Go's net.IP unmarshals "" to nil, i.e. "not set".
        return Ok(None);
    }
    s.parse::<IpAddr>()
        .map(|ip| Some(ip.to_canonical()))
        .map_err(|_| format!("invalid IP address: {s}"))
}

fn next_ip(ip: IpAddr) -> IpAddr {
    u128_to_ip(ip, ip_to_u128(ip).wrapping_add(1))
}

impl Range {
    /// Validates and fills defaults like Go's `Range.Canonicalize`: gateway
    /// defaults to subnet+1, rangeStart to subnet+1, rangeEnd to the last
    /// address (IPv4: broadcast-1; IPv6: all host bits set). The error is the
    /// Go message.
    pub fn canonicalize(config: &RangeConfig) -> Result<Range, String> {
        let subnet_text = config.subnet.as_deref().unwrap_or("");
        let subnet = parse_cidr(subnet_text)
            .ok_or_else(|| format!("invalid CIDR address: {subnet_text}"))?;
        let (ones, bits) = match subnet {
            IpNetwork::V4(n) => (n.prefix(), 32),
            IpNetwork::V6(n) => (n.prefix(), 128),
        };
        if ones > bits - 2 {
            return Err(format!("Network {subnet} too small to allocate from"));
        }
        if let IpNetwork::V6(n) = subnet {
            // Go turns an IPv4-mapped address into 4 bytes while the mask stays 16.
            if n.ip().to_ipv4_mapped().is_some() {
                return Err("IPNet IP and Mask version mismatch".to_string());
            }
        }
        let network = subnet.network();
        if network != subnet.ip() {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {ones} the network address is {network}"
            ));
        }
        let subnet = IpNetwork::new(network, ones).map_err(|e| e.to_string())?;

        let gateway = match config.gateway.as_deref().map(parse_ip_field).transpose()? {
            Some(Some(gw)) => gw,
            _ => next_ip(network),
        };
        let start_cfg = config
            .range_start
            .as_deref()
            .map(parse_ip_field)
            .transpose()?
            .flatten();
        let end_cfg = config
            .range_end
            .as_deref()
            .map(parse_ip_field)
            .transpose()?
            .flatten();

        // Go checks containment against the partially filled range: the start
        // is compared with a configured end, the end with the final start.
        let within = |addr: IpAddr, start: Option<IpAddr>, end: Option<IpAddr>| {
            addr.is_ipv4() == network.is_ipv4()
                && subnet.contains(addr)
                && start.is_none_or(|s| ip_to_u128(addr) >= ip_to_u128(s))
                && end.is_none_or(|e| {
                    e.is_ipv4() != addr.is_ipv4() || ip_to_u128(addr) <= ip_to_u128(e)
                })
        };
        let range_start = match start_cfg {
            Some(start) => {
                if !within(start, Some(start), end_cfg) {
                    return Err(format!("RangeStart {start} not in network {subnet}"));
                }
                start
            }
            None => next_ip(network),
        };
        let range_end = match end_cfg {
            Some(end) => {
                if !within(end, Some(range_start), Some(end)) {
                    return Err(format!("RangeEnd {end} not in network {subnet}"));
                }
                end
            }
            None => {
                let last = subnet.broadcast();
                if last.is_ipv4() {
                    u128_to_ip(last, ip_to_u128(last) - 1)
                } else {
                    last
                }
            }
        };
        Ok(Range {
            subnet,
            range_start,
            range_end,
            gateway,
        })
    }

    /// The subnet (network address and prefix).
    pub fn subnet(&self) -> IpNetwork {
        self.subnet
    }

    /// First allocatable address (inclusive).
    pub fn range_start(&self) -> IpAddr {
        self.range_start
    }

    /// Last allocatable address (inclusive).
    pub fn range_end(&self) -> IpAddr {
        self.range_end
    }

    /// The gateway (never allocated).
    pub fn gateway(&self) -> IpAddr {
        self.gateway
    }

    /// Whether `addr` lies in the subnet and between the bounds.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        addr.is_ipv4() == self.subnet.is_ipv4()
            && self.subnet.contains(addr)
            && ip_to_u128(addr) >= ip_to_u128(self.range_start)
            && ip_to_u128(addr) <= ip_to_u128(self.range_end)
    }

    /// Whether two ranges share an address (different families never do).
    pub fn overlaps(&self, other: &Range) -> bool {
        self.subnet.is_ipv4() == other.subnet.is_ipv4()
            && (self.contains(other.range_start)
                || self.contains(other.range_end)
                || other.contains(self.range_start)
                || other.contains(self.range_end))
    }

    /// Number of addresses between the bounds (the gateway included).
    pub fn size(&self) -> u128 {
        ip_to_u128(self.range_end) - ip_to_u128(self.range_start) + 1
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.range_start, self.range_end)
    }
}

/// A set of ranges of one family; one address is allocated per set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<Range>,
}

impl RangeSet {
    /// Canonicalises every range and checks the set like Go's
    /// `RangeSet.Canonicalize` (non-empty, one family, no overlaps).
    pub fn canonicalize(configs: &[RangeConfig]) -> Result<RangeSet, String> {
        if configs.is_empty() {
            return Err("empty range set".to_string());
        }
        let mut ranges: Vec<Range> = Vec::with_capacity(configs.len());
        for config in configs {
            let range = Range::canonicalize(config)?;
            if let Some(first) = ranges.first() {
                if first.subnet.is_ipv4() != range.subnet.is_ipv4() {
                    return Err("mixed address families".to_string());
                }
            }
            ranges.push(range);
        }
        for (i, r1) in ranges.iter().enumerate() {
            for r2 in &ranges[i + 1..] {
                if r1.overlaps(r2) {
                    return Err(format!("subnets {r1} and {r2} overlap"));
                }
            }
        }
        Ok(RangeSet { ranges })
    }

    /// The ranges, in configuration order.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// Whether this set holds IPv4 addresses.
    pub fn is_ipv4(&self) -> bool {
        self.ranges.first().is_some_and(|r| r.subnet.is_ipv4())
    }

    /// The range containing `addr`, if any.
    pub fn range_for(&self, addr: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.contains(addr))
    }

    /// Whether some range of the set contains `addr`.
    pub fn contains(&self, addr: IpAddr) -> bool {
        self.range_for(addr).is_some()
    }

    /// Whether any range of `self` overlaps any range of `other`.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.ranges
            .iter()
            .any(|r| other.ranges.iter().any(|o| r.overlaps(o)))
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(subnet: &str) -> RangeConfig {
        RangeConfig {
            subnet: Some(subnet.to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_v4_and_v6() {
        let r = Range::canonicalize(&rc("192.0.2.0/24")).unwrap();
        assert_eq!(r.to_string(), "192.0.2.1-192.0.2.254");
        assert_eq!(r.gateway().to_string(), "192.0.2.1");
        let r = Range::canonicalize(&rc("2001:db8:1::/64")).unwrap();
        assert_eq!(
            r.range_end().to_string(),
            "2001:db8:1:0:ffff:ffff:ffff:ffff"
        );
        assert_eq!(r.range_start().to_string(), "2001:db8:1::1");
    }

    #[test]
    fn go_messages() {
        let err = |c: RangeConfig| Range::canonicalize(&c).unwrap_err();
        assert_eq!(
            err(rc("192.0.2.1/24")),
            "Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0"
        );
        assert_eq!(
            err(rc("192.0.2.0/31")),
            "Network 192.0.2.0/31 too small to allocate from"
        );
        assert_eq!(
            err(rc("192.0.2.0/32")),
            "Network 192.0.2.0/32 too small to allocate from"
        );
        assert_eq!(
            err(rc("2001:db8::/127")),
            "Network 2001:db8::/127 too small to allocate from"
        );
        assert_eq!(
            err(RangeConfig {
                range_start: Some("192.0.3.0".into()),
                ..rc("192.0.2.0/24")
            }),
            "RangeStart 192.0.3.0 not in network 192.0.2.0/24"
        );
        assert_eq!(
            err(RangeConfig {
                range_end: Some("192.0.4.0".into()),
                ..rc("192.0.2.0/24")
            }),
            "RangeEnd 192.0.4.0 not in network 192.0.2.0/24"
        );
        assert_eq!(
            err(RangeConfig {
                range_start: Some("192.0.2.50".into()),
                range_end: Some("192.0.2.40".into()),
                ..rc("192.0.2.0/24")
            }),
            "RangeStart 192.0.2.50 not in network 192.0.2.0/24"
        );
        assert_eq!(err(rc("10.0.0.0")), "invalid CIDR address: 10.0.0.0");
    }

    #[test]
    fn sets() {
        assert_eq!(
            RangeSet::canonicalize(&[rc("192.0.2.0/24"), rc("2001:db8::/64")]).unwrap_err(),
            "mixed address families"
        );
        assert_eq!(
            RangeSet::canonicalize(&[rc("192.0.2.0/24"), rc("192.0.2.0/28")]).unwrap_err(),
            "subnets 192.0.2.1-192.0.2.254 and 192.0.2.1-192.0.2.14 overlap"
        );
        assert_eq!(RangeSet::canonicalize(&[]).unwrap_err(), "empty range set");
        let s = RangeSet::canonicalize(&[rc("10.1.2.0/24"), rc("10.2.2.0/24")]).unwrap();
        assert_eq!(s.to_string(), "10.1.2.1-10.1.2.254,10.2.2.1-10.2.2.254");
        assert!(s.contains("10.2.2.7".parse().unwrap()));
        assert!(!s.contains("10.2.2.255".parse().unwrap()));
        assert!(!s.contains("::ffff:10.3.2.7".parse().unwrap()));
    }
}
