//! Per-node certificates (`perNodeCertificate`, multus-cni
//! `pkg/k8sclient` `PerNodeCertificate`): with the bootstrap kubeconfig
//! the daemon creates a CertificateSigningRequest for its node's identity
//! (`system:multus:<node>`, signer `kubernetes.io/kube-apiserver-client`),
//! waits until it is approved and issued, stores key and certificate in
//! `certDir`, talks to the API with them, and rotates before
//! `certDuration` runs out.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use serde_json::{json, Value};

use super::autoconf::write_atomic_private;
use crate::k8s::{ClientConfig, HttpKubeClient};
use crate::Error;

/// The file in `certDir` holding the current certificate and key (the
/// name kubelet's certificate manager uses, with multus's prefix).
pub const CERT_FILE: &str = "multus-client-current.pem";
/// The signer multus asks for.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// Rotation happens after this fraction of the certificate's lifetime.
pub const ROTATE_AT: f64 = 0.8;
const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const POLL: Duration = Duration::from_millis(100);

fn cert_err(op: impl Into<String>, reason: impl ToString) -> Error {
    Error::Certificate {
        op: op.into(),
        reason: reason.to_string(),
    }
}

/// The node's name: `NODE_NAME` (what multus's daemonset sets from the
/// downward API), else the host name.
pub fn node_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "localhost".into())
}

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Credentials {
    /// The issued certificate.
    pub cert_pem: String,
    /// The private key.
    pub key_pem: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

/// Obtains and renews the node's client certificate.
#[derive(Debug, Clone)]
pub struct CertManager {
    bootstrap: ClientConfig,
    cert_dir: PathBuf,
    duration: Duration,
    node: String,
    wait: Duration,
}

impl CertManager {
    /// A manager for `node`, bootstrapping with `bootstrap`; certificates
    /// last `duration` and are waited for at most `wait`.
    pub fn new(
        bootstrap: ClientConfig,
        cert_dir: &Path,
        duration: Duration,
        node: &str,
        wait: Duration,
    ) -> Self {
        CertManager {
            bootstrap,
            cert_dir: cert_dir.to_path_buf(),
            duration,
            node: node.to_string(),
            wait,
        }
    }

    /// Where the current certificate is stored.
    pub fn cert_path(&self) -> PathBuf {
        self.cert_dir.join(CERT_FILE)
    }

    /// When a certificate issued at `issued` must be replaced.
    pub fn rotation_deadline(&self, issued: SystemTime) -> SystemTime {
        issued + self.duration.mul_f64(ROTATE_AT)
    }

    /// Creates a CSR, waits for its certificate, stores it; returns it.
    pub fn request(&self) -> Result<Credentials, Error> {
        let key = rcgen::KeyPair::generate().map_err(|e| cert_err("generate key", e))?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
            .map_err(|e| cert_err("build CSR", e))?;
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("system:multus:{}", self.node),
        );
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:multus");
        let csr = params
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .map_err(|e| cert_err("build CSR", e))?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let body = json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"generateName": format!("multus-{}-", self.node)},
            "spec": {
                "request": b64.encode(csr.as_bytes()),
                "signerName": SIGNER,
                "expirationSeconds": self.duration.as_secs().max(1),
                "usages": ["digital signature", "key encipherment", "client auth"],
            },
        });
        let client = HttpKubeClient::new(&self.bootstrap)?;
        let created = client.request_json(
            "POST",
            "create certificatesigningrequest",
            CSR_PATH,
            Some(body.to_string().as_bytes()),
        )?;
        let created: Value =
            serde_json::from_slice(&created).map_err(|e| cert_err("decode created CSR", e))?;
        let name = created["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            return Err(cert_err(
                "create certificatesigningrequest",
                "no name in the reply",
            ));
        }
        let deadline = Instant::now() + self.wait;
        let cert = loop {
            let v: Value = serde_json::from_slice(&client.request_json(
                "GET",
                &format!("get certificatesigningrequest {name}"),
                &format!("{CSR_PATH}/{name}"),
                None,
            )?)
            .map_err(|e| cert_err("decode CSR", e))?;
            if let Some(c) = v["status"]["certificate"]
                .as_str()
                .filter(|c| !c.is_empty())
            {
                let pem = b64
                    .decode(c)
                    .map_err(|e| cert_err(format!("decode certificate of {name}"), e))?;
                break String::from_utf8(pem)
                    .map_err(|e| cert_err(format!("decode certificate of {name}"), e))?;
            }
            let refused = v["status"]["conditions"].as_array().and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == "Denied" || c["type"] == "Failed")
            });
            if let Some(c) = refused {
                return Err(cert_err(
                    format!("certificatesigningrequest {name}"),
                    format!("{}: {}", c["type"], c["message"].as_str().unwrap_or("")),
                ));
            }
            if Instant::now() >= deadline {
                return Err(cert_err(
                    format!("certificatesigningrequest {name}"),
                    format!("not issued within {:?}", self.wait),
                ));
            }
            std::thread::sleep(POLL);
        };
        let creds = Credentials {
            cert_pem: cert,
            key_pem: key.serialize_pem(),
        };
        let mut file = creds.cert_pem.clone();
        if !file.ends_with('\n') {
            file.push('\n');
        }
        file.push_str(&creds.key_pem);
        write_atomic_private(&self.cert_path(), file.as_bytes())?;
        tracing::info!(csr = %name, file = %self.cert_path().display(), "node certificate issued");
        Ok(creds)
    }

    /// The API client configuration using `creds` instead of the bootstrap
    /// credentials.
    pub fn client_config(&self, creds: &Credentials) -> ClientConfig {
        let mut c = self.bootstrap.clone();
        c.token = None;
        c.client_cert_pem = Some(creds.cert_pem.clone().into_bytes());
        c.client_key_pem = Some(creds.key_pem.clone().into_bytes());
        c
    }

    /// A client with a fresh certificate.
    pub fn client(&self) -> Result<HttpKubeClient, Error> {
        let creds = self.request()?;
        HttpKubeClient::new(&self.client_config(&creds))
    }

    /// Renews the certificate before each deadline on a background thread,
    /// handing every new client to `install`; ends when `install` returns
    /// false. A failed renewal is retried after a tenth of the lifetime
    /// (while the current certificate is still valid).
    pub fn spawn_rotation(
        self,
        issued: SystemTime,
        install: impl Fn(HttpKubeClient) -> bool + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let mut next = self.rotation_deadline(issued);
            loop {
                let wait = next
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                std::thread::sleep(wait);
                match self.client() {
                    Ok(c) => {
                        if !install(c) {
                            return;
                        }
                        next = self.rotation_deadline(SystemTime::now());
                    }
                    Err(e) => {
                        tracing::error!("rotate node certificate: {e}");
                        next = SystemTime::now() + self.duration.mul_f64(0.1);
                    }
                }
            }
        })
    }
}
