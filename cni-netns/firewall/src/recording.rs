//! A [`Firewall`] that only records calls, for testing plugins without root.

use std::sync::{Mutex, PoisonError};

use super::{AttachmentId, Firewall, OwnedAttachment, RuleKind, RuleSpec};
use crate::Result;

/// One recorded [`Firewall`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FirewallCall {
    /// [`Firewall::add`].
    Add(RuleSpec),
    /// [`Firewall::delete`].
    Delete(RuleSpec),
    /// [`Firewall::check`].
    Check(RuleSpec),
    /// [`Firewall::delete_owned`].
    DeleteOwned(RuleKind, AttachmentId),
    /// [`Firewall::list`].
    List(RuleKind),
    /// [`Firewall::gc`].
    Gc(RuleKind, String, Vec<AttachmentId>),
}

/// Records every call and succeeds; lists and GCs find nothing.
///
/// ```
/// use cni_firewall::{
///     AttachmentId, Firewall, FirewallCall, MasqueradeSpec, RecordingFirewall, RuleSpec,
/// };
///
/// let fw = RecordingFirewall::default();
/// let spec = RuleSpec::from(MasqueradeSpec {
///     attachment: AttachmentId::new("net", "cid", "eth0"),
///     addresses: vec!["10.1.0.2/24".parse().unwrap()],
/// });
/// fw.add(&spec).unwrap();
/// assert_eq!(fw.calls(), vec![FirewallCall::Add(spec)]);
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
    fn add(&self, spec: &RuleSpec) -> Result<()> {
        self.record(FirewallCall::Add(spec.clone()));
        Ok(())
    }

    fn delete(&self, spec: &RuleSpec) -> Result<()> {
        self.record(FirewallCall::Delete(spec.clone()));
        Ok(())
    }

    fn check(&self, spec: &RuleSpec) -> Result<()> {
        self.record(FirewallCall::Check(spec.clone()));
        Ok(())
    }

    fn delete_owned(&self, kind: RuleKind, attachment: &AttachmentId) -> Result<()> {
        self.record(FirewallCall::DeleteOwned(kind, attachment.clone()));
        Ok(())
    }

    fn list(&self, kind: RuleKind) -> Result<Vec<OwnedAttachment>> {
        self.record(FirewallCall::List(kind));
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
