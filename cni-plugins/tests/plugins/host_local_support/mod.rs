//! Shared helpers of the host-local and static plugin tests: run a plugin
//! binary (ours or the Go reference) with a CNI environment and stdin.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// Our host-local binary.
pub const HOST_LOCAL: &str = env!("CARGO_BIN_EXE_host-local");
/// Our static binary.
pub const STATIC: &str = env!("CARGO_BIN_EXE_static");
/// The Go reference binaries (Debian containernetworking-plugins).
pub const GO_HOST_LOCAL: &str = "/usr/lib/cni/host-local";
/// The Go static plugin.
pub const GO_STATIC: &str = "/usr/lib/cni/static";

/// The Go binary, or `None` (with a note) when it is not installed.
pub fn go(path: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    cni_testkit::premise::require(p.exists(), &format!("needs {path}")).then_some(p)
}

/// One plugin invocation's outcome.
#[derive(Debug, Clone)]
pub struct Out {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.stdout).unwrap_or(Value::Null)
    }
    pub fn ok(&self) -> bool {
        self.code == 0
    }
    /// The error code of an error reply (0 on success).
    pub fn err_code(&self) -> u64 {
        if self.ok() {
            0
        } else {
            self.json()["code"].as_u64().unwrap_or(u64::MAX)
        }
    }
    pub fn msg(&self) -> String {
        self.json()["msg"].as_str().unwrap_or_default().to_string()
    }
}

/// A CNI invocation.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub command: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
}

impl<'a> Call<'a> {
    pub fn new(command: &'a str, container_id: &'a str) -> Self {
        Call {
            command,
            container_id,
            ifname: "eth0",
            args: "",
        }
    }
    pub fn ifname(mut self, ifname: &'a str) -> Self {
        self.ifname = ifname;
        self
    }
    pub fn args(mut self, args: &'a str) -> Self {
        self.args = args;
        self
    }

    pub fn command(&self, bin: &Path) -> Command {
        let mut cmd = Command::new(bin);
        cmd.env_clear()
            .env("CNI_COMMAND", self.command)
            .env("CNI_CONTAINERID", self.container_id)
            .env("CNI_NETNS", "/run/netns/ipam-test-nonexistent")
            .env("CNI_IFNAME", self.ifname)
            .env("CNI_PATH", "/usr/lib/cni")
            .env("CNI_ARGS", self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    pub fn run(&self, bin: &Path, stdin: &[u8]) -> Out {
        let mut child = self.command(bin).spawn().expect("spawn plugin");
        // A plugin may exit without reading stdin (VERSION, early errors).
        let _ = child.stdin.take().expect("stdin").write_all(stdin);
        let out = child.wait_with_output().expect("wait plugin");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Runs `bin` with `conf` as stdin.
pub fn run(bin: impl AsRef<Path>, call: Call<'_>, conf: &Value) -> Out {
    call.run(bin.as_ref(), conf.to_string().as_bytes())
}

/// A host-local network config with `ipam` merged over the defaults.
pub fn host_local_conf(version: &str, name: &str, data_dir: &Path, ipam: Value) -> Value {
    let mut full = json!({"type": "host-local", "dataDir": data_dir});
    if let (Some(f), Some(extra)) = (full.as_object_mut(), ipam.as_object()) {
        for (k, v) in extra {
            f.insert(k.clone(), v.clone());
        }
    }
    json!({"cniVersion": version, "name": name, "type": "ptp", "ipam": full})
}

/// Every file of a directory, by name, with its content (sub-directories
/// are listed with a trailing `/` and no content).
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.insert(format!("{name}/"), Vec::new());
        } else {
            out.insert(name, std::fs::read(e.path()).unwrap_or_default());
        }
    }
    out
}

/// The names in a directory that are reservations (parse as an IP).
pub fn reservations(dir: &Path) -> BTreeMap<String, String> {
    snapshot(dir)
        .into_iter()
        .filter(|(n, _)| n.parse::<std::net::IpAddr>().is_ok())
        .map(|(n, c)| (n, String::from_utf8_lossy(&c).into_owned()))
        .collect()
}

/// The spec versions a binary reports in VERSION.
pub fn supported_versions(bin: &Path) -> Vec<String> {
    let out = Call::new("VERSION", "").run(bin, b"{}");
    assert!(out.ok(), "VERSION failed: {out:?}");
    out.json()["supportedVersions"]
        .as_array()
        .expect("supportedVersions")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// A small, seedable pseudo-random generator (xorshift64*), so the tests
/// need no extra dependency and a failure prints its seed.
pub struct Rng(u64);

impl Rng {
    pub fn from_time() -> (Rng, u64) {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id());
        (Rng(seed | 1), seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Debian's Go plugins (plugins 1.1.1) vendors libcni 1.1, whose 1.x
/// result printer writes an empty `"dns": {}`; current libcni (and
/// cni-types) omit it. That one key is the only allowed difference.
pub fn without_empty_dns_1x(version: &str, go_out: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(go_out).into_owned();
    if version.starts_with("1.") {
        text.replace(",\n    \"dns\": {}\n}", "\n}").into_bytes()
    } else {
        text.into_bytes()
    }
}
