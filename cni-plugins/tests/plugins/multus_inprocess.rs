//! A runtime embedding multus: multus and its delegates registered in
//! cni-exec's in-process executor (no fork/exec), driven through libcni's
//! `CniConfig`, with the test API server. Needs root (a pod namespace is
//! created for the interface-name check); skipped otherwise.
#![cfg(feature = "multus")]

use std::sync::{Arc, Mutex};

use cni_exec::{CniConfig, InProcessExec, Plugin, Request, RuntimeConf};
use cni_multus::Multus;
use cni_testkit::KubeApiServer;
use cni_types::{CniError, CniResult, Interface, IpConfig, NetworkConfigList};
use serde_json::{json, Value};

#[derive(Clone)]
struct Fake {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl Plugin for Fake {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "fake"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("ADD {} {}", self.name, req.ifname));
        let octet = self.log.lock().unwrap().len();
        Ok(CniResult {
            interfaces: vec![Interface {
                name: req.ifname.clone(),
                sandbox: req.netns.clone(),
                ..Default::default()
            }],
            ips: vec![IpConfig {
                interface: Some(0),
                address: format!("10.77.{octet}.2/24").parse().unwrap(),
                gateway: None,
            }],
            ..Default::default()
        })
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("DEL {} {}", self.name, req.ifname));
        Ok(())
    }
    fn status(&self, _req: &Request) -> Result<(), CniError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("STATUS {}", self.name));
        Ok(())
    }
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let valid = req
            .config
            .valid_attachments()
            .ok()
            .flatten()
            .unwrap_or_default();
        let valid: Vec<String> = valid
            .iter()
            .map(|a| format!("{}/{}", a.container_id, a.ifname))
            .collect();
        self.log
            .lock()
            .unwrap()
            .push(format!("GC {} {valid:?}", self.name));
        Ok(())
    }
}

#[test]
fn embedded_multus_with_in_process_delegates() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let pod_ns = cni_netns::OwnedNetns::new("mip").unwrap();
    let server = KubeApiServer::start().unwrap();
    server.add_nad(
        "kube-system",
        "cluster",
        r#"{"cniVersion":"1.1.0","type":"fake-cluster"}"#,
    );
    server.add_nad("ns1", "net-a", r#"{"cniVersion":"1.0.0","type":"fake-a"}"#);
    server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a")],
    );
    let dir = tempfile::tempdir().unwrap();

    let log = Arc::new(Mutex::new(Vec::new()));
    let exec = InProcessExec::builder()
        .register("multus", Arc::new(Multus))
        .register(
            "fake-cluster",
            Arc::new(Fake {
                name: "cluster",
                log: log.clone(),
            }),
        )
        .register(
            "fake-a",
            Arc::new(Fake {
                name: "a",
                log: log.clone(),
            }),
        )
        .build();
    let cni = CniConfig::new(vec![dir.path().join("bin")], Arc::new(exec))
        .with_cache_dir(dir.path().join("runtime"));
    let list: Value = json!({"cniVersion": "1.1.0", "name": "multus-net", "plugins": [{
        "type": "multus", "kubeconfig": server.kubeconfig_path(), "clusterNetwork": "cluster",
        "binDir": dir.path().join("bin"), "cniDir": dir.path().join("multus"),
        "confDir": dir.path().join("conf")}]});
    let list = NetworkConfigList::from_slice(&serde_json::to_vec(&list).unwrap()).unwrap();
    let rt = RuntimeConf {
        container_id: "c1".into(),
        netns: pod_ns.netns().path().display().to_string(),
        ifname: "eth0".into(),
        args: vec![
            ("K8S_POD_NAMESPACE".into(), "ns1".into()),
            ("K8S_POD_NAME".into(), "web".into()),
            ("K8S_POD_UID".into(), "uid-1".into()),
        ],
        ..Default::default()
    };
    let added = cni.add_network_list(&list, &rt).unwrap();
    assert_eq!(added.result.interfaces[0].name, "eth0");
    assert_eq!(
        log.lock().unwrap().as_slice(),
        ["ADD cluster eth0", "ADD a net1"]
    );
    let st: Value = serde_json::from_str(
        &server
            .pod_annotation("ns1", "web", "k8s.v1.cni.cncf.io/network-status")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(st[1]["name"], "ns1/net-a");
    assert_eq!(st[1]["ips"], json!(["10.77.2.2"]));

    // STATUS and GC go to the cluster network; GC's valid attachments
    // come from multus's result cache.
    cni.status_network_list(&list).unwrap();
    let valid = [cni_types::GcAttachment {
        container_id: "c1".into(),
        ifname: "eth0".into(),
    }];
    cni.gc_network_list(&list, Some(&valid)).unwrap();
    assert_eq!(
        log.lock().unwrap()[2..],
        ["STATUS cluster", "GC cluster [\"c1/eth0\", \"c1/net1\"]"]
    );
    log.lock().unwrap().drain(2..);

    cni.del_network_list(&list, &rt).unwrap();
    assert_eq!(log.lock().unwrap()[2..], ["DEL a net1", "DEL cluster eth0"]);
}
