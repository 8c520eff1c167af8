//! The exporter's configuration: OpenTelemetry's standard environment
//! variables, overridden by a network config's `otlp` key.
//!
//! Nothing configured means no exporter: export happens only when an
//! endpoint is set (there is no default `localhost:4318`).

use std::fmt;
use std::time::Duration;

use crate::Error;

/// The export budget when none is configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);
/// The most any configuration may raise the export budget to.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(2);

/// Where to POST: an `http://` URL taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The host: an IPv4 address, an IPv6 address (without brackets) or a
    /// name.
    pub host: String,
    /// The port (80 when the URL names none).
    pub port: u16,
    /// The path, starting with `/`.
    pub path: String,
}

impl Endpoint {
    /// Parses `http://host[:port][/path]`; `https://` is refused
    /// ([`Error::HttpsUnsupported`]).
    pub fn parse(url: &str) -> Result<Endpoint, Error> {
        let invalid = |reason| Error::InvalidEndpoint {
            endpoint: url.to_string(),
            reason,
        };
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(Error::HttpsUnsupported(url.to_string()));
        }
        if !lower.starts_with("http://") {
            return Err(invalid("not an http:// URL"));
        }
        let rest = &url["http://".len()..];
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        if authority.contains('@') {
            return Err(invalid("user information in the URL"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| invalid("unclosed ["))?;
            let host = &v6[..end];
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(invalid("not an IPv6 address in [ ]"));
            }
            (host, &v6[end + 1..])
        } else {
            match authority.find(':') {
                Some(i) => (&authority[..i], &authority[i..]),
                None => (authority, ""),
            }
        };
        let port = match port {
            "" => 80,
            p => p
                .strip_prefix(':')
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| invalid("bad port"))?,
        };
        let name_ok = |h: &str| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b':')
        };
        if !name_ok(host) {
            return Err(invalid("bad host"));
        }
        if path.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(invalid("bad path"));
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path,
        })
    }

    /// `host:port` as an HTTP `Host` header and in messages.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The values of a network config's `otlp` key (cni-exec reads the JSON);
/// each one set wins over the environment.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `endpoint`: the base URL, `/v1/traces` appended.
    pub endpoint: Option<String>,
    /// `tracesEndpoint`: the URL as is.
    pub traces_endpoint: Option<String>,
    /// `headers`: extra request headers (secrets: never logged).
    pub headers: Vec<(String, String)>,
    /// `serviceName`.
    pub service_name: Option<String>,
    /// `timeoutMs`: the export budget.
    pub timeout_ms: Option<u64>,
}

impl fmt::Debug for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overrides")
            .field("endpoint", &self.endpoint)
            .field("traces_endpoint", &self.traces_endpoint)
            .field("headers", &Redacted(&self.headers))
            .field("service_name", &self.service_name)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// Header names with their values replaced.
struct Redacted<'a>(&'a [(String, String)]);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, _)| (k, "<redacted>")))
            .finish()
    }
}

/// A complete exporter configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Where spans are POSTed.
    pub endpoint: Endpoint,
    /// Extra request headers (values are secrets: `Debug` redacts them).
    pub headers: Vec<(String, String)>,
    /// The resource's attributes, `service.name` first.
    pub resource: Vec<(String, String)>,
    /// The whole export's budget (connect, write, read), at most
    /// [`MAX_TIMEOUT`].
    pub timeout: Duration,
}

impl fmt::Debug for ExportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportConfig")
            .field("endpoint", &self.endpoint)
            .field("headers", &Redacted(&self.headers))
            .field("resource", &self.resource)
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `k=v,k2=v2` (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES),
/// percent-decoded, entries without `=` or key skipped.
pub fn parse_pairs(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|item| {
            let (k, v) = item.split_once('=')?;
            let k = percent_decode(k.trim());
            (!k.is_empty()).then(|| (k, percent_decode(v.trim())))
        })
        .collect()
}

/// Sets `k` to `v` in `list`, replacing an earlier value (header names
/// case-insensitively).
fn upsert(list: &mut Vec<(String, String)>, k: String, v: String) {
    match list
        .iter_mut()
        .find(|(old, _)| old.eq_ignore_ascii_case(&k))
    {
        Some(slot) => slot.1 = v,
        None => list.push((k, v)),
    }
}

/// A header that cannot be sent as is (CR, LF, or a bad name) is dropped.
fn header_ok(k: &str, v: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b))
        && !v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

fn env_true(v: Option<String>) -> bool {
    v.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

impl ExportConfig {
    /// The configuration from the environment read through `env` and the
    /// config key's `overrides`: `Ok(None)` when nothing asks for export
    /// (no endpoint; `OTEL_SDK_DISABLED=true`; `OTEL_TRACES_EXPORTER`
    /// `none` or anything but `otlp`), an error when export is asked for
    /// but cannot be done (`https://`, the `grpc` or `http/json`
    /// protocols, a malformed endpoint): the caller logs it and goes on.
    /// `default_service` is `service.name` when neither
    /// `OTEL_SERVICE_NAME`, `serviceName` nor `OTEL_RESOURCE_ATTRIBUTES`
    /// gives one (the plugin binary's file name).
    pub fn resolve(
        env: impl Fn(&str) -> Option<String>,
        overrides: &Overrides,
        default_service: &str,
    ) -> Result<Option<ExportConfig>, Error> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        if env_true(env("OTEL_SDK_DISABLED")) {
            return Ok(None);
        }
        if let Some(exporter) = env("OTEL_TRACES_EXPORTER") {
            // A list is allowed; only `otlp` is ours.
            if !exporter
                .split(',')
                .any(|e| e.trim().eq_ignore_ascii_case("otlp"))
            {
                return Ok(None);
            }
        }
        let from_config = overrides.endpoint.is_some() || overrides.traces_endpoint.is_some();
        let (base, full) = if from_config {
            (
                overrides.endpoint.clone(),
                overrides.traces_endpoint.clone(),
            )
        } else {
            (
                env("OTEL_EXPORTER_OTLP_ENDPOINT"),
                env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            )
        };
        let url = match (full, base) {
            (Some(full), _) => full.trim().to_string(),
            (None, Some(base)) => format!("{}/v1/traces", base.trim().trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        if !from_config {
            let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"));
            if let Some(p) = protocol.filter(|p| p.trim() != "http/protobuf") {
                return Err(Error::UnsupportedProtocol(p));
            }
        }
        let endpoint = Endpoint::parse(&url)?;

        let mut headers = Vec::new();
        for var in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            for (k, v) in parse_pairs(&env(var).unwrap_or_default()) {
                upsert(&mut headers, k, v);
            }
        }
        for (k, v) in &overrides.headers {
            upsert(&mut headers, k.clone(), v.clone());
        }
        headers.retain(|(k, v)| header_ok(k, v));
        // What the request itself sets is not overridable.
        headers.retain(|(k, _)| {
            !["host", "content-type", "content-length", "connection"]
                .iter()
                .any(|h| k.eq_ignore_ascii_case(h))
        });

        let mut resource = parse_pairs(&env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default());
        let service = overrides
            .service_name
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| env("OTEL_SERVICE_NAME"))
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| default_service.to_string());
        resource.retain(|(k, _)| k != "service.name");
        resource.insert(0, ("service.name".to_string(), service));

        let ms = overrides.timeout_ms.or_else(|| {
            env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        let timeout = match ms {
            None => DEFAULT_TIMEOUT,
            // 0 is "no limit" to OpenTelemetry: ours is the cap.
            Some(0) => MAX_TIMEOUT,
            Some(ms) => Duration::from_millis(ms).min(MAX_TIMEOUT),
        };
        Ok(Some(ExportConfig {
            endpoint,
            headers,
            resource,
            timeout,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(vars: &[(&str, &str)], o: &Overrides) -> Result<Option<ExportConfig>, Error> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ExportConfig::resolve(|k| m.get(k).cloned(), o, "bridge")
    }

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:4318/v1/traces").unwrap();
        assert_eq!(e.authority(), "127.0.0.1:4318");
        assert_eq!(e.path, "/v1/traces");
        let e = Endpoint::parse("http://[::1]:9/x").unwrap();
        assert_eq!((e.host.as_str(), e.authority()), ("::1", "[::1]:9".into()));
        let e = Endpoint::parse("http://collector.local").unwrap();
        assert_eq!((e.port, e.path.as_str()), (80, "/"));
        assert!(matches!(
            Endpoint::parse("https://x:4318"),
            Err(Error::HttpsUnsupported(_))
        ));
        for bad in [
            "ftp://x",
            "http://",
            "http://a b/",
            "http://[zz]:1/",
            "http://x:0/",
            "http://u@h/",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nothing_configured_is_no_exporter() {
        assert!(resolve(&[], &Overrides::default()).unwrap().is_none());
        assert!(
            resolve(&[("OTEL_SERVICE_NAME", "x")], &Overrides::default())
                .unwrap()
                .is_none()
        );
        let ep = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ] {
            assert!(resolve(&[ep, off], &Overrides::default())
                .unwrap()
                .is_none());
        }
        assert!(matches!(
            resolve(
                &[ep, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
                &Overrides::default()
            ),
            Err(Error::UnsupportedProtocol(_))
        ));
    }

    #[test]
    fn env_and_config_key() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://10.0.0.1:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcret,x=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x=2"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=a,k8s.node.name=n1",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "100000"),
        ];
        let c = resolve(&vars, &Overrides::default()).unwrap().unwrap();
        assert_eq!(c.endpoint.path, "/v1/traces");
        assert_eq!(c.endpoint.authority(), "10.0.0.1:4318");
        assert_eq!(
            c.headers,
            vec![
                ("api-key".into(), "s=cret".into()),
                ("x".into(), "2".into())
            ]
        );
        assert_eq!(
            c.resource,
            vec![
                ("service.name".into(), "a".into()),
                ("k8s.node.name".into(), "n1".into())
            ]
        );
        assert_eq!(c.timeout, MAX_TIMEOUT);
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("s=cret") && debug.contains("api-key"),
            "{debug}"
        );

        let o = Overrides {
            traces_endpoint: Some("http://[::1]:1234/t".into()),
            headers: vec![("api-key".into(), "other".into())],
            service_name: Some("svc".into()),
            timeout_ms: Some(50),
            ..Default::default()
        };
        let c = resolve(&vars, &o).unwrap().unwrap();
        assert_eq!((c.endpoint.path.as_str(), c.endpoint.port), ("/t", 1234));
        assert_eq!(c.headers[0], ("api-key".into(), "other".into()));
        assert_eq!(c.resource[0], ("service.name".into(), "svc".into()));
        assert_eq!(c.timeout, Duration::from_millis(50));
        assert!(!format!("{o:?}").contains("other"));
        // Without any: the binary's name, the default budget.
        let c = resolve(
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:1/p")],
            &Overrides::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.resource, vec![("service.name".into(), "bridge".into())]);
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
    }
}
