//! Automatic configuration (`multusConfigFile: "auto"`, multus-cni
//! `pkg/server/config/generator.go` and `manager.go`): the primary CNI
//! configuration is the first conf/conflist of `cniConfigDir` in libcni's
//! order that is not multus's own; `00-multus.conf` names it as the cluster
//! network, in its `cniVersion`, and is rewritten whenever it changes.
//!
//! The daemon keys of Go's `MultusConf` that shape this
//! ([`PRIMARY_KEYS`](super::config::PRIMARY_KEYS), read into a
//! [`PrimaryChoice`]):
//! * `multusMasterCNI`: the primary is this file (a name in the directory
//!   searched) instead of the first file in CNI order; Go's
//!   `NewManager` skips discovery when it is set.
//! * `forceCNIVersion`: the primary's file is rewritten once, when first
//!   found, with the daemon's `cniVersion` (Go's `overrideCNIVersion`:
//!   the whole object re-encoded with that `cniVersion`), and the generated
//!   configuration carries that version.
//! * `overrideNetworkName`: the generated configuration is named after the
//!   primary's `name` instead of `multus-cni-network`; a primary without a
//!   name is an error (Go: "could not override the network name").

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cni_files::atomic::AtomicWrite;
use serde_json::{json, Map, Value};

use super::config::{DaemonConfig, PrimaryChoice, AUTO_CONFIG_NAME};
use crate::Error;

/// How often the directory is rescanned (a stat of a handful of files).
pub const POLL: Duration = Duration::from_millis(200);

/// The NetConf keys of the daemon configuration copied into the shim's
/// generated configuration (what the shim's DEL fallback needs, and what
/// the runtime should see).
const COPIED_KEYS: &[&str] = &["cniDir", "binDir", "logFile", "logLevel", "logToStderr"];

/// The name of the generated configuration unless `overrideNetworkName`.
pub const DEFAULT_NETWORK_NAME: &str = "multus-cni-network";

/// What auto-configuration watches and writes.
#[derive(Clone, Debug)]
pub struct AutoConfig {
    /// Where the primary configuration is looked for (the daemon's
    /// `multusAutoconfigDir`).
    pub cni_config_dir: PathBuf,
    /// Where `00-multus.conf` is written (the daemon's `cniConfigDir`).
    pub out_dir: PathBuf,
    /// Nothing is written while this file is missing.
    pub readiness_indicator_file: Option<PathBuf>,
    /// The daemon's socket directory (written for the shim).
    pub socket_dir: PathBuf,
    /// Keys copied verbatim into the generated configuration.
    pub extra: Map<String, Value>,
    /// `multusMasterCNI`, `forceCNIVersion`, `overrideNetworkName`.
    pub choice: PrimaryChoice,
    /// Whether the version was forced already (Go forces once, at start).
    forced: Arc<AtomicBool>,
}

/// The primary configuration: its path and parsed content.
#[derive(Clone, Debug, PartialEq)]
pub struct Primary {
    /// The file.
    pub path: PathBuf,
    /// Its JSON.
    pub config: Map<String, Value>,
}

fn is_multus(config: &Map<String, Value>) -> bool {
    let t = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t == "multus" || t == "multus-shim")
    };
    t(&Value::Object(config.clone()))
        || config
            .get("plugins")
            .and_then(Value::as_array)
            .and_then(|p| p.first())
            .is_some_and(t)
}

impl AutoConfig {
    /// The settings of a daemon configuration, its primary keys checked.
    pub fn try_from_daemon(c: &DaemonConfig) -> Result<AutoConfig, Error> {
        let choice = PrimaryChoice::from_overrides(&c.netconf_overrides)?;
        Ok(AutoConfig {
            choice,
            ..AutoConfig::from_daemon(c)
        })
    }

    /// The settings of a daemon configuration (the primary keys ignored).
    pub fn from_daemon(c: &DaemonConfig) -> AutoConfig {
        let extra = COPIED_KEYS
            .iter()
            .filter_map(|k| {
                c.netconf_overrides
                    .get(*k)
                    .map(|v| (k.to_string(), v.clone()))
            })
            .collect();
        AutoConfig {
            // As Go's config manager: the primary is read from
            // `multusAutoconfigDir`, `00-multus.conf` goes to `cniConfigDir`.
            cni_config_dir: c.multus_autoconfig_dir.clone(),
            out_dir: c.cni_config_dir.clone(),
            readiness_indicator_file: c.readiness_indicator_file.clone(),
            socket_dir: c.socket_dir.clone(),
            extra,
            choice: PrimaryChoice::default(),
            forced: Arc::default(),
        }
    }

    /// The generated file's path.
    pub fn output(&self) -> PathBuf {
        self.out_dir.join(AUTO_CONFIG_NAME)
    }

    /// The primary configuration now, if any: files in CNI order
    /// (`.conf`, `.conflist`, `.json` sorted by name), skipping multus's own
    /// and files that do not parse.
    pub fn primary(&self) -> Option<Primary> {
        if let Some(name) = &self.choice.master_cni {
            return self.named_primary(name);
        }
        let files =
            cni_exec::conf::conf_files(&self.cni_config_dir, &[".conf", ".conflist", ".json"])
                .ok()?;
        let out = self.output();
        for path in files {
            if path == out {
                continue;
            }
            let Ok(bytes) = cni_files::capped::read_file(&path, cni_files::capped::MAX_ADMIN_FILE)
            else {
                continue;
            };
            let Ok(config) = serde_json::from_slice::<Map<String, Value>>(&bytes) else {
                tracing::warn!(file = %path.display(), "skipping unparsable CNI configuration");
                continue;
            };
            if is_multus(&config) {
                continue;
            }
            return Some(Primary { path, config });
        }
        None
    }

    /// `multusMasterCNI`: the named file (Go's `filepath.Join` of the
    /// directory and the name), whatever its content, unless it is the
    /// generated file itself.
    fn named_primary(&self, name: &str) -> Option<Primary> {
        let rel = Path::new(name);
        let path = self
            .cni_config_dir
            .join(rel.strip_prefix("/").unwrap_or(rel));
        if path == self.output() {
            tracing::error!(file = %path.display(), "\"multusMasterCNI\" names the generated configuration: refusing a recursive config load");
            return None;
        }
        let bytes = cni_files::capped::read_file(&path, cni_files::capped::MAX_ADMIN_FILE).ok()?;
        match serde_json::from_slice::<Map<String, Value>>(&bytes) {
            Ok(config) => Some(Primary { path, config }),
            Err(e) => {
                tracing::warn!(file = %path.display(), "\"multusMasterCNI\" is not a JSON object: {e}");
                None
            }
        }
    }

    /// `forceCNIVersion`: the first time a primary is found, its file is
    /// rewritten with the forced `cniVersion` (keys sorted, as Go's
    /// `json.Marshal` of a map).
    fn force_version(&self, primary: &mut Primary) -> Result<(), Error> {
        let Some(v) = &self.choice.force_cni_version else {
            return Ok(());
        };
        if self.forced.load(Ordering::SeqCst) {
            return Ok(());
        }
        primary
            .config
            .insert("cniVersion".into(), Value::String(v.clone()));
        let sorted: std::collections::BTreeMap<&String, &Value> = primary.config.iter().collect();
        let bytes = serde_json::to_vec(&sorted).unwrap_or_default();
        // Go's os.WriteFile keeps an existing file's mode.
        let mode = std::fs::metadata(&primary.path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
            .unwrap_or(0o644);
        AtomicWrite::new()
            .mode(mode)
            .fsync(true)
            .write(&primary.path, &bytes)
            .map_err(crate::cache::atomic_error)?;
        self.forced.store(true, Ordering::SeqCst);
        tracing::info!(file = %primary.path.display(), version = %v, "forced the primary CNI configuration's cniVersion");
        Ok(())
    }

    /// The configuration written for `primary`.
    pub fn generate(&self, primary: &Primary) -> Value {
        let version = match &self.choice.force_cni_version {
            Some(v) => json!(v),
            None => primary
                .config
                .get("cniVersion")
                .cloned()
                .unwrap_or_else(|| json!("1.0.0")),
        };
        let name = match primary
            .config
            .get("name")
            .filter(|_| self.choice.override_network_name)
        {
            Some(n) => n.clone(),
            None => json!(DEFAULT_NETWORK_NAME),
        };
        let mut v = json!({
            "cniVersion": version,
            "name": name,
            "type": "multus-shim",
            "socketDir": self.socket_dir,
            "clusterNetwork": primary.path,
        });
        // The runtime hands capability arguments only to what declares
        // them: multus declares the primary's so they reach it.
        let mut caps = Map::new();
        let plugins = match primary.config.get("plugins").and_then(Value::as_array) {
            Some(p) => p.clone(),
            None => vec![Value::Object(primary.config.clone())],
        };
        for p in plugins {
            if let Some(Value::Object(c)) = p.get("capabilities") {
                for (k, b) in c {
                    if b.as_bool() == Some(true) {
                        caps.insert(k.clone(), Value::Bool(true));
                    }
                }
            }
        }
        if let Value::Object(m) = &mut v {
            if !caps.is_empty() {
                m.insert("capabilities".into(), Value::Object(caps));
            }
            if let Some(r) = &self.readiness_indicator_file {
                m.insert("readinessindicatorfile".into(), json!(r));
            }
            for (k, e) in &self.extra {
                m.insert(k.clone(), e.clone());
            }
        }
        v
    }

    fn ready(&self) -> bool {
        self.readiness_indicator_file
            .as_ref()
            .is_none_or(|f| f.exists())
    }

    /// One pass: writes, rewrites or removes `00-multus.conf` to match the
    /// directory. Returns whether a configuration is in place.
    pub fn sync(&self) -> Result<bool, Error> {
        let out = self.output();
        let primary = self.primary().filter(|_| self.ready());
        let Some(mut primary) = primary else {
            // No primary (or not ready): a multus configuration pointing at
            // nothing would fail every pod, so none is better.
            match std::fs::remove_file(&out) {
                Ok(()) => {
                    tracing::info!(file = %out.display(), "primary CNI configuration gone: removed")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove multus configuration", out, e)),
            }
            return Ok(false);
        };
        if self.choice.override_network_name
            && primary
                .config
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            return Err(Error::Config(format!(
                "could not override the network name: the primary CNI configuration {} does not feature the network name",
                primary.path.display()
            )));
        }
        self.force_version(&mut primary)?;
        let mut bytes = serde_json::to_vec_pretty(&self.generate(&primary)).unwrap_or_default();
        bytes.push(b'\n');
        if std::fs::read(&out).ok().as_deref() != Some(&bytes[..]) {
            write_atomic_private(&out, &bytes)?;
            tracing::info!(file = %out.display(), primary = %primary.path.display(), "wrote multus configuration");
        }
        Ok(true)
    }

    /// Keeps the configuration in step until `stop` says so; `configured`
    /// tells whether one is in place.
    pub fn run(&self, configured: &AtomicBool, stop: &dyn Fn() -> bool) {
        while !stop() {
            match self.sync() {
                Ok(ok) => configured.store(ok, Ordering::SeqCst),
                Err(e) => {
                    tracing::error!("auto-configuration: {e}");
                    configured.store(false, Ordering::SeqCst);
                }
            }
            std::thread::sleep(POLL);
        }
    }
}

/// Writes `data` to `path` with the shared atomic writer
/// ([`cni_files::atomic`]): a synced temporary file (mode 0600, hidden, so
/// libcni never loads it) in the same directory, then renamed: a reader sees
/// the old file or the new one, never half of one.
pub fn write_atomic_private(path: &Path, data: &[u8]) -> Result<(), Error> {
    AtomicWrite::new()
        .mode(0o600)
        .create_dir(0o777)
        .fsync(true)
        .write(path, data)
        .map_err(crate::cache::atomic_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_from_autoconfig_dir_output_to_cni_config_dir() {
        // Go's config manager: the primary is read from
        // `multusAutoconfigDir`, `00-multus.conf` goes to `cniConfigDir`.
        let c = DaemonConfig::from_slice(
            br#"{"cniConfigDir": "/host/etc/cni/net.d", "multusConfigFile": "auto",
                 "multusAutoconfigDir": "/host/run/multus/cni/net.d"}"#,
            Path::new("daemon-config.json"),
        )
        .unwrap();
        let a = AutoConfig::from_daemon(&c);
        assert_eq!(a.cni_config_dir, Path::new("/host/run/multus/cni/net.d"));
        assert_eq!(a.out_dir, Path::new("/host/etc/cni/net.d"));
    }

    #[test]
    fn primary_in_cni_order_skipping_multus() {
        let d = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| std::fs::write(d.path().join(n), s).unwrap();
        w(
            "05-multus.conf",
            r#"{"cniVersion":"1.0.0","name":"m","type":"multus-shim"}"#,
        );
        w("07-broken.conf", "{");
        w(
            "10-flannel.conflist",
            r#"{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","capabilities":{"portMappings":true}}]}"#,
        );
        w(
            "20-other.conf",
            r#"{"cniVersion":"1.0.0","name":"o","type":"bridge"}"#,
        );
        let a = AutoConfig {
            cni_config_dir: d.path().into(),
            out_dir: d.path().into(),
            readiness_indicator_file: None,
            socket_dir: "/run/multus".into(),
            extra: Map::new(),
            choice: PrimaryChoice::default(),
            forced: Arc::default(),
        };
        let p = a.primary().unwrap();
        assert!(p.path.ends_with("10-flannel.conflist"));
        let g = a.generate(&p);
        assert_eq!(g["cniVersion"], "0.3.1");
        assert_eq!(g["type"], "multus-shim");
        assert_eq!(g["capabilities"], json!({"portMappings": true}));
        assert!(a.sync().unwrap());
        // The generated file itself is never the primary.
        assert!(a.primary().unwrap().path.ends_with("10-flannel.conflist"));
    }
}
