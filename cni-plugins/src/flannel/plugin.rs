//! flannel's commands (flannel-io/cni-plugin `flannel.go`,
//! `flannel_linux.go`): ADD renders and saves the delegate config then
//! delegates; DEL delegates the saved config; CHECK does nothing; STATUS
//! reports whether `subnet.env` is there; GC is passed to the delegate.
//!
//! The saved config is keyed by container id **and** interface name
//! (`<dataDir>/<containerID>@<ifname>`; `@` never occurs in a container id,
//! so no two attachments share a file), unlike the reference's
//! `<dataDir>/<containerID>` where a second flannel attachment of the same
//! pod overwrites the first. For a node that goes back to the Go plugin,
//! ADD also writes the reference's file when it is absent, and DEL removes
//! it only if it still holds what we wrote; DEL falls back to that file for
//! pods a Go flannel added.

use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use cni_exec::{delegate_add, delegate_del, delegate_gc, Plugin, Request};
use cni_files::atomic::AtomicWrite;
use cni_types::{CniResult, LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY};
use serde_json::{Map, Value};

use super::delegate::render;
use super::error::{Error, Result};
use super::subnet_env::SubnetEnv;
use super::FlannelConf;

/// The flannel plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flannel;

impl Flannel {
    /// The plugin.
    pub fn new() -> Self {
        Flannel
    }
}

/// `<dataDir>/<containerID>@<ifname>`: where ADD saves the delegate config.
pub fn saved_config_path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(format!("{container_id}@{ifname}"))
}

/// `<dataDir>/<containerID>`: the reference's file.
pub fn legacy_config_path(data_dir: &Path, container_id: &str) -> PathBuf {
    data_dir.join(container_id)
}

fn load_conf(req: &Request) -> Result<FlannelConf> {
    Ok(req.config.parse_as::<FlannelConf>()?)
}

fn exec_err(e: cni_exec::Error) -> Error {
    crate::Error::Delegate(e.to_cni_error()).into()
}

fn serialize_err(source: serde_json::Error) -> Error {
    crate::Error::Serialize {
        object: "delegate netconf",
        source,
    }
    .into()
}

fn ensure_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| crate::Error::io("create directory", dir, e).into())
}

/// Saves the delegate config: our file atomically (temp + rename), and
/// the reference's file only where none exists (temp + hard link, which
/// fails rather than replaces), so a concurrent Go flannel's file is never
/// clobbered and a crash never leaves half a file.
fn save(data_dir: &Path, container_id: &str, ifname: &str, data: &[u8]) -> Result<()> {
    ensure_dir(data_dir)?;
    let path = saved_config_path(data_dir, container_id, ifname);
    // Synced before either name appears (the reference syncs nothing; a
    // saved config that reads back empty would break DEL).
    let staged = AtomicWrite::new()
        .mode(0o600)
        .fsync(true)
        .stage(&path, data)
        .map_err(crate::Error::atomic_write)?;
    let legacy = legacy_config_path(data_dir, container_id);
    match std::fs::hard_link(staged.temp_path(), &legacy) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => tracing::warn!("write {}: {e}", legacy.display()),
    }
    Ok(staged.commit().map_err(crate::Error::atomic_write)?)
}

fn read_opt(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(crate::Error::io("read", path, e).into()),
    }
}

fn remove_opt(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(crate::Error::io("remove", path, e).into()),
    }
}

/// Removes the reference's file if it holds exactly `data` (ours).
fn remove_legacy_if_same(legacy: &Path, data: &[u8]) -> Result<()> {
    if read_opt(legacy)?.as_deref() == Some(data) {
        remove_opt(legacy)?;
    }
    Ok(())
}

fn delegate_type(saved: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(saved).ok()?;
    v.get("type")?.as_str().map(str::to_string)
}

impl Flannel {
    /// The delegate config a GC is sent with: the rendered one when
    /// `subnet.env` is there, else the delegate dictionary with the same
    /// defaults that need no `subnet.env` (name, type, cniVersion, the base
    /// IPAM); plus the request's valid-attachment keys.
    fn gc_config(&self, req: &Request, conf: &FlannelConf) -> Result<Map<String, Value>> {
        let mut d = match SubnetEnv::load(&conf.subnet_file) {
            Ok(env) => match render(conf, &env)? {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            Err(_) => {
                let mut d = conf.delegate.clone().unwrap_or_default();
                super::delegate::check_delegate(&d)?;
                d.insert("name".into(), Value::from(conf.name.clone()));
                d.entry("type").or_insert_with(|| Value::from("bridge"));
                if !conf.cni_version.is_empty() {
                    d.insert("cniVersion".into(), Value::from(conf.cni_version.clone()));
                }
                let mut ipam = conf.ipam.clone().unwrap_or_default();
                ipam.entry("type")
                    .or_insert_with(|| Value::from("host-local"));
                d.insert("ipam".into(), Value::Object(ipam));
                d
            }
        };
        for key in [VALID_ATTACHMENTS_KEY, LEGACY_ATTACHMENTS_KEY] {
            if let Some(v) = req.config.specific().get(key) {
                d.insert(key.into(), v.clone());
            }
        }
        Ok(d)
    }

    /// Removes the saved configs of this network's attachments that are not
    /// valid any more (after the delegate has released their resources).
    fn gc_saved(&self, conf: &FlannelConf, valid: &[cni_types::GcAttachment]) -> Result<()> {
        let entries = match std::fs::read_dir(&conf.data_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(crate::Error::io("read directory", &conf.data_dir, e).into()),
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((cid, ifname)) = name.split_once('@') else {
                continue;
            };
            if cid.starts_with('.')
                || valid
                    .iter()
                    .any(|a| a.container_id == cid && a.ifname == ifname)
            {
                continue;
            }
            let path = entry.path();
            let Some(saved) = read_opt(&path)? else {
                continue;
            };
            let network = serde_json::from_slice::<Value>(&saved)
                .ok()
                .and_then(|v| v.get("name")?.as_str().map(str::to_string));
            if network.as_deref() != Some(conf.name.as_str()) {
                continue;
            }
            remove_legacy_if_same(&legacy_config_path(&conf.data_dir, cid), &saved)?;
            remove_opt(&path)?;
        }
        Ok(())
    }
}

impl Plugin for Flannel {
    type Error = Error;

    fn name(&self) -> &str {
        "flannel"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = load_conf(req).map_err(|e| Error::NetconfLoad {
            source: Box::new(e),
        })?;
        let env = SubnetEnv::load(&conf.subnet_file).map_err(|e| Error::SubnetEnv {
            path: conf.subnet_file.clone(),
            source: Box::new(e),
        })?;
        let delegate = render(&conf, &env)?;
        let plugin_type = delegate
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("bridge")
            .to_string();
        let bytes = serde_json::to_vec(&delegate).map_err(serialize_err)?;
        tracing::debug!(
            "delegateAdd: netconf sent to delegate plugin: {}",
            String::from_utf8_lossy(&bytes)
        );
        save(&conf.data_dir, &req.container_id, &req.ifname, &bytes)?;
        delegate_add(&plugin_type, &bytes, req).map_err(exec_err)
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = load_conf(req)?;
        let path = saved_config_path(&conf.data_dir, &req.container_id, &req.ifname);
        let legacy = legacy_config_path(&conf.data_dir, &req.container_id);
        // A flannel killed inside `save` leaves its temp file behind; it is
        // never read, so it can go first.
        cni_files::atomic::remove_stale_temps(&path);
        let (saved, ours) = match read_opt(&path)? {
            Some(b) => (b, true),
            None => match read_opt(&legacy)? {
                Some(b) => (b, false),
                // Already deleted, or never added: success per the spec.
                None => return Ok(()),
            },
        };
        let Some(plugin_type) = delegate_type(&saved) else {
            // As the reference: the host side stays until the node reboots,
            // but the pod can go; the file is kept for inspection.
            tracing::warn!(
                "failed to parse netconf {}: not a JSON object with a string type",
                if ours {
                    path.display()
                } else {
                    legacy.display()
                }
            );
            return Ok(());
        };
        delegate_del(&plugin_type, &saved, req).map_err(exec_err)?;
        if ours {
            remove_legacy_if_same(&legacy, &saved)?;
            remove_opt(&path)
        } else {
            remove_opt(&legacy)
        }
    }

    // CHECK is the default (success): the reference does not implement
    // it either (flannel.go).

    fn status(&self, req: &Request) -> Result<()> {
        let conf = load_conf(req)?;
        match SubnetEnv::load(&conf.subnet_file) {
            Ok(_) => Ok(()),
            Err(Error::Shared(crate::Error::Io { source, .. }))
                if source.kind() == ErrorKind::NotFound =>
            {
                Err(crate::Error::NotAvailable(format!(
                    "flannel is not ready on this node: {} does not exist yet (flanneld writes it once it has a subnet lease; check the flannel pod log for this node)",
                    conf.subnet_file.display()
                ))
                .into())
            }
            Err(e) => Err(crate::Error::NotAvailable(format!(
                "flannel is not ready on this node: {e}"
            ))
            .into()),
        }
    }

    fn gc(&self, req: &Request) -> Result<()> {
        let conf = load_conf(req)?;
        let d = self.gc_config(req, &conf)?;
        let plugin_type = d
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("bridge")
            .to_string();
        let bytes = serde_json::to_vec(&Value::Object(d)).map_err(serialize_err)?;
        delegate_gc(&plugin_type, &bytes, req).map_err(exec_err)?;
        if let Some(valid) = req.config.valid_attachments()? {
            self.gc_saved(&conf, &valid)?;
        }
        Ok(())
    }
}
