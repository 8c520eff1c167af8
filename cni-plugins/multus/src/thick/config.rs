//! The daemon configuration (multus-cni `pkg/server/types.go`
//! `ControllerNetConf`, `docs/thick-plugin.md`, `docs/configuration.md`):
//! the daemon's own keys, plus any multus `NetConf` key, which overrides the
//! shim's configuration on every request.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::conf::{LogConfig, LogLevel, LogOptions};

use crate::Error;

/// Where `multus-daemon` reads its configuration by default.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/cni/net.d/multus.d/daemon-config.json";
/// Default `socketDir`.
pub const DEFAULT_SOCKET_DIR: &str = "/run/multus/";
/// The socket's file name inside `socketDir`.
pub const SOCKET_NAME: &str = "multus.sock";
/// Default `cniConfigDir` (the node's CNI directory as the daemon's pod
/// mounts it).
pub const DEFAULT_CNI_CONFIG_DIR: &str = "/host/etc/cni/net.d";
/// The file auto-configuration writes.
pub const AUTO_CONFIG_NAME: &str = "00-multus.conf";
/// Default `perNodeCertificate.certDuration` (Go: 10 minutes).
pub const DEFAULT_CERT_DURATION: Duration = Duration::from_secs(600);

/// The keys that configure the daemon itself; every other key is a multus
/// `NetConf` key passed on to the thin code.
pub const DAEMON_KEYS: &[&str] = &[
    "chrootDir",
    "socketDir",
    "metricsPort",
    "metricsBindAddress",
    "perNodeCertificate",
    "cniConfigDir",
    "multusConfigFile",
    "multusAutoconfigDir",
    super::limit::CONNECTION_LIMIT_KEY,
    super::limit::CONNECTION_WAIT_KEY,
];

/// `perNodeCertificate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerNodeCertificate {
    /// `enabled`.
    pub enabled: bool,
    /// `bootstrapKubeconfig`: the credentials that may create CSRs.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `certDir`: where the key and the issued certificate are stored.
    pub cert_dir: PathBuf,
    /// `certDuration` (Go duration syntax, default 10m).
    pub cert_duration: Duration,
}

/// The daemon configuration, decoded.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// `chrootDir`: delegates run chrooted here (the host's root when the
    /// daemon runs in a pod).
    pub chroot_dir: Option<PathBuf>,
    /// `socketDir` (default `/run/multus/`).
    pub socket_dir: PathBuf,
    /// `metricsPort`: no metrics server when unset.
    pub metrics_port: Option<u16>,
    /// `metricsBindAddress` (ours; default all addresses as Go's `:port`).
    pub metrics_bind_address: String,
    /// `logFile`.
    pub log_file: Option<PathBuf>,
    /// `logLevel` (panic, error, verbose, debug).
    pub log_level: Option<String>,
    /// `logToStderr`.
    pub log_to_stderr: bool,
    /// `perNodeCertificate`.
    pub per_node_certificate: Option<PerNodeCertificate>,
    /// `cniConfigDir`: where `00-multus.conf` is written (and the primary
    /// CNI configuration is looked for unless `multusAutoconfigDir` is set).
    pub cni_config_dir: PathBuf,
    /// `multusConfigFile`: `"auto"` generates `00-multus.conf`; a path (or
    /// unset) leaves the node's configuration to the admin.
    pub multus_config_file: Option<String>,
    /// `multusAutoconfigDir`: where the primary CNI configuration is looked
    /// for (default `cniConfigDir`), as Go's config manager.
    pub multus_autoconfig_dir: PathBuf,
    /// `readinessindicatorfile`.
    pub readiness_indicator_file: Option<PathBuf>,
    /// Every multus `NetConf` key of the file: they override the shim's.
    pub netconf_overrides: Map<String, Value>,
    /// `connectionLimit` and `connectionLimitWaitSeconds`.
    pub request_limit: super::limit::LimitConfig,
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::DaemonConfig {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn string(raw: &Map<String, Value>, key: &str, path: &Path) -> Result<Option<String>, Error> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(bad(path, format!("{key:?} must be a string, got {other}"))),
    }
}

impl DaemonConfig {
    /// The daemon's logging (Go's `LoadDaemonNetConf`): `logFile`,
    /// `logLevel` (an unknown one keeps `panic`, as Go), `logToStderr`
    /// (default off), and `logOptions`, which Go applies once requests have
    /// overlaid the daemon file (we apply them from the start).
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            file: self.log_file.clone(),
            level: self
                .log_level
                .as_deref()
                .and_then(LogLevel::parse)
                .unwrap_or_default(),
            to_stderr: self.log_to_stderr,
            options: self
                .netconf_overrides
                .get("logOptions")
                .and_then(|v| LogOptions::deserialize(v).ok()),
        }
    }

    /// Reads and decodes the configuration file.
    pub fn from_file(path: &Path) -> Result<DaemonConfig, Error> {
        let bytes = cni_files::capped::read_file(path, cni_files::capped::MAX_ADMIN_FILE)
            .map_err(|e| Error::io("read daemon config", path, e))?;
        DaemonConfig::from_slice(&bytes, path)
    }

    /// Decodes a configuration; `path` only names it in errors.
    pub fn from_slice(bytes: &[u8], path: &Path) -> Result<DaemonConfig, Error> {
        let raw: Map<String, Value> = serde_json::from_slice(bytes)
            .map_err(|e| bad(path, format!("not a JSON object: {e}")))?;
        let metrics_port =
            match raw.get("metricsPort") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|p| u16::try_from(p).ok()).ok_or_else(
                    || bad(path, format!("\"metricsPort\" must be a port, got {v}")),
                )?),
            };
        let per_node_certificate = match raw.get("perNodeCertificate") {
            None | Some(Value::Null) => None,
            Some(Value::Object(p)) => {
                let enabled = match p.get("enabled") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(v) => {
                        return Err(bad(path, format!("\"perNodeCertificate.enabled\": {v}")))
                    }
                };
                let cert_duration = match string(p, "certDuration", path)? {
                    None => DEFAULT_CERT_DURATION,
                    Some(s) => cni_types::go_duration::parse(&s)
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| {
                            bad(
                                path,
                                format!(
                                    "\"perNodeCertificate.certDuration\" {s:?} is not a duration"
                                ),
                            )
                        })?,
                };
                let pnc = PerNodeCertificate {
                    enabled,
                    bootstrap_kubeconfig: string(p, "bootstrapKubeconfig", path)?
                        .map(PathBuf::from),
                    cert_dir: string(p, "certDir", path)?
                        .map(PathBuf::from)
                        .unwrap_or_else(|| PathBuf::from("/var/lib/multus/certs")),
                    cert_duration,
                };
                if pnc.enabled && pnc.bootstrap_kubeconfig.is_none() {
                    return Err(bad(
                        path,
                        "\"perNodeCertificate\" is enabled but \"bootstrapKubeconfig\" is not set",
                    ));
                }
                Some(pnc)
            }
            Some(v) => {
                return Err(bad(
                    path,
                    format!("\"perNodeCertificate\" must be an object, got {v}"),
                ))
            }
        };
        let log_to_stderr = match raw.get("logToStderr") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(bad(
                    path,
                    format!("\"logToStderr\" must be a boolean, got {v}"),
                ))
            }
        };
        let cni_config_dir = string(&raw, "cniConfigDir", path)?
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CNI_CONFIG_DIR));
        let multus_autoconfig_dir = string(&raw, "multusAutoconfigDir", path)?
            .map(PathBuf::from)
            .unwrap_or_else(|| cni_config_dir.clone());
        let netconf_overrides = raw
            .iter()
            .filter(|(k, _)| !DAEMON_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // The auto-configuration keys are of their types even when
        // auto-configuration is off.
        PrimaryChoice::from_overrides(&netconf_overrides)?;
        Ok(DaemonConfig {
            chroot_dir: string(&raw, "chrootDir", path)?.map(PathBuf::from),
            socket_dir: string(&raw, "socketDir", path)?
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET_DIR)),
            metrics_port,
            metrics_bind_address: string(&raw, "metricsBindAddress", path)?
                .unwrap_or_else(|| "0.0.0.0".into()),
            log_file: string(&raw, "logFile", path)?.map(PathBuf::from),
            log_level: string(&raw, "logLevel", path)?,
            log_to_stderr,
            per_node_certificate,
            cni_config_dir,
            multus_config_file: string(&raw, "multusConfigFile", path)?,
            multus_autoconfig_dir,
            readiness_indicator_file: string(&raw, "readinessindicatorfile", path)?
                .map(PathBuf::from),
            netconf_overrides,
            request_limit: super::limit::LimitConfig::from_raw(&raw, path)?,
        })
    }

    /// The daemon's socket: `socketDir/multus.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.socket_dir.join(SOCKET_NAME)
    }

    /// True when `multusConfigFile` is `"auto"`.
    pub fn auto_config(&self) -> bool {
        self.multus_config_file.as_deref() == Some("auto")
    }
}

/// The daemon keys choosing and shaping the primary configuration (they
/// are also laid over requests, as Go overlays its whole daemon file).
pub const PRIMARY_KEYS: &[&str] = &["multusMasterCNI", "forceCNIVersion", "overrideNetworkName"];

/// `multusMasterCNI`, `forceCNIVersion`, `overrideNetworkName`: which
/// configuration auto-configuration takes as the primary, and how it
/// shapes it (see [`autoconf`](super::autoconf)).
#[derive(Clone, Debug, Default)]
pub struct PrimaryChoice {
    /// `multusMasterCNI`: the primary's file name.
    pub master_cni: Option<String>,
    /// `forceCNIVersion` with the daemon's `cniVersion`: the version forced
    /// onto the primary's file.
    pub force_cni_version: Option<String>,
    /// `overrideNetworkName`.
    pub override_network_name: bool,
}

impl PrimaryChoice {
    /// The keys from a daemon configuration's NetConf keys; a key of the
    /// wrong type, or `forceCNIVersion` without `cniVersion`, is an error.
    pub fn from_overrides(o: &Map<String, Value>) -> Result<PrimaryChoice, Error> {
        let bad = |msg: String| Error::Config(msg);
        let flag = |k: &str| match o.get(k) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(bad(format!("{k:?} must be a boolean, got {v}"))),
        };
        let master_cni = match o.get("multusMasterCNI") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                return Err(bad(format!(
                    "\"multusMasterCNI\" must be a string, got {v}"
                )))
            }
        };
        let force_cni_version = if flag("forceCNIVersion")? {
            match o
                .get("cniVersion")
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
            {
                Some(v) => Some(v.to_string()),
                None => {
                    return Err(bad(
                        "\"forceCNIVersion\" needs the daemon configuration's \"cniVersion\""
                            .into(),
                    ))
                }
            }
        } else {
            None
        };
        Ok(PrimaryChoice {
            master_cni,
            force_cni_version,
            override_network_name: flag("overrideNetworkName")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_field() {
        let c = DaemonConfig::from_slice(
            json!({"chrootDir": "/hostroot", "socketDir": "/tmp/s", "metricsPort": 9091,
                "logFile": "/tmp/l", "logLevel": "verbose", "logToStderr": true,
                "perNodeCertificate": {"enabled": true, "bootstrapKubeconfig": "/b",
                    "certDir": "/c", "certDuration": "1h30m"},
                "cniConfigDir": "/etc/cni/net.d", "multusConfigFile": "auto",
                "readinessindicatorfile": "/r", "clusterNetwork": "k", "cniDir": "/d"})
            .to_string()
            .as_bytes(),
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.chroot_dir.as_deref(), Some(Path::new("/hostroot")));
        assert_eq!(c.socket_path(), Path::new("/tmp/s/multus.sock"));
        assert_eq!(c.metrics_port, Some(9091));
        assert!(c.log_to_stderr && c.auto_config());
        let p = c.per_node_certificate.unwrap();
        assert_eq!(p.cert_duration, Duration::from_secs(5400));
        assert_eq!(c.multus_autoconfig_dir, Path::new("/etc/cni/net.d"));
        // NetConf keys (and the shared log/readiness keys) are passed on.
        let keys: Vec<&str> = c.netconf_overrides.keys().map(String::as_str).collect();
        assert!(keys.contains(&"clusterNetwork") && keys.contains(&"logFile"));
        assert!(!keys.contains(&"socketDir") && !keys.contains(&"metricsPort"));
    }

    #[test]
    fn defaults_and_errors() {
        let c = DaemonConfig::from_slice(b"{}", Path::new("x")).unwrap();
        assert_eq!(c.socket_path(), Path::new("/run/multus/multus.sock"));
        assert!(c.metrics_port.is_none() && !c.auto_config());
        for bad in [
            r#"{"metricsPort": 70000}"#,
            r#"{"perNodeCertificate": {"enabled": true}}"#,
            r#"{"perNodeCertificate": {"enabled": true, "bootstrapKubeconfig": "/b", "certDuration": "soon"}}"#,
            r#"[1]"#,
        ] {
            assert!(
                DaemonConfig::from_slice(bad.as_bytes(), Path::new("x")).is_err(),
                "{bad}"
            );
        }
    }
}
