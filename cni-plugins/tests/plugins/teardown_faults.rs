//! DEL and GC run every teardown step: a firewall that fails to remove
//! the masquerade must not keep the pod's address reserved (the oracle is
//! host-local's reservation files on disk, and the kernel's veth list).

use std::path::Path;
use std::sync::Arc;

use cni_exec::{Command, Plugin, ProcessExec, Request};
use cni_netns::firewall::{
    AttachmentId, Firewall, NativeFirewall, OwnedAttachment, RuleKind, RuleSpec,
};
use cni_netns::Netns;
use cni_plugins::bridge::Bridge;
use cni_plugins::ptp::Ptp;
use cni_types::NetworkConfig;
use serde_json::json;

use crate::common::reserved_ips;
use crate::nodenet::{suffix, Ns};

/// The real firewall, except that removing rules fails.
#[derive(Debug)]
struct FailingTeardown(NativeFirewall);

fn refused() -> cni_netns::Error {
    cni_netns::Error::FirewallTool {
        op: "delete".into(),
        command: "test".into(),
        message: "refused by the test".into(),
    }
}

impl Firewall for FailingTeardown {
    fn add(&self, spec: &RuleSpec) -> cni_netns::Result<()> {
        self.0.add(spec)
    }
    fn delete(&self, _: &RuleSpec) -> cni_netns::Result<()> {
        Err(refused())
    }
    fn check(&self, spec: &RuleSpec) -> cni_netns::Result<()> {
        self.0.check(spec)
    }
    fn delete_owned(&self, _: RuleKind, _: &AttachmentId) -> cni_netns::Result<()> {
        Err(refused())
    }
    fn list(&self, kind: RuleKind) -> cni_netns::Result<Vec<OwnedAttachment>> {
        self.0.list(kind)
    }
    fn gc(
        &self,
        _: RuleKind,
        _: &str,
        _: &[AttachmentId],
    ) -> cni_netns::Result<Vec<OwnedAttachment>> {
        Err(refused())
    }
}

fn request(command: Command, conf: &serde_json::Value, pod: &Ns, bins: &Path) -> Request {
    let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
    Request::builder(command, config)
        .container_id("teardown-cid")
        .netns(pod.path())
        .ifname("eth0")
        .path(bins.to_string_lossy())
        .exec(Arc::new(ProcessExec::new()))
        .build()
        .unwrap()
}

/// ADD with the real firewall, then DEL with one whose removals fail: the
/// DEL reports the failure, and the address and the veth are gone anyway.
fn del_releases_despite_the_firewall<P: Plugin>(ours: P, failing: P, plugin: serde_json::Value)
where
    P::Error: std::fmt::Debug,
{
    if !cni_testkit::premise::require_root() {
        return;
    }
    let node = Ns::new("tdnode");
    let pod = Ns::new("tdpod");
    let data = tempfile::tempdir().unwrap();
    let bins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_host-local"),
        bins.path().join("host-local"),
    )
    .unwrap();
    let network = format!("td-{}", &suffix()[..6]);
    let mut conf = json!({
        "cniVersion": "1.1.0", "name": network, "ipMasq": true,
        "ipam": {"type": "host-local", "subnet": "10.231.0.0/24", "dataDir": data.path()},
    });
    conf.as_object_mut()
        .unwrap()
        .extend(plugin.as_object().unwrap().clone());
    let node_ns = Netns::open(node.path()).unwrap();
    node_ns
        .run(|| {
            let add = request(Command::Add, &conf, &pod, bins.path());
            ours.add(&add).expect("ADD");
            assert_eq!(reserved_ips(data.path(), &network).len(), 1);
            let del = request(Command::Del, &conf, &pod, bins.path());
            let e = failing
                .del(&del)
                .expect_err("DEL reports the firewall's failure");
            assert!(format!("{e:?}").contains("refused by the test"), "{e:?}");
        })
        .unwrap();
    assert_eq!(reserved_ips(data.path(), &network), Vec::<String>::new());
    assert!(
        !pod.ip(&["-br", "link"]).contains("eth0"),
        "{}",
        pod.ip(&["-br", "link"])
    );
    // The real firewall's GC clears what the failed DEL left.
    let mut gc_conf = conf.clone();
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    node_ns
        .run(|| {
            ours.gc(&request(Command::Gc, &gc_conf, &pod, bins.path()))
                .expect("GC");
        })
        .unwrap();
}

#[test]
fn bridge_del_releases_the_address_when_the_firewall_fails() {
    let bridge = format!("tdb{}", &suffix()[..6]);
    del_releases_despite_the_firewall(
        Bridge::new(),
        Bridge::with_firewall(Arc::new(FailingTeardown(NativeFirewall::new()))),
        json!({"type": "bridge", "bridge": bridge, "isGateway": true}),
    );
}

#[test]
fn ptp_del_releases_the_address_when_the_firewall_fails() {
    del_releases_despite_the_firewall(
        Ptp::default(),
        Ptp::with_firewall(Arc::new(FailingTeardown(NativeFirewall::new()))),
        json!({"type": "ptp"}),
    );
}
