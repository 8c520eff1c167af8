//! flannel's `subnet.env`, written by flanneld for each node.

use std::path::Path;

use ipnetwork::IpNetwork;

use super::error::{Error, Result};

/// The contents of `subnet.env`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubnetEnv {
    /// `FLANNEL_NETWORK`: the cluster's IPv4 networks (comma list, deduplicated).
    pub networks: Vec<IpNetwork>,
    /// `FLANNEL_SUBNET`: this node's IPv4 subnet, as a network address.
    pub subnet: Option<IpNetwork>,
    /// `FLANNEL_IPV6_NETWORK`.
    pub ipv6_networks: Vec<IpNetwork>,
    /// `FLANNEL_IPV6_SUBNET`.
    pub ipv6_subnet: Option<IpNetwork>,
    /// `FLANNEL_MTU`.
    pub mtu: Option<u32>,
    /// `FLANNEL_IPMASQ` (flanneld masquerades itself when true).
    pub ipmasq: Option<bool>,
}

/// Go's `net.ParseCIDR` returns the network, not the address given:
/// `10.1.17.1/24` is `10.1.17.0/24`.
fn parse_network(key: &str, s: &str) -> Result<IpNetwork> {
    let invalid = |e: &dyn std::fmt::Display| Error::SubnetEnvNetwork {
        key: key.to_owned(),
        reason: e.to_string(),
    };
    let n = cni_types::json::parse_cidr(s.trim()).map_err(|e| invalid(&e))?;
    IpNetwork::new(n.network(), n.prefix()).map_err(|e| invalid(&e))
}

fn parse_networks(key: &str, s: &str) -> Result<Vec<IpNetwork>> {
    let mut out: Vec<IpNetwork> = Vec::new();
    for part in s.split(',') {
        let n = parse_network(key, part)?;
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}

impl SubnetEnv {
    /// Parses the file's text. `path` is only used in messages. Unknown
    /// lines are ignored; the required keys are checked as the reference
    /// does (`<path> is missing FLANNEL_NETWORK, ...`).
    pub fn parse(text: &str, path: &Path) -> Result<SubnetEnv> {
        let mut env = SubnetEnv::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            match key {
                "FLANNEL_NETWORK" => env.networks = parse_networks(key, value)?,
                "FLANNEL_SUBNET" => env.subnet = Some(parse_network(key, value)?),
                "FLANNEL_IPV6_NETWORK" => env.ipv6_networks = parse_networks(key, value)?,
                "FLANNEL_IPV6_SUBNET" => env.ipv6_subnet = Some(parse_network(key, value)?),
                "FLANNEL_MTU" => {
                    env.mtu =
                        Some(
                            value
                                .trim()
                                .parse::<u32>()
                                .map_err(|e| Error::SubnetEnvMtu {
                                    value: value.to_owned(),
                                    reason: e.to_string(),
                                })?,
                        )
                }
                "FLANNEL_IPMASQ" => env.ipmasq = Some(value == "true"),
                _ => {}
            }
        }
        let missing = env.missing();
        if !missing.is_empty() {
            return Err(Error::SubnetEnvMissing {
                path: path.to_owned(),
                keys: missing,
            });
        }
        Ok(env)
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<SubnetEnv> {
        let text = cni_files::capped::read_file_to_string(path, cni_files::capped::MAX_ADMIN_FILE)
            .map_err(|e| crate::Error::io("read", path, e))?;
        SubnetEnv::parse(&text, path)
    }

    fn missing(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if self.networks.is_empty() && self.ipv6_networks.is_empty() {
            m.extend(["FLANNEL_NETWORK", "FLANNEL_IPV6_NETWORK"]);
        }
        if self.subnet.is_none() && self.ipv6_subnet.is_none() {
            m.extend(["FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET"]);
        }
        if self.mtu.is_none() {
            m.push("FLANNEL_MTU");
        }
        if self.ipmasq.is_none() {
            m.push("FLANNEL_IPMASQ");
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<SubnetEnv> {
        SubnetEnv::parse(s, Path::new("/run/flannel/subnet.env"))
    }

    #[test]
    fn v4() {
        let e = parse("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n").unwrap();
        assert_eq!(
            e.networks,
            vec!["10.1.0.0/16".parse::<IpNetwork>().unwrap()]
        );
        assert_eq!(e.subnet.unwrap().to_string(), "10.1.17.0/24");
        assert_eq!(e.mtu, Some(1472));
        assert_eq!(e.ipmasq, Some(true));
    }

    #[test]
    fn v6_only_and_dual() {
        let e = parse("FLANNEL_IPV6_NETWORK=fc00::/48\nFLANNEL_IPV6_SUBNET=fc00::1/64\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=false\n").unwrap();
        assert!(e.networks.is_empty() && e.subnet.is_none());
        assert_eq!(e.ipv6_subnet.unwrap().to_string(), "fc00::/64");
        assert_eq!(e.ipmasq, Some(false));
        let d = parse("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_IPV6_NETWORK=fc00::/48\nFLANNEL_IPV6_SUBNET=fc00::1/64\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n").unwrap();
        assert!(d.subnet.is_some() && d.ipv6_subnet.is_some());
    }

    #[test]
    fn multiple_networks_deduplicated() {
        let e = parse("FLANNEL_NETWORK=10.1.0.0/16,192.168.0.0/16,10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n").unwrap();
        assert_eq!(e.networks.len(), 2);
    }

    #[test]
    fn each_key_missing() {
        let err = parse("").unwrap_err().to_string();
        assert_eq!(err, "/run/flannel/subnet.env is missing FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK, FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ");
        let full = [
            "FLANNEL_NETWORK=10.1.0.0/16",
            "FLANNEL_SUBNET=10.1.17.1/24",
            "FLANNEL_MTU=1472",
            "FLANNEL_IPMASQ=true",
        ];
        let want = [
            "FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK",
            "FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET",
            "FLANNEL_MTU",
            "FLANNEL_IPMASQ",
        ];
        for (skip, want) in want.iter().enumerate() {
            let text: Vec<&str> = full
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, l)| *l)
                .collect();
            let err = parse(&text.join("\n")).unwrap_err().to_string();
            assert!(err.ends_with(&format!("is missing {want}")), "{err}");
        }
    }

    #[test]
    fn bad_values() {
        assert!(parse("FLANNEL_NETWORK=10.1.0.0\n").is_err());
        assert!(parse("FLANNEL_MTU=abc\n").is_err());
    }
}
