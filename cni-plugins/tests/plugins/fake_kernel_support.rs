//! A plugin's ADD and DEL without root: the kernel is a
//! [`FakeKernel`], the firewall a [`RecordingFirewall`] (or one whose
//! removals fail), the IPAM plugin an in-process fake that hands out one
//! address per container and notes what the kernel and the firewall had
//! done when it was called. The real-kernel tests (bridge_behaviour, ptp,
//! macvlan) stay the oracle for what the kernel does.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use cni_exec::{Command, InProcessExec, NoNetnsGuard, Plugin, Request};
use cni_firewall::{
    AttachmentId, Firewall, FirewallCall, OwnedAttachment, RecordingFirewall, RuleKind, RuleSpec,
};
use cni_netns::kernel::FakeKernel;
use cni_types::{CniError, CniResult, IpConfig, NetworkConfig, Route};
use serde_json::{json, Value};

/// The pod's namespace path in the fake kernel.
pub(crate) const POD: &str = "/run/netns/fake-pod";
/// The node's namespace in the fake kernel.
pub(crate) const NODE: &str = "node";
/// The address the fake IPAM plugin hands out.
pub(crate) const POD_IP: &str = "10.231.0.2/24";

/// What the IPAM plugin saw when it was called.
#[derive(Debug, Clone)]
pub(crate) struct IpamCall {
    /// `ADD` or `DEL`.
    pub(crate) command: &'static str,
    /// The firewall's calls so far.
    pub(crate) firewall: Vec<FirewallCall>,
    /// The pod's links at that moment.
    pub(crate) pod_links: Vec<String>,
}

/// An in-process IPAM plugin: ADD leases [`POD_IP`] (gateway .1, plus the
/// configured `routes`) to the container, DEL releases it.
pub(crate) struct FakeIpam {
    kernel: FakeKernel,
    firewall: Arc<RecordingFirewall>,
    routes: Vec<Route>,
    refuse: bool,
    /// DEL fails (the lease stays) while set.
    refuse_del: std::sync::atomic::AtomicBool,
    leases: Mutex<BTreeSet<String>>,
    calls: Mutex<Vec<IpamCall>>,
}

impl FakeIpam {
    fn note(&self, command: &'static str) {
        self.calls.lock().unwrap().push(IpamCall {
            command,
            firewall: self.firewall.calls(),
            pod_links: self.kernel.link_names(POD),
        });
    }
}

impl Plugin for FakeIpam {
    type Error = CniError;

    fn name(&self) -> &str {
        "fake-ipam"
    }

    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.note("ADD");
        if self.refuse {
            return Err(CniError::new(
                cni_types::ErrorCode::TryAgainLater,
                "ipam says no",
                "",
            ));
        }
        self.leases.lock().unwrap().insert(req.container_id.clone());
        let mut ip = IpConfig::new(POD_IP.parse().unwrap());
        ip.gateway = Some("10.231.0.1".parse().unwrap());
        Ok(CniResult {
            ips: vec![ip],
            routes: self.routes.clone(),
            ..Default::default()
        })
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.note("DEL");
        if self.refuse_del.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(CniError::new(
                cni_types::ErrorCode::TryAgainLater,
                "ipam DEL says no",
                "",
            ));
        }
        self.leases.lock().unwrap().remove(&req.container_id);
        Ok(())
    }
}

/// The recording firewall, except that removing rules fails.
#[derive(Debug)]
pub(crate) struct FailingTeardown(pub(crate) Arc<RecordingFirewall>);

fn refused() -> cni_firewall::Error {
    cni_firewall::Error::FirewallTool {
        op: "delete".into(),
        command: "test".into(),
        message: "refused by the test".into(),
    }
}

impl Firewall for FailingTeardown {
    fn add(&self, spec: &RuleSpec) -> cni_firewall::Result<()> {
        self.0.add(spec)
    }
    fn delete(&self, spec: &RuleSpec) -> cni_firewall::Result<()> {
        self.0.delete(spec)?;
        Err(refused())
    }
    fn check(&self, spec: &RuleSpec) -> cni_firewall::Result<()> {
        self.0.check(spec)
    }
    fn delete_owned(&self, kind: RuleKind, id: &AttachmentId) -> cni_firewall::Result<()> {
        self.0.delete_owned(kind, id)?;
        Err(refused())
    }
    fn list(&self, kind: RuleKind) -> cni_firewall::Result<Vec<OwnedAttachment>> {
        self.0.list(kind)
    }
    fn gc(
        &self,
        kind: RuleKind,
        network: &str,
        valid: &[AttachmentId],
    ) -> cni_firewall::Result<Vec<OwnedAttachment>> {
        self.0.gc(kind, network, valid)?;
        Err(refused())
    }
}

/// A fake node: the kernel (with the pod's namespace made), the firewall
/// and the IPAM plugin, shared by the plugin under test.
pub(crate) struct FakeNode {
    pub(crate) kernel: FakeKernel,
    pub(crate) firewall: Arc<RecordingFirewall>,
    pub(crate) ipam: Arc<FakeIpam>,
    exec: Arc<InProcessExec>,
}

impl FakeNode {
    /// A node whose IPAM plugin adds `routes` to its result (and refuses
    /// every ADD with `refuse`).
    pub(crate) fn with_ipam(routes: Vec<Route>, refuse: bool) -> FakeNode {
        let kernel = FakeKernel::new();
        kernel.add_netns(POD);
        let firewall = Arc::new(RecordingFirewall::default());
        let ipam = Arc::new(FakeIpam {
            kernel: kernel.clone(),
            firewall: firewall.clone(),
            routes,
            refuse,
            refuse_del: Default::default(),
            leases: Mutex::default(),
            calls: Mutex::default(),
        });
        let exec = InProcessExec::builder()
            .register("fake-ipam", ipam.clone())
            .netns_guard(Arc::new(NoNetnsGuard))
            .build();
        FakeNode {
            kernel,
            firewall,
            ipam,
            exec: Arc::new(exec),
        }
    }

    /// A node with a plain IPAM plugin.
    pub(crate) fn new() -> FakeNode {
        FakeNode::with_ipam(Vec::new(), false)
    }

    /// The plugin config `plugin` (its `type` and options) on the fake
    /// IPAM plugin.
    pub(crate) fn conf(&self, plugin: Value) -> Value {
        let mut conf = json!({
            "cniVersion": "1.1.0", "name": "fakenet",
            "ipam": {"type": "fake-ipam"},
        });
        conf.as_object_mut()
            .unwrap()
            .extend(plugin.as_object().unwrap().clone());
        conf
    }

    /// A request for container `cid`'s `eth0` in `netns`.
    pub(crate) fn request(
        &self,
        command: Command,
        conf: &Value,
        cid: &str,
        netns: &str,
    ) -> Request {
        self.request_for(command, conf, cid, netns, "eth0")
    }

    /// A request for container `cid`'s interface `ifname` in `netns`.
    pub(crate) fn request_for(
        &self,
        command: Command,
        conf: &Value,
        cid: &str,
        netns: &str,
        ifname: &str,
    ) -> Request {
        let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
        Request::builder(command, config)
            .container_id(cid)
            .netns(netns)
            .ifname(ifname)
            .path("/nonexistent-cni-path")
            .exec(self.exec.clone())
            .build()
            .unwrap()
    }

    /// Makes the IPAM plugin's DELs fail (the lease stays).
    pub(crate) fn refuse_ipam_del(&self) {
        self.ipam
            .refuse_del
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The containers holding a lease.
    pub(crate) fn leases(&self) -> Vec<String> {
        self.ipam.leases.lock().unwrap().iter().cloned().collect()
    }

    /// The IPAM plugin's calls so far.
    pub(crate) fn ipam_calls(&self) -> Vec<IpamCall> {
        self.ipam.calls.lock().unwrap().clone()
    }

    /// The node's links whose names start with `veth`.
    pub(crate) fn node_veths(&self) -> Vec<String> {
        self.kernel
            .link_names(NODE)
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .collect()
    }
}

/// The CNI error a plugin error becomes.
pub(crate) fn cni_error<E: Into<CniError>>(e: E) -> CniError {
    e.into()
}
