//! The bridge MAC spoof check (bridge `macspoofchk`): table
//! `bridge cni_rs_macspoofchk`. An attachment is `sc_ports: host veth` and
//! `sc_allowed: host veth . pod MAC`; the fixed rule drops frames from a
//! checked port whose pair is not allowed (the Go reference's
//! `pkg/link/spoofcheck.go` semantics, with two lookups instead of rules
//! per port).

use super::attachment::{anchored, element, owner_data, OWNERS};
use super::model::{
    map, AttachmentRules, BaseChain, Chain, ChainType, Expr, Hook, KeyType, NftFamily, NftRule,
    Stmt, Table, Value,
};
use super::AttachmentId;

/// The bridge MAC spoof check of one attachment: frames entering the bridge
/// from `host_ifname` whose source MAC is not `mac` are dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacSpoofCheckSpec {
    /// The owner of the rules.
    pub attachment: AttachmentId,
    /// The host side of the container's veth (the bridge port).
    pub host_ifname: String,
    /// The container interface's MAC address.
    pub mac: cni_netns::MacAddr,
}

/// The table (`bridge`); distinct from the Go reference's `bridge nat`.
pub(crate) const TABLE: &str = "cni_rs_macspoofchk";
/// Interfaces whose source MAC is checked (`ifname : owner`).
pub(crate) const SC_PORTS: &str = "sc_ports";
/// The MAC allowed per interface (`ifname . ether_addr : owner`).
pub(crate) const SC_ALLOWED: &str = "sc_allowed";

/// `bridge cni_rs_macspoofchk`: frames entering the bridge from a checked
/// port are dropped unless `port . source MAC` is the allowed pair.
pub(crate) fn table() -> Table {
    use KeyType::*;
    Table {
        family: NftFamily::Bridge,
        name: TABLE,
        maps: vec![
            map(OWNERS, &[Mark, Mark], &[Mark], false),
            map(SC_PORTS, &[IfName], &[Mark], false),
            map(SC_ALLOWED, &[IfName, EtherAddr], &[Mark], false),
        ],
        chains: vec![Chain {
            name: "prerouting".into(),
            base: Some(BaseChain {
                chain_type: ChainType::Filter,
                hook: Hook::Prerouting,
                priority: -300,
            }),
            rules: vec![NftRule::new(vec![
                Stmt::Lookup {
                    key: vec![Expr::meta("iifname")],
                    map: SC_PORTS.into(),
                    negate: false,
                },
                Stmt::Lookup {
                    key: vec![Expr::meta("iifname"), Expr::payload("ether", "saddr")],
                    map: SC_ALLOWED.into(),
                    negate: true,
                },
                Stmt::Drop,
            ])],
        }],
        conditions_chain: None,
    }
}

/// The elements of one attachment's MAC spoof check.
pub(crate) fn elements(spec: &MacSpoofCheckSpec) -> AttachmentRules {
    let id = &spec.attachment;
    let port = Value::Str(spec.host_ifname.clone());
    let rules = AttachmentRules {
        elements: vec![
            element(id, SC_PORTS, vec![port.clone()], owner_data(id)),
            element(
                id,
                SC_ALLOWED,
                vec![port, Value::Str(spec.mac.to_string())],
                owner_data(id),
            ),
        ],
        ..Default::default()
    };
    anchored(id, rules)
}
