//! A blocking HTTPS client for the API server (ureq + rustls with the
//! `ring` provider): no async runtime in a short-lived plugin process.

use std::collections::BTreeMap;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use ureq::Agent;

use super::{annotations_patch, ClientConfig, KubeClient, NetworkAttachmentDefinition, Pod};
use crate::Error;

/// A [`KubeClient`] over HTTPS.
pub struct HttpKubeClient {
    agent: Agent,
    server: String,
    token: Option<String>,
}

impl std::fmt::Debug for HttpKubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("HttpKubeClient")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// The `k8s.request` span of one API server request (OpenTelemetry's HTTP
/// client attributes; the path without its query).
fn request_span(method: &str, path: &str) -> tracing::Span {
    cni_types::step_span!(
        "k8s.request",
        http.request.method = %method,
        url.path = %path.split('?').next().unwrap_or(path),
        http.response.status_code = tracing::field::Empty
    )
}

/// Records the answer's status on `span`; 4xx and 5xx mark it failed, as
/// OpenTelemetry's HTTP client conventions do.
fn record_status(span: &tracing::Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 400 {
        cni_types::trace::record_error(span, &format_args!("HTTP {status}"));
    }
}

fn cfg_err(reason: String) -> Error {
    Error::KubeConfig {
        source_name: "client".into(),
        reason,
    }
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<Certificate<'static>>, Error> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item.map_err(|e| cfg_err(format!("parse {what}: {e}")))? {
            PemItem::Certificate(c) => certs.push(c),
            _ => continue,
        }
    }
    if certs.is_empty() {
        return Err(cfg_err(format!("{what}: no PEM certificate found")));
    }
    Ok(certs)
}

impl HttpKubeClient {
    /// Builds a client; every call is bounded by `config.timeout`.
    pub fn new(config: &ClientConfig) -> Result<HttpKubeClient, Error> {
        if !config.server.starts_with("https://") && !config.server.starts_with("http://") {
            return Err(cfg_err(format!(
                "server {:?} is not an http(s) URL",
                config.server
            )));
        }
        let mut tls = TlsConfig::builder();
        if let Some(ca) = &config.ca_pem {
            let roots = certificates(ca, "certificate-authority")?;
            tls = tls.root_certs(RootCerts::new_with_certs(&roots));
        }
        if config.insecure_skip_tls_verify {
            tls = tls.disable_verification(true);
        }
        if let (Some(cert), Some(key)) = (&config.client_cert_pem, &config.client_key_pem) {
            let chain = certificates(cert, "client-certificate")?;
            let key =
                PrivateKey::from_pem(key).map_err(|e| cfg_err(format!("parse client-key: {e}")))?;
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        let agent: Agent = Agent::config_builder()
            .tls_config(tls.build())
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent("multus-rs")
            .build()
            .into();
        Ok(HttpKubeClient {
            agent,
            server: config.server.clone(),
            token: config.token.clone(),
        })
    }

    /// Sends `method path` with the client's credentials: GET without a
    /// body, PATCH with a merge patch, POST and PUT with JSON (`{}` when
    /// none is given); the answer's status and body (read up to 16 MiB).
    /// `what` names the request in errors.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        what: &str,
    ) -> Result<(u16, Vec<u8>), Error> {
        let span = request_span(method, path);
        let exchanged = span.in_scope(|| self.exchange_now(method, path, body, what));
        let exchanged = cni_types::trace::record_result(&span, exchanged);
        if let Ok((status, _)) = &exchanged {
            record_status(&span, *status);
        }
        exchanged
    }

    fn exchange_now(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        what: &str,
    ) -> Result<(u16, Vec<u8>), Error> {
        let url = format!("{}{path}", self.server);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = if method == "GET" {
            let mut req = self.agent.get(&url).header("Accept", "application/json");
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            req.call()
        } else {
            let (builder, content_type) = match method {
                "PATCH" => (self.agent.patch(&url), "application/merge-patch+json"),
                "POST" => (self.agent.post(&url), "application/json"),
                _ => (self.agent.put(&url), "application/json"),
            };
            let mut req = builder
                .header("Accept", "application/json")
                .content_type(content_type);
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            req.send(body.unwrap_or(b"{}"))
        };
        let mut resp = result.map_err(|e| Error::ApiUnreachable {
            op: format!("{what} at {}", self.server),
            reason: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(16 << 20)
            .read_to_vec()
            .map_err(|e| Error::ApiUnreachable {
                op: format!("{what}: read the response"),
                reason: e.to_string(),
            })?;
        Ok((status, body))
    }

    fn call(
        &self,
        op: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        path: &str,
        patch: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, Error> {
        let method = if patch.is_some() { "PATCH" } else { "GET" };
        let what = format!("{op} {namespace}/{name}");
        let (status, body) = self.exchange(method, path, patch.as_deref(), &what)?;
        match status {
            200..=299 => Ok(body),
            404 => Err(Error::ApiNotFound {
                op: op.into(),
                kind: kind.into(),
                namespace: namespace.into(),
                name: name.into(),
            }),
            _ => Err(api_status(&what, status, &body)),
        }
    }
}

impl HttpKubeClient {
    /// `GET path` (a list, for the daemon's watch cache): the body.
    pub fn get_path(&self, op: &str, path: &str) -> Result<Vec<u8>, Error> {
        self.call(op, "list", "", "", path, None)
    }

    /// `method path` (`GET`, `POST`, `PUT`; `PATCH` sends a merge patch) with an
    /// optional JSON body (create and read
    /// CertificateSigningRequests): the response body of a 2xx answer.
    pub fn request_json(
        &self,
        method: &str,
        op: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Vec<u8>, Error> {
        let (status, bytes) = self.exchange(method, path, body, op)?;
        if (200..300).contains(&status) {
            return Ok(bytes);
        }
        Err(api_status(op, status, &bytes))
    }

    /// `GET path` as a stream (a watch): the open body, read as events
    /// arrive, bounded by `timeout` instead of the client's API timeout.
    pub fn stream(
        &self,
        op: &str,
        path: &str,
        timeout: std::time::Duration,
    ) -> Result<impl std::io::Read, Error> {
        let url = format!("{}{path}", self.server);
        let mut req = self
            .agent
            .get(&url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let resp = req.call().map_err(|e| Error::ApiUnreachable {
            op: format!("{op} at {}", self.server),
            reason: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(Error::ApiStatus {
                op: op.into(),
                status,
                message: String::new(),
            });
        }
        Ok(resp.into_body().into_reader())
    }
}

impl HttpKubeClient {
    /// `POST path` with a JSON body, bounded by `timeout` instead of the
    /// client's API timeout.
    fn post_within(
        &self,
        op: &str,
        path: &str,
        body: &[u8],
        timeout: std::time::Duration,
    ) -> Result<(), Error> {
        let span = request_span("POST", path);
        let posted = span.in_scope(|| self.post_within_now(op, path, body, timeout));
        cni_types::trace::record_result(&span, posted)
    }

    fn post_within_now(
        &self,
        op: &str,
        path: &str,
        body: &[u8],
        timeout: std::time::Duration,
    ) -> Result<(), Error> {
        let url = format!("{}{path}", self.server);
        let mut req = self
            .agent
            .post(&url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Accept", "application/json")
            .content_type("application/json");
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = req.send(body).map_err(|e| Error::ApiUnreachable {
            op: format!("{op} at {}", self.server),
            reason: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        // Inside `post_within`'s span.
        record_status(&tracing::Span::current(), status);
        if (200..300).contains(&status) {
            return Ok(());
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .unwrap_or_default();
        Err(api_status(op, status, &body))
    }
}

impl KubeClient for HttpKubeClient {
    fn create_event(
        &self,
        namespace: &str,
        event: &serde_json::Value,
        timeout: std::time::Duration,
    ) -> Result<(), Error> {
        let body = serde_json::to_vec(event).map_err(|e| Error::Decode {
            what: "event".into(),
            reason: e.to_string(),
        })?;
        self.post_within(
            &format!("create event in {namespace}"),
            &format!("/api/v1/namespaces/{namespace}/events"),
            &body,
            timeout,
        )
    }

    fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<super::resource::ResourceClaim, Error> {
        let body = self.call(
            "get resourceclaim",
            "resourceclaim",
            namespace,
            name,
            &format!("/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"),
            None,
        )?;
        super::resource::ResourceClaim::from_json(&body)
    }

    fn list_resource_slice_devices(
        &self,
        node_name: &str,
        driver: &str,
    ) -> Result<Vec<super::resource::SliceDevice>, Error> {
        let mut selector = format!("spec.driver={driver}");
        if !node_name.is_empty() {
            selector = format!("spec.nodeName={node_name},{selector}");
        }
        let body = self.call(
            "list resourceslices",
            "resourceslice",
            "",
            &selector,
            &format!("/apis/resource.k8s.io/v1/resourceslices?fieldSelector={selector}"),
            None,
        )?;
        super::resource::slice_devices_from_json(&body)
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Result<Pod, Error> {
        let body = self.call(
            "get pod",
            "pod",
            namespace,
            name,
            &format!("/api/v1/namespaces/{namespace}/pods/{name}"),
            None,
        )?;
        Pod::from_json(&body)
    }

    fn get_network_attachment_definition(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, Error> {
        let body = self.call(
            "get network-attachment-definition",
            "network-attachment-definition",
            namespace,
            name,
            &format!(
                "/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions/{name}"
            ),
            None,
        )?;
        NetworkAttachmentDefinition::from_json(&body)
    }

    fn patch_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), Error> {
        let body =
            serde_json::to_vec(&annotations_patch(annotations)).map_err(|e| Error::Decode {
                what: "annotation patch".into(),
                reason: e.to_string(),
            })?;
        // The status subresource: what multus's RBAC grants (`pods/status`),
        // and what the Go plugin writes through (UpdateStatus).
        self.call(
            "patch pod",
            "pod",
            namespace,
            name,
            &format!("/api/v1/namespaces/{namespace}/pods/{name}/status"),
            Some(body),
        )
        .map(|_| ())
    }
}

/// A non-2xx answer: the API server's `Status.message` when the body is
/// one, else the body's first 200 characters.
fn api_status(op: &str, status: u16, body: &[u8]) -> Error {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    Error::ApiStatus {
        op: op.into(),
        status,
        message,
    }
}
