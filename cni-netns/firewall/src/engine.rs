//! The one implementation of [`Firewall`]: a [`Driver`] (native netlink,
//! the `nft` process) provides the primitives (send a batch, read a table
//! back, identify keys and data the way it reads them); this file turns a
//! spec into its elements (the rule families) and batches ([`batch`]), and
//! runs the ADD / DEL / CHECK / list / GC logic exactly once.

use std::collections::{BTreeMap, HashSet};

use super::attachment::{network_hash, owner_of_comment};
use super::batch;
use super::model::{AttachmentRules, Batch, Element, Map, RuleRef, Table, Value};
// What a driver reads back: data of the model, named here as the drivers know it.
pub(crate) use super::model::{ListedElement, ListedRule, Listing};
use super::{
    hostport, macspoof, masquerade, AttachmentId, Firewall, FirewallOp, OwnedAttachment, RuleKind,
    RuleSpec,
};
use crate::{Error, Result};

/// Why the kernel (or nft) refused a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusalKind {
    /// A table, map, chain or element named is missing (`ENOENT`).
    NotFound,
    /// An element exists (with other data, or at all for `create`).
    Exists,
    /// A batch bound to a ruleset generation ([`Driver::send_at`]) came
    /// after another commit: nothing changed; decide again.
    Stale,
    /// Anything else.
    Other,
}

/// A refused batch: what kind of refusal, the message naming the object,
/// and the typed error to report when the caller cannot recover.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) kind: RefusalKind,
    pub(crate) message: String,
    pub(crate) error: Error,
}

/// A sent batch's outcome: the transport's error, or the kernel's (or
/// `nft`'s) refusal.
pub(crate) type Sent = Result<std::result::Result<(), Refusal>>;

/// Sends one batch with `send` inside a `firewall.batch` span (the
/// backend, the operation, the attachment, the batch's commands). A
/// refusal the engine acts on (a missing table or element, an existing
/// element, a stale generation: it then builds the objects, waits or
/// decides again) is the span's `firewall.refused` (`not_found`, `exists`,
/// `stale`); any other refusal or a transport error marks it failed.
pub(crate) fn traced_batch(
    backend: &'static str,
    op: FirewallOp,
    who: &str,
    commands: usize,
    send: impl FnOnce() -> Sent,
) -> Sent {
    let span = cni_types::step_span!(
        "firewall.batch",
        firewall.backend = backend,
        firewall.op = %op,
        firewall.attachment = %who,
        firewall.commands = commands,
        firewall.refused = tracing::field::Empty
    );
    let sent = span.in_scope(send);
    let refused = match &sent {
        Err(e) => {
            cni_types::trace::record_error(&span, e);
            None
        }
        Ok(Err(refusal)) => match refusal.kind {
            RefusalKind::NotFound => Some("not_found"),
            RefusalKind::Exists => Some("exists"),
            RefusalKind::Stale => Some("stale"),
            RefusalKind::Other => {
                cni_types::trace::record_error(&span, &refusal.message);
                None
            }
        },
        Ok(Ok(())) => None,
    };
    if let Some(kind) = refused {
        span.record("firewall.refused", kind);
    }
    sent
}

fn owned(comment: &Option<String>, owner_hash: &str) -> bool {
    comment.as_deref().and_then(owner_of_comment) == Some(owner_hash)
}

impl Listing {
    /// The elements and rules owned by `owner_hash`.
    pub(crate) fn owned_by(&self, owner_hash: &str) -> (Vec<(String, Vec<Value>)>, Vec<RuleRef>) {
        self.owned_where(|h| h == owner_hash)
    }

    /// The elements and rules owned by any of `owner_hashes`, in one pass.
    pub(crate) fn owned_by_any(
        &self,
        owner_hashes: &HashSet<&str>,
    ) -> (Vec<(String, Vec<Value>)>, Vec<RuleRef>) {
        self.owned_where(|h| owner_hashes.contains(h))
    }

    /// The (not expiring) elements and rules whose owner hash `is_owner`.
    fn owned_where(
        &self,
        is_owner: impl Fn(&str) -> bool,
    ) -> (Vec<(String, Vec<Value>)>, Vec<RuleRef>) {
        let mine = |c: &Option<String>| {
            c.as_deref()
                .and_then(owner_of_comment)
                .is_some_and(&is_owner)
        };
        let elements = self
            .elements
            .iter()
            .filter(|e| !e.expiring && mine(&e.comment))
            .map(|e| (e.map.clone(), e.key.clone()))
            .collect();
        let rules = self
            .rules
            .iter()
            .filter(|r| mine(&r.comment))
            .map(|r| RuleRef {
                chain: r.chain.clone(),
                handle: r.handle,
            })
            .collect();
        (elements, rules)
    }

    /// Every owner found, by owner hash.
    pub(crate) fn owners(&self) -> Vec<OwnedAttachment> {
        let mut by_hash: BTreeMap<&str, Option<(AttachmentId, bool)>> = BTreeMap::new();
        let comments = self
            .elements
            .iter()
            .filter(|e| !e.expiring)
            .map(|e| &e.comment)
            .chain(self.rules.iter().map(|r| &r.comment));
        for c in comments.flatten() {
            let Some(hash) = owner_of_comment(c) else {
                continue;
            };
            let slot = by_hash.entry(hash).or_default();
            let parsed = AttachmentId::from_tag(c);
            // A complete tag beats a truncated one.
            if slot.as_ref().is_none_or(|(_, complete)| !complete) {
                if let Some(p) = parsed {
                    *slot = Some(p);
                }
            }
        }
        by_hash
            .into_iter()
            .map(|(hash, parsed)| {
                let (attachment, complete) =
                    parsed.unwrap_or_else(|| (AttachmentId::new("", "", ""), false));
                OwnedAttachment {
                    attachment,
                    owner_hash: hash.to_owned(),
                    complete,
                }
            })
            .collect()
    }
}

/// What a backend (`nft` process, native netlink) provides.
pub(crate) trait Driver: std::fmt::Debug + Send + Sync {
    /// The masquerade mark its port-mapping rules use.
    fn masq_mark(&self) -> u32;
    /// Sends `batch` as one atomic change; `Ok(Err(_))` when refused.
    fn send(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
    ) -> Result<std::result::Result<(), Refusal>>;
    /// Creates the table's shared objects and installs `rules`
    /// ([`batch::add`]).
    fn send_with_shared(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        rules: &AttachmentRules,
    ) -> Result<std::result::Result<(), Refusal>> {
        self.send(op, who, table, &batch::add(table, rules))
    }
    /// The ruleset's generation: nf_tables counts every commit.
    fn generation(&self, op: FirewallOp, who: &str) -> Result<u32>;
    /// [`Driver::send`], committed only if the ruleset is still at
    /// `generation` ([`RefusalKind::Stale`] otherwise): a change decided on
    /// a listing read after [`Driver::generation`] commits only if nothing
    /// changed since.
    fn send_at(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        batch: &Batch,
        generation: u32,
    ) -> Result<std::result::Result<(), Refusal>>;
    /// Reads `table` (`None`: it does not exist); with `rules_only`, only
    /// the conditions chain.
    fn read(
        &self,
        op: FirewallOp,
        who: &str,
        table: &Table,
        rules_only: bool,
    ) -> Result<Option<Listing>>;
    /// Whether DEL can make elements expire ([`batch::expire`])
    /// rather than delete them.
    fn expire_on_delete(&self) -> bool {
        false
    }
    /// After an expiring DEL: returns once `anchor` (and so every element
    /// the same batch made expire) no longer matches packets; false when it
    /// still does after a while (a kernel that ignored the expiry).
    fn wait_expired(
        &self,
        _op: FirewallOp,
        _who: &str,
        _table: &Table,
        _anchor: &Element,
    ) -> Result<bool> {
        Ok(true)
    }
    /// How this backend identifies `key` of `map` in a [`Listing`].
    fn key_id(&self, map: &Map, key: &[Value]) -> Option<String>;
    /// How this backend identifies `data` of `map` in a [`Listing`].
    fn data_id(&self, map: &Map, data: &[Value]) -> Option<String>;
    /// Another firewall to run an ADD of `rules` through, when this
    /// driver cannot encode them (the native encoder hands conditions it
    /// does not know to `nft`); `None`: this driver does.
    fn delegate_add(&self, _table: &Table, _rules: &AttachmentRules) -> Option<&dyn Firewall> {
        None
    }
}

/// How long an ADD waits for an expiring element holding one of its keys
/// (expirations are rounded up to jiffies: 10 ms at HZ=100).
const EXPIRY_WAIT_MS: u64 = 12;

/// ADD: one exclusive batch of the attachment's elements. A missing table
/// or map (first ADD) creates the shared objects in the same batch; a key
/// already present is either another attachment's (conflict) or ours (a
/// re-ADD: everything the attachment owns is replaced in one batch).
fn add_rules<B: Driver + ?Sized>(
    b: &B,
    kind: RuleKind,
    id: &AttachmentId,
    rules: &AttachmentRules,
) -> Result<()> {
    let op = FirewallOp::Add(kind);
    let table = kind.table(b.masq_mark());
    let who = id.to_string();
    let mut result = b.send(op, &who, &table, &batch::attach(&table, rules, true))?;
    if matches!(&result, Err(r) if r.kind == RefusalKind::NotFound) {
        result = b.send_with_shared(op, &who, &table, rules)?;
    }
    let refusal = match result {
        Ok(()) => return Ok(()),
        Err(r) if r.kind == RefusalKind::Exists => r,
        Err(r) => return Err(r.error),
    };
    let conflict = |key: String, message: String| Error::FirewallConflict {
        op,
        attachment: who.clone(),
        key,
        message,
    };
    let hash = id.owner_hash();
    let mut listing = b.read(op, &who, &table, false)?.unwrap_or_default();
    // A key still held by an element a DEL made expire (a few milliseconds
    // ago): wait for it to go, once.
    let expiring_held = |listing: &Listing| {
        rules.elements.iter().any(|e| {
            let key_id = table.map(&e.map).and_then(|m| b.key_id(m, &e.key));
            listing
                .elements
                .iter()
                .any(|l| l.expiring && l.map == e.map && Some(&l.key_id) == key_id.as_ref())
        })
    };
    if expiring_held(&listing) {
        std::thread::sleep(std::time::Duration::from_millis(EXPIRY_WAIT_MS));
        match b.send(op, &who, &table, &batch::attach(&table, rules, true))? {
            Ok(()) => return Ok(()),
            Err(r) if r.kind == RefusalKind::Exists => {}
            Err(r) => return Err(r.error),
        }
        listing = b.read(op, &who, &table, false)?.unwrap_or_default();
    }
    for e in &rules.elements {
        let Some(map) = table.map(&e.map) else {
            continue;
        };
        let key_id = b.key_id(map, &e.key);
        let held = listing
            .elements
            .iter()
            .find(|l| !l.expiring && l.map == e.map && Some(&l.key_id) == key_id.as_ref());
        if let Some(l) = held {
            if !owned(&l.comment, &hash) {
                return Err(conflict(batch::describe_key(e), refusal.message));
            }
        }
    }
    // A re-ADD: replace what the attachment owns (also stale keys of an
    // earlier spec) with `rules`.
    let (elements, handles) = listing.owned_by(&hash);
    let replace = |rules: &AttachmentRules| {
        let mut batch = batch::remove(&table, &elements, &handles);
        batch
            .commands
            .extend(batch::attach(&table, rules, true).commands);
        batch
    };
    let refusal = match b.send(op, &who, &table, &replace(rules))? {
        Ok(()) => return Ok(()),
        Err(r) if r.kind == RefusalKind::Exists => r,
        Err(r) => return Err(r.error),
    };
    // A shared subnet key that overlaps another network's starting at the
    // same address (`10.1.0.0/24` next to `10.1.0.0/16`): the interval map
    // refuses it; the attachment goes in without it.
    if !rules.shared.is_empty() {
        let owned_only = AttachmentRules {
            shared: Vec::new(),
            ..rules.clone()
        };
        match b.send(op, &who, &table, &replace(&owned_only))? {
            Ok(()) => {
                tracing::warn!(
                    attachment = %who,
                    keys = %rules.shared.iter().map(batch::describe_key).collect::<Vec<_>>().join(", "),
                    "shared keys overlap others of the table: left out"
                );
                return Ok(());
            }
            Err(r) if r.kind == RefusalKind::Exists => {}
            Err(r) => return Err(r.error),
        }
    }
    Err(conflict(batch::describe_keys(rules), refusal.message))
}

/// DEL with a spec: one batch removing exactly the spec's elements, also
/// when they are gone already; when a key is someone else's, or the table
/// is missing, the table is read once and what the attachment owns removed.
fn del_rules<B: Driver + ?Sized>(
    b: &B,
    kind: RuleKind,
    id: &AttachmentId,
    rules: &AttachmentRules,
) -> Result<()> {
    let op = FirewallOp::Delete(kind);
    let table = kind.table(b.masq_mark());
    let who = id.to_string();
    let handles = if rules.rules.is_empty() {
        Vec::new()
    } else {
        // Conditions rules are found by tag, in their own small chain.
        match b.read(op, &who, &table, true)? {
            Some(l) => l.owned_by(&id.owner_hash()).1,
            None => return Ok(()),
        }
    };
    // Two DEL paths, because neither serves every kernel at the same cost.
    // Expiring rather than deleting leaves the kernel nothing to free, so
    // the plugin does not wait for an RCU grace period (5-20 ms) when it
    // exits and its netlink socket is released (the release flushes
    // nf_tables' pending destroy work, `nft_rcv_nl_event`): portmap DEL
    // 2.4-5 ms instead of ~13, the chain's DEL 24 ms instead of 32
    // (BENCHMARKS.md), which the 7x DEL target needs. But only Linux 6.10
    // and later update an existing element's expiration; older kernels
    // (Debian 12's 6.1, RHEL 9's 5.14) ignore it, and the `nft` backend
    // cannot express a sub-second expiry, so they delete.
    let expire = b.expire_on_delete();
    let batch = if expire {
        batch::expire(&table, rules, &handles)
    } else {
        batch::delete(&table, rules, &handles)
    };
    match b.send(op, &who, &table, &batch)? {
        Ok(()) => match rules.elements.first() {
            // The expiry takes effect at the next jiffy (1-10 ms): a DEL
            // returns once it has. A kernel that kept the elements gets the
            // plain delete.
            Some(anchor) if expire => {
                if b.wait_expired(op, &who, &table, anchor)? {
                    return Ok(());
                }
                match b.send(op, &who, &table, &batch::delete(&table, rules, &[]))? {
                    Ok(()) => Ok(()),
                    Err(_) => remove_owner(b, kind, id).map(|_| ()),
                }
            }
            _ => Ok(()),
        },
        Err(_) => remove_owner(b, kind, id).map(|_| ()),
    }
}

/// Removes `elements` and rules `handles` of `table`, found in a listing;
/// a refusal is the error.
fn remove_listed<B: Driver + ?Sized>(
    b: &B,
    op: FirewallOp,
    who: &str,
    table: &Table,
    elements: &[(String, Vec<Value>)],
    handles: &[RuleRef],
) -> Result<()> {
    b.send(op, who, table, &batch::remove(table, elements, handles))?
        .map_err(|r| r.error)
}

/// Removes whatever `id` owns of `kind`, found by reading the table; true
/// when something was removed.
fn remove_owner<B: Driver + ?Sized>(b: &B, kind: RuleKind, id: &AttachmentId) -> Result<bool> {
    let op = FirewallOp::Delete(kind);
    let table = kind.table(b.masq_mark());
    let who = id.to_string();
    let Some(listing) = b.read(op, &who, &table, false)? else {
        return Ok(false);
    };
    let (elements, handles) = listing.owned_by(&id.owner_hash());
    if elements.is_empty() && handles.is_empty() {
        return Ok(false);
    }
    remove_listed(b, op, &who, &table, &elements, &handles)?;
    Ok(true)
}

/// CHECK: every element of the spec present, owned by `id`, with the
/// spec's data; the conditions rules all there.
fn check_rules<B: Driver + ?Sized>(
    b: &B,
    kind: RuleKind,
    id: &AttachmentId,
    rules: &AttachmentRules,
) -> Result<()> {
    let op = FirewallOp::Check(kind);
    let who = id.to_string();
    let table = kind.table(b.masq_mark());
    let missing = |missing: String| Error::FirewallCheck {
        op,
        attachment: who.clone(),
        missing,
    };
    let listing = b.read(op, &who, &table, false)?.ok_or_else(|| {
        missing(format!(
            "table {} {} is missing",
            table.family.as_str(),
            table.name
        ))
    })?;
    let hash = id.owner_hash();
    for e in &rules.elements {
        let text = batch::describe_key(e);
        let Some(map) = table.map(&e.map) else {
            return Err(missing(format!("map {} is not in the layout", e.map)));
        };
        let key_id = b.key_id(map, &e.key);
        let found = listing
            .elements
            .iter()
            .find(|l| !l.expiring && l.map == e.map && Some(&l.key_id) == key_id.as_ref());
        let Some(l) = found else {
            return Err(missing(format!("element {text} is missing")));
        };
        if !owned(&l.comment, &hash) {
            return Err(missing(format!(
                "element {text} belongs to {:?}",
                l.comment.as_deref().unwrap_or("nobody")
            )));
        }
        if Some(&l.data_id) != b.data_id(map, &e.data).as_ref() {
            let data: Vec<String> = e.data.iter().map(batch::value_text).collect();
            return Err(missing(format!(
                "element {text} maps to {}, not {}",
                l.data_id,
                data.join(" . ")
            )));
        }
    }
    // Shared keys are not checked: one may be left out for overlapping
    // another network's (see `add_rules`), and they are nobody's.
    let tag = id.tag();
    let tagged = listing
        .rules
        .iter()
        .filter(|r| r.comment.as_deref() == Some(&*tag))
        .count();
    if tagged != rules.rules.len() {
        return Err(missing(format!(
            "{tagged} condition rules tagged for it, expected {}",
            rules.rules.len()
        )));
    }
    Ok(())
}

/// The attachments owning elements or rules of `kind`.
fn list_owners<B: Driver + ?Sized>(b: &B, kind: RuleKind) -> Result<Vec<OwnedAttachment>> {
    let table = kind.table(b.masq_mark());
    let op = FirewallOp::List(kind);
    let who = format!("table {} {}", table.family.as_str(), table.name);
    Ok(match b.read(op, &who, &table, false)? {
        Some(listing) => listing.owners(),
        None => Vec::new(),
    })
}

/// GC: one read, one batch removing every dead attachment of `network`.
fn gc_owners<B: Driver + ?Sized>(
    b: &B,
    kind: RuleKind,
    network: &str,
    valid: &[AttachmentId],
) -> Result<Vec<OwnedAttachment>> {
    let table = kind.table(b.masq_mark());
    let op = FirewallOp::Gc(kind);
    let who = format!("network {network:?}");
    let Some(listing) = b.read(op, &who, &table, false)? else {
        return Ok(Vec::new());
    };
    let keep: HashSet<String> = valid
        .iter()
        .filter(|a| a.network == network)
        .map(AttachmentId::owner_hash)
        .collect();
    let net_prefix = format!("{}-", network_hash(network));
    let dead: Vec<OwnedAttachment> = listing
        .owners()
        .into_iter()
        .filter(|o| o.owner_hash.starts_with(&net_prefix) && !keep.contains(&o.owner_hash))
        .collect();
    // One pass over the listing (not one per dead owner: a GC of 1000
    // attachments would read 1000 times through every element).
    let dead_hashes: HashSet<&str> = dead.iter().map(|o| o.owner_hash.as_str()).collect();
    let (elements, handles) = listing.owned_by_any(&dead_hashes);
    remove_listed(b, op, &who, &table, &elements, &handles)?;
    if kind == RuleKind::Masquerade {
        release_subnets(b, op, &who, network)?;
    }
    Ok(dead)
}

/// How often a decision on a listing is made again when the ruleset
/// changed before it committed.
const DECIDE_ATTEMPTS: usize = 8;

/// After a masquerade DEL or GC in `network`: the network's shared subnet
/// keys (`masq_nets`) that no live address is in any more go too, so
/// nothing of the network stays after its last attachment (Go's per-pod
/// chains leave nothing either). The decision is made on a listing and commits
/// only if the ruleset has not changed since it was read; otherwise it is
/// made again: an ADD in the subnet committed meanwhile keeps the key, and
/// of two last DELs the later one sees the earlier one's commit. Only the
/// maps the decision needs are read.
fn release_subnets<B: Driver + ?Sized>(
    b: &B,
    op: FirewallOp,
    who: &str,
    network: &str,
) -> Result<()> {
    let table = RuleKind::Masquerade.table(b.masq_mark());
    let mut reading = table.clone();
    reading
        .maps
        .retain(|m| masquerade::SUBNET_DECISION_MAPS.contains(&m.name));
    for _ in 0..DECIDE_ATTEMPTS {
        let generation = b.generation(op, who)?;
        let Some(listing) = b.read(op, who, &reading, false)? else {
            return Ok(());
        };
        let stale = masquerade::stale_subnets(&listing, network);
        if stale.is_empty() {
            return Ok(());
        }
        let batch = batch::remove(&table, &stale, &[]);
        match b.send_at(op, who, &table, &batch, generation)? {
            Ok(()) => return Ok(()),
            Err(r) if r.kind == RefusalKind::Stale => continue,
            // Removed by a DEL or GC meanwhile.
            Err(r) if r.kind == RefusalKind::NotFound => return Ok(()),
            Err(r) => return Err(r.error),
        }
    }
    // The ruleset kept changing: the keys stay for the network's next DEL
    // or a GC (a key no address is in matches no packet).
    tracing::debug!(%who, "subnet keys kept: the ruleset kept changing");
    Ok(())
}

/// The elements (and rules) `spec` installs; `None` when there is nothing
/// to install (port mappings without a mapping of the container's families).
fn elements(spec: &RuleSpec) -> crate::Result<Option<AttachmentRules>> {
    Ok(match spec {
        RuleSpec::Masquerade(s) => Some(masquerade::elements(s)),
        RuleSpec::PortMappings(s) => hostport::elements(s)?,
        RuleSpec::MacSpoofCheck(s) => Some(macspoof::elements(s)),
    })
}

impl<D: Driver> Firewall for D {
    fn add(&self, spec: &RuleSpec) -> Result<()> {
        let Some(rules) = elements(spec)? else {
            return Ok(());
        };
        let kind = spec.kind();
        if kind == RuleKind::PortMapping {
            if let Some(other) = self.delegate_add(&kind.table(self.masq_mark()), &rules) {
                return other.add(spec);
            }
        }
        add_rules(self, kind, spec.attachment(), &rules)
    }

    fn check(&self, spec: &RuleSpec) -> Result<()> {
        match elements(spec)? {
            Some(rules) => check_rules(self, spec.kind(), spec.attachment(), &rules),
            None => Ok(()),
        }
    }

    fn delete(&self, spec: &RuleSpec) -> Result<()> {
        let (kind, id) = (spec.kind(), spec.attachment());
        match spec {
            // A DEL that does not know the addresses (the pod is gone).
            RuleSpec::Masquerade(s) if s.addresses.is_empty() => {
                return self.delete_owned(kind, id)
            }
            // Nothing was installed (as the Go reference).
            RuleSpec::PortMappings(s) if s.mappings.is_empty() => return Ok(()),
            _ => {}
        }
        match elements(spec) {
            Ok(Some(rules)) => {
                del_rules(self, kind, id, &rules)?;
                if kind == RuleKind::Masquerade {
                    release_subnets(self, FirewallOp::Delete(kind), &id.to_string(), &id.network)?;
                }
                Ok(())
            }
            // A DEL must not fail on a spec an ADD would refuse: remove
            // whatever the attachment owns.
            Ok(None) | Err(_) => self.delete_owned(kind, id),
        }
    }

    fn delete_owned(&self, kind: RuleKind, attachment: &AttachmentId) -> Result<()> {
        remove_owner(self, kind, attachment)?;
        if kind == RuleKind::Masquerade {
            let who = attachment.to_string();
            release_subnets(self, FirewallOp::Delete(kind), &who, &attachment.network)?;
        }
        Ok(())
    }

    fn list(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>> {
        list_owners(self, kind)
    }

    fn gc(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> Result<Vec<OwnedAttachment>> {
        gc_owners(self, kind, network, valid)
    }
}

#[cfg(test)]
mod tests {
    //! The engine's decisions against an in-memory nf_tables (no root): a
    //! [`Driver`] whose table is a map of elements and whose generation
    //! counts commits, with a hook that commits something of its own right
    //! after a read (another process's batch landing between a decision's
    //! read and its commit).
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;
    use crate::model::NftCommand;
    use crate::MasqueradeSpec;

    type Hook = Box<dyn FnOnce(&MemoryNft) + Send>;

    /// (map, key id) -> (key, data id, comment, expiring).
    type Elements = BTreeMap<(String, String), (Vec<Value>, String, Option<String>, bool)>;

    #[derive(Default)]
    struct State {
        exists: bool,
        elements: Elements,
        generation: u32,
    }

    #[derive(Default)]
    struct MemoryNft {
        state: Mutex<State>,
        after_read: Mutex<Option<Hook>>,
    }

    impl std::fmt::Debug for MemoryNft {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("MemoryNft")
        }
    }

    fn id_of(v: &[Value]) -> String {
        format!("{v:?}")
    }

    fn refusal(kind: RefusalKind) -> Refusal {
        Refusal {
            kind,
            message: format!("{kind:?}"),
            error: Error::Netns(cni_netns::Error::InvalidArgument {
                op: "memory nft".into(),
                reason: format!("{kind:?}"),
            }),
        }
    }

    impl MemoryNft {
        #[allow(clippy::result_large_err)] // as `Driver::send`
        fn apply(&self, batch: &Batch) -> std::result::Result<(), Refusal> {
            let mut st = self.state.lock().unwrap();
            let mut next = BTreeMap::clone(&st.elements);
            let mut exists = st.exists;
            for c in &batch.commands {
                match c {
                    NftCommand::AddTable => exists = true,
                    NftCommand::AddElement { element, exclusive } => {
                        if !exists {
                            return Err(refusal(RefusalKind::NotFound));
                        }
                        let k = (element.map.clone(), id_of(&element.key));
                        let data = id_of(&element.data);
                        match next.get(&k) {
                            Some((_, d, _, false)) if *exclusive || *d != data => {
                                return Err(refusal(RefusalKind::Exists))
                            }
                            Some((_, _, _, false)) => {}
                            _ => {
                                next.insert(
                                    k,
                                    (element.key.clone(), data, element.comment.clone(), false),
                                );
                            }
                        }
                    }
                    NftCommand::ExpireElements(es) => {
                        for e in es {
                            let k = (e.map.clone(), id_of(&e.key));
                            next.insert(
                                k,
                                (e.key.clone(), id_of(&e.data), e.comment.clone(), true),
                            );
                        }
                    }
                    NftCommand::DeleteElements { map, keys } => {
                        for key in keys {
                            if next.remove(&(map.clone(), id_of(key))).is_none() {
                                return Err(refusal(RefusalKind::NotFound));
                            }
                        }
                    }
                    _ => {}
                }
            }
            st.elements = next;
            st.exists = exists;
            st.generation += 1;
            Ok(())
        }

        fn keys(&self, map: &str) -> Vec<String> {
            let st = self.state.lock().unwrap();
            st.elements
                .iter()
                .filter(|((m, _), (.., expiring))| m == map && !expiring)
                .map(|((_, k), _)| k.clone())
                .collect()
        }
    }

    impl Driver for MemoryNft {
        fn masq_mark(&self) -> u32 {
            super::super::DEFAULT_MASQ_MARK
        }
        fn send(
            &self,
            _: FirewallOp,
            _: &str,
            _: &Table,
            batch: &Batch,
        ) -> Result<std::result::Result<(), Refusal>> {
            Ok(self.apply(batch))
        }
        fn generation(&self, _: FirewallOp, _: &str) -> Result<u32> {
            Ok(self.state.lock().unwrap().generation)
        }
        fn send_at(
            &self,
            op: FirewallOp,
            who: &str,
            table: &Table,
            batch: &Batch,
            generation: u32,
        ) -> Result<std::result::Result<(), Refusal>> {
            if self.state.lock().unwrap().generation != generation {
                return Ok(Err(refusal(RefusalKind::Stale)));
            }
            self.send(op, who, table, batch)
        }
        fn read(&self, _: FirewallOp, _: &str, table: &Table, _: bool) -> Result<Option<Listing>> {
            let listing = {
                let st = self.state.lock().unwrap();
                if !st.exists {
                    return Ok(None);
                }
                Listing {
                    elements: st
                        .elements
                        .iter()
                        .filter(|((m, _), _)| table.map(m).is_some())
                        .map(
                            |((map, key_id), (key, data_id, comment, expiring))| ListedElement {
                                map: map.clone(),
                                key: key.clone(),
                                key_id: key_id.clone(),
                                data_id: data_id.clone(),
                                comment: comment.clone(),
                                expiring: *expiring,
                            },
                        )
                        .collect(),
                    rules: Vec::new(),
                }
            };
            if let Some(hook) = self.after_read.lock().unwrap().take() {
                hook(self);
            }
            Ok(Some(listing))
        }
        fn expire_on_delete(&self) -> bool {
            true
        }
        fn key_id(&self, _: &Map, key: &[Value]) -> Option<String> {
            Some(id_of(key))
        }
        fn data_id(&self, _: &Map, data: &[Value]) -> Option<String> {
            Some(id_of(data))
        }
    }

    fn masq(cid: &str, addr: &str) -> RuleSpec {
        RuleSpec::Masquerade(MasqueradeSpec {
            attachment: AttachmentId::new("net", cid, "eth0"),
            addresses: vec![addr.parse().unwrap()],
        })
    }

    #[test]
    fn the_last_del_of_a_subnet_takes_its_key() {
        let fw = MemoryNft::default();
        fw.add(&masq("a", "10.1.0.5/24")).unwrap();
        fw.add(&masq("b", "10.1.0.6/24")).unwrap();
        fw.delete(&masq("a", "10.1.0.5/24")).unwrap();
        assert_eq!(fw.keys(masquerade::MASQ_NETS4).len(), 1);
        fw.delete(&masq("b", "10.1.0.6/24")).unwrap();
        assert!(fw.keys(masquerade::MASQ_NETS4).is_empty());
        assert!(fw.keys(masquerade::MASQ_SRC4).is_empty());
    }

    #[test]
    fn an_add_landing_between_the_last_dels_read_and_commit_keeps_the_key() {
        let fw = MemoryNft::default();
        fw.add(&masq("a", "10.1.0.5/24")).unwrap();
        // The DEL's own batch reads nothing; its subnet decision reads once:
        // right after that read, another pod of the subnet is ADDed.
        let hook: Hook = Box::new(|fw: &MemoryNft| fw.add(&masq("b", "10.1.0.6/24")).unwrap());
        *fw.after_read.lock().unwrap() = Some(hook);
        fw.delete(&masq("a", "10.1.0.5/24")).unwrap();
        assert_eq!(
            fw.keys(masquerade::MASQ_NETS4).len(),
            1,
            "the new pod's subnet key was taken by the DEL"
        );
        assert_eq!(fw.keys(masquerade::MASQ_SRC4).len(), 1);
    }

    #[test]
    fn gc_takes_the_subnets_of_the_dead_and_keeps_the_live_ones() {
        let fw = MemoryNft::default();
        fw.add(&masq("a", "10.1.0.5/24")).unwrap();
        fw.add(&masq("b", "10.2.0.5/24")).unwrap();
        let dead = fw
            .gc(
                RuleKind::Masquerade,
                "net",
                &[AttachmentId::new("net", "b", "eth0")],
            )
            .unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].attachment.container_id, "a");
        let nets = fw.keys(masquerade::MASQ_NETS4);
        assert_eq!(nets.len(), 1);
        assert!(nets[0].contains("10.2.0.0,"), "{nets:?}");
    }
}
