//! The daemon's lease files: one JSON file per attachment in the state
//! directory, written crash-safely (temporary file, fsync, rename, fsync
//! of the directory), so that a daemon restarted after a crash or an
//! upgrade resumes every lease instead of losing it.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use cni_files::atomic::{self, AtomicWrite};
use serde::{Deserialize, Serialize};

use super::client::{ClientConfig, Lease};
use crate::error::{Error, Result};

/// What the daemon persists for one attachment: enough to renew, answer
/// CHECK, rebuild the ADD result and release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// `CNI_CONTAINERID`.
    #[serde(rename = "containerId")]
    pub container_id: String,
    /// The network name.
    pub network: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// The pod's namespace path as the daemon opens it (host prefix applied).
    pub netns: String,
    /// The client's settings.
    pub client: ClientConfig,
    /// Route priority from the configuration (0: none).
    #[serde(default)]
    pub priority: u32,
    /// The lease.
    pub lease: Lease,
    /// True from just before the DHCPREQUEST until the ACK is recorded:
    /// `lease` is then what the OFFER proposed. A daemon that finds a
    /// pending record at start died mid-ADD (the ADD failed, the server
    /// may have granted the address) and releases it. Written only when
    /// true, so a confirmed record reads as before this field existed,
    /// and a file without it is confirmed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

impl LeaseRecord {
    /// The attachment key (`<container>/<network>/<ifname>`, Go's lease key).
    pub fn key(&self) -> String {
        attachment_key(&self.container_id, &self.network, &self.ifname)
    }
}

/// Go's lease key: `<container>/<network>/<ifname>`.
pub fn attachment_key(container_id: &str, network: &str, ifname: &str) -> String {
    format!("{container_id}/{network}/{ifname}")
}

/// The longest file name (Linux's `NAME_MAX`).
const MAX_NAME: usize = 255;

/// The lease files under one directory.
#[derive(Clone, Debug)]
pub struct LeaseStore {
    dir: PathBuf,
}

impl LeaseStore {
    /// The store in `dir` (created, mode 0700, when missing).
    pub fn open(dir: impl Into<PathBuf>) -> Result<LeaseStore> {
        let dir = dir.into();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::io("create lease directory", &dir, e))?;
        Ok(LeaseStore { dir })
    }

    /// The file of attachment `key`: the key with every byte outside
    /// `[A-Za-z0-9._-]` written `%XX`, plus `.json`. A name that would pass
    /// the file system's 255 bytes (a long container id) is cut and made
    /// unique by a hash of the whole key: `<first 150 bytes>~<32 hex>.json`
    /// (the record inside names the attachment).
    pub fn path_of(&self, key: &str) -> PathBuf {
        let mut name = String::with_capacity(key.len() + 5);
        for b in key.bytes() {
            if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
                name.push(char::from(b));
            } else {
                name.push_str(&format!("%{b:02X}"));
            }
        }
        if name.len() + ".json".len() > MAX_NAME {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(key.as_bytes());
            let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
            // The encoding is ASCII: any byte offset is a char boundary.
            name.truncate(150);
            name.push('~');
            name.push_str(&hex);
        }
        name.push_str(".json");
        self.dir.join(name)
    }

    /// Writes `record` atomically and durably.
    pub fn save(&self, record: &LeaseRecord) -> Result<()> {
        let path = self.path_of(&record.key());
        let data = serde_json::to_vec_pretty(record).map_err(|e| Error::Io {
            op: "encode lease",
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        write_durable(&path, &data)
    }

    /// Removes attachment `key`'s file (absent is fine).
    pub fn remove(&self, key: &str) -> Result<()> {
        let path = self.path_of(key);
        match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove lease", path, e)),
        }
    }

    /// Attachment `key`'s record, if it has one.
    pub fn load(&self, key: &str) -> Result<Option<LeaseRecord>> {
        match read_record(&self.path_of(key)) {
            Ok(r) => Ok(Some(r)),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Every record on disk; unreadable files are returned as errors
    /// beside the good ones, and temporary files left by a crash are
    /// removed.
    pub fn load_all(&self) -> (Vec<LeaseRecord>, Vec<Error>) {
        let mut records = Vec::new();
        let mut errors = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                return (
                    records,
                    vec![Error::io("read lease directory", &self.dir, e)],
                )
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if atomic::is_temp_name(&name) {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if !name.ends_with(".json") {
                continue;
            }
            match read_record(&path) {
                Ok(r) => records.push(r),
                Err(e) => errors.push(e),
            }
        }
        records.sort_by_key(LeaseRecord::key);
        (records, errors)
    }
}

/// The record in the lease file at `path`.
fn read_record(path: &Path) -> Result<LeaseRecord> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("read lease", path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Io {
        op: "decode lease",
        path: path.to_owned(),
        source: std::io::Error::other(e),
    })
}

/// The shared atomic writer ([`cni_files::atomic`]): temporary file, fsync,
/// rename over `path`, fsync of the directory: after a crash the file is
/// the old or the new content, never a torn one, and a rename that returned
/// survives a power cut.
fn write_durable(path: &Path, data: &[u8]) -> Result<()> {
    AtomicWrite::new()
        .mode(0o600)
        .fsync(true)
        .fsync_dir(true)
        .write(path, data)
        .map_err(Error::atomic_write)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync lease directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn record(cid: &str) -> LeaseRecord {
        LeaseRecord {
            container_id: cid.into(),
            network: "net".into(),
            ifname: "eth0".into(),
            netns: "/run/netns/x".into(),
            client: ClientConfig {
                client_id: vec![0, 1],
                request_list: vec![3, 1],
                provide: vec![(12, b"h".to_vec())],
                broadcast: false,
                timeout: Duration::from_millis(1500),
                resend_max: Duration::from_secs(62),
                resend_timeout: Duration::from_secs(208),
            },
            priority: 0,
            lease: Lease {
                address: Ipv4Addr::new(10, 0, 0, 5),
                server: Ipv4Addr::new(10, 0, 0, 1),
                acquired: 1,
                lease_secs: 2,
                t1_secs: 1,
                t2_secs: 1,
                ack: String::new(),
            },
            pending: false,
        }
    }

    #[test]
    fn save_load_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::open(dir.path().join("leases")).unwrap();
        store.save(&record("a")).unwrap();
        store.save(&record("b/../x")).unwrap();
        std::fs::write(dir.path().join("leases/.a.json.tmp.1.1"), "torn").unwrap();
        std::fs::write(dir.path().join("leases/bad.json"), "{").unwrap();
        assert!(store
            .path_of("b/../x/net/eth0")
            .ends_with("b%2F..%2Fx%2Fnet%2Feth0.json"));
        let (got, errors) = store.load_all();
        assert_eq!(got, vec![record("a"), record("b/../x")]);
        assert_eq!(errors.len(), 1);
        assert!(!dir.path().join("leases/.a.json.tmp.1.1").exists());
        store.remove("a/net/eth0").unwrap();
        store.remove("a/net/eth0").unwrap();
        assert_eq!(store.load_all().0.len(), 1);
    }

    /// #31.9: a record written before the DHCPREQUEST says so and reads
    /// back pending; a confirmed one is written as before the field
    /// existed, and such a file reads back confirmed.
    #[test]
    fn pending_records_round_trip_and_confirmed_ones_keep_their_format() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::open(dir.path()).unwrap();
        let mut pending = record("p");
        pending.pending = true;
        store.save(&pending).unwrap();
        store.save(&record("c")).unwrap();
        let text = |r: &LeaseRecord| std::fs::read_to_string(store.path_of(&r.key())).unwrap();
        assert!(text(&pending).contains("\"pending\": true"));
        assert!(!text(&record("c")).contains("pending"));
        let (got, errors) = store.load_all();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(got, vec![record("c"), pending]);
    }

    /// #31.9: a key longer than a file name may be (a long container id)
    /// gets a cut, hashed name: save, load and remove work, and two long
    /// keys that share their beginning get two files.
    #[test]
    fn long_keys_get_hashed_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::open(dir.path()).unwrap();
        let a = record(&"a".repeat(300));
        let mut b = record(&"a".repeat(300));
        b.ifname = "eth1".into();
        for r in [&a, &b] {
            let name = store.path_of(&r.key()).file_name().unwrap().len();
            assert!(name <= MAX_NAME, "{name}");
            store.save(r).unwrap();
        }
        assert_ne!(store.path_of(&a.key()), store.path_of(&b.key()));
        let (records, errors) = store.load_all();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(records.len(), 2);
        store.remove(&a.key()).unwrap();
        store.remove(&b.key()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Short keys keep their readable names.
        assert!(store
            .path_of("c1/net/eth0")
            .ends_with("c1%2Fnet%2Feth0.json"));
    }
}
