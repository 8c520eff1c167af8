//! The result cache in libcni's on-disk format, so that a Go runtime and
//! ours read each other's cache.
//!
//! `<cacheDir>/results/<network>-<containerID>-<ifname>` holds
//! `{"kind":"cniCacheV1","containerId","config" (base64 of the list bytes),
//! "ifName","networkName","netns","cniArgs","capabilityArgs","result"}`;
//! the directories are 0700, the file 0600. Unlike libcni we write a temp
//! file and rename it over the old one ([`cni_files::atomic`]), so a crash
//! leaves the old or the new file, never an empty one (cni#1055).

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use cni_files::atomic::AtomicWrite;

use base64::Engine;
use cni_types::{CniResult, Version};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Error;

/// The `kind` of a libcni cache file.
pub const CACHE_KIND: &str = "cniCacheV1";

/// The largest cache record read (40 MiB): a record holds a network config
/// (base64) and a result, each at most [`crate::process::MAX_STDIN`]
/// bytes. A larger file (a sparse file, a mistake) is reported unreadable,
/// not read whole: a collector under a memory limit must not be killed by
/// one file.
pub const MAX_CACHE_FILE: u64 = 40 << 20;

/// The runtime's description of one attachment (libcni's `RuntimeConf`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeConf {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS`.
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS` pairs.
    pub args: Vec<(String, String)>,
    /// Capability data; each plugin receives, in `runtimeConfig`, the keys
    /// its `capabilities` declare.
    pub capability_args: Map<String, Value>,
}

impl RuntimeConf {
    /// `CNI_ARGS` as `K=V;K=V`.
    pub fn args_string(&self) -> String {
        self.args
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// One attachment as libcni's result cache records it (Go's
/// `NetworkAttachment`): not a GC list entry ([`cni_types::GcAttachment`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CachedAttachment {
    /// The container id.
    pub container_id: String,
    /// The network name.
    pub network: String,
    /// The interface name.
    pub ifname: String,
    /// The config bytes the attachment was made with.
    pub config: Vec<u8>,
    /// The netns path.
    pub netns: String,
    /// `CNI_ARGS` pairs.
    pub cni_args: Vec<(String, String)>,
    /// Capability data.
    pub capability_args: Map<String, Value>,
}

impl CachedAttachment {
    /// The runtime config to DEL this attachment with: its container,
    /// namespace, interface and the cached `CNI_ARGS` and capability data
    /// (libcni's GC builds the same).
    pub fn runtime_conf(&self) -> RuntimeConf {
        RuntimeConf {
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: self.ifname.clone(),
            args: self.cni_args.clone(),
            capability_args: self.capability_args.clone(),
        }
    }
}

/// One file of the cache's `results/` directory as [`ResultCache::scan`]
/// found it.
#[derive(Clone, Debug)]
pub struct CachedFile {
    /// The file.
    pub path: PathBuf,
    /// Its modification time (when the attachment was cached).
    pub modified: Option<std::time::SystemTime>,
    /// The attachment it records, or why it records none.
    pub attachment: Result<CachedAttachment, String>,
}

mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        match s {
            None => Ok(Vec::new()),
            Some(s) => base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// libcni's `cachedInfo`, field for field and in its order.
#[derive(Debug, Serialize, Deserialize)]
struct CachedInfo {
    #[serde(default)]
    kind: String,
    #[serde(rename = "containerId", default)]
    container_id: String,
    #[serde(with = "b64", default)]
    config: Vec<u8>,
    #[serde(rename = "ifName", default)]
    ifname: String,
    #[serde(rename = "networkName", default)]
    network_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    netns: String,
    #[serde(rename = "cniArgs", default, skip_serializing_if = "Option::is_none")]
    cni_args: Option<Vec<(String, String)>>,
    #[serde(
        rename = "capabilityArgs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    capability_args: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Map<String, Value>>,
}

/// The result cache rooted at a cache directory (libcni's default is
/// `/var/lib/cni`).
#[derive(Clone, Debug)]
pub struct ResultCache {
    dir: PathBuf,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `data` to `path` atomically with the shared writer
/// ([`cni_files::atomic`]): a 0600 temp file in the same directory, renamed over
/// the target, so a killed runtime or plugin never leaves a torn file.
///
/// Not fsynced, like libcni: the cache only has to outlive the process, a
/// power cut takes every pod with it, and DEL already treats an empty or
/// corrupt cache as absent (cni#1055). An fsync would be the largest
/// single cost of an in-process ADD (BENCHMARKS.md, "Node scale").
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), Error> {
    Ok(AtomicWrite::new().mode(0o600).write(path, data)?)
}

/// Removes the temporary files that a writer killed between create and
/// rename left next to `path` (the atomic writer's names for it, see
/// [`cni_files::atomic::remove_stale_temps`]). Nothing reads them, so without
/// this they stay forever (found by the SIGKILL campaign,
/// `cni-plugins/tests/plugins/reliability_faults.rs`). Errors are ignored: this is
/// best-effort cleanup on DEL.
pub fn remove_temp_files(path: &Path) {
    cni_files::atomic::remove_stale_temps(path);
}

impl ResultCache {
    /// A cache rooted at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ResultCache { dir: dir.into() }
    }

    /// The root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/results/<network>-<containerID>-<ifname>`; all three parts
    /// are required.
    pub fn file_path(&self, network: &str, rt: &RuntimeConf) -> Result<PathBuf, Error> {
        if network.is_empty() || rt.container_id.is_empty() || rt.ifname.is_empty() {
            return Err(Error::Cache {
                network: network.to_string(),
                reason: format!(
                    "cache file path requires network name ({network:?}), container ID ({:?}), and interface name ({:?})",
                    rt.container_id, rt.ifname
                ),
            });
        }
        Ok(self
            .dir
            .join("results")
            .join(format!("{network}-{}-{}", rt.container_id, rt.ifname)))
    }

    /// Stores an attachment's result (`result` in its own version's wire
    /// shape) and the config bytes it was made with.
    pub fn write(
        &self,
        network: &str,
        rt: &RuntimeConf,
        config: &[u8],
        result: &Value,
    ) -> Result<(), Error> {
        let path = self.file_path(network, rt)?;
        let info = CachedInfo {
            kind: CACHE_KIND.into(),
            container_id: rt.container_id.clone(),
            config: config.to_vec(),
            ifname: rt.ifname.clone(),
            network_name: network.to_string(),
            netns: rt.netns.clone(),
            cni_args: (!rt.args.is_empty()).then(|| rt.args.clone()),
            capability_args: (!rt.capability_args.is_empty()).then(|| rt.capability_args.clone()),
            result: result.as_object().cloned(),
        };
        let bytes = serde_json::to_vec(&info).map_err(|e| Error::Cache {
            network: network.to_string(),
            reason: e.to_string(),
        })?;
        let results = self.dir.join("results");
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&results)
            .map_err(io("create cache directory", &results))?;
        write_atomic(&path, &bytes)
    }

    /// Removes an attachment's cache file; a missing file is fine.
    pub fn remove(&self, network: &str, rt: &RuntimeConf) -> Result<(), Error> {
        let Ok(path) = self.file_path(network, rt) else {
            return Ok(());
        };
        remove_temp_files(&path);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("remove cache file", &path)(e)),
        }
    }

    fn read_file(&self, network: &str, rt: &RuntimeConf) -> Result<Option<Vec<u8>>, Error> {
        let path = self.file_path(network, rt)?;
        // Read errors mean "no cache", as libcni: the attachment may predate
        // the cache or it was cleaned.
        Ok(cni_files::capped::read_regular_file(&path, MAX_CACHE_FILE).ok())
    }

    /// The cached result converted to `version` (the list's), ready to be
    /// a `prevResult`; `None` when nothing is cached. A file that is not a
    /// `cniCacheV1` record is read as a legacy raw result.
    pub fn result(
        &self,
        network: &str,
        version: &str,
        rt: &RuntimeConf,
    ) -> Result<Option<Value>, Error> {
        let Some(data) = self.read_file(network, rt)? else {
            return Ok(None);
        };
        let cache_err = |reason: String| Error::Cache {
            network: network.to_string(),
            reason,
        };
        let raw: Value = match serde_json::from_slice::<CachedInfo>(&data) {
            Ok(info) if info.kind == CACHE_KIND => match info.result {
                Some(r) => Value::Object(r),
                None => return Ok(None),
            },
            _ => serde_json::from_slice(&data).map_err(|e| cache_err(e.to_string()))?,
        };
        // Go's create.CreateFromBytes: a missing cniVersion is 0.1.0 here.
        let (_, result) =
            CniResult::from_value(&raw, Version::V0_1_0).map_err(|e| cache_err(e.to_string()))?;
        let target = Version::parse(version).map_err(|e| cache_err(e.to_string()))?;
        result.to_value(target).map(Some).map_err(|e| {
            cache_err(format!(
                "failed to convert cached result to config version {version:?}: {e}"
            ))
        })
    }

    /// The cached config bytes and the runtime config with the cached
    /// `CNI_ARGS` and capability data (libcni's `getCachedConfig`).
    pub fn config(
        &self,
        network: &str,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, Error> {
        let Some(data) = self.read_file(network, rt)? else {
            return Ok(None);
        };
        let info: CachedInfo = serde_json::from_slice(&data).map_err(|e| Error::Cache {
            network: network.to_string(),
            reason: format!("failed to unmarshal cached network {network:?} config: {e}"),
        })?;
        if info.kind != CACHE_KIND {
            return Err(Error::Cache {
                network: network.to_string(),
                reason: format!(
                    "read cached network {network:?} config has wrong kind: {}",
                    info.kind
                ),
            });
        }
        let mut new_rt = rt.clone();
        if let Some(args) = info.cni_args {
            new_rt.args = args;
        }
        new_rt.capability_args = info.capability_args.unwrap_or_default();
        Ok(Some((info.config, new_rt)))
    }

    /// Every cached attachment, optionally of one container, in file name
    /// order (libcni's `GetCachedAttachments`); files that record none are
    /// skipped, as there.
    pub fn attachments(&self, container_id: &str) -> Result<Vec<CachedAttachment>, Error> {
        Ok(self
            .scan()?
            .into_iter()
            .filter_map(|f| f.attachment.ok())
            .filter(|a| container_id.is_empty() || a.container_id == container_id)
            .collect())
    }

    /// Every file of `results/` in name order, with the attachment it
    /// records or why it records none (unreadable, not JSON, not a
    /// `cniCacheV1` record, a part missing): a collector reports those
    /// rather than guessing. Temp files of the atomic writer are left out.
    pub fn scan(&self) -> Result<Vec<CachedFile>, Error> {
        let dir = self.dir.join("results");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read cache directory", &dir)(e)),
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !cni_files::atomic::is_temp_name(n))
            .collect();
        names.sort();
        Ok(names
            .into_iter()
            .map(|name| {
                let path = dir.join(&name);
                let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
                let attachment = cni_files::capped::read_regular_file(&path, MAX_CACHE_FILE)
                    .map_err(|e| format!("unreadable: {e}"))
                    .and_then(|data| {
                        serde_json::from_slice::<CachedInfo>(&data)
                            .map_err(|e| format!("not a cache record: {e}"))
                    })
                    .and_then(|info| {
                        if info.kind != CACHE_KIND {
                            return Err(format!("kind {:?}, not {CACHE_KIND:?}", info.kind));
                        }
                        if info.container_id.is_empty()
                            || info.ifname.is_empty()
                            || info.network_name.is_empty()
                        {
                            return Err("no container id, interface or network name".into());
                        }
                        let netns = if info.netns.is_empty() {
                            result_sandbox(info.result.as_ref(), &info.ifname)
                        } else {
                            info.netns
                        };
                        Ok(CachedAttachment {
                            container_id: info.container_id,
                            network: info.network_name,
                            ifname: info.ifname,
                            config: info.config,
                            netns,
                            cni_args: info.cni_args.unwrap_or_default(),
                            capability_args: info.capability_args.unwrap_or_default(),
                        })
                    });
                CachedFile {
                    path,
                    modified,
                    attachment,
                }
            })
            .collect())
    }
}

/// The network namespace of interface `ifname` in a cached result (its
/// `interfaces[].sandbox`), or "". libcni wrote no `netns` in its records
/// before 1.2 (containerd 1.6 and 1.7 write none): the result the plugins
/// returned still names where the attachment's interface lives.
fn result_sandbox(result: Option<&Map<String, Value>>, ifname: &str) -> String {
    result
        .and_then(|r| r.get("interfaces"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|i| i["name"] == ifname)
        .and_then(|i| i["sandbox"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Decodes the base64 `config` of a cache file (for tools and tests).
pub fn decode_config(b64: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn remove_drops_temp_files_of_killed_writers_only() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResultCache::new(dir.path());
        let rt = RuntimeConf {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            ..Default::default()
        };
        let results = dir.path().join("results");
        std::fs::create_dir_all(&results).unwrap();
        let stale = [".net-c1-eth0.tmp.77.0", ".net-c1-eth0.tmp.78.3"];
        let kept = [".net-c1-eth0.tmpx", ".net-c1-eth1.tmp.77.0", "net-c2-eth0"];
        for f in stale.iter().chain(&kept) {
            std::fs::write(results.join(f), b"").unwrap();
        }
        cache.remove("net", &rt).unwrap();
        for f in stale {
            assert!(!results.join(f).exists(), "{f}");
        }
        for f in kept {
            assert!(results.join(f).exists(), "{f}");
        }
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(write_atomic(&dir.path().join("missing/f"), b"x").is_err());
        // A killed writer's temporary file goes with the shared clean-up.
        let staged = AtomicWrite::new().stage(&path, b"half").unwrap();
        let temp = staged.temp_path().to_path_buf();
        std::mem::forget(staged);
        assert!(temp.exists());
        remove_temp_files(&path);
        assert!(!temp.exists());
    }

    #[test]
    fn concurrent_writers_never_leave_a_torn_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResultCache::new(dir.path());
        let rt = RuntimeConf {
            container_id: "c".into(),
            ifname: "eth0".into(),
            ..Default::default()
        };
        std::thread::scope(|s| {
            for i in 0..8 {
                let (cache, rt) = (&cache, &rt);
                s.spawn(move || {
                    for _ in 0..20 {
                        let result = serde_json::json!({"cniVersion": "1.0.0", "ips": [{"address": format!("10.0.0.{i}/24")}]});
                        cache.write("n", rt, b"{}", &result).unwrap();
                        assert!(cache.result("n", "1.0.0", rt).unwrap().is_some());
                    }
                });
            }
        });
        assert_eq!(
            std::fs::read_dir(dir.path().join("results"))
                .unwrap()
                .count(),
            1
        );
    }

    #[test]
    fn file_path_needs_all_parts() {
        let cache = ResultCache::new("/x");
        let rt = RuntimeConf {
            container_id: "c".into(),
            ..Default::default()
        };
        assert!(cache.file_path("n", &rt).is_err());
        assert!(cache.remove("n", &rt).is_ok());
        let rt = RuntimeConf {
            ifname: "eth0".into(),
            ..rt
        };
        assert_eq!(
            cache.file_path("n", &rt).unwrap(),
            Path::new("/x/results/n-c-eth0")
        );
    }

    #[test]
    fn scan_reports_a_huge_cache_file_unreadable_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().join("results");
        std::fs::create_dir(&results).unwrap();
        // 3 GB, sparse: read whole it would cost 3 GB of memory.
        let f = std::fs::File::create(results.join("n-c1-eth0")).unwrap();
        f.set_len(3 << 30).unwrap();
        let scanned = ResultCache::new(dir.path()).scan().unwrap();
        assert_eq!(scanned.len(), 1);
        let why = scanned[0].attachment.as_ref().unwrap_err();
        assert_eq!(
            why,
            &format!("unreadable: larger than {MAX_CACHE_FILE} bytes")
        );
        // The same bound for a result read back.
        let rt = RuntimeConf {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            ..RuntimeConf::default()
        };
        assert_eq!(
            ResultCache::new(dir.path()).read_file("n", &rt).unwrap(),
            None
        );
    }

    #[test]
    fn scan_finds_the_netns_of_a_record_without_one_in_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().join("results");
        std::fs::create_dir(&results).unwrap();
        // As libcni 1.1 (containerd 1.6) writes it: no "netns".
        let record = |ifname: &str| {
            serde_json::json!({
                "kind": CACHE_KIND, "containerId": "c1", "config": "e30=",
                "ifName": ifname, "networkName": "n",
                "result": {"cniVersion": "1.0.0", "interfaces": [
                    {"name": "cni0", "mac": "02:00:00:00:00:01"},
                    {"name": "eth0", "mac": "02:00:00:00:00:02",
                     "sandbox": "/var/run/netns/cni-1234"}]}
            })
        };
        std::fs::write(results.join("n-c1-eth0"), record("eth0").to_string()).unwrap();
        std::fs::write(results.join("n-c1-net1"), record("net1").to_string()).unwrap();
        let mut with_netns = record("eth1");
        with_netns["netns"] = "/run/netns/own".into();
        std::fs::write(results.join("n-c1-eth1"), with_netns.to_string()).unwrap();
        let found: Vec<(String, String)> = ResultCache::new(dir.path())
            .attachments("")
            .unwrap()
            .into_iter()
            .map(|a| (a.ifname, a.netns))
            .collect();
        assert_eq!(
            found,
            [
                ("eth0".into(), "/var/run/netns/cni-1234".into()),
                ("eth1".into(), "/run/netns/own".into()),
                // Its interface is not in the result: nothing to go by.
                ("net1".into(), String::new()),
            ]
        );
    }
}
