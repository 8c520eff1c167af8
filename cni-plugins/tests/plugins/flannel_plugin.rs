//! flannel's commands through `dispatch`, with an in-process fake `bridge`
//! delegate that records what it receives: the saved delegate files (ours
//! keyed by container id and ifname, the reference's keyed by container id),
//! DEL's fallbacks, STATUS and GC. No root needed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cni_exec::{dispatch, Command, Env, InProcessExec, NoNetnsGuard, Plugin, Request};
use cni_types::{CniError, CniResult, IpConfig};

/// command, container id, ifname, stdin
pub(crate) type Call = (Command, String, String, Vec<u8>);

#[derive(Default)]
pub(crate) struct FakeBridge {
    calls: Mutex<Vec<Call>>,
    /// ADD fails (`trait_plugins_fake::flannel`).
    pub(crate) fail_add: AtomicBool,
    pub(crate) fail_del: AtomicBool,
}

impl FakeBridge {
    fn record(&self, req: &Request) {
        self.calls.lock().unwrap().push((
            req.command,
            req.container_id.clone(),
            req.ifname.clone(),
            req.stdin.clone(),
        ));
    }
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Plugin for FakeBridge {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "fake-bridge"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.record(req);
        if self.fail_add.load(Ordering::Relaxed) {
            return Err(CniError::internal("bridge ADD failed"));
        }
        let mut r = CniResult::default();
        r.ips.push(IpConfig::new("10.1.17.2/24".parse().unwrap()));
        Ok(r)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.record(req);
        if self.fail_del.load(Ordering::Relaxed) {
            return Err(CniError::internal("bridge DEL failed"));
        }
        Ok(())
    }
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        self.record(req);
        Ok(())
    }
}

const V4: &str =
    "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n";
const REFERENCE: &str = r#"{"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"}],"type":"host-local"},"isGateway":true,"mtu":1472,"name":"cni-flannel","type":"bridge"}"#;

pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) bridge: Arc<FakeBridge>,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("subnet.env"), V4).unwrap();
        Fixture {
            dir,
            bridge: Arc::new(FakeBridge::default()),
        }
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub(crate) fn conf(&self, extra: &str) -> String {
        format!(
            r#"{{"name":"cni-flannel","type":"flannel","subnetFile":"{}","dataDir":"{}"{extra}}}"#,
            self.dir.path().join("subnet.env").display(),
            self.data_dir().display()
        )
    }

    pub(crate) fn run(&self, cmd: &str, cid: &str, ifname: &str, stdin: &str) -> (i32, String) {
        let exec = InProcessExec::builder()
            .register("bridge", self.bridge.clone())
            .netns_guard(Arc::new(NoNetnsGuard))
            .build();
        let env = Env::new([
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", "/run/netns/flannel-test"),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", "/nonexistent"),
        ])
        .with_exec(Arc::new(exec));
        let out = dispatch(
            &cni_plugins::flannel::Flannel::new(),
            &env,
            stdin.as_bytes(),
        );
        (
            out.exit_code,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

#[test]
fn add_saves_the_reference_vector_under_both_names_and_delegates_it() {
    let f = Fixture::new();
    let (code, out) = f.run("ADD", "c1", "eth0", &f.conf(""));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("10.1.17.2/24"), "{out}");
    let ours = f.data_dir().join("c1@eth0");
    assert_eq!(read(&ours).as_deref(), Some(REFERENCE));
    assert_eq!(read(&f.data_dir().join("c1")).as_deref(), Some(REFERENCE));
    let calls = f.bridge.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, Command::Add);
    assert_eq!(calls[0].3, REFERENCE.as_bytes());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&ours).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // DEL: delegate gets the saved bytes, both files go; again: success.
    let (code, out) = f.run("DEL", "c1", "eth0", &f.conf(""));
    assert_eq!(code, 0, "{out}");
    assert_eq!(f.bridge.calls()[1].0, Command::Del);
    assert_eq!(f.bridge.calls()[1].3, REFERENCE.as_bytes());
    assert!(!ours.exists() && !f.data_dir().join("c1").exists());
    let (code, _) = f.run("DEL", "c1", "eth0", &f.conf(""));
    assert_eq!(code, 0);
    assert_eq!(f.bridge.calls().len(), 2, "missing file: no delegate call");
}

#[test]
fn two_attachments_of_one_pod_do_not_overwrite_each_other() {
    let f = Fixture::new();
    assert_eq!(f.run("ADD", "c2", "eth0", &f.conf("")).0, 0);
    let other = f.conf(r#","delegate":{"mtu":1400}"#);
    assert_eq!(f.run("ADD", "c2", "net1", &other).0, 0);
    let eth0 = read(&f.data_dir().join("c2@eth0")).unwrap();
    let net1 = read(&f.data_dir().join("c2@net1")).unwrap();
    assert!(net1.contains("\"mtu\":1400") && eth0.contains("\"mtu\":1472"));
    // The reference's file keeps the first attachment's config.
    assert_eq!(read(&f.data_dir().join("c2")).unwrap(), eth0);

    assert_eq!(f.run("DEL", "c2", "net1", &other).0, 0);
    assert_eq!(f.bridge.calls().last().unwrap().3, net1.as_bytes());
    assert_eq!(read(&f.data_dir().join("c2")).unwrap(), eth0);
    assert_eq!(f.run("DEL", "c2", "eth0", &f.conf("")).0, 0);
    assert_eq!(f.bridge.calls().last().unwrap().3, eth0.as_bytes());
    assert!(std::fs::read_dir(f.data_dir()).unwrap().next().is_none());
}

#[test]
fn del_uses_a_file_written_by_the_go_plugin() {
    let f = Fixture::new();
    std::fs::create_dir_all(f.data_dir()).unwrap();
    let go = r#"{"cniVersion":"0.3.1","name":"cni-flannel","type":"bridge","ipam":{"type":"host-local"}}"#;
    std::fs::write(f.data_dir().join("gocid"), go).unwrap();
    // subnet.env gone: DEL does not need it.
    std::fs::remove_file(f.dir.path().join("subnet.env")).unwrap();
    assert_eq!(f.run("DEL", "gocid", "eth0", &f.conf("")).0, 0);
    assert_eq!(f.bridge.calls()[0].3, go.as_bytes());
    assert!(!f.data_dir().join("gocid").exists());
}

#[test]
fn an_existing_reference_file_is_not_clobbered() {
    let f = Fixture::new();
    std::fs::create_dir_all(f.data_dir()).unwrap();
    std::fs::write(f.data_dir().join("c3"), "go's").unwrap();
    assert_eq!(f.run("ADD", "c3", "eth0", &f.conf("")).0, 0);
    assert_eq!(read(&f.data_dir().join("c3")).as_deref(), Some("go's"));
    assert_eq!(f.run("DEL", "c3", "eth0", &f.conf("")).0, 0);
    // not ours (different bytes): left for the Go plugin's DEL
    assert_eq!(read(&f.data_dir().join("c3")).as_deref(), Some("go's"));
    assert!(!f.data_dir().join("c3@eth0").exists());
}

#[test]
fn del_failures_and_unparsable_files() {
    let f = Fixture::new();
    assert_eq!(f.run("ADD", "c4", "eth0", &f.conf("")).0, 0);
    f.bridge.fail_del.store(true, Ordering::Relaxed);
    let (code, out) = f.run("DEL", "c4", "eth0", &f.conf(""));
    assert_ne!(code, 0);
    assert!(out.contains("bridge DEL failed"), "{out}");
    assert!(f.data_dir().join("c4@eth0").exists(), "kept for the retry");
    f.bridge.fail_del.store(false, Ordering::Relaxed);
    assert_eq!(f.run("DEL", "c4", "eth0", &f.conf("")).0, 0);
    assert!(!f.data_dir().join("c4@eth0").exists());

    std::fs::write(f.data_dir().join("c5@eth0"), "{not json").unwrap();
    let before = f.bridge.calls().len();
    assert_eq!(f.run("DEL", "c5", "eth0", &f.conf("")).0, 0);
    assert_eq!(f.bridge.calls().len(), before);
}

#[test]
fn add_errors_name_the_cause() {
    let f = Fixture::new();
    let (code, out) = f.run("ADD", "c6", "eth0", &f.conf(r#","delegate":{"name":"x"}"#));
    assert_ne!(code, 0);
    assert!(out.contains("must not have 'name' field"), "{out}");
    std::fs::remove_file(f.dir.path().join("subnet.env")).unwrap();
    let (code, out) = f.run("ADD", "c6", "eth0", &f.conf(""));
    assert_ne!(code, 0);
    assert!(
        out.contains("failed to load flannel 'subnet.env' file: "),
        "{out}"
    );
    assert!(
        out.contains("Check the flannel pod log for this node."),
        "{out}"
    );
    assert!(f.bridge.calls().is_empty());
}

#[test]
fn status_is_50_while_subnet_env_is_missing() {
    let f = Fixture::new();
    let conf = f.conf(r#","cniVersion":"1.1.0""#);
    assert_eq!(f.run("STATUS", "", "", &conf).0, 0);
    std::fs::remove_file(f.dir.path().join("subnet.env")).unwrap();
    let (code, out) = f.run("STATUS", "", "", &conf);
    assert_ne!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["code"], 50);
    assert!(
        v["msg"]
            .as_str()
            .unwrap()
            .contains("subnet.env does not exist"),
        "{v}"
    );
}

#[test]
fn check_is_a_no_op_and_gc_goes_to_the_delegate() {
    let f = Fixture::new();
    let conf = f.conf(r#","cniVersion":"1.1.0""#);
    assert_eq!(f.run("ADD", "live", "eth0", &conf).0, 0);
    assert_eq!(f.run("ADD", "dead", "eth0", &conf).0, 0);
    assert_eq!(f.run("CHECK", "live", "eth0", &conf).0, 0);
    let gc = conf.trim_end_matches('}').to_string()
        + r#","cni.dev/valid-attachments":[{"containerID":"live","ifname":"eth0"}]}"#;
    let (code, out) = f.run("GC", "", "", &gc);
    assert_eq!(code, 0, "{out}");
    let (cmd, _, _, stdin) = f.bridge.calls().last().unwrap().clone();
    assert_eq!(cmd, Command::Gc);
    let sent: serde_json::Value = serde_json::from_slice(&stdin).unwrap();
    assert_eq!(sent["type"], "bridge");
    assert_eq!(sent["cniVersion"], "1.1.0");
    assert_eq!(sent["cni.dev/valid-attachments"][0]["containerID"], "live");
    assert!(f.data_dir().join("live@eth0").exists());
    assert!(!f.data_dir().join("dead@eth0").exists());
    assert!(!f.data_dir().join("dead").exists());
}
