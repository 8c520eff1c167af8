//! The thick daemon's primary-configuration keys (multus-cni
//! `pkg/server/config`): `multusMasterCNI` picks the primary by file name,
//! `forceCNIVersion` rewrites the primary's `cniVersion` once, and
//! `overrideNetworkName` names `00-multus.conf` after the primary. Each
//! through an in-process daemon (as `multus_thick`'s auto-configuration
//! test) and through one `AutoConfig` pass; the primaries are that test's
//! fixtures.
#![cfg(feature = "multus")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_multus::thick::{self, autoconf::AutoConfig, DaemonConfig};
use serde_json::{json, Value};

const FLANNEL: &str = r#"{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#;
const CALICO: &str = r#"{"cniVersion":"0.4.0","name":"k8s-pod-network","type":"calico"}"#;

fn daemon_config(dir: &Path, net: &Path, extra: Value) -> DaemonConfig {
    try_daemon_config(dir, net, extra).unwrap()
}

/// The daemon configuration, or the error of a key of the wrong type.
fn try_daemon_config(
    dir: &Path,
    net: &Path,
    extra: Value,
) -> Result<DaemonConfig, cni_multus::Error> {
    let mut c = json!({"socketDir": dir.join("sock"), "clusterNetwork": "cluster",
        "cniDir": dir.join("cni"), "binDir": dir.join("bin"),
        "multusConfigFile": "auto", "cniConfigDir": net});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    DaemonConfig::from_slice(c.to_string().as_bytes(), Path::new("test"))
}

/// An `AutoConfig` of a daemon configuration with `extra` keys.
fn auto(net: &Path, extra: Value) -> Result<AutoConfig, cni_multus::Error> {
    let dir = tempfile::tempdir().unwrap();
    AutoConfig::try_from_daemon(&try_daemon_config(dir.path(), net, extra)?)
}

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_default()).unwrap_or(Value::Null)
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A daemon in this process, stopped before its directory goes.
struct Daemon {
    handle: Option<thick::DaemonHandle>,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(net: &Path, extra: Value) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let c = daemon_config(dir.path(), net, extra);
        let h = thick::start_with(c, None, Arc::new(cni_exec::ProcessExec::new())).unwrap();
        Daemon {
            handle: Some(h),
            _dir: dir,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(d) = self.handle.take() {
            d.stop();
        }
    }
}

#[test]
fn multus_master_cni_chooses_the_primary_by_name() {
    let net = tempfile::tempdir().unwrap();
    let n = net.path();
    std::fs::write(n.join("10-flannel.conflist"), FLANNEL).unwrap();
    std::fs::write(n.join("20-calico.conf"), CALICO).unwrap();
    let out = n.join("00-multus.conf");

    // Without the key: the first file in CNI order.
    let a = auto(n, json!({})).unwrap();
    assert!(a.sync().unwrap());
    assert_eq!(
        read(&out)["clusterNetwork"],
        json!(n.join("10-flannel.conflist"))
    );

    // With it: the named file, in the daemon too.
    let _d = Daemon::start(n, json!({"multusMasterCNI": "20-calico.conf"}));
    wait_for("20-calico.conf as the primary", || {
        read(&out)["clusterNetwork"] == json!(n.join("20-calico.conf"))
    });
    assert_eq!(read(&out)["cniVersion"], "0.4.0");
    drop(_d);

    // A named file that does not exist: no configuration (not another file).
    let a = auto(n, json!({"multusMasterCNI": "30-missing.conflist"})).unwrap();
    assert!(!a.sync().unwrap());
    assert!(!out.exists());
    // Naming the generated file is refused (Go: recursive config load).
    std::fs::write(
        &out,
        r#"{"cniVersion":"1.0.0","name":"m","type":"multus-shim"}"#,
    )
    .unwrap();
    let a = auto(n, json!({"multusMasterCNI": "00-multus.conf"})).unwrap();
    assert!(!a.sync().unwrap());
    // A wrong type fails the daemon's start.
    let e = auto(n, json!({"multusMasterCNI": 5})).unwrap_err();
    assert!(e.to_string().contains("multusMasterCNI"), "{e}");
    // The daemon configuration itself is refused (it cannot start).
    let dir = tempfile::tempdir().unwrap();
    let e = try_daemon_config(dir.path(), n, json!({"multusMasterCNI": true})).unwrap_err();
    assert!(e.to_string().contains("multusMasterCNI"), "{e}");
}

#[test]
fn force_cni_version_rewrites_the_primary_once() {
    let net = tempfile::tempdir().unwrap();
    let n = net.path();
    let primary = n.join("10-flannel.conflist");
    std::fs::write(&primary, FLANNEL).unwrap();
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    std::fs::set_permissions(
        &primary,
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    let out = n.join("00-multus.conf");
    let d = Daemon::start(n, json!({"cniVersion": "1.0.0", "forceCNIVersion": true}));
    wait_for("00-multus.conf", || out.exists());
    // The primary's file: every key kept, cniVersion forced, re-encoded as
    // Go's json.Marshal of a map (sorted keys, compact).
    let mut want: Value = serde_json::from_str(FLANNEL).unwrap();
    want["cniVersion"] = json!("1.0.0");
    assert_eq!(read(&primary), want);
    assert_eq!(mode(&primary), 0o640, "the file's mode is kept");
    let text = std::fs::read_to_string(&primary).unwrap();
    assert!(
        text.starts_with(r#"{"cniVersion":"1.0.0","name":"cbr0","plugins":["#),
        "{text}"
    );
    assert_eq!(read(&out)["cniVersion"], "1.0.0");
    assert!(read(&out).get("forceCNIVersion").is_none());
    // Go forces once, at start: a later rewrite by the primary's owner
    // stays, the generated configuration keeps the daemon's version.
    std::fs::write(&primary, FLANNEL.replace("cbr0", "cbr1")).unwrap();
    std::thread::sleep(thick::autoconf::POLL * 3);
    assert_eq!(read(&primary)["cniVersion"], "0.3.1");
    assert_eq!(read(&out)["cniVersion"], "1.0.0");
    drop(d);

    // Without it the primary is left alone.
    std::fs::write(&primary, FLANNEL).unwrap();
    let a = auto(n, json!({"cniVersion": "1.0.0"})).unwrap();
    assert!(a.sync().unwrap());
    assert_eq!(std::fs::read_to_string(&primary).unwrap(), FLANNEL);
    assert_eq!(read(&out)["cniVersion"], "0.3.1");
    // forceCNIVersion needs a version to force (Go: "the CNI version is a
    // mandatory parameter"); a wrong type is an error too.
    let e = auto(n, json!({"forceCNIVersion": true})).unwrap_err();
    assert!(e.to_string().contains("cniVersion"), "{e}");
    let e = auto(n, json!({"forceCNIVersion": "yes", "cniVersion": "1.0.0"})).unwrap_err();
    assert!(e.to_string().contains("forceCNIVersion"), "{e}");
}

#[test]
fn override_network_name_takes_the_primarys_name() {
    let net = tempfile::tempdir().unwrap();
    let n = net.path();
    std::fs::write(n.join("10-flannel.conflist"), FLANNEL).unwrap();
    let out = n.join("00-multus.conf");
    let a = auto(n, json!({})).unwrap();
    assert!(a.sync().unwrap());
    assert_eq!(read(&out)["name"], "multus-cni-network");

    let d = Daemon::start(n, json!({"overrideNetworkName": true}));
    wait_for("the primary's name", || read(&out)["name"] == "cbr0");
    drop(d);

    // A primary without a name: an error, no configuration written.
    std::fs::remove_file(&out).unwrap();
    std::fs::write(
        n.join("10-flannel.conflist"),
        r#"{"cniVersion":"0.3.1","plugins":[{"type":"flannel"}]}"#,
    )
    .unwrap();
    let a = auto(n, json!({"overrideNetworkName": true})).unwrap();
    let e = a.sync().unwrap_err();
    assert!(e.to_string().contains("network name"), "{e}");
    assert!(!out.exists());
    let e = auto(n, json!({"overrideNetworkName": 1})).unwrap_err();
    assert!(e.to_string().contains("overrideNetworkName"), "{e}");
}
