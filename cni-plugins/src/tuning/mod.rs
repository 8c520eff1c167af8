//! The tuning meta-plugin (chained only): sets network sysctls and link
//! attributes (MAC, MTU, promiscuous and all-multicast modes, transmit
//! queue length) of the container interface, backs the originals up in
//! `dataDir` and restores them on DEL.
//!
//! Behaviour follows containernetworking/plugins `plugins/meta/tuning`
//! (its current version: `txQLen`, the sysctl allow-list, duplicated keys
//! rejected, `IFNAME` substituted after the dots are turned into slashes so
//! that interface names with dots work). The backup file
//! (`<dataDir>/<containerID>_<ifname>.json`) has Go's layout, so either
//! implementation restores the other's. Beyond the reference: the original
//! sysctl values are backed up too (an extra `sysctl` key Go ignores) and
//! restored on DEL; all sysctl keys are validated before anything is
//! written; a failed ADD restores what it changed; and a backup whose
//! namespace or interface is gone is removed instead of leaking.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::tuning::Tuning;
//!
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! // Only /proc/sys/net is writable through tuning.
//! let stdin = br#"{"cniVersion":"1.0.0","name":"net","type":"tuning",
//!     "sysctl":{"kernel.hostname":"x"},
//!     "prevResult":{"cniVersion":"1.0.0"}}"#;
//! let out = dispatch(&Tuning::new(), &env, stdin);
//! assert_ne!(out.exit_code, 0);
//! assert!(String::from_utf8(out.stdout).unwrap().contains("invalid net sysctl key"));
//! ```

pub(crate) mod config;

mod error;

use std::path::{Path, PathBuf};

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::MacAddr;
use cni_types::step_span;
use cni_types::trace::in_step;
use cni_types::CniResult;
use serde::{Deserialize, Serialize};

pub use config::{sysctl_file_name, TuningConf, DEFAULT_ALLOWLIST, DEFAULT_DATA_DIR};

pub use error::{Error, Result};

/// The tuning plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root) with
/// [`Tuning::with_kernel`].
#[derive(Debug, Clone)]
pub struct Tuning<K = LinuxKernel> {
    allowlist: PathBuf,
    kernel: K,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning::with_kernel(LinuxKernel)
    }
}

/// The backup of one attachment: Go's `configToRestore` (same keys, same
/// order) plus the original sysctl values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The original MAC address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// The original promiscuous mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    /// The original MTU.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: i64,
    /// The original all-multicast mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    /// The original transmit queue length.
    #[serde(rename = "txQLen", default, skip_serializing_if = "Option::is_none")]
    pub txqlen: Option<i64>,
    /// The original value of each sysctl written, by file name under
    /// `/proc/sys/net` (not in Go's file).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "pairs")]
    pub sysctl: Vec<(String, String)>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

mod pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        v: &[(String, String)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let m: serde_json::Map<String, serde_json::Value> = v
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        m.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, String)>, D::Error> {
        let m = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        Ok(m.into_iter()
            .filter_map(|(k, v)| Some((k, v.as_str()?.to_owned())))
            .collect())
    }
}

/// Runs `f` with a handle on the pod namespace.
fn in_pod<K: NetKernel, T>(
    kernel: &K,
    path: &str,
    f: impl FnOnce(&K::Handle) -> Result<T>,
) -> Result<T> {
    f(&kernel.open(path)?)
}

/// The key of a sysctl file under `/proc/sys` (`net/ipv4/...`), as the
/// kernel verbs take it.
fn sysctl_key(file: &str) -> &str {
    file.strip_prefix("/proc/sys/").unwrap_or(file)
}

/// A failed sysctl read or write of `file`: Go's `open <file>: <errno>`
/// when the kernel says why.
fn sysctl_error(op: &'static str, file: &str, e: cni_netns::Error) -> Error {
    match e {
        cni_netns::Error::Sysctl { source, .. } => Error::SysctlAccess {
            op,
            file: file.to_owned(),
            source,
        },
        other => other.into(),
    }
}

fn backup_path(data_dir: &str, container_id: &str, ifname: &str) -> PathBuf {
    Path::new(data_dir).join(format!("{container_id}_{ifname}.json"))
}

/// Go's `json.MarshalIndent(config, "", " ")`.
fn encode_backup(b: &Backup) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    b.serialize(&mut ser)
        .map_err(|source| crate::Error::Serialize {
            object: "backup",
            source,
        })?;
    Ok(out)
}

fn write_backup(path: &Path, b: &Backup) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| crate::Error::io("create backup directory", dir, e))?;
    }
    let data = encode_backup(b)?;
    cni_files::atomic::AtomicWrite::new()
        .mode(0o600)
        .write(path, &data)
        .map_err(|e| crate::Error::atomic_write(e).into())
}

fn remove_backup(path: &Path) -> Result<()> {
    // A tuning killed inside `write_backup` leaves its temp file behind.
    cni_files::atomic::remove_stale_temps(path);
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(crate::Error::io("remove", path, e).into()),
    }
}

fn mac_str(m: Option<MacAddr>) -> String {
    m.map(|m| m.to_string()).unwrap_or_default()
}

fn parse_mac(s: &str) -> Result<MacAddr> {
    s.parse::<MacAddr>().map_err(|e| Error::MacInvalid {
        value: s.to_owned(),
        reason: e.to_string(),
    })
}

/// Reads the interface's current attributes for what `conf` will change.
fn snapshot<H: NetnsHandle>(handle: &H, ifname: &str, conf: &TuningConf) -> Result<(u32, Backup)> {
    let link = handle
        .link_by_name(ifname)
        .map_err(|source| Error::LinkLookup {
            ifname: ifname.to_owned(),
            source: source.into(),
        })?;
    let mut b = Backup::default();
    if !conf.mac.is_empty() {
        b.mac = mac_str(link.mac);
    }
    if conf.promisc {
        b.promisc = Some(link.is_promisc());
    }
    if conf.mtu != 0 {
        b.mtu = link.mtu as i64;
    }
    if conf.allmulti.is_some() {
        b.allmulti = Some(link.is_allmulti());
    }
    if conf.txqlen.is_some() {
        b.txqlen = Some(handle.link_txqlen(link.index)? as i64);
    }
    Ok((link.index, b))
}

fn to_u32(field: &'static str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| Error::ValueInvalid { field, value })
}

/// Applies the link attributes of `conf` (Go's order: MAC, promisc, MTU,
/// allmulti, txQLen).
fn apply_link<H: NetnsHandle>(handle: &H, index: u32, conf: &TuningConf) -> Result<()> {
    if !conf.mac.is_empty() {
        handle.set_mac(index, parse_mac(&conf.mac)?)?;
    }
    if conf.promisc {
        handle.set_promisc(index, true)?;
    }
    if conf.mtu != 0 {
        handle.set_mtu(index, to_u32("mtu", conf.mtu)?)?;
    }
    if let Some(on) = conf.allmulti {
        handle.set_allmulti(index, on)?;
    }
    if let Some(q) = conf.txqlen {
        handle.set_txqlen(index, to_u32("txQLen", q)?)?;
    }
    Ok(())
}

/// Restores a backup (Go's `restoreBackup` order: MTU, MAC, promisc,
/// allmulti, txQLen; then the sysctls). Returns the failures.
fn restore<H: NetnsHandle>(handle: &H, index: u32, b: &Backup) -> Vec<String> {
    let mut errs = Vec::new();
    let mut note = |what: &str, r: Result<()>| {
        if let Err(e) = r {
            errs.push(format!("failed to restore {what}: {e}"));
        }
    };
    if b.mtu != 0 {
        note(
            "MTU",
            to_u32("mtu", b.mtu).and_then(|m| handle.set_mtu(index, m).map_err(Error::from)),
        );
    }
    if !b.mac.is_empty() {
        note(
            "MAC address",
            parse_mac(&b.mac).and_then(|m| handle.set_mac(index, m).map_err(Error::from)),
        );
    }
    if let Some(on) = b.promisc {
        note(
            "promiscuous mode",
            handle.set_promisc(index, on).map_err(Error::from),
        );
    }
    if let Some(on) = b.allmulti {
        note(
            "all-multicast mode",
            handle.set_allmulti(index, on).map_err(Error::from),
        );
    }
    if let Some(q) = b.txqlen {
        note(
            "transmit queue length",
            to_u32("txQLen", q).and_then(|q| handle.set_txqlen(index, q).map_err(Error::from)),
        );
    }
    for (file, value) in &b.sysctl {
        // The file is trusted no more than the config was.
        if !file.starts_with(config::SYSCTL_NET_ROOT) || file.contains("/../") {
            errs.push(format!(
                "failed to restore sysctl: refusing to restore {file}"
            ));
            continue;
        }
        if let Err(e) = handle.sysctl_write(sysctl_key(file), value) {
            let why = match sysctl_error("write", file, e) {
                Error::SysctlAccess { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            errs.push(format!("failed to restore sysctl {file}: {why}"));
        }
    }
    errs
}

impl Tuning {
    /// tuning with the default allow-list file
    /// (`/etc/cni/tuning/allowlist.conf`, no restriction when missing).
    pub fn new() -> Self {
        Tuning::default()
    }

    /// tuning reading its sysctl allow-list from `path`.
    pub fn with_allowlist(path: impl Into<PathBuf>) -> Self {
        Tuning {
            allowlist: path.into(),
            kernel: LinuxKernel,
        }
    }
}

impl<K: NetKernel> Tuning<K> {
    /// tuning on another kernel, with the default allow-list file.
    pub fn with_kernel(kernel: K) -> Tuning<K> {
        Tuning {
            allowlist: PathBuf::from(DEFAULT_ALLOWLIST),
            kernel,
        }
    }

    fn load(&self, req: &Request) -> Result<(TuningConf, CniResult)> {
        config::reject_duplicate_sysctls(&req.stdin)?;
        let conf = TuningConf::parse(req)?;
        Ok((conf, self.prev(req)?))
    }

    fn prev(&self, req: &Request) -> Result<CniResult> {
        if req.config.prev_result.is_none() {
            return Err(Error::PrevResultMissing);
        }
        req.config.prev_result()?.ok_or(Error::PrevResultMissing)
    }

    fn add_in_pod(
        &self,
        handle: &K::Handle,
        req: &Request,
        conf: &TuningConf,
        files: Vec<(String, String)>,
        mut result: CniResult,
    ) -> Result<CniResult> {
        let touches_link = !conf.mac.is_empty()
            || conf.mtu != 0
            || conf.promisc
            || conf.allmulti.is_some()
            || conf.txqlen.is_some();
        // Sysctls alone do not need the link (Go does not look it up then).
        let (index, mut backup) = if touches_link {
            snapshot(handle, &req.ifname, conf)?
        } else {
            (0, Backup::default())
        };
        let path = backup_path(&conf.data_dir, &req.container_id, &req.ifname);

        // Sysctls: each original read (one that cannot be read, as a
        // write-only one, is not backed up), then the value written, even
        // when it is there already (as Go does).
        let mut write_err = None;
        for (file, value) in &files {
            if let Ok(Some(old)) = handle.sysctl_get(sysctl_key(file)) {
                backup.sysctl.push((file.clone(), old));
            }
            if let Err(e) = handle.sysctl_write(sysctl_key(file), value) {
                write_err = Some(sysctl_error("write", file, e));
                break;
            }
        }
        let rolled_back = |backup: &Backup, e: Error| -> Error {
            for msg in restore(handle, index, backup) {
                tracing::warn!("rollback: {msg}");
            }
            let _ = remove_backup(&path);
            e
        };
        if let Some(e) = write_err {
            return Err(rolled_back(&backup, e));
        }
        if touches_link || !backup.sysctl.is_empty() {
            if let Err(e) = write_backup(&path, &backup) {
                return Err(rolled_back(&backup, e));
            }
        }
        let span = step_span!("tuning.link", link.name = %req.ifname);
        if let Err(e) = in_step(span, || apply_link(handle, index, conf)) {
            return Err(rolled_back(&backup, e));
        }
        if !conf.mac.is_empty() {
            // Go writes the configured string, not a normalised one.
            for i in result
                .interfaces
                .iter_mut()
                .filter(|i| i.name == req.ifname)
            {
                i.mac = conf.mac.clone();
            }
        }
        Ok(result)
    }
}

impl<K: NetKernel> Plugin for Tuning<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "tuning"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        config::reject_duplicate_sysctls(&req.stdin)?;
        let conf = TuningConf::parse(req)?;
        config::check_allowlist(&self.allowlist, &conf.sysctl)?;
        if req.ifname.contains('/') {
            return Err(Error::IfnameInvalid {
                ifname: req.ifname.clone(),
            });
        }
        let result = self.prev(req)?;
        let files: Vec<(String, String)> = conf
            .sysctl
            .iter()
            .map(|(k, v)| Ok((sysctl_file_name(k, &req.ifname)?, v.clone())))
            .collect::<Result<_>>()?;

        in_pod(&self.kernel, &req.netns, |handle| {
            self.add_in_pod(handle, req, &conf, files, result)
        })
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = TuningConf::parse(req)?;
        let path = backup_path(&conf.data_dir, &req.container_id, &req.ifname);
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(crate::Error::io("read", &path, e).into()),
        };
        // Like Go: an unreadable backup is left alone and DEL succeeds.
        let Ok(backup) = serde_json::from_slice::<Backup>(&data) else {
            return Ok(());
        };
        let handle = match self.kernel.open(&req.netns) {
            Ok(h) => h,
            // Beyond Go: with the namespace gone there is nothing to
            // restore, and the backup would leak.
            Err(e) if e.is_not_found() || req.netns.is_empty() => return remove_backup(&path),
            Err(e) => return Err(e.into()),
        };
        restore_in_pod(&handle, &req.ifname, backup, &path)
    }

    fn check(&self, req: &Request) -> Result<()> {
        let (conf, _) = self.load(req)?;
        in_pod(&self.kernel, &req.netns, |handle| {
            check_in_pod(handle, req, &conf)
        })
    }
}

/// DEL's work inside the pod namespace.
fn restore_in_pod<H: NetnsHandle>(
    handle: &H,
    ifname: &str,
    backup: Backup,
    path: &Path,
) -> Result<()> {
    let index = match handle.link_by_name(ifname) {
        Ok(l) => l.index,
        Err(e) if e.is_not_found() => {
            // The namespace-wide sysctls can still be put back; the
            // interface's own went with it.
            let sysctls = Backup {
                sysctl: backup.sysctl,
                ..Backup::default()
            };
            for msg in restore(handle, 0, &sysctls) {
                tracing::debug!("{msg}");
            }
            return remove_backup(path);
        }
        Err(e) => return Err(e.into()),
    };
    let errs = restore(handle, index, &backup);
    if errs.is_empty() {
        remove_backup(path)
    } else {
        // Go keeps the backup and still succeeds.
        tracing::warn!("{}", errs.join("; "));
        Ok(())
    }
}

/// CHECK's finding that `attribute` of `object` is not as configured.
fn mismatch(
    object: &str,
    attribute: &'static str,
    configured: impl ToString,
    current: impl ToString,
) -> Error {
    Error::Mismatch {
        object: object.to_owned(),
        attribute,
        configured: configured.to_string(),
        current: current.to_string(),
    }
}

/// CHECK's work inside the pod namespace.
fn check_in_pod<H: NetnsHandle>(handle: &H, req: &Request, conf: &TuningConf) -> Result<()> {
    let files: Vec<(String, String)> = conf
        .sysctl
        .iter()
        .map(|(k, v)| Ok((sysctl_file_name(k, &req.ifname)?, v.clone())))
        .collect::<Result<_>>()?;
    for (file, want) in &files {
        let cur = handle
            .sysctl_get(sysctl_key(file))
            .map_err(|e| sysctl_error("read", file, e))?
            .ok_or_else(|| Error::SysctlAccess {
                op: "read",
                file: file.clone(),
                source: std::io::Error::from_raw_os_error(cni_netns::kernel::Errno::ENOENT as i32),
            })?;
        if cur != *want {
            return Err(mismatch(file, "value", want, cur));
        }
    }
    let ifname = &req.ifname;
    let link = handle
        .link_by_name(ifname)
        .map_err(|source| Error::LinkMissing {
            ifname: ifname.clone(),
            source: source.into(),
        })?;
    if !conf.mac.is_empty() {
        let cur = mac_str(link.mac);
        if parse_mac(&conf.mac)?.to_string() != cur {
            return Err(mismatch(ifname, "Ethernet", &conf.mac, &cur));
        }
    }
    if conf.promisc != link.is_promisc() {
        let cur = u8::from(link.is_promisc());
        return Err(mismatch(ifname, "promisc", conf.promisc, cur));
    }
    if conf.mtu != 0 && conf.mtu != link.mtu as i64 {
        return Err(mismatch(ifname, "MTU", conf.mtu, link.mtu));
    }
    if let Some(want) = conf.allmulti {
        if want != link.is_allmulti() {
            return Err(mismatch(
                ifname,
                "all-multicast mode",
                want,
                link.is_allmulti(),
            ));
        }
    }
    if let Some(want) = conf.txqlen {
        let cur = handle.link_txqlen(link.index)?;
        if want != cur as i64 {
            return Err(mismatch(ifname, "Transmit Queue Length", want, cur));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_is_written_like_go() {
        let b = Backup {
            mac: "aa:bb:cc:dd:ee:ff".into(),
            promisc: Some(false),
            mtu: 1500,
            allmulti: Some(true),
            txqlen: None,
            sysctl: vec![],
        };
        assert_eq!(
            String::from_utf8(encode_backup(&b).unwrap()).unwrap(),
            "{\n \"mac\": \"aa:bb:cc:dd:ee:ff\",\n \"promisc\": false,\n \"mtu\": 1500,\n \"allmulti\": true\n}"
        );
        // Go's file (no sysctl key) reads back; ours round-trips.
        let with = Backup {
            sysctl: vec![("/proc/sys/net/x".into(), "1".into())],
            ..b.clone()
        };
        let back: Backup = serde_json::from_slice(&encode_backup(&with).unwrap()).unwrap();
        assert_eq!(back, with);
    }
}
