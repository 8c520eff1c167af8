//! Who owns an element: an attachment's id, the tag every element it owns
//! carries, and its anchor element in map `owners` (the same in every
//! table).

use std::fmt;

use super::model::{AttachmentRules, Element, Value};

/// One attachment of a container to a network: the key CNI uses for
/// everything a plugin creates (`CNI_CONTAINERID`, `CNI_IFNAME` and the
/// network name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttachmentId {
    /// The network name (`name` in the network configuration).
    pub network: String,
    /// The container id (`CNI_CONTAINERID`).
    pub container_id: String,
    /// The interface name inside the container (`CNI_IFNAME`).
    pub ifname: String,
}

impl AttachmentId {
    /// Builds an id from its three parts.
    pub fn new(
        network: impl Into<String>,
        container_id: impl Into<String>,
        ifname: impl Into<String>,
    ) -> Self {
        AttachmentId {
            network: network.into(),
            container_id: container_id.into(),
            ifname: ifname.into(),
        }
    }

    /// The hash identifying this attachment's network (16 hex digits).
    pub fn network_hash(&self) -> String {
        network_hash(&self.network)
    }

    /// The hash identifying this attachment within its network
    /// (`<network hash>-<hash of ifname:container id>`); tags start with it,
    /// so it is exact even when the tag is truncated.
    pub fn owner_hash(&self) -> String {
        format!(
            "{}-{}",
            self.network_hash(),
            hash16(&format!("{}:{}", self.ifname, self.container_id))
        )
    }

    /// The comment every map element (and rule) of this attachment carries:
    /// `<owner hash>, net: <network>, if: <ifname>, id: <container id>`,
    /// cut to 128 bytes (nft's comment limit). The format follows the Go
    /// reference's `pkg/ip/ipmasq_nftables_linux.go` so operators read both
    /// the same way.
    pub fn tag(&self) -> String {
        let strip = |s: &str| s.replace('"', "");
        let mut tag = format!(
            "{}, net: {}, if: {}, id: {}",
            self.owner_hash(),
            strip(&self.network),
            strip(&self.ifname),
            strip(&self.container_id)
        );
        truncate_at_char_boundary(&mut tag, TAG_MAX_LEN);
        tag
    }

    /// Parses a tag written by [`AttachmentId::tag`]. Returns the id and
    /// whether it is complete (the tag was not truncated); `None` if the text
    /// is not one of our tags.
    pub fn from_tag(tag: &str) -> Option<(AttachmentId, bool)> {
        let (hash, rest) = tag.split_once(", net: ")?;
        let (network, rest) = rest.split_once(", if: ")?;
        let (ifname, container_id) = rest.split_once(", id: ")?;
        let id = AttachmentId::new(network, container_id, ifname);
        let complete = id.owner_hash() == hash;
        Some((id, complete))
    }
}

impl fmt::Display for AttachmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "network {:?} container {:?} interface {:?}",
            self.network, self.container_id, self.ifname
        )
    }
}

/// An attachment found owning firewall rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedAttachment {
    /// The owner, as read back from its tag.
    pub attachment: AttachmentId,
    /// The hash its tags start with ([`AttachmentId::owner_hash`]).
    pub owner_hash: String,
    /// `false` if the tag was truncated (very long names), so the fields of
    /// `attachment` may be cut short; `owner_hash` is exact either way.
    pub complete: bool,
}

/// nft (libnftnl) refuses comments longer than this many bytes.
const TAG_MAX_LEN: usize = 128;

fn truncate_at_char_boundary(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// The hash naming a network in tags (16 hex digits).
pub(crate) fn network_hash(network: &str) -> String {
    hash16(network)
}

/// FNV-1a (64 bit): stable across releases and platforms, no dependency,
/// and collisions among the few thousand attachments of a node are
/// negligible (ownership is still confirmed by the full tag where one is
/// needed).
fn fnv64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn hash16(s: &str) -> String {
    format!("{:016x}", fnv64(s.bytes()))
}

/// The 32-bit owner id stored as the data of an attachment's elements,
/// from its owner hash ([`AttachmentId::owner_hash`]): two owners of the
/// same key (the case it exists for) collide with negligible probability.
pub fn owner_id(owner_hash: &str) -> u32 {
    let h = fnv64(owner_hash.bytes());
    (h ^ (h >> 32)) as u32
}

/// The owner hash a comment written by [`AttachmentId::tag`] starts with.
pub(crate) fn owner_of_comment(comment: &str) -> Option<&str> {
    let hash = comment.split_once(", net: ").map(|(h, _)| h)?;
    let (net, inst) = hash.split_once('-')?;
    let is_hash = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
    (is_hash(net) && is_hash(inst)).then_some(hash)
}

/// One element per attachment in every table (`mark . mark : mark`, the
/// 64-bit owner id to a fingerprint of everything the attachment owns
/// there): a re-ADD finds its own anchor and replaces what it owned, and a
/// DEL whose spec differs from the ADD's clashes on it and falls back to
/// removing by tag, so no element outlives its attachment.
pub(crate) const OWNERS: &str = "owners";

/// The data of an attachment's elements in the maps that only record an
/// owner: its [`owner_id`].
pub(crate) fn owner_data(id: &AttachmentId) -> Vec<Value> {
    vec![Value::Num(u64::from(owner_id(&id.owner_hash())))]
}

/// An element of `id` in `map`, tagged with its owner.
pub(crate) fn element(id: &AttachmentId, map: &str, key: Vec<Value>, data: Vec<Value>) -> Element {
    Element {
        map: map.into(),
        key,
        data,
        comment: Some(id.tag()),
    }
}

/// The first element of a key wins: a second one with other data would make
/// the kernel refuse the whole batch.
pub(crate) fn push_unique(elements: &mut Vec<Element>, e: Element) {
    if !elements.iter().any(|x| x.map == e.map && x.key == e.key) {
        elements.push(e);
    }
}

/// Puts the attachment's [`OWNERS`] element first: key the 64-bit owner id,
/// data a fingerprint of the other elements and rules.
pub(crate) fn anchored(id: &AttachmentId, mut rules: AttachmentRules) -> AttachmentRules {
    let text = format!("{:?}{:?}", rules.elements, rules.rules);
    let print = fnv64(text.bytes());
    let owner = fnv64(id.owner_hash().bytes());
    rules.elements.insert(
        0,
        element(
            id,
            OWNERS,
            vec![Value::Num(owner >> 32), Value::Num(owner & 0xffff_ffff)],
            vec![Value::Num((print ^ (print >> 32)) & 0xffff_ffff)],
        ),
    );
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_round_trips_and_detects_truncation() {
        let id = AttachmentId::new("net1", "abc", "eth0");
        let (back, complete) = AttachmentId::from_tag(&id.tag()).unwrap();
        assert_eq!(back, id);
        assert!(complete);

        let long = AttachmentId::new("n".repeat(60), "c".repeat(64), "eth0");
        let tag = long.tag();
        assert_eq!(tag.len(), TAG_MAX_LEN);
        let (_, complete) = AttachmentId::from_tag(&tag).unwrap();
        assert!(!complete);
        assert!(tag.starts_with(&long.owner_hash()));
    }

    #[test]
    fn hashes_are_stable() {
        assert_eq!(hash16(""), "cbf29ce484222325");
        assert_ne!(
            AttachmentId::new("n", "a", "eth0").owner_hash(),
            AttachmentId::new("n", "a", "eth1").owner_hash()
        );
    }

    #[test]
    fn truncation_respects_utf8() {
        let mut s = "é".repeat(100);
        truncate_at_char_boundary(&mut s, 127);
        assert_eq!(s.len(), 126);
    }

    #[test]
    fn owners_from_comments() {
        let id = AttachmentId::new("net", "cid", "eth0");
        assert_eq!(owner_of_comment(&id.tag()), Some(&*id.owner_hash()));
        assert_eq!(owner_of_comment("something else"), None);
        assert_ne!(
            owner_id(&id.owner_hash()),
            owner_id(&AttachmentId::new("net", "cid2", "eth0").owner_hash())
        );
    }
}
