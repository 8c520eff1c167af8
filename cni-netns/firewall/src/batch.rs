//! Batch assembly: the atomic batches of commands that install, remove or
//! expire an attachment's elements (and create a table's shared objects),
//! from what the rule families ([`masquerade`](super::masquerade),
//! [`hostport`](super::hostport), [`macspoof`](super::macspoof)) define.
//! Backends only encode these.

use super::model::{AttachmentRules, Batch, Element, NftCommand, RuleRef, Table, Value};

/// The batch creating the table's shared objects: the table, maps and fixed
/// chains if missing, the fixed chains' rules rewritten (flush + add,
/// atomic), so it also repairs them. Rewriting rules makes the kernel
/// validate the table, so this batch is only used when [`attach`]
/// fails for lack of the shared objects.
pub(crate) fn shared(table: &Table) -> Batch {
    let mut commands = vec![NftCommand::AddTable];
    commands.extend(table.maps.iter().cloned().map(NftCommand::AddMap));
    for c in &table.chains {
        commands.push(NftCommand::AddChain {
            name: c.name.clone(),
            base: c.base,
        });
    }
    for c in table.chains.iter().filter(|c| !c.rules.is_empty()) {
        commands.push(NftCommand::FlushChain(c.name.clone()));
        for r in &c.rules {
            commands.push(NftCommand::AddRule {
                chain: c.name.clone(),
                rule: r.clone(),
            });
        }
    }
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// [`shared`] followed by [`attach`], as one batch.
pub(crate) fn add(table: &Table, rules: &AttachmentRules) -> Batch {
    let mut b = shared(table);
    b.commands.extend(attach(table, rules, true).commands);
    b
}

/// The batch installing an attachment's elements (and conditions rules).
/// With `exclusive`, any key already present fails the batch (`File
/// exists`), so an ADD never silently shares or takes over a key; without,
/// only a key present with other data (another owner) does. Its cost does
/// not depend on the number of attachments (without conditions rules); it
/// fails (`No such file or directory`) when the table or its maps do not
/// exist yet.
pub(crate) fn attach(table: &Table, rules: &AttachmentRules, exclusive: bool) -> Batch {
    let mut commands = Vec::new();
    if let Some(chain) = table.conditions_chain {
        for r in &rules.rules {
            commands.push(NftCommand::AddRule {
                chain: chain.to_owned(),
                rule: r.clone(),
            });
        }
    }
    commands.extend(rules.elements.iter().map(|e| NftCommand::AddElement {
        element: e.clone(),
        exclusive,
    }));
    // Shared keys: present already unless this is the network's first
    // attachment (a no-op then).
    commands.extend(rules.shared.iter().map(|e| NftCommand::AddElement {
        element: e.clone(),
        exclusive: false,
    }));
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// Keys per delete message: at most about 100 bytes each (a first and a
/// last 40-byte key with their headers), so a message's element list stays
/// well below the 64 KiB an attribute can hold.
const DELETE_CHUNK: usize = 256;

/// The batch removing elements (by map and key) and rules (by handle).
pub(crate) fn remove(table: &Table, elements: &[(String, Vec<Value>)], rules: &[RuleRef]) -> Batch {
    let mut commands = Vec::new();
    let mut maps: Vec<&str> = elements.iter().map(|(m, _)| m.as_str()).collect();
    maps.sort_unstable();
    maps.dedup();
    for map in maps {
        let keys: Vec<Vec<Value>> = elements
            .iter()
            .filter(|(m, _)| m == map)
            .map(|(_, k)| k.clone())
            .collect();
        // A netlink attribute's length is 16 bits: a GC of many attachments
        // needs several messages per map.
        for chunk in keys.chunks(DELETE_CHUNK) {
            commands.push(NftCommand::DeleteElements {
                map: map.to_owned(),
                keys: chunk.to_vec(),
            });
        }
    }
    commands.extend(rules.iter().cloned().map(NftCommand::DeleteRule));
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The one-batch DEL of the elements `rules` names (and the conditions
/// rules `handles`), written so that it also succeeds when they are already
/// gone (a repeated DEL): the elements are first added (no-ops when present
/// with the same data), then deleted. It fails as a whole, changing
/// nothing, when one of the keys is held by another attachment (its owner id
/// or DNAT destination differs: `File exists`); the caller then reads the
/// state. Failing batches are avoided on purpose: `nft` answers ENOENT with
/// a search of the whole table for a similar name to suggest.
pub(crate) fn delete(table: &Table, rules: &AttachmentRules, handles: &[RuleRef]) -> Batch {
    let elements: Vec<(String, Vec<Value>)> = rules
        .elements
        .iter()
        .map(|e| (e.map.clone(), e.key.clone()))
        .collect();
    let mut commands: Vec<NftCommand> = rules
        .elements
        .iter()
        .map(|e| NftCommand::AddElement {
            element: e.clone(),
            exclusive: false,
        })
        .collect();
    commands.extend(remove(table, &elements, handles).commands);
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The DEL of [`delete`] without deleting elements: they expire
/// instead ([`NftCommand::ExpireElements`]), so no RCU wait at socket close.
pub(crate) fn expire(table: &Table, rules: &AttachmentRules, handles: &[RuleRef]) -> Batch {
    // One message per map: the kernel takes elements of one set per message.
    let mut maps: Vec<&str> = rules.elements.iter().map(|e| e.map.as_str()).collect();
    maps.sort_unstable();
    maps.dedup();
    let mut commands: Vec<NftCommand> = maps
        .into_iter()
        .map(|m| {
            NftCommand::ExpireElements(
                rules
                    .elements
                    .iter()
                    .filter(|e| e.map == m)
                    .cloned()
                    .collect(),
            )
        })
        .collect();
    commands.extend(remove(table, &[], handles).commands);
    Batch {
        family: table.family,
        table: table.name,
        commands,
    }
}

/// The element timeout: elements live "forever" (ten years), and only an
/// element with a timeout can be made to expire later.
pub(crate) const ELEMENT_TIMEOUT_MS: u64 = 3650 * 86_400_000;

/// Elements expiring within this long are being removed (an expired DEL),
/// not installed.
pub(crate) const EXPIRING_MS: u64 = 86_400_000;

/// The map keys of `rules` as text (`hp_dnat4 tcp . 8080`), for messages.
pub(crate) fn describe_keys(rules: &AttachmentRules) -> String {
    let keys: Vec<String> = rules.elements.iter().map(describe_key).collect();
    keys.join(", ")
}

/// The map key of one element as text (`hp_dnat4 tcp . 8080`).
pub(crate) fn describe_key(e: &Element) -> String {
    let parts: Vec<String> = e.key.iter().map(value_text).collect();
    format!("{} {}", e.map, parts.join(" . "))
}

/// A value as nft writes it.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Num(n) => n.to_string(),
        Value::Addr(a) => a.to_string(),
        Value::Prefix(p) => p.to_string(),
        Value::Range(a, b) => format!("{}-{}", value_text(a), value_text(b)),
        Value::Set(items) => {
            let inner: Vec<String> = items.iter().map(value_text).collect();
            format!("{{ {} }}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::hostport::{self, DEFAULT_MASQ_MARK, HP_DNAT4};
    use super::super::macspoof::{self, MacSpoofCheckSpec, SC_ALLOWED, SC_PORTS};
    use super::super::{attachment::OWNERS, AttachmentId};
    use super::*;

    #[test]
    fn delete_batch_adds_then_removes() {
        let spec = MacSpoofCheckSpec {
            attachment: AttachmentId::new("net", "cid", "eth0"),
            host_ifname: "veth1".into(),
            mac: cni_netns::MacAddr([2, 0, 0, 0, 0, 1]),
        };
        let r = macspoof::elements(&spec);
        let handle = RuleRef {
            chain: "x".into(),
            handle: 7,
        };
        let b = delete(&macspoof::table(), &r, std::slice::from_ref(&handle));
        assert_eq!(
            b.commands,
            vec![
                NftCommand::AddElement {
                    element: r.elements[0].clone(),
                    exclusive: false
                },
                NftCommand::AddElement {
                    element: r.elements[1].clone(),
                    exclusive: false
                },
                NftCommand::AddElement {
                    element: r.elements[2].clone(),
                    exclusive: false
                },
                NftCommand::DeleteElements {
                    map: OWNERS.into(),
                    keys: vec![r.elements[0].key.clone()]
                },
                NftCommand::DeleteElements {
                    map: SC_ALLOWED.into(),
                    keys: vec![vec![Value::str("veth1"), Value::str("02:00:00:00:00:01")]]
                },
                NftCommand::DeleteElements {
                    map: SC_PORTS.into(),
                    keys: vec![vec![Value::str("veth1")]]
                },
                NftCommand::DeleteRule(handle),
            ]
        );
        assert!(describe_keys(&r).contains("veth1"));
    }

    #[test]
    fn large_removals_are_chunked() {
        let elements: Vec<(String, Vec<Value>)> = (0..1000u64)
            .map(|i| {
                (
                    HP_DNAT4.to_owned(),
                    vec![Value::str("tcp"), Value::Num(10000 + i)],
                )
            })
            .collect();
        let b = remove(&hostport::table(DEFAULT_MASQ_MARK), &elements, &[]);
        assert_eq!(b.commands.len(), 4);
        let total: usize = b
            .commands
            .iter()
            .map(|c| match c {
                NftCommand::DeleteElements { keys, .. } => keys.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(total, 1000);
    }

    #[test]
    fn shared_batch_never_flushes_the_conditions_chain() {
        let b = shared(&hostport::table(DEFAULT_MASQ_MARK));
        assert!(!b
            .commands
            .contains(&NftCommand::FlushChain(hostport::CONDITIONS_CHAIN.into())));
        assert!(b
            .commands
            .contains(&NftCommand::FlushChain("dispatch".into())));
    }
}
