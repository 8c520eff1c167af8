//! multus device IDs (issue 23, part 1): NADs naming a
//! `k8s.v1.cni.cncf.io/resourceName` get the device kubelet allocated to
//! the pod, from a pod-resources gRPC server run by the test on a unix
//! socket (the kubelet proto, served with h2), from a device-plugin
//! checkpoint file, or from DRA ResourceClaims on the test API server.
//! Delegates are in-process recorders (an SR-IOV-like one fails without a
//! `deviceID`, as sriov-cni does); the device-info file is checked on disk.
//! Needs root (multus checks interface names in a pod namespace).
#![cfg(feature = "multus")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use cni_cri::grpc::encode_frame;
use cni_exec::{CniConfig, InProcessExec, Plugin, Request, RuntimeConf};
use cni_multus::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources, LIST_PATH,
};
use cni_multus::Multus;
use cni_testkit::KubeApiServer;
use cni_types::{CniError, CniResult, ErrorCode, Interface, NetworkConfigList};
use serde_json::{json, Value};

const RESOURCE: &str = "intel.com/sriov";

/// What the fake kubelet answers to `List`.
#[derive(Clone)]
enum Answer {
    Pods(ListPodResourcesResponse),
    /// This body, then grpc-status 0.
    Raw(Vec<u8>),
    /// No body, a failing grpc-status.
    Status(&'static str, &'static str),
}

/// kubelet's pod-resources API on a unix socket (HTTP/2 gRPC).
struct FakeKubelet {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    calls: Arc<Mutex<Vec<String>>>,
}

async fn serve(conn: tokio::net::UnixStream, answer: Answer, calls: Arc<Mutex<Vec<String>>>) {
    let Ok(mut h2) = h2::server::handshake(conn).await else {
        return;
    };
    while let Some(Ok((req, mut respond))) = h2.accept().await {
        calls.lock().unwrap().push(format!(
            "{} {} {}",
            req.method(),
            req.uri().path(),
            req.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
        ));
        let (body, code, msg) = match &answer {
            Answer::Pods(p) => (encode_frame(p), "0", ""),
            Answer::Raw(b) => (b.clone(), "0", ""),
            Answer::Status(c, m) => (Vec::new(), *c, *m),
        };
        let resp = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let Ok(mut send) = respond.send_response(resp, false) else {
            return;
        };
        if !body.is_empty() && send.send_data(Bytes::from(body), false).is_err() {
            return;
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", code.parse().unwrap());
        if !msg.is_empty() {
            trailers.insert("grpc-message", msg.parse().unwrap());
        }
        let _ = send.send_trailers(trailers);
    }
}

impl FakeKubelet {
    fn start(path: &Path, answer: Answer) -> FakeKubelet {
        let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (stop2, calls2) = (stop.clone(), calls.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener).unwrap();
                while let Ok((conn, _)) = listener.accept().await {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    tokio::spawn(serve(conn, answer.clone(), calls2.clone()));
                }
            });
        });
        FakeKubelet {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
            calls,
        }
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = std::os::unix::net::UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One delegate call: command, plugin type, interface, the config it got.
type Call = (String, String, String, Value);

/// A delegate recording what it was given. `fake-sriov` fails without a
/// `deviceID` in its config (sriov-cni: "VF pci addr is required").
#[derive(Clone)]
struct Recorder {
    kind: &'static str,
    log: Arc<Mutex<Vec<Call>>>,
}

impl Plugin for Recorder {
    type Error = CniError;
    fn name(&self) -> &str {
        self.kind
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = Value::Object(req.config.to_map());
        self.log.lock().unwrap().push((
            "ADD".into(),
            self.kind.into(),
            req.ifname.clone(),
            conf.clone(),
        ));
        if self.kind == "fake-sriov" && conf.get("deviceID").is_none() {
            return Err(CniError::new(
                ErrorCode::InvalidNetworkConfig,
                "VF pci addr is required",
                "",
            ));
        }
        Ok(CniResult {
            interfaces: vec![Interface {
                name: req.ifname.clone(),
                sandbox: req.netns.clone(),
                ..Default::default()
            }],
            ..Default::default()
        })
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log.lock().unwrap().push((
            "DEL".into(),
            self.kind.into(),
            req.ifname.clone(),
            Value::Object(req.config.to_map()),
        ));
        Ok(())
    }
}

struct Env {
    dir: tempfile::TempDir,
    server: KubeApiServer,
    pod_ns: cni_netns::OwnedNetns,
    log: Arc<Mutex<Vec<Call>>>,
    cni: CniConfig,
}

const SRIOV_CAPS: &str = r#"{"cniVersion":"1.0.0","type":"fake-sriov","capabilities":{"deviceID":true,"CNIDeviceInfoFile":true}}"#;
const SRIOV_PLAIN: &str = r#"{"cniVersion":"1.0.0","type":"fake-sriov"}"#;

impl Env {
    /// `None` when the premise (root) is missing and skipping is allowed.
    fn new(networks: &str) -> Option<Env> {
        if !cni_testkit::premise::require_root() {
            return None;
        }
        let pod_ns = cni_netns::OwnedNetns::new("mdev").unwrap();
        let server = KubeApiServer::start().unwrap();
        server.add_nad(
            "kube-system",
            "cluster",
            r#"{"cniVersion":"1.0.0","type":"fake-plain"}"#,
        );
        let res = [("k8s.v1.cni.cncf.io/resourceName", RESOURCE)];
        server.add_nad_with_annotations("ns1", "sriov-a", SRIOV_CAPS, &res);
        server.add_nad_with_annotations("ns1", "sriov-b", SRIOV_PLAIN, &res);
        server.add_nad_with_annotations(
            "ns1",
            "ghost",
            SRIOV_CAPS,
            &[("k8s.v1.cni.cncf.io/resourceName", "example.com/none")],
        );
        server.add_nad(
            "ns1",
            "plain",
            r#"{"cniVersion":"1.0.0","type":"fake-plain"}"#,
        );
        server.add_pod(
            "ns1",
            "web",
            "uid-1",
            &[("k8s.v1.cni.cncf.io/networks", networks)],
        );
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let rec = |kind| {
            Arc::new(Recorder {
                kind,
                log: log.clone(),
            })
        };
        let exec = InProcessExec::builder()
            .register("multus", Arc::new(Multus))
            .register("fake-sriov", rec("fake-sriov"))
            .register("fake-plain", rec("fake-plain"))
            .build();
        let cni = CniConfig::new(vec![dir.path().join("bin")], Arc::new(exec))
            .with_cache_dir(dir.path().join("runtime"));
        Some(Env {
            dir,
            server,
            pod_ns,
            log,
            cni,
        })
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("kubelet.sock")
    }

    fn checkpoint(&self) -> PathBuf {
        self.dir.path().join("kubelet_internal_checkpoint")
    }

    fn devinfo(&self) -> PathBuf {
        self.dir.path().join("devinfo")
    }

    fn list(&self) -> NetworkConfigList {
        let d = self.dir.path();
        let list = json!({"cniVersion": "1.0.0", "name": "multus-net", "plugins": [{
            "type": "multus", "kubeconfig": self.server.kubeconfig_path(), "clusterNetwork": "cluster",
            "binDir": d.join("bin"), "cniDir": d.join("multus"), "confDir": d.join("conf"),
            "podResourcesSocket": self.socket(), "deviceCheckpointFile": self.checkpoint(),
            "deviceInfoDir": self.devinfo()}]});
        NetworkConfigList::from_slice(&serde_json::to_vec(&list).unwrap()).unwrap()
    }

    fn rt(&self) -> RuntimeConf {
        RuntimeConf {
            container_id: "c1".into(),
            netns: self.pod_ns.netns().path().display().to_string(),
            ifname: "eth0".into(),
            args: vec![
                ("K8S_POD_NAMESPACE".into(), "ns1".into()),
                ("K8S_POD_NAME".into(), "web".into()),
                ("K8S_POD_UID".into(), "uid-1".into()),
            ],
            ..Default::default()
        }
    }

    fn add(&self) -> Result<(), String> {
        self.cni
            .add_network_list(&self.list(), &self.rt())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn del(&self) {
        self.cni.del_network_list(&self.list(), &self.rt()).unwrap();
    }

    fn calls(&self, cmd: &str) -> Vec<(String, String, Value)> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.0 == cmd)
            .map(|c| (c.1.clone(), c.2.clone(), c.3.clone()))
            .collect()
    }

    /// The device plugin's device-info file of a device.
    fn write_dp_info(&self, device: &str) -> Value {
        let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": device, "rdma-device": "mlx5_3"}});
        let dp = self.devinfo().join("dp");
        std::fs::create_dir_all(&dp).unwrap();
        std::fs::write(
            dp.join(format!("intel.com-sriov-{device}-device.json")),
            serde_json::to_vec(&info).unwrap(),
        )
        .unwrap();
        info
    }
}

fn pods_answer(devices: &[(&str, &str, &[&str])]) -> ListPodResourcesResponse {
    let mut pods: Vec<PodResources> = Vec::new();
    for (pod, resource, ids) in devices {
        let (ns, name) = pod.split_once('/').unwrap();
        pods.push(PodResources {
            name: name.into(),
            namespace: ns.into(),
            containers: vec![ContainerResources {
                name: "c".into(),
                devices: vec![ContainerDevices {
                    resource_name: resource.to_string(),
                    device_ids: ids.iter().map(|s| s.to_string()).collect(),
                    topology: None,
                }],
            }],
        });
    }
    ListPodResourcesResponse {
        pod_resources: pods,
    }
}

#[test]
fn device_ids_from_pod_resources_reach_the_delegates_and_devinfo_files() {
    let Some(env) = Env::new("sriov-a,plain,sriov-b") else {
        return;
    };
    let kubelet = FakeKubelet::start(
        &env.socket(),
        Answer::Pods(pods_answer(&[
            ("other/web", RESOURCE, &["0000:03:02.7"]),
            ("ns1/web", RESOURCE, &["0000:03:02.1", "0000:03:02.0"]),
            ("ns1/web", "nvidia.com/gpu", &["GPU-1"]),
        ])),
    );
    let info = env.write_dp_info("0000:03:02.0");
    env.add().unwrap();
    assert_eq!(
        kubelet.calls.lock().unwrap().as_slice(),
        [format!("POST {LIST_PATH} application/grpc")]
    );
    let adds = env.calls("ADD");
    let kinds: Vec<(&str, &str)> = adds.iter().map(|c| (c.0.as_str(), c.1.as_str())).collect();
    assert_eq!(
        kinds,
        [
            ("fake-plain", "eth0"),
            ("fake-sriov", "net1"),
            ("fake-plain", "net2"),
            ("fake-sriov", "net3")
        ]
    );
    // Sorted device IDs, handed out in network order; in the config as Go
    // injects them, and as the deviceID capability where declared.
    let a = &adds[1].2;
    assert_eq!(a["deviceID"], "0000:03:02.0");
    assert_eq!(a["pciBusID"], "0000:03:02.0");
    assert_eq!(a["runtimeConfig"]["deviceID"], "0000:03:02.0");
    let cni_file = env.devinfo().join("cni/ns1-sriov-a-c1_net1");
    assert_eq!(
        a["runtimeConfig"]["CNIDeviceInfoFile"],
        cni_file.display().to_string()
    );
    let copied: Value = serde_json::from_slice(&std::fs::read(&cni_file).unwrap()).unwrap();
    assert_eq!(copied, info);
    let b = &adds[3].2;
    assert_eq!(b["deviceID"], "0000:03:02.1");
    assert!(b.get("runtimeConfig").is_none(), "{b}");
    assert!(adds[2].2.get("deviceID").is_none());
    assert!(adds[0].2.get("deviceID").is_none());
    // No device-plugin file for the second device: nothing to copy.
    assert!(!env.devinfo().join("cni/ns1-sriov-b-c1_net3").exists());

    // network-status carries the device information.
    let st: Value = serde_json::from_str(
        &env.server
            .pod_annotation("ns1", "web", "k8s.v1.cni.cncf.io/network-status")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(st[1]["name"], "ns1/sriov-a");
    assert_eq!(st[1]["device-info"], info);

    // DEL works from the cache (kubelet gone): same device IDs, and the
    // device-info file is removed.
    drop(kubelet);
    env.del();
    let dels = env.calls("DEL");
    let sriov: Vec<&Value> = dels
        .iter()
        .filter(|c| c.0 == "fake-sriov")
        .map(|c| &c.2)
        .collect();
    assert_eq!(sriov[0]["deviceID"], "0000:03:02.1");
    assert_eq!(sriov[1]["deviceID"], "0000:03:02.0");
    assert_eq!(sriov[1]["runtimeConfig"]["deviceID"], "0000:03:02.0");
    assert!(!cni_file.exists());
}

#[test]
fn checkpoint_is_the_fallback_without_the_socket() {
    let Some(env) = Env::new("sriov-a") else {
        return;
    };
    std::fs::write(
        env.checkpoint(),
        json!({"Data": {"PodDeviceEntries": [
            {"PodUID": "uid-0", "ContainerName": "c", "ResourceName": RESOURCE, "DeviceIDs": {"0": ["0000:03:02.0"]}, "AllocResp": "CgA="},
            {"PodUID": "uid-1", "ContainerName": "c", "ResourceName": RESOURCE, "DeviceIDs": {"1": ["0000:81:00.5"]}, "AllocResp": "CgA="}],
            "RegisteredDevices": {RESOURCE: ["0000:03:02.0", "0000:81:00.5"]}}, "Checksum": 42})
        .to_string(),
    )
    .unwrap();
    env.add().unwrap();
    let adds = env.calls("ADD");
    assert_eq!(adds[1].2["deviceID"], "0000:81:00.5");
    assert_eq!(adds[1].2["runtimeConfig"]["deviceID"], "0000:81:00.5");
    env.del();
}

/// Every failure names the resource and where it looked; no delegate ran
/// (as Go: the pod's delegates are resolved before any ADD).
fn assert_fails(env: &Env, want: &[&str]) {
    let e = env.add().unwrap_err();
    for w in want {
        assert!(e.contains(w), "{w:?} not in {e:?}");
    }
    assert!(e.contains("intel.com/sriov"), "{e}");
    assert!(env.calls("ADD").is_empty(), "{:?}", env.calls("ADD"));
}

#[test]
fn bad_kubelet_answers_are_clear_errors() {
    let Some(env) = Env::new("plain,sriov-a") else {
        return;
    };
    let sock = env.socket().display().to_string();
    {
        // Not protobuf.
        let mut frame = vec![0, 0, 0, 0, 4];
        frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        let _k = FakeKubelet::start(&env.socket(), Answer::Raw(frame));
        assert_fails(&env, &[&sock, "malformed protobuf"]);
    }
    {
        // A frame announcing more than it carries.
        let _k = FakeKubelet::start(&env.socket(), Answer::Raw(vec![0, 0, 0, 1, 0, 1, 2]));
        assert_fails(&env, &[&sock, "announces 256 bytes"]);
    }
    {
        // Larger than 16 MiB (Go's MaxCallRecvMsgSize).
        let _k = FakeKubelet::start(&env.socket(), Answer::Raw(vec![0u8; 17 << 20]));
        assert_fails(&env, &[&sock, "larger than the limit"]);
    }
    {
        let _k = FakeKubelet::start(
            &env.socket(),
            Answer::Status("14", "kubelet is shutting down"),
        );
        assert_fails(&env, &["gRPC status 14: kubelet is shutting down"]);
    }
    // A socket file nobody listens on is not "missing": the call fails
    // (Go only falls back when the file is absent).
    {
        let l = std::os::unix::net::UnixListener::bind(env.socket()).unwrap();
        drop(l);
        assert_fails(&env, &[&sock, "connect"]);
        std::fs::remove_file(env.socket()).unwrap();
    }
    // No socket, no checkpoint.
    let cp = env.checkpoint().display().to_string();
    assert_fails(&env, &[&sock, &cp, "no pod-resources socket"]);
    // Malformed and huge checkpoints.
    std::fs::write(env.checkpoint(), b"{\"Data\": {\"PodDeviceEntries\": [{").unwrap();
    assert_fails(&env, &[&cp, "malformed checkpoint"]);
    let f = std::fs::File::create(env.checkpoint()).unwrap();
    f.set_len(17 << 20).unwrap();
    assert_fails(&env, &[&cp, "larger than"]);
}

#[test]
fn unknown_resource_tolerated_like_go_and_explained_when_the_delegate_fails() {
    let Some(env) = Env::new("plain,ghost") else {
        return;
    };
    let _k = FakeKubelet::start(
        &env.socket(),
        Answer::Pods(pods_answer(&[("ns1/web", RESOURCE, &["0000:03:02.0"])])),
    );
    let e = env.add().unwrap_err();
    assert!(e.contains("VF pci addr is required"), "{e}");
    assert!(
        e.contains("no device of resource \"example.com/none\" was allocated to the pod"),
        "{e}"
    );
    // It did run (Go passes no deviceID and lets the delegate decide), and
    // the networks added before it were undone.
    let adds = env.calls("ADD");
    assert_eq!(adds.len(), 3);
    assert!(adds[2].2.get("deviceID").is_none());
    assert_eq!(env.calls("DEL").len(), 3);
}

#[test]
fn dra_claims_give_device_ids() {
    let Some(env) = Env::new("sriov-a") else {
        return;
    };
    // No device plugin devices for the pod, but an empty checkpoint: the
    // kubelet step succeeds and DRA supplies the device.
    std::fs::write(env.checkpoint(), br#"{"Data":{},"Checksum":0}"#).unwrap();
    env.server.patch_pod(
        "ns1",
        "web",
        &json!({"spec": {"nodeName": "node-1"}, "status": {"resourceClaimStatuses": [
            {"name": "sriov", "resourceClaimName": "web-sriov-x7k"},
            {"name": "gpu", "resourceClaimName": "web-gpu-1"}]}}),
    );
    env.server.add_resource_claim(
        "ns1",
        "web-sriov-x7k",
        Some(json!([{"request": "vf", "driver": "sriovnetwork.k8snetworkplumbingwg.io", "pool": "node-1", "device": "vf-3"}])),
    );
    env.server.add_resource_claim(
        "ns1",
        "web-gpu-1",
        Some(json!([{"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}])),
    );
    env.server.add_resource_slice(
        "node-1-sriov",
        "node-1",
        "sriovnetwork.k8snetworkplumbingwg.io",
        "node-1",
        json!([
            {"name": "vf-2", "attributes": {"k8s.cni.cncf.io/deviceID": {"string": "0000:03:02.2"}, "k8s.cni.cncf.io/resourceName": {"string": RESOURCE}}},
            {"name": "vf-3", "attributes": {"k8s.cni.cncf.io/deviceID": {"string": "0000:03:02.3"}, "k8s.cni.cncf.io/resourceName": {"string": RESOURCE}}}]),
    );
    env.server.add_resource_slice(
        "node-2-sriov",
        "node-2",
        "sriovnetwork.k8snetworkplumbingwg.io",
        "node-1",
        json!([{"name": "vf-3", "attributes": {"k8s.cni.cncf.io/deviceID": {"string": "0000:99:00.0"}, "k8s.cni.cncf.io/resourceName": {"string": RESOURCE}}}]),
    );
    // A GPU without the CNI attributes is skipped.
    env.server.add_resource_slice(
        "node-1-gpu",
        "node-1",
        "gpu.example.com",
        "node-1",
        json!([{"name": "gpu-0", "attributes": {"model": {"string": "x"}}}]),
    );
    env.add().unwrap();
    let adds = env.calls("ADD");
    assert_eq!(adds[1].2["deviceID"], "0000:03:02.3");
    assert_eq!(adds[1].2["runtimeConfig"]["deviceID"], "0000:03:02.3");
    let paths: Vec<String> = env
        .server
        .requests()
        .iter()
        .map(|r| r.path.clone())
        .filter(|p| p.contains("resource.k8s.io"))
        .collect();
    assert_eq!(
        paths,
        [
            "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/web-sriov-x7k",
            "/apis/resource.k8s.io/v1/resourceslices",
            "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/web-gpu-1",
            "/apis/resource.k8s.io/v1/resourceslices",
        ]
    );
    env.del();

    // A claim without allocation fails ADD, naming it.
    env.server.add_resource_claim("ns1", "web-gpu-1", None);
    let e = env.add().unwrap_err();
    assert!(e.contains("resourceclaim ns1/web-gpu-1"), "{e}");
    assert!(e.contains("no device allocation"), "{e}");
}

#[test]
fn dra_extended_resource_mapping_is_strict() {
    let Some(env) = Env::new("sriov-a") else {
        return;
    };
    std::fs::write(env.checkpoint(), br#"{"Data":{"PodDeviceEntries":null}}"#).unwrap();
    env.server.patch_pod(
        "ns1",
        "web",
        &json!({"spec": {"nodeName": "node-1"}, "status": {"extendedResourceClaimStatus": {
            "resourceClaimName": "web-extended-resources-abc",
            "requestMappings": [{"containerName": "c", "resourceName": RESOURCE, "requestName": "container-0-request-0"}]}}}),
    );
    env.server.add_resource_claim(
        "ns1",
        "web-extended-resources-abc",
        Some(json!([{"request": "container-0-request-0", "driver": "sriov.example.com", "pool": "p1", "device": "vf-5"}])),
    );
    let slice = |resource: &str| {
        env.server.add_resource_slice(
            "node-1-ext",
            "node-1",
            "sriov.example.com",
            "p1",
            json!([{"name": "vf-5", "attributes": {"k8s.cni.cncf.io/deviceID": {"string": "0000:03:02.5"}, "k8s.cni.cncf.io/resourceName": {"string": resource}}}]),
        )
    };
    slice(RESOURCE);
    env.add().unwrap();
    assert_eq!(env.calls("ADD")[1].2["deviceID"], "0000:03:02.5");
    env.del();
    // The device's resourceName attribute must equal the mapping's.
    slice("other.example.com/vf");
    let e = env.add().unwrap_err();
    assert!(
        e.contains("but the extended resource mapping of request \"container-0-request-0\" is \"intel.com/sriov\""),
        "{e}"
    );
}
