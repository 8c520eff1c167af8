//! Per-node certificates against the test API server (HTTPS on
//! loopback): CSR created with the bootstrap credentials, approved and
//! issued, stored in `certDir`, used for the API, rotated before expiry.
#![cfg(feature = "multus")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use cni_multus::k8s::{ClientConfig, HttpKubeClient, KubeClient};
use cni_multus::thick::{self, certs::CertManager, DaemonConfig};
use cni_testkit::KubeApiServer;
use serde_json::json;

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn manager(server: &KubeApiServer, dir: &Path, duration: Duration, wait: Duration) -> CertManager {
    let boot =
        ClientConfig::from_kubeconfig(server.kubeconfig_path(), Duration::from_secs(5)).unwrap();
    CertManager::new(boot, dir, duration, "node-a", wait)
}

/// The subject of a PEM certificate, read by openssl (an independent
/// parser), when openssl is installed.
fn openssl_subject(pem: &str) -> Option<String> {
    let mut child = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    use std::io::Write;
    child.stdin.take()?.write_all(pem.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn csr_issued_stored_and_used() {
    let server = KubeApiServer::start().unwrap();
    server.set_csr_auto_approve(true);
    server.add_pod("ns1", "p", "uid-p", &[]);
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let mgr = manager(
        &server,
        &certs,
        Duration::from_secs(600),
        Duration::from_secs(10),
    );
    let creds = mgr.request().unwrap();

    let csrs = server.csrs();
    assert_eq!(csrs.len(), 1);
    let csr = &csrs[0];
    assert!(
        csr["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("multus-node-a-"),
        "{csr}"
    );
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client"
    );
    assert_eq!(csr["spec"]["expirationSeconds"], 600);
    assert!(csr["spec"]["usages"]
        .as_array()
        .unwrap()
        .contains(&json!("client auth")));

    // Stored: certificate and key, owner-only.
    let file = mgr.cert_path();
    assert_eq!(file, certs.join("multus-client-current.pem"));
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("BEGIN CERTIFICATE") && text.contains("PRIVATE KEY"));
    if let Some(subject) = openssl_subject(&creds.cert_pem) {
        assert!(subject.contains("CN=system:multus:node-a"), "{subject}");
        assert!(subject.contains("O=system:multus"), "{subject}");
    }

    // Used: a client with the certificate and no token reaches the API.
    let cfg = mgr.client_config(&creds);
    assert!(cfg.token.is_none());
    let client = HttpKubeClient::new(&cfg).unwrap();
    assert_eq!(client.get_pod("ns1", "p").unwrap().uid, "uid-p");
}

#[test]
fn waits_for_approval_and_gives_up_when_never_issued() {
    let server = Arc::new(KubeApiServer::start().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mgr = manager(
        &server,
        dir.path(),
        Duration::from_secs(600),
        Duration::from_secs(10),
    );
    let t = std::thread::spawn(move || mgr.request().map(|c| c.cert_pem));
    wait_for("a pending CSR", || server.csrs().len() == 1);
    let csr = server.csrs().remove(0);
    assert!(csr["status"]["certificate"].is_null(), "{csr}");
    assert!(server.approve_csr(csr["metadata"]["name"].as_str().unwrap()));
    let pem = t.join().unwrap().unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE"));

    let dir2 = tempfile::tempdir().unwrap();
    let impatient = manager(
        &server,
        dir2.path(),
        Duration::from_secs(600),
        Duration::from_millis(300),
    );
    let e = impatient.request().unwrap_err();
    assert!(e.to_string().contains("not issued within"), "{e}");
    assert!(!impatient.cert_path().exists());
}

#[test]
fn rotation_before_expiry() {
    let server = KubeApiServer::start().unwrap();
    server.set_csr_auto_approve(true);
    let dir = tempfile::tempdir().unwrap();
    let lifetime = Duration::from_millis(1500);
    let mgr = manager(&server, dir.path(), lifetime, Duration::from_secs(10));
    let issued = SystemTime::now();
    mgr.request().unwrap();
    let first = std::fs::read_to_string(mgr.cert_path()).unwrap();
    assert_eq!(
        mgr.rotation_deadline(issued)
            .duration_since(issued)
            .unwrap(),
        lifetime.mul_f64(0.8)
    );
    let installed = Arc::new(AtomicUsize::new(0));
    let n = installed.clone();
    let started = Instant::now();
    let path = mgr.cert_path();
    let t = mgr.spawn_rotation(issued, move |_client| {
        n.fetch_add(1, Ordering::SeqCst) + 1 < 2
    });
    wait_for("first rotation", || installed.load(Ordering::SeqCst) >= 1);
    let took = started.elapsed();
    // Rotated before the certificate ran out, not long before 80 %.
    assert!(took < lifetime, "{took:?}");
    assert!(took >= lifetime.mul_f64(0.7), "{took:?}");
    assert_ne!(std::fs::read_to_string(&path).unwrap(), first);
    t.join().unwrap();
    assert_eq!(installed.load(Ordering::SeqCst), 2);
    assert_eq!(server.csrs().len(), 3);
}

#[test]
fn daemon_bootstraps_its_node_certificate() {
    let server = KubeApiServer::start().unwrap();
    server.set_csr_auto_approve(true);
    let dir = tempfile::tempdir().unwrap();
    let c = json!({"socketDir": dir.path().join("sock"), "clusterNetwork": "cluster",
        "cniDir": dir.path().join("cni"),
        "perNodeCertificate": {"enabled": true, "bootstrapKubeconfig": server.kubeconfig_path(),
            "certDir": dir.path().join("certs"), "certDuration": "10m"}});
    let config = DaemonConfig::from_slice(c.to_string().as_bytes(), Path::new("test")).unwrap();
    let d = thick::start(config).unwrap();
    assert_eq!(server.csrs().len(), 1);
    assert!(dir.path().join("certs/multus-client-current.pem").exists());
    // The watch cache runs on the node certificate.
    wait_for("list + watch", || {
        server
            .requests()
            .iter()
            .filter(|r| r.path == "/api/v1/pods")
            .count()
            >= 2
    });
    d.stop();
}
