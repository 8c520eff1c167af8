//! The multus configuration (`NetConf`): every field of the Multus
//! configuration reference, its defaults and its validation rules
//! (multus-cni `pkg/types/conf.go`, `docs/configuration.md`).

use std::path::PathBuf;
use std::time::Duration;

use cni_types::json::canonicalize_keys;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::capabilities::RuntimeConfig;
use super::delegate::Delegate;
use super::selection::is_dns1123_label;
use crate::Error;

fn config_err(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

/// Default `confDir`.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/multus/net.d";
/// Default `cniDir`.
pub const DEFAULT_CNI_DIR: &str = "/var/lib/cni/multus";
/// Default `binDir`.
pub const DEFAULT_BIN_DIR: &str = "/opt/cni/bin";
/// Default `multusNamespace`.
pub const DEFAULT_MULTUS_NAMESPACE: &str = "kube-system";
/// Default `globalNamespaces` (the namespaces exempt from isolation).
pub const DEFAULT_GLOBAL_NAMESPACE: &str = "default";
/// Default total time ADD waits for the API server (Go: 2.5 s `shortPollTimeout`).
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_millis(2500);

/// `logLevel`, in decreasing order of severity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Only panics (the Go default).
    #[default]
    Panic,
    /// Errors.
    Error,
    /// Verbose: one line per delegate operation.
    Verbose,
    /// Everything.
    Debug,
}

impl LogLevel {
    /// Parses `panic`, `error`, `verbose` or `debug` (any case), as Go does.
    pub fn parse(s: &str) -> Option<LogLevel> {
        match s.to_ascii_lowercase().as_str() {
            "panic" => Some(LogLevel::Panic),
            "error" => Some(LogLevel::Error),
            "verbose" => Some(LogLevel::Verbose),
            "debug" => Some(LogLevel::Debug),
            _ => None,
        }
    }
}

/// `logOptions`: log file rotation (lumberjack's settings in Go).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogOptions {
    /// Days to keep old files (`maxAge`, Go default 5).
    #[serde(rename = "maxAge", default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u32>,
    /// Megabytes before rotating (`maxSize`, Go default 100).
    #[serde(rename = "maxSize", default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u32>,
    /// Old files to keep (`maxBackups`, Go default 5).
    #[serde(
        rename = "maxBackups",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_backups: Option<u32>,
    /// Gzip old files (`compress`, Go default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<bool>,
}

/// Logging settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// `logFile`: append log lines here.
    pub file: Option<PathBuf>,
    /// `logLevel`.
    pub level: LogLevel,
    /// `logToStderr` (default true).
    pub to_stderr: bool,
    /// `logOptions`.
    pub options: Option<LogOptions>,
}

/// The device manager's checkpoint (the fallback when kubelet's socket is absent).
pub const DEFAULT_CHECKPOINT_FILE: &str =
    "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";
/// The device-info base directory (NAD client `baseDevInfoPath`).
pub const DEFAULT_DEVICE_INFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// Where device IDs and device information come from (the multus config
/// keys `podResourcesSocket`, `deviceCheckpointFile`, `deviceInfoDir`;
/// Go multus has fixed paths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSources {
    /// kubelet's pod-resources socket.
    pub pod_resources_socket: PathBuf,
    /// The device-plugin checkpoint file.
    pub checkpoint_file: PathBuf,
    /// The device-info base directory (`dp/` and `cni/` below it).
    pub device_info_dir: PathBuf,
    /// Bound on the pod-resources call.
    pub timeout: Duration,
}

impl Default for DeviceSources {
    fn default() -> Self {
        DeviceSources {
            pod_resources_socket: super::podresources::DEFAULT_SOCKET.into(),
            checkpoint_file: DEFAULT_CHECKPOINT_FILE.into(),
            device_info_dir: DEFAULT_DEVICE_INFO_DIR.into(),
            timeout: super::podresources::DEFAULT_TIMEOUT,
        }
    }
}

impl DeviceSources {
    /// Reads the keys from the multus config object (absent or empty: the
    /// kubelet defaults).
    pub fn from_raw(raw: &Map<String, Value>) -> Result<DeviceSources, Error> {
        let mut s = DeviceSources::default();
        for (key, slot) in [
            ("podResourcesSocket", &mut s.pod_resources_socket),
            ("deviceCheckpointFile", &mut s.checkpoint_file),
            ("deviceInfoDir", &mut s.device_info_dir),
        ] {
            match raw.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(p)) if p.is_empty() => {}
                Some(Value::String(p)) => *slot = PathBuf::from(p),
                Some(other) => {
                    return Err(Error::Config(format!(
                        "{key:?} must be a path string, got {other}"
                    )))
                }
            }
        }
        Ok(s)
    }

    /// Where `CNIDeviceInfoFile`s are created (`<deviceInfoDir>/cni`).
    pub fn cni_info_dir(&self) -> PathBuf {
        self.device_info_dir.join("cni")
    }

    /// The device plugin's device-info file of a device (NAD client
    /// `getDPDeviceInfoPath`: `/` replaced by `-` in both names).
    pub fn dp_info_path(&self, resource: &str, device_id: &str) -> PathBuf {
        self.device_info_dir.join("dp").join(format!(
            "{}-{}-device.json",
            resource.replace('/', "-"),
            device_id.replace('/', "-")
        ))
    }
}

/// The multus configuration, decoded and validated.
#[derive(Clone, Debug)]
pub struct NetConf {
    /// `cniVersion`.
    pub cni_version: String,
    /// `name`.
    pub name: String,
    /// `type` (normally "multus").
    pub plugin_type: String,
    /// `confDir`: where on-disk delegate configs are looked up.
    pub conf_dir: PathBuf,
    /// `cniDir`: delegate cache and libcni result cache.
    pub cni_dir: PathBuf,
    /// `binDir`: searched for delegate plugins before `CNI_PATH`.
    pub bin_dir: PathBuf,
    /// `kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// Logging (`logFile`, `logLevel`, `logToStderr`, `logOptions`).
    pub log: LogConfig,
    /// Inline `delegates` (empty when `clusterNetwork` is set: it wins).
    pub delegates: Vec<Delegate>,
    /// `clusterNetwork`.
    pub cluster_network: Option<String>,
    /// `defaultNetworks`.
    pub default_networks: Vec<String>,
    /// `namespaceIsolation`.
    pub namespace_isolation: bool,
    /// `globalNamespaces`, split on commas and trimmed (default `["default"]`).
    pub global_namespaces: Vec<String>,
    /// `systemNamespaces` (default `["kube-system"]`).
    pub system_namespaces: Vec<String>,
    /// `multusNamespace` (default `kube-system`).
    pub multus_namespace: String,
    /// `readinessindicatorfile`.
    pub readiness_indicator_file: Option<PathBuf>,
    /// `retryDeleteOnError`.
    pub retry_delete_on_error: bool,
    /// `auxiliaryCNIChainName`.
    pub auxiliary_cni_chain_name: Option<String>,
    /// `runtimeConfig`.
    pub runtime_config: RuntimeConfig,
    /// `prevResult`, verbatim.
    pub prev_result: Option<Value>,
    /// `apiTimeoutSeconds` (ours): the total time ADD waits for the API.
    pub api_timeout: Duration,
    /// Device IDs and device information (`podResourcesSocket`,
    /// `deviceCheckpointFile`, `deviceInfoDir`; ours).
    pub devices: DeviceSources,
    /// `apiRequestTimeoutSeconds` (ours): the limit on one API request
    /// (default `apiTimeoutSeconds`; Go: a fixed minute, 250 ms per pod poll).
    pub api_request_timeout: Duration,
    /// Notes about ignored settings (e.g. `delegates` next to `clusterNetwork`).
    pub warnings: Vec<String>,
    /// The whole object, verbatim.
    pub raw: Map<String, Value>,
}

pub(crate) const KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "confDir",
    "cniDir",
    "binDir",
    "kubeconfig",
    "logFile",
    "logLevel",
    "logToStderr",
    "logOptions",
    "delegates",
    "clusterNetwork",
    "defaultNetworks",
    "namespaceIsolation",
    "globalNamespaces",
    "systemNamespaces",
    "multusNamespace",
    "readinessindicatorfile",
    "retryDeleteOnError",
    "auxiliaryCNIChainName",
    "runtimeConfig",
    "prevResult",
    "apiTimeoutSeconds",
    "podResourcesSocket",
    "deviceCheckpointFile",
    "deviceInfoDir",
    "apiRequestTimeoutSeconds",
];

fn get<'a>(raw: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    raw.get(key).filter(|v| !v.is_null())
}

/// The string at `key` (absent, null or empty: none); any other kind is
/// refused (code 7, naming the key).
pub(crate) fn string(raw: &Map<String, Value>, key: &str) -> Result<Option<String>, Error> {
    match get(raw, key) {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(config_err(format!("{key:?} must be a string, got {other}"))),
    }
}

pub(crate) fn boolean(raw: &Map<String, Value>, key: &str, default: bool) -> Result<bool, Error> {
    match get(raw, key) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(config_err(format!(
            "{key:?} must be a boolean, got {other}"
        ))),
    }
}

fn string_list(raw: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, Error> {
    match get(raw, key) {
        None => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(config_err(format!(
                    "{key:?} must be a list of strings, found {other}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(config_err(format!(
            "{key:?} must be a list of strings, got {other}"
        ))),
    }
}

fn typed<T: for<'de> Deserialize<'de>>(
    raw: &Map<String, Value>,
    key: &str,
) -> Result<Option<T>, Error> {
    get(raw, key)
        .map(|v| {
            cni_types::json::from_value_naming_key(v.clone())
                .map_err(|e| config_err(format!("{key:?}: {e}")))
        })
        .transpose()
}

/// A duration key in seconds, 0 < n <= 600.
fn seconds(raw: &Map<String, Value>, key: &str) -> Result<Option<Duration>, Error> {
    match get(raw, key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s <= 600.0 => Ok(Some(Duration::from_secs_f64(s))),
            _ => Err(config_err(format!(
                "{key:?} must be a number in (0, 600], got {v}"
            ))),
        },
    }
}

impl NetConf {
    /// Decodes and validates a multus configuration (stdin of the plugin).
    ///
    /// Malformed JSON is code 6; every rule violation is code 7 with a
    /// message naming the key.
    pub fn from_slice(bytes: &[u8]) -> Result<NetConf, Error> {
        let raw: Map<String, Value> = serde_json::from_slice(bytes).map_err(|e| Error::Decode {
            what: "multus configuration".into(),
            reason: e.to_string(),
        })?;
        NetConf::from_map(raw)
    }

    /// Decodes and validates a configuration object.
    pub fn from_map(mut raw: Map<String, Value>) -> Result<NetConf, Error> {
        // Go's encoding/json matches keys case-insensitively.
        canonicalize_keys(&mut raw, KEYS);
        let mut warnings = Vec::new();

        // Go's SetLogLevel: an unknown level is reported and ignored.
        let level = match string(&raw, "logLevel")? {
            None => LogLevel::default(),
            Some(s) => LogLevel::parse(&s).unwrap_or_else(|| {
                warnings.push(format!(
                    "multus logging: cannot set logging level to {s} (not one of panic, error, verbose, debug)"
                ));
                LogLevel::default()
            }),
        };
        // lumberjack reads a 0 maxSize as its default (100 MB).
        let options: Option<LogOptions> = typed(&raw, "logOptions")?;
        let log = LogConfig {
            file: string(&raw, "logFile")?.map(PathBuf::from),
            level,
            to_stderr: boolean(&raw, "logToStderr", true)?,
            options,
        };

        let cluster_network = string(&raw, "clusterNetwork")?;
        let default_networks = string_list(&raw, "defaultNetworks")?.unwrap_or_default();
        let raw_delegates = match get(&raw, "delegates") {
            None => Vec::new(),
            Some(Value::Array(a)) => a.clone(),
            Some(other) => {
                return Err(config_err(format!(
                    "\"delegates\" must be a list of CNI configurations, got {other}"
                )))
            }
        };
        if raw_delegates.is_empty() && cluster_network.is_none() {
            return Err(config_err(
                "at least one delegate/clusterNetwork must be specified",
            ));
        }
        let mut delegates = Vec::new();
        if cluster_network.is_some() {
            if !raw_delegates.is_empty() {
                warnings.push(
                    "\"delegates\" is ignored because \"clusterNetwork\" is set (they are mutually exclusive)".into(),
                );
            }
        } else {
            if !default_networks.is_empty() {
                warnings.push("\"defaultNetworks\" is ignored without \"clusterNetwork\"".into());
            }
            for (i, d) in raw_delegates.into_iter().enumerate() {
                let mut d = Delegate::from_value(d, None).map_err(|e| match e {
                    Error::DelegateConfig { reason, .. } => Error::DelegateConfig {
                        what: format!("delegates[{i}]"),
                        reason,
                    },
                    other => other,
                })?;
                d.master = i == 0;
                delegates.push(d);
            }
        }

        let global_namespaces = match string(&raw, "globalNamespaces")? {
            None => vec![DEFAULT_GLOBAL_NAMESPACE.to_string()],
            Some(s) => s.split(',').map(|n| n.trim().to_string()).collect(),
        };
        let system_namespaces =
            string_list(&raw, "systemNamespaces")?.unwrap_or_else(|| vec!["kube-system".into()]);
        let multus_namespace =
            string(&raw, "multusNamespace")?.unwrap_or_else(|| DEFAULT_MULTUS_NAMESPACE.into());
        if !is_dns1123_label(&multus_namespace) {
            return Err(config_err(format!(
                "\"multusNamespace\" {multus_namespace:?} is not a valid namespace name (DNS-1123 label)"
            )));
        }

        let auxiliary_cni_chain_name = string(&raw, "auxiliaryCNIChainName")?;
        if let Some(aux) = &auxiliary_cni_chain_name {
            cni_types::validate::network_name(aux).map_err(|_| {
                config_err(format!(
                    "\"auxiliaryCNIChainName\" {aux:?} is not a valid network name"
                ))
            })?;
            if !cluster_network.as_deref().is_some_and(|c| c.contains('/')) {
                return Err(config_err(
                    "\"auxiliaryCNIChainName\" needs \"clusterNetwork\" to be a path (its directory holds the chain)",
                ));
            }
        }

        let runtime_config: RuntimeConfig = typed(&raw, "runtimeConfig")?.unwrap_or_default();
        let api_timeout = seconds(&raw, "apiTimeoutSeconds")?.unwrap_or(DEFAULT_API_TIMEOUT);
        let api_request_timeout = seconds(&raw, "apiRequestTimeoutSeconds")?.unwrap_or(api_timeout);

        Ok(NetConf {
            cni_version: string(&raw, "cniVersion")?.unwrap_or_default(),
            name: string(&raw, "name")?.unwrap_or_default(),
            plugin_type: string(&raw, "type")?.unwrap_or_default(),
            conf_dir: string(&raw, "confDir")?
                .unwrap_or_else(|| DEFAULT_CONF_DIR.into())
                .into(),
            cni_dir: string(&raw, "cniDir")?
                .unwrap_or_else(|| DEFAULT_CNI_DIR.into())
                .into(),
            bin_dir: string(&raw, "binDir")?
                .unwrap_or_else(|| DEFAULT_BIN_DIR.into())
                .into(),
            kubeconfig: string(&raw, "kubeconfig")?.map(PathBuf::from),
            log,
            delegates,
            cluster_network,
            default_networks,
            namespace_isolation: boolean(&raw, "namespaceIsolation", false)?,
            global_namespaces,
            system_namespaces,
            multus_namespace,
            readiness_indicator_file: string(&raw, "readinessindicatorfile")?.map(PathBuf::from),
            retry_delete_on_error: boolean(&raw, "retryDeleteOnError", false)?,
            auxiliary_cni_chain_name,
            runtime_config,
            prev_result: get(&raw, "prevResult").cloned(),
            api_timeout,
            devices: DeviceSources::from_raw(&raw)?,
            api_request_timeout,
            warnings,
            raw,
        })
    }

    /// True when `namespace` is one of `systemNamespaces`.
    pub fn is_system_namespace(&self, namespace: &str) -> bool {
        self.system_namespaces.iter().any(|n| n == namespace)
    }

    /// True when a pod in `pod_namespace` may use a NAD in `target`.
    pub fn may_reference(&self, pod_namespace: &str, target: &str) -> bool {
        !self.namespace_isolation
            || pod_namespace == target
            || self.global_namespaces.iter().any(|n| n == target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::ErrorCode;
    use serde_json::json;

    fn load(v: Value) -> Result<NetConf, Error> {
        NetConf::from_slice(&serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn defaults() {
        let c =
            load(json!({"name": "multus", "type": "multus", "delegates": [{"type": "weave-net"}]}))
                .unwrap();
        assert_eq!(c.conf_dir, PathBuf::from("/etc/cni/multus/net.d"));
        assert_eq!(c.cni_dir, PathBuf::from("/var/lib/cni/multus"));
        assert_eq!(c.bin_dir, PathBuf::from("/opt/cni/bin"));
        assert_eq!(c.multus_namespace, "kube-system");
        assert_eq!(c.system_namespaces, vec!["kube-system"]);
        assert_eq!(c.global_namespaces, vec!["default"]);
        assert!(c.log.to_stderr);
        assert_eq!(c.log.level, LogLevel::Panic);
        assert_eq!(c.readiness_indicator_file, None);
        assert!(!c.namespace_isolation && !c.retry_delete_on_error);
        assert_eq!(c.api_timeout, DEFAULT_API_TIMEOUT);
        assert_eq!(c.kubeconfig, None);
        assert!(c.delegates[0].master);
    }

    #[test]
    fn every_field() {
        let c = load(json!({
            "cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
            "confDir": "/c", "cniDir": "/d", "binDir": "/b", "kubeconfig": "/k.yaml",
            "logFile": "/var/log/multus.log", "logLevel": "Debug", "logToStderr": false,
            "logOptions": {"maxAge": 5, "maxSize": 100, "maxBackups": 5, "compress": true},
            "clusterNetwork": "/etc/cni/net.d/10-flannel.conflist",
            "defaultNetworks": ["side", "other"],
            "namespaceIsolation": true, "globalNamespaces": " foo,bar ,default",
            "systemNamespaces": ["kube-system", "admin"], "multusNamespace": "multus",
            "readinessindicatorfile": "/run/ready", "retryDeleteOnError": true,
            "auxiliaryCNIChainName": "aux-chain",
            "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                "bandwidth": {"ingressRate": 1, "ingressBurst": 2, "egressRate": 3, "egressBurst": 4},
                "ips": ["10.0.0.1/24"], "mac": "c2:11:22:33:44:55", "infinibandGUID": "g",
                "deviceID": "0000:00:00.1", "CNIDeviceInfoFile": "/f"},
            "apiTimeoutSeconds": 1.5
        }))
        .unwrap();
        assert_eq!(c.log.level, LogLevel::Debug);
        assert_eq!(c.log.file, Some(PathBuf::from("/var/log/multus.log")));
        assert!(!c.log.to_stderr);
        let o = c.log.options.unwrap();
        assert_eq!(
            (o.max_age, o.max_size, o.max_backups, o.compress),
            (Some(5), Some(100), Some(5), Some(true))
        );
        assert_eq!(c.global_namespaces, vec!["foo", "bar", "default"]);
        assert_eq!(c.system_namespaces, vec!["kube-system", "admin"]);
        assert_eq!(c.multus_namespace, "multus");
        assert_eq!(c.default_networks, vec!["side", "other"]);
        assert_eq!(c.api_timeout, Duration::from_millis(1500));
        assert_eq!(c.auxiliary_cni_chain_name.as_deref(), Some("aux-chain"));
        let caps = c.runtime_config.capability_args();
        let keys: Vec<&str> = caps.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "portMappings",
                "bandwidth",
                "ips",
                "mac",
                "infinibandGUID",
                "deviceID",
                "CNIDeviceInfoFile"
            ]
        );
        assert!(
            c.may_reference("a", "a") && c.may_reference("a", "bar") && !c.may_reference("a", "b")
        );
        assert!(c.is_system_namespace("admin"));
    }

    #[test]
    fn case_insensitive_keys_like_go() {
        let c = load(json!({"Delegates": [{"type": "x"}], "CNIDir": "/x"})).unwrap();
        assert_eq!(c.cni_dir, PathBuf::from("/x"));
    }

    #[test]
    fn mutual_exclusion() {
        let c = load(json!({"clusterNetwork": "net", "delegates": [{"type": "x"}]})).unwrap();
        assert!(c.delegates.is_empty());
        assert!(c.warnings[0].contains("mutually exclusive"));
        let c = load(json!({"delegates": [{"type": "x"}], "defaultNetworks": ["a"]})).unwrap();
        assert!(c.warnings[0].contains("defaultNetworks"));
        let e = load(json!({"name": "n", "type": "multus"})).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidNetworkConfig);
        assert!(e
            .to_string()
            .contains("at least one delegate/clusterNetwork must be specified"));
        assert!(load(json!({"kubeconfig": "/k", "delegates": []})).is_err());
    }

    #[test]
    fn bad_values() {
        let cases = [
            (
                json!({"delegates": [{"_not_type": "weave-net"}]}),
                "delegates[0]",
            ),
            (
                json!({"delegates": {"type": "x"}}),
                "\"delegates\" must be a list",
            ),
            (
                json!({"delegates": [{"type": "x"}], "logOptions": {"maxAge": -1}}),
                "\"logOptions\"",
            ),
            (
                json!({"delegates": [{"type": "x"}], "logToStderr": "yes"}),
                "\"logToStderr\" must be a boolean",
            ),
            (
                json!({"delegates": [{"type": "x"}], "confDir": 5}),
                "\"confDir\" must be a string",
            ),
            (
                json!({"delegates": [{"type": "x"}], "multusNamespace": "Kube_System"}),
                "multusNamespace",
            ),
            (
                json!({"delegates": [{"type": "x"}], "systemNamespaces": "kube-system"}),
                "systemNamespaces",
            ),
            (
                json!({"clusterNetwork": "net", "auxiliaryCNIChainName": "aux"}),
                "to be a path",
            ),
            (
                json!({"delegates": [{"type": "x"}], "runtimeConfig": {"portMappings": 1}}),
                "runtimeConfig",
            ),
            (
                json!({"delegates": [{"type": "x"}], "apiTimeoutSeconds": 0}),
                "apiTimeoutSeconds",
            ),
            (json!({"delegates": [{"plugins": []}]}), "delegates[0]"),
        ];
        for (v, want) in cases {
            let e = load(v.clone()).unwrap_err();
            assert!(e.to_string().contains(want), "{v}: {e}");
            assert_eq!(e.code(), ErrorCode::InvalidNetworkConfig, "{v}");
        }
        // As Go: an unknown logLevel is reported, the level stays panic.
        let c = load(json!({"delegates": [{"type": "x"}], "logLevel": "info"})).unwrap();
        assert_eq!(c.log.level, LogLevel::Panic);
        assert!(c.warnings[0].contains("cannot set logging level to info"));
        let e = NetConf::from_slice(b"{\"delegates\": [").unwrap_err();
        assert_eq!(e.code(), ErrorCode::DecodingFailure);
    }

    #[test]
    fn sources_from_config() {
        let raw: Map<String, Value> = serde_json::from_str(
            r#"{"podResourcesSocket":"/t/k.sock","deviceCheckpointFile":"","deviceInfoDir":"/t/devinfo"}"#,
        )
        .unwrap();
        let s = DeviceSources::from_raw(&raw).unwrap();
        use std::path::Path;
        assert_eq!(s.pod_resources_socket, Path::new("/t/k.sock"));
        assert_eq!(s.checkpoint_file, Path::new(DEFAULT_CHECKPOINT_FILE));
        assert_eq!(
            s.dp_info_path("intel.com/sriov", "0000:03:02.1"),
            Path::new("/t/devinfo/dp/intel.com-sriov-0000:03:02.1-device.json")
        );
        let raw: Map<String, Value> = serde_json::from_str(r#"{"deviceInfoDir":1}"#).unwrap();
        assert!(DeviceSources::from_raw(&raw).is_err());
    }
}
