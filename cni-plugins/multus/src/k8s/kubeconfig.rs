//! Client configuration: a kubeconfig file (server, CA file or data, bearer
//! token or token file, client certificate and key, current-context) or the
//! in-cluster service account, as client-go reads them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use crate::Error;

/// Where a pod's service-account credentials are mounted.
pub const IN_CLUSTER_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The most a kubeconfig, or a file it names (CA, client certificate and
/// key, token), may hold. Real ones are a few KiB; without a cap a path
/// to `/dev/zero` or to a growing log file takes all memory (found by the
/// `multus_kubeconfig` fuzz target).
const MAX_FILE_SIZE: u64 = cni_files::capped::MAX_ADMIN_FILE;

/// Reads a whole file of at most [`MAX_FILE_SIZE`] bytes.
fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    cni_files::capped::read_file(path, MAX_FILE_SIZE)
}

/// Everything needed to reach the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Base URL (`https://host:port`).
    pub server: String,
    /// CA certificates (PEM) to trust; `None` means the public web roots.
    pub ca_pem: Option<Vec<u8>>,
    /// `insecure-skip-tls-verify`.
    pub insecure_skip_tls_verify: bool,
    /// Bearer token.
    pub token: Option<String>,
    /// Client certificate chain (PEM).
    pub client_cert_pem: Option<Vec<u8>>,
    /// Client key (PEM).
    pub client_key_pem: Option<Vec<u8>>,
    /// The bound on every call (connect, TLS, request, response).
    pub timeout: Duration,
}

#[derive(Deserialize, Default)]
struct KubeconfigFile {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context", default)]
    current_context: String,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    #[serde(default)]
    cluster: Cluster,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    #[serde(default)]
    context: Context,
}

#[derive(Deserialize, Default)]
struct Cluster {
    #[serde(default)]
    server: String,
    #[serde(rename = "certificate-authority", default)]
    certificate_authority: String,
    #[serde(rename = "certificate-authority-data", default)]
    certificate_authority_data: String,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    token: String,
    #[serde(rename = "tokenFile", default)]
    token_file: String,
    #[serde(rename = "client-certificate", default)]
    client_certificate: String,
    #[serde(rename = "client-certificate-data", default)]
    client_certificate_data: String,
    #[serde(rename = "client-key", default)]
    client_key: String,
    #[serde(rename = "client-key-data", default)]
    client_key_data: String,
}

#[derive(Deserialize, Default)]
struct Context {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

impl ClientConfig {
    /// Reads a kubeconfig file. Relative file paths inside it are relative
    /// to the file's directory, as in client-go.
    pub fn from_kubeconfig(path: &Path, timeout: Duration) -> Result<ClientConfig, Error> {
        let text = read_capped(path)
            .and_then(|b| {
                String::from_utf8(b)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            })
            .map_err(|e| Error::KubeConfig {
                source_name: path.display().to_string(),
                reason: format!("read: {e}"),
            })?;
        let base = path.parent().unwrap_or(Path::new("."));
        ClientConfig::from_kubeconfig_str(&text, base, &path.display().to_string(), timeout)
    }

    /// Parses kubeconfig text; `base_dir` resolves relative paths and
    /// `source_name` names the file in errors.
    pub fn from_kubeconfig_str(
        text: &str,
        base_dir: &Path,
        source_name: &str,
        timeout: Duration,
    ) -> Result<ClientConfig, Error> {
        let err = |reason: String| Error::KubeConfig {
            source_name: source_name.to_string(),
            reason,
        };
        let kc: KubeconfigFile =
            serde_saphyr::from_str(text).map_err(|e| err(format!("parse YAML: {e}")))?;
        let (cluster, user) = if kc.current_context.is_empty() {
            // Without a current context client-go would fail; a file with a
            // single cluster and user is unambiguous, so we take them.
            match (kc.clusters.as_slice(), kc.users.as_slice()) {
                ([c], users) if users.len() <= 1 => (&c.cluster, users.first().map(|u| &u.user)),
                _ => return Err(err("no current-context".into())),
            }
        } else {
            let ctx = kc
                .contexts
                .iter()
                .find(|c| c.name == kc.current_context)
                .map(|c| &c.context)
                .ok_or_else(|| err(format!("context {:?} not found", kc.current_context)))?;
            let cluster = kc
                .clusters
                .iter()
                .find(|c| c.name == ctx.cluster)
                .map(|c| &c.cluster)
                .ok_or_else(|| err(format!("cluster {:?} not found", ctx.cluster)))?;
            let user = if ctx.user.is_empty() {
                None
            } else {
                Some(
                    kc.users
                        .iter()
                        .find(|u| u.name == ctx.user)
                        .map(|u| &u.user)
                        .ok_or_else(|| err(format!("user {:?} not found", ctx.user)))?,
                )
            };
            (cluster, user)
        };
        if cluster.server.is_empty() {
            return Err(err("cluster has no server".into()));
        }
        let resolve = |p: &str| -> PathBuf {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base_dir.join(p)
            }
        };
        let read = |what: &str, p: &str| -> Result<Vec<u8>, Error> {
            let path = resolve(p);
            read_capped(&path).map_err(|e| err(format!("read {what} {}: {e}", path.display())))
        };
        let data = |what: &str, d: &str| -> Result<Vec<u8>, Error> {
            base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map_err(|e| err(format!("decode {what}: {e}")))
        };
        let pick = |what: &str, data_v: &str, file_v: &str| -> Result<Option<Vec<u8>>, Error> {
            if !data_v.is_empty() {
                data(what, data_v).map(Some)
            } else if !file_v.is_empty() {
                read(what, file_v).map(Some)
            } else {
                Ok(None)
            }
        };
        let ca_pem = pick(
            "certificate-authority",
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
        )?;
        let mut cfg = ClientConfig {
            server: cluster.server.trim_end_matches('/').to_string(),
            ca_pem,
            insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
            token: None,
            client_cert_pem: None,
            client_key_pem: None,
            timeout,
        };
        if let Some(u) = user {
            cfg.token = if !u.token.is_empty() {
                Some(u.token.clone())
            } else if !u.token_file.is_empty() {
                let t = read("tokenFile", &u.token_file)?;
                Some(String::from_utf8_lossy(&t).trim().to_string())
            } else {
                None
            };
            cfg.client_cert_pem = pick(
                "client-certificate",
                &u.client_certificate_data,
                &u.client_certificate,
            )?;
            cfg.client_key_pem = pick("client-key", &u.client_key_data, &u.client_key)?;
            if cfg.client_cert_pem.is_some() != cfg.client_key_pem.is_some() {
                return Err(err(
                    "client certificate and client key must be given together".into(),
                ));
            }
        }
        Ok(cfg)
    }

    /// The in-cluster configuration when `KUBERNETES_SERVICE_HOST` and
    /// `KUBERNETES_SERVICE_PORT` are set (`None` otherwise), with the
    /// service account's token and CA.
    pub fn in_cluster(timeout: Duration) -> Result<Option<ClientConfig>, Error> {
        match (
            std::env::var("KUBERNETES_SERVICE_HOST"),
            std::env::var("KUBERNETES_SERVICE_PORT"),
        ) {
            (Ok(h), Ok(p)) if !h.is_empty() && !p.is_empty() => {
                ClientConfig::in_cluster_from(&h, &p, Path::new(IN_CLUSTER_DIR), timeout).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The in-cluster configuration from explicit parts (`dir` holds
    /// `token` and `ca.crt`).
    pub fn in_cluster_from(
        host: &str,
        port: &str,
        dir: &Path,
        timeout: Duration,
    ) -> Result<ClientConfig, Error> {
        let err = |reason: String| Error::KubeConfig {
            source_name: "in-cluster".into(),
            reason,
        };
        let token = read_capped(&dir.join("token"))
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .map_err(|e| err(format!("read {}: {e}", dir.join("token").display())))?;
        let ca = read_capped(&dir.join("ca.crt"))
            .map_err(|e| err(format!("read {}: {e}", dir.join("ca.crt").display())))?;
        // An IPv6 service host needs brackets in a URL.
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Ok(ClientConfig {
            server: format!("https://{host}:{port}"),
            ca_pem: Some(ca),
            insecure_skip_tls_verify: false,
            token: Some(token.trim().to_string()),
            client_cert_pem: None,
            client_key_pem: None,
            timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn current_context_and_relative_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "CA").unwrap();
        std::fs::write(dir.path().join("tok"), "secret\n").unwrap();
        let yaml = r#"
apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a:6443/"}
- name: b
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: ca.crt
contexts:
- name: ca
  context: {cluster: a, user: ua}
- name: cb
  context: {cluster: b, user: ub, namespace: x}
current-context: cb
users:
- name: ua
  user: {token: nope}
- name: ub
  user:
    tokenFile: tok
"#;
        let c = ClientConfig::from_kubeconfig_str(yaml, dir.path(), "k", T).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(c.token.as_deref(), Some("secret"));
        let yaml = yaml.replace("current-context: cb", "current-context: ca");
        let c = ClientConfig::from_kubeconfig_str(&yaml, dir.path(), "k", T).unwrap();
        assert_eq!(
            (c.server.as_str(), c.token.as_deref()),
            ("https://a:6443", Some("nope"))
        );
    }

    #[test]
    fn inline_data() {
        let yaml = "clusters:\n- name: c\n  cluster:\n    server: https://s\n    certificate-authority-data: Q0E=\nusers:\n- name: u\n  user:\n    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
        let c = ClientConfig::from_kubeconfig_str(yaml, Path::new("/"), "k", T).unwrap();
        assert_eq!(c.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(c.client_cert_pem.as_deref(), Some(&b"CERT"[..]));
        assert_eq!(c.client_key_pem.as_deref(), Some(&b"KEY"[..]));
        assert_eq!(c.token, None);
    }

    #[test]
    fn errors() {
        let cases = [
            ("current-context: x\n", "context \"x\" not found"),
            ("clusters: [{name: c, cluster: {server: s}}]\ncontexts: [{name: x, context: {cluster: d, user: u}}]\ncurrent-context: x\n", "cluster \"d\" not found"),
            ("clusters: [{name: c, cluster: {}}]\n", "no server"),
            ("clusters: [{name: c, cluster: {server: s, certificate-authority-data: '%%%'}}]\n", "decode certificate-authority"),
            ("clusters: [{name: c, cluster: {server: s, certificate-authority: /nonexistent/ca}}]\n", "read certificate-authority"),
            ("clusters: [{name: c, cluster: {server: s}}]\nusers: [{name: u, user: {client-key-data: S0VZ}}]\n", "together"),
            ("[unclosed", "parse YAML"),
        ];
        for (y, want) in cases {
            let e = ClientConfig::from_kubeconfig_str(y, Path::new("/"), "k", T).unwrap_err();
            assert!(e.to_string().contains(want), "{y}: {e}");
        }
        let e = ClientConfig::from_kubeconfig(Path::new("/nonexistent/kubeconfig"), T).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/kubeconfig"));
    }

    #[test]
    fn in_cluster() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ClientConfig::in_cluster_from("10.96.0.1", "443", dir.path(), T).is_err());
        std::fs::write(dir.path().join("token"), "t0k\n").unwrap();
        std::fs::write(dir.path().join("ca.crt"), "CA").unwrap();
        let c = ClientConfig::in_cluster_from("fd00::1", "443", dir.path(), T).unwrap();
        assert_eq!(c.server, "https://[fd00::1]:443");
        assert_eq!(c.token.as_deref(), Some("t0k"));
    }
}
