//! Masquerade (bridge and ptp `ipMasq`): table `inet cni_rs_masq`. An
//! attachment is, per address, `masq_src: pod IP` (a hash map); its subnet
//! is a key `masq_nets: subnet . subnet` shared by every attachment of the
//! network (an interval map holding one element per subnet, not per pod).
//! The fixed rules masquerade a source in `masq_src` unless source and
//! destination are both in one subnet of `masq_nets`. The subnet is shared
//! rather than a per-pod `pod IP . pod subnet` key because an interval
//! (pipapo) map's insertion and deletion cost grows with its size (a GC of
//! 1000 pods would delete 1000 elements at O(n) each).

use ipnetwork::IpNetwork;

use super::attachment::{anchored, element, owner_data, push_unique, OWNERS};
use super::model::{
    const_net, ipx, map, match_eq, prefix_part, AttachmentRules, BaseChain, Chain, ChainType,
    Element, Expr, Hook, KeyType, Listing, NftFamily, NftRule, Stmt, Table, Value, PRIORITY_SRCNAT,
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
/// Pod subnets, traffic within which is not masqueraded:
/// `subnet . subnet : 0` (intervals), one element per subnet, shared.
pub(crate) const MASQ_NETS4: &str = "masq_nets4";
/// The same for IPv6.
pub(crate) const MASQ_NETS6: &str = "masq_nets6";
/// The maps whether a subnet key is still used is decided on: the
/// addresses and the subnet keys.
pub(crate) const SUBNET_DECISION_MAPS: [&str; 4] = [MASQ_SRC4, MASQ_SRC6, MASQ_NETS4, MASQ_NETS6];
/// What a shared subnet element's comment says after the subnet.
const SUBNET_COMMENT: &str = ", subnet of net: ";

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
        let (src, nets) = if v6 {
            (MASQ_SRC6, MASQ_NETS6)
        } else {
            (MASQ_SRC4, MASQ_NETS4)
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
                map: nets.into(),
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
            map(MASQ_NETS4, &[Ipv4Addr, Ipv4Addr], &[Mark], true),
            map(MASQ_SRC6, &[Ipv6Addr], &[Mark], false),
            map(MASQ_NETS6, &[Ipv6Addr, Ipv6Addr], &[Mark], true),
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

/// The elements of one attachment's masquerade: its addresses (owned) and
/// their subnets (shared with the network's other attachments).
pub(crate) fn elements(spec: &MasqueradeSpec) -> AttachmentRules {
    let id = &spec.attachment;
    let data = owner_data(id);
    let mut elements = Vec::new();
    let mut shared = Vec::new();
    for address in &spec.addresses {
        let src = if address.is_ipv6() {
            MASQ_SRC6
        } else {
            MASQ_SRC4
        };
        push_unique(
            &mut elements,
            element(id, src, vec![Value::Addr(address.ip())], data.clone()),
        );
        push_unique(&mut shared, subnet_element(&id.network, *address));
    }
    let mut rules = anchored(
        id,
        AttachmentRules {
            elements,
            ..Default::default()
        },
    );
    rules.shared = shared;
    rules
}

/// The shared element of `address`'s subnet: `subnet . subnet : 0`,
/// commented `<subnet>, subnet of net: <network>` (no owner's tag).
fn subnet_element(network: &str, address: IpNetwork) -> Element {
    let net = prefix_part(address);
    let subnet = IpNetwork::new(address.network(), address.prefix()).unwrap_or(address);
    let mut comment = format!("{subnet}{SUBNET_COMMENT}{}", network.replace('"', ""));
    if comment.len() > 128 {
        let mut end = 128;
        while !comment.is_char_boundary(end) {
            end -= 1;
        }
        comment.truncate(end);
    }
    Element {
        map: if address.is_ipv6() {
            MASQ_NETS6
        } else {
            MASQ_NETS4
        }
        .into(),
        key: vec![net.clone(), net],
        data: vec![Value::Num(0)],
        comment: Some(comment),
    }
}

/// The shared subnet elements of `network` that no attachment's address
/// (expiring ones are being deleted) is in, by map and key: a network's
/// subnets go with its last attachment.
pub(crate) fn stale_subnets(listing: &Listing, network: &str) -> Vec<(String, Vec<Value>)> {
    let alive: Vec<std::net::IpAddr> = listing
        .elements
        .iter()
        .filter(|e| !e.expiring && (e.map == MASQ_SRC4 || e.map == MASQ_SRC6))
        .filter_map(|e| match e.key.first() {
            Some(Value::Addr(a)) => Some(*a),
            // As the `nft` backend reads keys back.
            Some(Value::Str(s)) => s.parse().ok(),
            _ => None,
        })
        .collect();
    let network = network.replace('"', "");
    let mut stale = Vec::new();
    for e in &listing.elements {
        if e.map != MASQ_NETS4 && e.map != MASQ_NETS6 {
            continue;
        }
        let Some((subnet, net)) = e
            .comment
            .as_deref()
            .and_then(|c| c.split_once(SUBNET_COMMENT))
        else {
            continue;
        };
        let Ok(subnet) = subnet.parse::<IpNetwork>() else {
            continue;
        };
        if net != network || alive.iter().any(|a| subnet.contains(*a)) {
            continue;
        }
        let part = prefix_part(subnet);
        push_unique_key(&mut stale, (e.map.clone(), vec![part.clone(), part]));
    }
    stale
}

fn push_unique_key(keys: &mut Vec<(String, Vec<Value>)>, k: (String, Vec<Value>)) {
    if !keys.contains(&k) {
        keys.push(k);
    }
}

#[cfg(test)]
mod tests {
    use super::super::attachment::owner_of_comment;
    use super::*;

    #[test]
    fn masquerade_is_source_elements_and_shared_subnets() {
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
        assert_eq!(maps, [OWNERS, MASQ_SRC4, MASQ_SRC6]);
        assert_eq!(r.elements[1].key, vec![a("10.88.3.4")]);
        let shared: Vec<&str> = r.shared.iter().map(|e| e.map.as_str()).collect();
        assert_eq!(shared, [MASQ_NETS4, MASQ_NETS6]);
        assert_eq!(r.shared[0].key, vec![p("10.88.0.0/16"), p("10.88.0.0/16")]);
        assert_eq!(r.shared[1].key, vec![p("fd00:88::/64"), p("fd00:88::/64")]);
        assert_eq!(
            r.shared[0].comment.as_deref(),
            Some("10.88.0.0/16, subnet of net: net")
        );
        // Shared elements belong to no attachment.
        assert!(r
            .shared
            .iter()
            .all(|e| owner_of_comment(e.comment.as_deref().unwrap()).is_none()));
        assert!(r.rules.is_empty());
        let t = table();
        assert!(t.maps.iter().all(|m| m.data == [KeyType::Mark]));
        assert_eq!(t.chains[0].rules.len(), 4);
    }

    #[test]
    fn stale_subnets_are_those_without_a_live_address() {
        use super::super::model::ListedElement;
        let listed = |map: &str, key: Vec<Value>, comment: String| ListedElement {
            map: map.into(),
            key,
            key_id: String::new(),
            data_id: String::new(),
            comment: Some(comment),
            expiring: false,
        };
        let (alive, going) = (
            AttachmentId::new("net", "a", "eth0"),
            AttachmentId::new("net", "b", "eth0"),
        );
        let mut listing = Listing::default();
        // Keys as the native backend (addresses) and `nft` (text) read them.
        for (id, key) in [
            (&alive, Value::str("10.1.0.5")),
            (&going, Value::Addr("10.2.0.5".parse().unwrap())),
        ] {
            listing
                .elements
                .push(listed(MASQ_SRC4, vec![key], id.tag()));
        }
        for (net, subnet) in [
            ("net", "10.1.0.0/16"),
            ("net", "10.2.0.0/16"),
            ("other", "10.3.0.0/16"),
        ] {
            let e = subnet_element(net, subnet.parse().unwrap());
            listing
                .elements
                .push(listed(&e.map, e.key, e.comment.unwrap()));
        }
        // Both subnets have an address: none is stale.
        assert!(stale_subnets(&listing, "net").is_empty());
        // An expiring address (a DEL's) no longer counts.
        listing.elements[1].expiring = true;
        let p = Value::Prefix("10.2.0.0/16".parse().unwrap());
        assert_eq!(
            stale_subnets(&listing, "net"),
            vec![(MASQ_NETS4.to_owned(), vec![p.clone(), p])]
        );
    }
}
