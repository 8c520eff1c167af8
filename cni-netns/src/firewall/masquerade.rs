//! Masquerade (bridge and ptp `ipMasq`): table `inet cni_rs_masq`. An
//! attachment is, per address, `masq_src: pod IP` and
//! `masq_keep: pod IP . pod subnet`; the fixed rules masquerade a source in
//! the first unless the destination is in its own subnet.

use ipnetwork::IpNetwork;

use super::attachment::{anchored, element, owner_data, push_unique, OWNERS};
use super::model::{
    const_net, ipx, map, match_eq, prefix_part, AttachmentRules, BaseChain, Chain, ChainType, Expr,
    Hook, KeyType, NftFamily, NftRule, Stmt, Table, Value, PRIORITY_SRCNAT,
};
use super::AttachmentId;

/// Masquerade one attachment's addresses (a dual-stack pod has two):
/// traffic from an address to anything outside its subnet, except
/// multicast (224.0.0.0/4, ff00::/8), leaves with the host's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqueradeSpec {
    /// The owner of the rules.
    pub attachment: AttachmentId,
    /// The container addresses with their prefixes (`10.88.0.5/16`); the
    /// subnet is the address masked by the prefix. Empty in a DEL: the
    /// attachment's rules are found by its tag.
    pub addresses: Vec<IpNetwork>,
}

/// The table (`inet`); distinct from the Go reference's
/// `cni_plugins_masquerade` so both can run on one node.
pub(crate) const TABLE: &str = "cni_rs_masq";
/// Pod addresses to masquerade (`ipv4_addr : owner`).
pub(crate) const MASQ_SRC4: &str = "masq_src4";
/// Pod addresses to masquerade (`ipv6_addr : owner`).
pub(crate) const MASQ_SRC6: &str = "masq_src6";
/// Destinations a pod address reaches without masquerade, its own subnet
/// (`ipv4_addr . ipv4_addr : owner`, intervals).
pub(crate) const MASQ_KEEP4: &str = "masq_keep4";
/// The same for IPv6.
pub(crate) const MASQ_KEEP6: &str = "masq_keep6";

/// `inet cni_rs_masq`: multicast is never masqueraded (as in the Go
/// reference); a pod address is masqueraded unless the destination is in
/// its own subnet: two lookups whatever the number of pods.
pub(crate) fn table() -> Table {
    use KeyType::*;
    let multicast_return = |v6: bool, net: &str| {
        NftRule::new(vec![
            match_eq(
                Expr::payload(ipx(v6), "daddr"),
                Value::Prefix(const_net(net)),
            ),
            Stmt::Return,
        ])
    };
    let masq = |v6: bool| {
        let (src, keep) = if v6 {
            (MASQ_SRC6, MASQ_KEEP6)
        } else {
            (MASQ_SRC4, MASQ_KEEP4)
        };
        NftRule::new(vec![
            Stmt::Lookup {
                key: vec![Expr::payload(ipx(v6), "saddr")],
                map: src.into(),
                negate: false,
            },
            Stmt::Lookup {
                key: vec![
                    Expr::payload(ipx(v6), "saddr"),
                    Expr::payload(ipx(v6), "daddr"),
                ],
                map: keep.into(),
                negate: true,
            },
            Stmt::Masquerade,
        ])
    };
    Table {
        family: NftFamily::Inet,
        name: TABLE,
        maps: vec![
            map(OWNERS, &[Mark, Mark], &[Mark], false),
            map(MASQ_SRC4, &[Ipv4Addr], &[Mark], false),
            map(MASQ_KEEP4, &[Ipv4Addr, Ipv4Addr], &[Mark], true),
            map(MASQ_SRC6, &[Ipv6Addr], &[Mark], false),
            map(MASQ_KEEP6, &[Ipv6Addr, Ipv6Addr], &[Mark], true),
        ],
        chains: vec![Chain {
            name: "postrouting".into(),
            base: Some(BaseChain {
                chain_type: ChainType::Nat,
                hook: Hook::Postrouting,
                priority: PRIORITY_SRCNAT,
            }),
            rules: vec![
                multicast_return(false, "224.0.0.0/4"),
                multicast_return(true, "ff00::/8"),
                masq(false),
                masq(true),
            ],
        }],
        conditions_chain: None,
    }
}

/// The elements of one attachment's masquerade.
pub(crate) fn elements(spec: &MasqueradeSpec) -> AttachmentRules {
    let id = &spec.attachment;
    let data = owner_data(id);
    let mut elements = Vec::new();
    for address in &spec.addresses {
        let v6 = address.is_ipv6();
        let (src, keep) = if v6 {
            (MASQ_SRC6, MASQ_KEEP6)
        } else {
            (MASQ_SRC4, MASQ_KEEP4)
        };
        let ip = Value::Addr(address.ip());
        push_unique(
            &mut elements,
            element(id, src, vec![ip.clone()], data.clone()),
        );
        push_unique(
            &mut elements,
            element(id, keep, vec![ip, prefix_part(*address)], data.clone()),
        );
    }
    anchored(
        id,
        AttachmentRules {
            elements,
            rules: Vec::new(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masquerade_is_source_and_subnet_elements() {
        let a = |s: &str| Value::Addr(s.parse().unwrap());
        let p = |s: &str| Value::Prefix(s.parse().unwrap());
        let r = elements(&MasqueradeSpec {
            attachment: AttachmentId::new("net", "cid", "eth0"),
            addresses: vec![
                "10.88.3.4/16".parse().unwrap(),
                "fd00:88::4/64".parse().unwrap(),
            ],
        });
        let maps: Vec<&str> = r.elements.iter().map(|e| e.map.as_str()).collect();
        assert_eq!(maps, [OWNERS, MASQ_SRC4, MASQ_KEEP4, MASQ_SRC6, MASQ_KEEP6]);
        assert_eq!(r.elements[2].key, vec![a("10.88.3.4"), p("10.88.0.0/16")]);
        assert_eq!(r.elements[4].key, vec![a("fd00:88::4"), p("fd00:88::/64")]);
        assert!(r.rules.is_empty());
        let t = table();
        assert!(t.maps.iter().all(|m| m.data == [KeyType::Mark]));
        assert_eq!(t.chains[0].rules.len(), 4);
    }
}
