//! The tuning plugin's configuration: the config keys, their overrides from
//! `CNI_ARGS`, `runtimeConfig` and `args.cni` (Go's `parseConf`), the
//! sysctl key rules and the allow-list.

use std::path::Path;

use cni_exec::Request;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::{Error, Result};

/// Where backups go unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";
/// The sysctl allow-list file (one regular expression a line).
pub const DEFAULT_ALLOWLIST: &str = "/etc/cni/tuning/allowlist.conf";
pub(crate) const SYSCTL_NET_ROOT: &str = "/proc/sys/net/";

/// The effective tuning settings of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TuningConf {
    /// Backup directory.
    pub data_dir: String,
    /// Sysctls to write, in config order (`args.cni.sysctl` merged in).
    pub sysctl: Vec<(String, String)>,
    /// MAC address to set ("" for none).
    pub mac: String,
    /// Promiscuous mode on.
    pub promisc: bool,
    /// MTU (0 for unchanged).
    pub mtu: i64,
    /// Transmit queue length.
    pub txqlen: Option<i64>,
    /// All-multicast mode.
    pub allmulti: Option<bool>,
}

#[derive(Deserialize, Default)]
pub(crate) struct Raw {
    #[serde(rename = "dataDir", default)]
    data_dir: String,
    #[serde(default)]
    sysctl: Option<Map<String, Value>>,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    promisc: bool,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "txQLen", default)]
    txqlen: Option<i64>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntime>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Deserialize, Default)]
struct RawRuntime {
    #[serde(default)]
    mac: String,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawCniArgs>,
}

#[derive(Deserialize, Default)]
struct RawCniArgs {
    sysctl: Option<Map<String, Value>>,
    mac: Option<String>,
    promisc: Option<bool>,
    mtu: Option<i64>,
    allmulti: Option<bool>,
    #[serde(rename = "txQLen")]
    txqlen: Option<i64>,
}

fn string_pairs(m: Map<String, Value>) -> Result<Vec<(String, String)>> {
    m.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            other => Err(Error::SysctlNotString {
                key: k,
                found: other.to_string(),
            }),
        })
        .collect()
}

impl TuningConf {
    /// Go's `parseConf`: the config, then `CNI_ARGS` `MAC`, then
    /// `runtimeConfig.mac`, then `args.cni` (each overriding the former).
    pub fn parse(req: &Request) -> Result<TuningConf> {
        let raw: Raw = req.config.parse_as().map_err(Error::from)?;
        let mut conf = TuningConf {
            data_dir: if raw.data_dir.is_empty() {
                DEFAULT_DATA_DIR.into()
            } else {
                raw.data_dir
            },
            sysctl: string_pairs(raw.sysctl.unwrap_or_default())?,
            mac: raw.mac,
            promisc: raw.promisc,
            mtu: raw.mtu,
            txqlen: raw.txqlen,
            allmulti: raw.allmulti,
        };
        if !req.args_raw.is_empty() {
            let args = req.args()?;
            args.check_known(&["MAC"])?;
            if let Some(mac) = args.get("MAC").filter(|m| !m.is_empty()) {
                conf.mac = mac.to_owned();
            }
        }
        if let Some(rc) = raw.runtime_config.filter(|rc| !rc.mac.is_empty()) {
            conf.mac = rc.mac;
        }
        if let Some(a) = raw.args.and_then(|a| a.cni) {
            for (k, v) in string_pairs(a.sysctl.unwrap_or_default())? {
                match conf.sysctl.iter_mut().find(|(ek, _)| *ek == k) {
                    Some(e) => e.1 = v,
                    None => conf.sysctl.push((k, v)),
                }
            }
            if let Some(m) = a.mac {
                conf.mac = m;
            }
            if let Some(p) = a.promisc {
                conf.promisc = p;
            }
            if let Some(m) = a.mtu {
                conf.mtu = m;
            }
            if a.allmulti.is_some() {
                conf.allmulti = a.allmulti;
            }
            if a.txqlen.is_some() {
                conf.txqlen = a.txqlen;
            }
        }
        Ok(conf)
    }
}

/// Go's `getSysctlFilename`: dots become slashes, then the first `IFNAME`
/// becomes the interface name (so a name with dots stays one path
/// component), the path is cleaned, and it must lie under `/proc/sys/net/`.
pub fn sysctl_file_name(key: &str, ifname: &str) -> Result<String> {
    let key = key.replace('.', "/").replacen("IFNAME", ifname, 1);
    let file = clean(&format!("/proc/sys/{key}"));
    if !file.starts_with(SYSCTL_NET_ROOT) {
        return Err(Error::SysctlKeyInvalid { key });
    }
    Ok(file)
}

/// Lexical path cleaning like Go's `filepath.Clean` for absolute paths.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Fails when the top-level `sysctl` object of the raw config repeats a key
/// (Go's `validateSysctlConflictingKeys`); JSON parsers keep the last one
/// silently, so this reads the bytes again.
pub(crate) fn reject_duplicate_sysctls(stdin: &[u8]) -> Result<()> {
    #[derive(Deserialize)]
    struct Check {
        #[serde(default, deserialize_with = "no_duplicates")]
        #[allow(dead_code)]
        sysctl: (),
    }
    fn no_duplicates<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<(), D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sysctl object")
            }
            fn visit_unit<E>(self) -> std::result::Result<(), E> {
                Ok(())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<(), A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some((k, _)) = m.next_entry::<String, serde::de::IgnoredAny>()? {
                    if !seen.insert(k) {
                        return Err(serde::de::Error::custom(
                            "duplicated sysctl keys are not allowed",
                        ));
                    }
                }
                Ok(())
            }
        }
        d.deserialize_any(V)
    }
    match serde_json::from_slice::<Check>(stdin) {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("duplicated sysctl keys") => Err(Error::SysctlDuplicated),
        // Anything else is for the config parser to report.
        Err(_) => Ok(()),
    }
}

/// Go's `validateSysctlConf`: with an allow-list file present, every sysctl
/// key must match one of its regular expressions (unanchored, as Go's
/// `regexp.MatchString`).
pub(crate) fn check_allowlist(path: &Path, sysctl: &[(String, String)]) -> Result<()> {
    let text = match cni_files::capped::read_file_to_string(path, cni_files::capped::MAX_ADMIN_FILE)
    {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(crate::Error::io("read", path, e).into()),
    };
    let list: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let res = list
        .iter()
        .map(|p| {
            regex_lite::Regex::new(p).map_err(|e| Error::AllowlistPatternInvalid {
                pattern: (*p).to_owned(),
                reason: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    for (key, _) in sysctl {
        if !res.iter().any(|r| r.is_match(key)) {
            return Err(Error::SysctlNotAllowed {
                key: key.clone(),
                allowed: list.iter().map(|p| (*p).to_owned()).collect(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys_resolve_under_proc_sys_net() {
        assert_eq!(
            sysctl_file_name("net.ipv4.conf.IFNAME.rp_filter", "eth0.100").unwrap(),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        assert_eq!(
            sysctl_file_name("net/ipv6/conf/all/forwarding", "eth0").unwrap(),
            "/proc/sys/net/ipv6/conf/all/forwarding"
        );
        // Dots become slashes before cleaning, so `..` can never climb out.
        assert_eq!(
            sysctl_file_name("net/../kernel/x", "eth0").unwrap(),
            "/proc/sys/net/kernel/x"
        );
        for bad in [
            "kernel.hostname",
            "net",
            "../../etc/passwd",
            "kernel/../net/x",
        ] {
            let e = sysctl_file_name(bad, "eth0").unwrap_err().to_string();
            assert!(e.contains("invalid net sysctl key"), "{bad}: {e}");
        }
    }

    #[test]
    fn duplicated_sysctl_keys_are_rejected() {
        let dup = br#"{"name":"n","sysctl":{"net.a":"1","net.a":"2"}}"#;
        assert!(reject_duplicate_sysctls(dup).is_err());
        let ok = br#"{"name":"n","sysctl":{"net.a":"1","net.b":"2"}}"#;
        assert!(reject_duplicate_sysctls(ok).is_ok());
        assert!(reject_duplicate_sysctls(br#"{"name":"n"}"#).is_ok());
    }

    #[test]
    fn allowlist_matches_unanchored_regexes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("allowlist.conf");
        let keys = vec![(
            "net.ipv4.conf.IFNAME.rp_filter".to_string(),
            "1".to_string(),
        )];
        assert!(
            check_allowlist(&p, &keys).is_ok(),
            "no file, no restriction"
        );
        std::fs::write(&p, "^net\\.ipv4\\.conf\\.IFNAME\\.[a-z_]+$\n\n").unwrap();
        assert!(check_allowlist(&p, &keys).is_ok());
        let other = vec![("net.core.somaxconn".to_string(), "1".to_string())];
        let e = check_allowlist(&p, &other).unwrap_err().to_string();
        assert!(
            e.starts_with("Sysctl net.core.somaxconn is not allowed"),
            "{e}"
        );
    }
}
