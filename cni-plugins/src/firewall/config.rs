//! The firewall configuration: Go's keys (`backend`,
//! `iptablesAdminChainName`, `firewalldZone`, `ingressPolicy`) and ours
//! (`nftablesTable`, `nftablesFamily`, `nftablesChain`, `dataDir`),
//! matched without regard to case as Go's decoder does. Unlike Go, an
//! unknown `backend` or `ingressPolicy` is refused before anything changes.

use cni_exec::Request;
use cni_types::json::canonicalize_keys;
use cni_types::CniResult;
use serde_json::{Map, Value};

use super::error::{Error, Result};

/// Go's default admin chain.
pub const DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
/// Go's default firewalld zone.
pub const DEFAULT_ZONE: &str = "trusted";
/// Where the iptables backend keeps each attachment's addresses for GC.
pub const DEFAULT_DATA_DIR: &str = "/run/cni/firewall";

pub(crate) const KEYS: &[&str] = &[
    "backend",
    "iptablesAdminChainName",
    "firewalldZone",
    "ingressPolicy",
    "nftablesTable",
    "nftablesFamily",
    "nftablesChain",
    "dataDir",
];

/// Which firewall the pod's traffic is opened in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The iptables/ip6tables filter table (`FORWARD` → `CNI-FORWARD`).
    Iptables,
    /// firewalld over D-Bus (not available in this build: a clear error).
    Firewalld,
    /// A native nftables table of the node's (ours).
    Nftables {
        /// Table family (`inet`, `ip`, `ip6`).
        family: String,
        /// Table name.
        table: String,
        /// The table's forward base chain the jump goes into.
        chain: String,
    },
}

/// `ingressPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressPolicy {
    /// No isolation (`open` or empty).
    Open,
    /// Traffic into the bridge only from the same bridge.
    SameBridge,
    /// Not even between pods of the same bridge (Go v1.7.0).
    Isolated,
}

/// The firewall settings of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FirewallConf {
    /// The network name (attachment identity).
    pub network: String,
    /// The backend.
    pub backend: Backend,
    /// The admin chain jumped to from `CNI-FORWARD`.
    pub admin_chain: String,
    /// The firewalld zone.
    pub zone: String,
    /// The ingress policy.
    pub ingress: IngressPolicy,
    /// State directory of the iptables backend.
    pub data_dir: String,
}

fn string(raw: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(Error::KeyNotString {
            key: key.to_owned(),
            found: v.to_string(),
        }),
    }
}

impl FirewallConf {
    /// Reads and validates the configuration of `req`.
    pub fn parse(req: &Request) -> Result<FirewallConf> {
        FirewallConf::from_slice(&req.stdin)
    }

    /// Reads and validates a configuration document.
    pub fn from_slice(stdin: &[u8]) -> Result<FirewallConf> {
        let mut raw: Map<String, Value> =
            serde_json::from_slice(stdin).map_err(|e| Error::ConfigDecode {
                reason: e.to_string(),
            })?;
        canonicalize_keys(&mut raw, KEYS);
        // Every key is of its type, whichever backend reads it: a wrong
        // type is refused even where the key would be ignored.
        for key in KEYS {
            string(&raw, key)?;
        }
        let nft_table = string(&raw, "nftablesTable")?.filter(|s| !s.is_empty());
        let backend = match string(&raw, "backend")?.as_deref() {
            None | Some("") if nft_table.is_some() => "nftables".to_owned(),
            None | Some("") => "iptables".to_owned(),
            Some(b) => b.to_owned(),
        };
        let backend = match backend.as_str() {
            "iptables" => Backend::Iptables,
            "firewalld" => Backend::Firewalld,
            "nftables" => {
                let table = nft_table.ok_or(Error::NftTableMissing)?;
                let family = string(&raw, "nftablesFamily")?
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "inet".into());
                if !matches!(family.as_str(), "inet" | "ip" | "ip6") {
                    return Err(Error::NftFamilyInvalid { family });
                }
                let chain = string(&raw, "nftablesChain")?
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "forward".into());
                Backend::Nftables {
                    family,
                    table,
                    chain,
                }
            }
            other => {
                return Err(Error::BackendUnknown {
                    backend: other.to_owned(),
                })
            }
        };
        let ingress = match string(&raw, "ingressPolicy")?.as_deref() {
            None | Some("") | Some("open") => IngressPolicy::Open,
            Some("same-bridge") => IngressPolicy::SameBridge,
            Some("isolated") => IngressPolicy::Isolated,
            Some(other) => {
                return Err(Error::IngressPolicyUnknown {
                    policy: other.to_owned(),
                })
            }
        };
        let admin_chain = string(&raw, "iptablesAdminChainName")?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_ADMIN_CHAIN.into());
        if admin_chain.len() > 28 || admin_chain.contains(char::is_whitespace) {
            return Err(Error::AdminChainInvalid { chain: admin_chain });
        }
        Ok(FirewallConf {
            network: string(&raw, "name")?.unwrap_or_default(),
            backend,
            admin_chain,
            zone: string(&raw, "firewalldZone")?
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| DEFAULT_ZONE.into()),
            ingress,
            data_dir: string(&raw, "dataDir")?
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
        })
    }
}

/// The parsed `prevResult`, required for ADD and CHECK (Go's message).
pub(crate) fn required_prev(req: &Request) -> Result<CniResult> {
    req.config.prev_result()?.ok_or(Error::PrevResultMissing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<FirewallConf> {
        FirewallConf::from_slice(
            format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"firewall"{extra}}}"#).as_bytes(),
        )
    }

    #[test]
    fn defaults_and_keys() {
        let c = parse("").unwrap();
        assert_eq!(c.backend, Backend::Iptables);
        assert_eq!(c.admin_chain, "CNI-ADMIN");
        assert_eq!(c.zone, "trusted");
        assert_eq!(c.ingress, IngressPolicy::Open);
        let c = parse(r#","IPTABLESADMINCHAINNAME":"CNI-foobar","ingresspolicy":"same-bridge""#)
            .unwrap();
        assert_eq!(c.admin_chain, "CNI-foobar");
        assert_eq!(c.ingress, IngressPolicy::SameBridge);
        let c = parse(r#","nftablesTable":"filter""#).unwrap();
        assert_eq!(
            c.backend,
            Backend::Nftables {
                family: "inet".into(),
                table: "filter".into(),
                chain: "forward".into()
            }
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        for (extra, key) in [
            (r#","backend":"pf""#, "backend:"),
            (r#","backend":"nftables""#, "nftablesTable:"),
            (
                r#","nftablesTable":"t","nftablesFamily":"bridge""#,
                "nftablesFamily:",
            ),
            (r#","ingressPolicy":"closed""#, "ingressPolicy:"),
            (
                r#","iptablesAdminChainName":"A-CHAIN-NAME-LONGER-THAN-28-CHARS""#,
                "iptablesAdminChainName:",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert!(e.to_string().starts_with(key), "{extra}: {e}");
            assert_eq!(
                cni_types::CniError::from(e).code,
                cni_types::ErrorCode::InvalidNetworkConfig
            );
        }
    }
}
