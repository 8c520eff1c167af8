//! The delegate cache: the list of delegates an ADD ran, so DEL can undo it
//! without the API server. Written atomically (temporary file, fsync,
//! rename) per container id and interface, in the Go plugin's JSON shape
//! (an array of `DelegateNetConf` with the config in `Bytes`), so each
//! implementation can read the other's file. Go's per-container file
//! (`<cniDir>/<containerID>`, mode 0600, what Go's `saveDelegates` writes
//! and `consumeScratchNetConf` reads) is written too, with the same bytes,
//! so a node rolled back to Go multus can still DEL our pods; it is read as
//! a fallback and removed with ours (as flannel does with its two names).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use cni_files::atomic::AtomicWrite;
use cni_types::{Bandwidth, PortMapping};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::delegate::Delegate;
use crate::Error;

/// One cached delegate (multus-cni `types.DelegateNetConf` JSON).
#[derive(Serialize, Deserialize, Default)]
struct CachedDelegate {
    #[serde(rename = "Conf", default)]
    conf: Map<String, Value>,
    #[serde(rename = "ConfList", default)]
    conf_list: Map<String, Value>,
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(
        rename = "ifnameRequest",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    ifname_request: String,
    #[serde(
        rename = "macRequest",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    mac_request: String,
    #[serde(
        rename = "infinibandGUIDRequest",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    infiniband_guid_request: String,
    #[serde(rename = "ipRequest", default, skip_serializing_if = "Option::is_none")]
    ip_request: Option<Vec<String>>,
    // Go does not cache these two (json:"-"); we do, so DEL gets the same
    // runtimeConfig ADD had. Go ignores the extra keys.
    #[serde(
        rename = "portMappingsRequest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    port_mappings_request: Option<Vec<PortMapping>>,
    #[serde(
        rename = "bandwidthRequest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    bandwidth_request: Option<Bandwidth>,
    #[serde(
        rename = "default-route",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    gateway_request: Option<Vec<IpAddr>>,
    #[serde(rename = "IsFilterV4Gateway", default)]
    filter_v4_gateway: bool,
    #[serde(rename = "IsFilterV6Gateway", default)]
    filter_v6_gateway: bool,
    #[serde(rename = "deviceID", default, skip_serializing_if = "String::is_empty")]
    device_id: String,
    #[serde(
        rename = "resourceName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    resource_name: String,
    #[serde(rename = "Bytes", default)]
    bytes: String,
}

const CONF_KEYS: &[&str] = &["cniVersion", "name", "type", "capabilities", "ipam", "dns"];

fn subset(obj: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| obj.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect()
}

impl CachedDelegate {
    fn from_delegate(d: &Delegate) -> CachedDelegate {
        let (conf, conf_list) = if d.is_conflist {
            let mut l = subset(&d.config, &["cniVersion", "name", "disableCheck"]);
            let plugins: Vec<Value> = d
                .config
                .get("plugins")
                .and_then(Value::as_array)
                .map(|p| {
                    p.iter()
                        .filter_map(Value::as_object)
                        .map(|o| Value::Object(subset(o, CONF_KEYS)))
                        .collect()
                })
                .unwrap_or_default();
            l.insert("plugins".into(), Value::Array(plugins));
            (Map::new(), l)
        } else {
            (subset(&d.config, CONF_KEYS), Map::new())
        };
        CachedDelegate {
            conf,
            conf_list,
            name: d.name.clone(),
            ifname_request: d.ifname_request.clone(),
            mac_request: d.mac_request.clone(),
            infiniband_guid_request: d.infiniband_guid_request.clone(),
            ip_request: d.ip_request.clone(),
            port_mappings_request: d.port_mappings_request.clone(),
            bandwidth_request: d.bandwidth_request.clone(),
            gateway_request: d.gateway_request.clone(),
            filter_v4_gateway: d.filter_v4_gateway,
            filter_v6_gateway: d.filter_v6_gateway,
            device_id: d.device_id.clone(),
            resource_name: d.resource_name.clone(),
            bytes: base64::engine::general_purpose::STANDARD.encode(d.config_bytes()),
        }
    }

    fn into_delegate(self, i: usize) -> Result<Delegate, Error> {
        let bad = |reason: String| Error::DelegateConfig {
            what: format!("cached delegate {i}"),
            reason,
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.bytes)
            .map_err(|e| bad(format!("decode Bytes: {e}")))?;
        let config: Map<String, Value> =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("parse Bytes: {e}")))?;
        let is_conflist = self
            .conf_list
            .get("plugins")
            .and_then(Value::as_array)
            .is_some_and(|p| !p.is_empty());
        let mut d = Delegate {
            name: self.name,
            config,
            is_conflist,
            master: i == 0,
            ifname_request: self.ifname_request,
            mac_request: self.mac_request,
            infiniband_guid_request: self.infiniband_guid_request,
            ip_request: self.ip_request,
            port_mappings_request: self.port_mappings_request,
            bandwidth_request: self.bandwidth_request,
            gateway_request: self.gateway_request,
            device_id: self.device_id,
            resource_name: self.resource_name,
            filter_v4_gateway: self.filter_v4_gateway,
            filter_v6_gateway: self.filter_v6_gateway,
            ..Default::default()
        };
        keep_exact_bytes(&mut d, bytes);
        Ok(d)
    }
}

/// DEL hands a delegate exactly the bytes ADD gave it: the cache's `Bytes`
/// are kept as they are, never re-encoded from the parsed config (a
/// re-encoding once dropped keys in Go multus and leaked IPs, multus-cni
/// PR #1521).
fn keep_exact_bytes(d: &mut Delegate, bytes: Vec<u8>) {
    d.cached_bytes = Some(bytes);
}

/// The cache file of an attachment: `<cniDir>/<containerID>@<ifname>`
/// (`@` cannot occur in a container id, so no name collides with Go's
/// `<cniDir>/<containerID>`).
pub fn cache_path(cni_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    cni_dir.join(format!("{container_id}@{ifname}"))
}

/// The Go plugin's cache file for a container.
pub fn go_cache_path(cni_dir: &Path, container_id: &str) -> PathBuf {
    cni_dir.join(container_id)
}

/// Serializes delegates in the Go plugin's cache format.
pub fn encode(delegates: &[Delegate]) -> Vec<u8> {
    let list: Vec<CachedDelegate> = delegates
        .iter()
        .map(CachedDelegate::from_delegate)
        .collect();
    serde_json::to_vec(&list).unwrap_or_default()
}

/// Parses a cache file's content (ours or Go's); the first is the master.
pub fn decode(bytes: &[u8]) -> Result<Vec<Delegate>, Error> {
    let list: Vec<CachedDelegate> = serde_json::from_slice(bytes).map_err(|e| Error::Decode {
        what: "delegate cache".into(),
        reason: e.to_string(),
    })?;
    if list.is_empty() {
        return Err(Error::Decode {
            what: "delegate cache".into(),
            reason: "no delegate".into(),
        });
    }
    list.into_iter()
        .enumerate()
        .map(|(i, c)| c.into_delegate(i))
        .collect()
}

/// Writes `data` to `path` atomically with the shared writer
/// ([`cni_files::atomic`]): a temporary file in the same directory, fsync,
/// rename, fsync of the directory (best effort). A crash leaves the old file
/// or the new one, never a torn one.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), Error> {
    AtomicWrite::new()
        .mode(0o666)
        .create_dir(0o777)
        .fsync(true)
        .write(path, data)
        .map_err(atomic_error)?;
    if let Some(dir) = path.parent() {
        let _ = cni_files::atomic::sync_dir(dir);
    }
    Ok(())
}

/// A failed write of the shared atomic writer as multus's [`Error::Io`].
pub(crate) fn atomic_error(e: cni_files::Error) -> Error {
    match e {
        cni_files::Error::Io { op, path, source } => Error::io(op, path, source),
        e => Error::Exec(e.into()),
    }
}

/// Saves the delegate list of an attachment under both names: ours
/// atomically (synced temporary file, rename), and Go's
/// (`<cniDir>/<containerID>`) as a hard link of the same synced temporary
/// file, only where none exists (a link fails rather than replaces), so a
/// concurrent Go multus's file or another attachment's is never clobbered
/// and a crash never leaves half a file. Both are mode 0600 in a 0700
/// directory, as Go's `saveScratchNetConf`.
pub fn save(
    cni_dir: &Path,
    container_id: &str,
    ifname: &str,
    delegates: &[Delegate],
) -> Result<PathBuf, Error> {
    let path = cache_path(cni_dir, container_id, ifname);
    let staged = AtomicWrite::new()
        .mode(0o600)
        .create_dir(0o700)
        .fsync(true)
        .stage(&path, &encode(delegates))
        .map_err(atomic_error)?;
    let go = go_cache_path(cni_dir, container_id);
    match std::fs::hard_link(staged.temp_path(), &go) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        // Go's name is a courtesy to a rollback: ours is what we read.
        Err(e) => tracing::warn!("write {}: {e}", go.display()),
    }
    staged.commit().map_err(atomic_error)?;
    let _ = cni_files::atomic::sync_dir(cni_dir);
    Ok(path)
}

/// Removes an attachment's cache: ours, and Go's name when it holds the
/// same bytes (ours, linked at ADD) or when ours is gone (the cache DEL
/// read was Go's). Missing files are not an error.
pub fn remove(cni_dir: &Path, container_id: &str, ifname: &str) {
    let ours = cache_path(cni_dir, container_id, ifname);
    let go = go_cache_path(cni_dir, container_id);
    let remove_go = match std::fs::read(&ours) {
        Ok(b) => std::fs::read(&go).is_ok_and(|g| g == b),
        Err(_) => true,
    };
    if remove_go {
        let _ = std::fs::remove_file(&go);
    }
    let _ = std::fs::remove_file(&ours);
}

/// Loads the delegate list of an attachment: ours, else Go's. `Ok(None)`
/// when neither exists; an unreadable or corrupt file is an error.
pub fn load(
    cni_dir: &Path,
    container_id: &str,
    ifname: &str,
) -> Result<Option<(PathBuf, Vec<Delegate>)>, Error> {
    for path in [
        cache_path(cni_dir, container_id, ifname),
        go_cache_path(cni_dir, container_id),
    ] {
        match std::fs::read(&path) {
            Ok(b) => return decode(&b).map(|d| Some((path, d))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(Error::Io {
                    op: "read delegate cache",
                    path,
                    source,
                })
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_is_lossless() {
        let mut list = Delegate::from_value(
            json!({"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [
                {"type": "calico", "datastore_type": "kubernetes", "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}},
                {"type": "portmap", "capabilities": {"portMappings": true}}]}),
            None,
        )
        .unwrap();
        list.master = true;
        let e = crate::selection::parse_networks(
            "k",
            r#"[{"name":"n","interface":"data0","ips":["10.1.1.5/24"],"mac":"c2:11:22:33:44:55","portMappings":[{"hostPort":1,"containerPort":2}],"default-route":["10.1.1.1"]}]"#,
            "ns",
        )
        .unwrap();
        let conf = Delegate::from_value(
            json!({"name": "br", "type": "bridge", "custom": {"deep": [1, 2]}}),
            Some(&e[0]),
        )
        .unwrap();
        let ds = vec![list, conf];
        let mut back = decode(&encode(&ds)).unwrap();
        for (b, d) in back.iter_mut().zip(&ds) {
            assert_eq!(b.cached_bytes.take(), Some(d.config_bytes()));
        }
        assert_eq!(back, ds);
    }

    #[test]
    fn reads_go_shaped_cache() {
        // A cache as the Go plugin writes it (Bytes is base64 of the config).
        let bytes = base64::engine::general_purpose::STANDARD
            .encode(br#"{"cniVersion":"0.3.1","name":"weave","type":"weave-net"}"#);
        let go = format!(
            r#"[{{"Conf":{{"cniVersion":"0.3.1","name":"weave","type":"weave-net"}},"ConfList":{{"cniVersion":"","name":"","plugins":null}},"Name":"weave","IsFilterV4Gateway":false,"IsFilterV6Gateway":false,"Bytes":"{bytes}"}}]"#
        );
        let d = decode(go.as_bytes()).unwrap();
        assert!(d[0].master && !d[0].is_conflist);
        assert_eq!(d[0].plugin_type(), "weave-net");
        assert!(decode(b"").is_err());
        assert!(decode(b"[]").is_err());
        assert!(decode(br#"[{"Bytes":"!!"}]"#).is_err());
    }

    #[test]
    fn cached_bytes_are_handed_on_unchanged() {
        // Go writes its own spelling (sorted keys, its number format); ours
        // may differ in order and numbers: DEL gets the file's bytes as
        // they are, never a re-encoding.
        let cfg: &[u8] =
            br#"{"type":"x","zeta":1.50,"alpha":1e3,"name":"n","big":18446744073709551616}"#;
        let go = format!(
            r#"[{{"Conf":{{"type":"x","name":"n"}},"ConfList":{{}},"Name":"n","Bytes":"{}"}}]"#,
            base64::engine::general_purpose::STANDARD.encode(cfg)
        );
        let mut d = decode(go.as_bytes()).unwrap();
        assert_eq!(d[0].config_bytes(), cfg);
        assert_eq!(d[0].config["zeta"], 1.5);
        // A conf keeps them through DEL's version default only when it has
        // a version; one without gets multus's and is re-encoded (as Go).
        d[0].default_cni_version("1.0.0");
        assert_eq!(d[0].cached_bytes, None);
        assert_eq!(d[0].cni_version(), "1.0.0");
        // Saved again, the bytes are the same ones.
        let cfg2 = d[0].config_bytes();
        let back = decode(&encode(&d)).unwrap();
        assert_eq!(back[0].config_bytes(), cfg2);
    }

    #[test]
    fn save_load_and_fallback() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path(), "c1", "eth0").unwrap().is_none());
        let d = Delegate::from_value(json!({"name": "a", "type": "bridge"}), None).unwrap();
        let p = save(dir.path(), "c1", "eth0", std::slice::from_ref(&d)).unwrap();
        assert_eq!(p, dir.path().join("c1@eth0"));
        let (path, got) = load(dir.path(), "c1", "eth0").unwrap().unwrap();
        assert_eq!((&path, got[0].name.as_str()), (&p, "a"));
        // Go's name holds the same bytes; no temporary file is left behind.
        let go = std::fs::read(dir.path().join("c1")).unwrap();
        assert_eq!(go, std::fs::read(&p).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        remove(dir.path(), "c1", "eth0");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        std::fs::write(dir.path().join("c2"), encode(&[d])).unwrap();
        assert_eq!(
            load(dir.path(), "c2", "eth0").unwrap().unwrap().0,
            dir.path().join("c2")
        );
        std::fs::write(dir.path().join("c3@eth0"), b"").unwrap();
        assert!(load(dir.path(), "c3", "eth0").is_err());
    }
}
