//! The multus Kubernetes client against the test API server (real HTTPS on
//! 127.0.0.1, a CA generated for the test).
#![cfg(feature = "multus")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cni_multus::k8s::{ClientConfig, HttpKubeClient, KubeClient};
use cni_multus::Error;
use cni_testkit::{KubeApiServer, KubeconfigAuth, KubeconfigCa};

const T: Duration = Duration::from_secs(5);

fn client_for(server: &KubeApiServer, auth: KubeconfigAuth, ca: KubeconfigCa) -> HttpKubeClient {
    let path = server.dir().join(format!("kc-{auth:?}-{ca:?}"));
    server.write_kubeconfig(&path, auth, ca).unwrap();
    let cfg = ClientConfig::from_kubeconfig(&path, T).unwrap();
    HttpKubeClient::new(&cfg).unwrap()
}

#[test]
fn get_pod_and_nad_with_token() {
    let server = KubeApiServer::start().unwrap();
    server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a")],
    );
    server.add_nad("ns1", "net-a", r#"{"cniVersion":"1.0.0","type":"bridge"}"#);
    let cfg = ClientConfig::from_kubeconfig(server.kubeconfig_path(), T).unwrap();
    let c = HttpKubeClient::new(&cfg).unwrap();
    let pod = c.get_pod("ns1", "web").unwrap();
    assert_eq!(
        (pod.name.as_str(), pod.namespace.as_str(), pod.uid.as_str()),
        ("web", "ns1", "uid-1")
    );
    assert_eq!(pod.annotations["k8s.v1.cni.cncf.io/networks"], "net-a");
    let nad = c.get_network_attachment_definition("ns1", "net-a").unwrap();
    assert_eq!(nad.config, r#"{"cniVersion":"1.0.0","type":"bridge"}"#);
    let e = c.get_pod("ns1", "missing").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let e = c
        .get_network_attachment_definition("other", "net-a")
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let paths: Vec<String> = server
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        [
            "GET /api/v1/namespaces/ns1/pods/web",
            "GET /apis/k8s.cni.cncf.io/v1/namespaces/ns1/network-attachment-definitions/net-a",
            "GET /api/v1/namespaces/ns1/pods/missing",
            "GET /apis/k8s.cni.cncf.io/v1/namespaces/other/network-attachment-definitions/net-a",
        ]
    );
}

#[test]
fn patch_is_a_merge_patch_on_the_stored_pod() {
    let server = KubeApiServer::start().unwrap();
    server.add_pod("ns1", "web", "uid-1", &[("keep", "me"), ("drop", "me")]);
    let c = client_for(&server, KubeconfigAuth::Token, KubeconfigCa::Data);
    let mut ann = BTreeMap::new();
    ann.insert(
        "k8s.v1.cni.cncf.io/network-status".to_string(),
        Some("[]".to_string()),
    );
    ann.insert("drop".to_string(), None);
    c.patch_pod_annotations("ns1", "web", &ann).unwrap();
    let pod = server.pod("ns1", "web").unwrap();
    let a = &pod["metadata"]["annotations"];
    assert_eq!(a["keep"], "me");
    assert_eq!(a["k8s.v1.cni.cncf.io/network-status"], "[]");
    assert!(a.get("drop").is_none());
    assert_eq!(pod["spec"]["containers"][0]["name"], "c");
    let last = server.requests().pop().unwrap();
    assert_eq!(last.method, "PATCH");
    assert_eq!(
        last.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(last.status, 200);
    assert!(c
        .patch_pod_annotations("ns1", "gone", &ann)
        .unwrap_err()
        .is_not_found());
}

#[test]
fn every_authentication_and_ca_style() {
    let server = KubeApiServer::start().unwrap();
    server.add_pod("ns1", "web", "uid-1", &[]);
    for auth in [
        KubeconfigAuth::Token,
        KubeconfigAuth::TokenFile,
        KubeconfigAuth::ClientCert,
    ] {
        for ca in [KubeconfigCa::File, KubeconfigCa::Data] {
            let c = client_for(&server, auth, ca);
            assert_eq!(
                c.get_pod("ns1", "web").unwrap().uid,
                "uid-1",
                "{auth:?} {ca:?}"
            );
        }
    }
}

#[test]
fn wrong_token_is_401() {
    let server = KubeApiServer::start().unwrap();
    server.add_pod("ns1", "web", "uid-1", &[]);
    let c = client_for(&server, KubeconfigAuth::WrongToken, KubeconfigCa::File);
    match c.get_pod("ns1", "web").unwrap_err() {
        Error::ApiStatus {
            status, message, ..
        } => {
            assert_eq!(status, 401);
            assert_eq!(message, "Unauthorized");
        }
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn tls_needs_the_test_ca() {
    let server = KubeApiServer::start().unwrap();
    let mut cfg = ClientConfig::from_kubeconfig(server.kubeconfig_path(), T).unwrap();
    // Public roots do not trust the test CA.
    cfg.ca_pem = None;
    let e = HttpKubeClient::new(&cfg)
        .unwrap()
        .get_pod("ns1", "web")
        .unwrap_err();
    assert!(matches!(e, Error::ApiUnreachable { .. }), "{e}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    // A CA that is not PEM is a configuration error.
    cfg.ca_pem = Some(b"garbage".to_vec());
    assert!(HttpKubeClient::new(&cfg).is_err());
}

#[test]
fn every_call_is_bounded_by_the_timeout() {
    let server = KubeApiServer::start().unwrap();
    server.add_pod("ns1", "web", "uid-1", &[]);
    server.set_response_delay(Duration::from_secs(3));
    let mut cfg = ClientConfig::from_kubeconfig(server.kubeconfig_path(), T).unwrap();
    cfg.timeout = Duration::from_millis(300);
    let c = HttpKubeClient::new(&cfg).unwrap();
    let start = Instant::now();
    let e = c.get_pod("ns1", "web").unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, Error::ApiUnreachable { .. }), "{e}");
    assert!(e.is_retriable());
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert_eq!(e.code(), cni_types::ErrorCode::TryAgainLater);
}

#[test]
fn stopped_server_is_unreachable() {
    let mut server = KubeApiServer::start().unwrap();
    let cfg = ClientConfig::from_kubeconfig(server.kubeconfig_path(), T).unwrap();
    server.stop();
    let e = HttpKubeClient::new(&cfg)
        .unwrap()
        .get_pod("ns1", "web")
        .unwrap_err();
    assert!(matches!(e, Error::ApiUnreachable { .. }), "{e}");
}
