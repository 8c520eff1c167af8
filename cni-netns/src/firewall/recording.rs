//! A [`Firewall`] that only records calls, for testing plugins without root.

use std::sync::{Mutex, PoisonError};

use super::{
    AttachmentId, Firewall, MacSpoofCheckSpec, MasqueradeSpec, OwnedAttachment, PortMappingSpec,
    RuleKind,
};
use crate::Result;

/// One recorded [`Firewall`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FirewallCall {
    /// [`Firewall::add_masquerade`].
    AddMasquerade(MasqueradeSpec),
    /// [`Firewall::del_masquerade`].
    DelMasquerade(MasqueradeSpec),
    /// [`Firewall::check_masquerade`].
    CheckMasquerade(MasqueradeSpec),
    /// [`Firewall::add_port_mappings`].
    AddPortMappings(PortMappingSpec),
    /// [`Firewall::del_port_mappings`].
    DelPortMappings(PortMappingSpec),
    /// [`Firewall::check_port_mappings`].
    CheckPortMappings(PortMappingSpec),
    /// [`Firewall::add_mac_spoof_check`].
    AddMacSpoofCheck(MacSpoofCheckSpec),
    /// [`Firewall::del_mac_spoof_check`].
    DelMacSpoofCheck(MacSpoofCheckSpec),
    /// [`Firewall::check_mac_spoof_check`].
    CheckMacSpoofCheck(MacSpoofCheckSpec),
    /// [`Firewall::delete_attachment`].
    DeleteAttachment(RuleKind, AttachmentId),
    /// [`Firewall::list_attachments`].
    ListAttachments(RuleKind),
    /// [`Firewall::gc`].
    Gc(RuleKind, String, Vec<AttachmentId>),
}

/// Records every call and succeeds; lists and GCs find nothing.
///
/// ```
/// use cni_netns::firewall::{AttachmentId, Firewall, FirewallCall, MasqueradeSpec, RecordingFirewall};
///
/// let fw = RecordingFirewall::default();
/// let spec = MasqueradeSpec {
///     attachment: AttachmentId::new("net", "cid", "eth0"),
///     address: "10.1.0.2/24".parse().unwrap(),
/// };
/// fw.add_masquerade(&spec).unwrap();
/// assert_eq!(fw.calls(), vec![FirewallCall::AddMasquerade(spec)]);
/// ```
#[derive(Debug, Default)]
pub struct RecordingFirewall {
    calls: Mutex<Vec<FirewallCall>>,
}

impl RecordingFirewall {
    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<FirewallCall> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, call: FirewallCall) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }
}

impl Firewall for RecordingFirewall {
    fn add_masquerade(&self, spec: &MasqueradeSpec) -> Result<()> {
        self.record(FirewallCall::AddMasquerade(spec.clone()));
        Ok(())
    }

    fn del_masquerade(&self, spec: &MasqueradeSpec) -> Result<()> {
        self.record(FirewallCall::DelMasquerade(spec.clone()));
        Ok(())
    }

    fn check_masquerade(&self, spec: &MasqueradeSpec) -> Result<()> {
        self.record(FirewallCall::CheckMasquerade(spec.clone()));
        Ok(())
    }

    fn add_port_mappings(&self, spec: &PortMappingSpec) -> Result<()> {
        self.record(FirewallCall::AddPortMappings(spec.clone()));
        Ok(())
    }

    fn del_port_mappings(&self, spec: &PortMappingSpec) -> Result<()> {
        self.record(FirewallCall::DelPortMappings(spec.clone()));
        Ok(())
    }

    fn check_port_mappings(&self, spec: &PortMappingSpec) -> Result<()> {
        self.record(FirewallCall::CheckPortMappings(spec.clone()));
        Ok(())
    }

    fn add_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()> {
        self.record(FirewallCall::AddMacSpoofCheck(spec.clone()));
        Ok(())
    }

    fn del_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()> {
        self.record(FirewallCall::DelMacSpoofCheck(spec.clone()));
        Ok(())
    }

    fn check_mac_spoof_check(&self, spec: &MacSpoofCheckSpec) -> Result<()> {
        self.record(FirewallCall::CheckMacSpoofCheck(spec.clone()));
        Ok(())
    }

    fn delete_attachment(&self, kind: RuleKind, attachment: &AttachmentId) -> Result<()> {
        self.record(FirewallCall::DeleteAttachment(kind, attachment.clone()));
        Ok(())
    }

    fn list_attachments(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>> {
        self.record(FirewallCall::ListAttachments(kind));
        Ok(Vec::new())
    }

    fn gc(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> Result<Vec<OwnedAttachment>> {
        self.record(FirewallCall::Gc(kind, network.to_owned(), valid.to_vec()));
        Ok(Vec::new())
    }
}
