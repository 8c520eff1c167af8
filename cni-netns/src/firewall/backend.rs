//! The one implementation of [`Firewall`] for every rule-programming
//! backend: a backend provides the per-attachment primitives (program,
//! remove, verify, list, collect the rules of one attachment as a unit) and
//! this file maps each spec to its rules with [`layout`] exactly once.

use ipnetwork::IpNetwork;

use super::layout;
use super::model::AttachmentRules;
use super::{
    AttachmentId, Firewall, MacSpoofCheckSpec, MasqueradeSpec, OwnedAttachment, PortMappingSpec,
    RuleKind,
};
use crate::Result;

/// What a backend (`nft` process, native netlink) provides.
pub(crate) trait RuleBackend: std::fmt::Debug + Send + Sync {
    /// The masquerade mark its port-mapping rules use.
    fn masq_mark(&self) -> u32;
    /// Installs (or re-installs) `rules` as everything `id` owns of `kind`.
    fn add_rules(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules) -> Result<()>;
    /// Removes `rules` of `id`; missing objects are fine.
    fn del_rules(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules) -> Result<()>;
    /// Verifies that `rules` of `id` are in place.
    fn check_rules(&self, kind: RuleKind, id: &AttachmentId, rules: &AttachmentRules)
        -> Result<()>;
    /// Removes whatever `id` owns of `kind`, found by listing; true when
    /// something was removed.
    fn remove_owner(&self, kind: RuleKind, id: &AttachmentId) -> Result<bool>;
    /// The attachments owning rules of `kind`.
    fn list_owners(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>>;
    /// Removes the rules of `network`'s attachments not in `valid`.
    fn gc_owners(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> Result<Vec<OwnedAttachment>>;
    /// Installs port-mapping rules; a backend that cannot express some
    /// rules overrides this to hand them elsewhere.
    fn add_port_mapping_rules(
        &self,
        spec: &PortMappingSpec,
        rules: &AttachmentRules,
    ) -> Result<()> {
        self.add_rules(RuleKind::PortMapping, &spec.attachment, rules)
    }
}

impl<B: RuleBackend> Firewall for B {
    fn add_masquerade(&self, spec: &MasqueradeSpec) -> Result<()> {
        let rules = layout::masquerade_rules(spec);
        self.add_rules(RuleKind::Masquerade, &spec.attachment, &rules)
    }

    fn del_masquerade(&self, spec: &MasqueradeSpec) -> Result<()> {
        let rules = layout::masquerade_rules(spec);
        self.del_rules(RuleKind::Masquerade, &spec.attachment, &rules)
    }

    fn check_masquerade(&self, spec: &MasqueradeSpec) -> Result<()> {
        let rules = layout::masquerade_rules(spec);
        self.check_rules(RuleKind::Masquerade, &spec.attachment, &rules)
    }

    // All of an attachment's addresses in one chain: one call per address
    // would rewrite the chain and keep only the last family (dual-stack).
    fn add_masquerades(&self, attachment: &AttachmentId, addresses: &[IpNetwork]) -> Result<()> {
        let rules = layout::masquerade_rules_all(attachment, addresses);
        self.add_rules(RuleKind::Masquerade, attachment, &rules)
    }

    fn del_masquerades(&self, attachment: &AttachmentId, addresses: &[IpNetwork]) -> Result<()> {
        if addresses.is_empty() {
            return self.delete_attachment(RuleKind::Masquerade, attachment);
        }
        // One batch when the addresses are exactly the owner's; the backend
        // falls back to reading the table otherwise.
        let rules = layout::masquerade_rules_all(attachment, addresses);
        self.del_rules(RuleKind::Masquerade, attachment, &rules)
    }

    fn check_masquerades(&self, attachment: &AttachmentId, addresses: &[IpNetwork]) -> Result<()> {
        let rules = layout::masquerade_rules_all(attachment, addresses);
        self.check_rules(RuleKind::Masquerade, attachment, &rules)
    }

    fn add_port_mappings(&self, spec: &PortMappingSpec) -> Result<()> {
        match layout::port_mapping_rules(spec, self.masq_mark())? {
            Some(rules) => self.add_port_mapping_rules(spec, &rules),
            None => Ok(()),
        }
    }

    fn del_port_mappings(&self, spec: &PortMappingSpec) -> Result<()> {
        if spec.mappings.is_empty() {
            return Ok(());
        }
        match layout::port_mapping_rules(spec, self.masq_mark()) {
            Ok(Some(rules)) => self.del_rules(RuleKind::PortMapping, &spec.attachment, &rules),
            // A DEL must not fail on a spec an ADD would refuse: fall back to
            // removing whatever the attachment owns.
            Ok(None) | Err(_) => self
                .remove_owner(RuleKind::PortMapping, &spec.attachment)
                .map(|_| ()),
        }
    }

    fn check_port_mappings(&self, spec: &PortMappingSpec) -> Result<()> {
        match layout::port_mapping_rules(spec, self.masq_mark())? {
            Some(rules) => self.check_rules(RuleKind::PortMapping, &spec.attachment, &rules),
            None => Ok(()),
        }
    }

    fn add_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()> {
        let rules = layout::mac_spoof_rules(spec);
        self.add_rules(RuleKind::MacSpoofCheck, &spec.attachment, &rules)
    }

    fn del_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()> {
        let rules = layout::mac_spoof_rules(spec);
        self.del_rules(RuleKind::MacSpoofCheck, &spec.attachment, &rules)
    }

    fn check_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()> {
        let rules = layout::mac_spoof_rules(spec);
        self.check_rules(RuleKind::MacSpoofCheck, &spec.attachment, &rules)
    }

    fn delete_attachment(&self, kind: RuleKind, attachment: &AttachmentId) -> Result<()> {
        self.remove_owner(kind, attachment).map(|_| ())
    }

    fn list_attachments(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>> {
        self.list_owners(kind)
    }

    fn gc(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> Result<Vec<OwnedAttachment>> {
        self.gc_owners(kind, network, valid)
    }
}
