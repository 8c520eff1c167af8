//! A private containerd for tests and benchmarks (feature `containerd`).
//!
//! [`Containerd::start`] runs Debian's `containerd` (1.6) with `runc` as
//! a kubelet-less node: a generated `config.toml` gives it its own root,
//! state, socket, runc root and `opt` directory under one temporary
//! directory, the CNI plugins and config directory the caller names, and
//! a sandbox image built on the spot (a static `pause` program compiled
//! with `gcc -static`, packed as a one-layer OCI image and imported with
//! `ctr`; nothing is pulled). Sandboxes go under a cgroup of the
//! instance's own. With [`ContainerdOptions::netns`] containerd (and so
//! every CNI plugin it runs, and each shim) lives in a network namespace
//! the caller made: the bridge, its veths, the masquerade and port-mapping
//! rules land there, not on the machine.
//!
//! Dropping the value cleans up, also after a failed assertion: every
//! sandbox still known is stopped and removed through CRI (containerd is
//! started again for it if it was killed), containerd is terminated, the
//! instance's shims and sandbox processes are killed, the network
//! namespace and overlay mounts under its directory are unmounted, its
//! cgroups, directory and the libcni cache entries of its sandboxes are
//! removed. Names carry a random suffix: instances run side by side.
//!
//! containerd 1.6 has no setting for libcni's cache directory: it keeps
//! each attachment's result under `/var/lib/cni/results` (libcni's
//! default) and removes it on DEL. What a failed test leaves there for
//! this instance's sandboxes (and only theirs: names carry the sandbox id)
//! is removed on drop.
//!
//! ```no_run
//! use cni_testkit::containerd::{Containerd, ContainerdOptions};
//!
//! let conf = tempfile::tempdir()?;
//! let node = cni_netns::OwnedNetns::new("node")?;
//! let ctd = Containerd::start(
//!     ContainerdOptions::new("/opt/cni/bin", conf.path()).netns(node.path()),
//! )?;
//! let mut cri = ctd.client()?;
//! assert_eq!(cri.status(false)?.network_ready(), Some(false)); // no config yet
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod image;

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cni_cri::v1::{
    LinuxPodSandboxConfig, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatusResponse,
};
use cni_cri::RuntimeClient;

use crate::error::{io_err, Error};

/// The programs an instance needs on `PATH` (Debian: `containerd`, `runc`,
/// `gcc`, `libc6-dev`).
pub const PROGRAMS: [&str; 5] = [
    "containerd",
    "ctr",
    "containerd-shim-runc-v2",
    "runc",
    "gcc",
];
/// The CRI namespace containerd keeps Kubernetes' sandboxes and images in.
pub const CRI_NAMESPACE: &str = "k8s.io";
/// Where libcni (inside containerd 1.6) caches attachment results.
pub const LIBCNI_CACHE: &str = "/var/lib/cni/results";
/// Where containerd 1.6's shims put their sockets (not configurable).
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";
/// The CRI plugin's directory name under root and state.
const CRI_PLUGIN: &str = "io.containerd.grpc.v1.cri";

/// What [`Containerd::start`] needs.
#[derive(Clone, Debug)]
pub struct ContainerdOptions {
    cni_bin_dir: PathBuf,
    cni_conf_dir: PathBuf,
    netns: Option<PathBuf>,
    timeout: Duration,
    max_conf_num: usize,
}

impl ContainerdOptions {
    /// The CNI plugin directory (`bin_dir`: it must also hold `loopback`)
    /// and config directory (`conf_dir`; containerd 1.6 ignores files
    /// moved in: write configs in place).
    pub fn new(cni_bin_dir: impl Into<PathBuf>, cni_conf_dir: impl Into<PathBuf>) -> Self {
        ContainerdOptions {
            cni_bin_dir: cni_bin_dir.into(),
            cni_conf_dir: cni_conf_dir.into(),
            netns: None,
            timeout: Duration::from_secs(60),
            max_conf_num: 1,
        }
    }

    /// Runs containerd inside this network namespace (a path such as
    /// `/run/netns/<name>`; its `lo` should be up: containerd's streaming
    /// server listens on 127.0.0.1).
    pub fn netns(mut self, path: impl Into<PathBuf>) -> Self {
        self.netns = Some(path.into());
        self
    }

    /// How long start-up steps and each CRI call of the fixture may take
    /// (60 s by default: generous, for a loaded machine).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many networks of the config directory each sandbox joins
    /// (containerd's `max_conf_num`; 1 by default): the first `n` in
    /// libcni's order, on `eth0`, `eth1`, ...
    pub fn max_conf_num(mut self, n: usize) -> Self {
        self.max_conf_num = n.max(1);
        self
    }
}

/// A private containerd (see the [module](self) documentation).
#[derive(Debug)]
pub struct Containerd {
    tag: String,
    dir: PathBuf,
    socket: PathBuf,
    options: ContainerdOptions,
    snapshotter: &'static str,
    image: String,
    process: Option<Child>,
    sandboxes: Mutex<BTreeSet<String>>,
}

fn setup_err(op: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Setup {
        op: op.into(),
        reason: reason.into(),
    }
}

fn cri_err(op: impl Into<String>) -> impl FnOnce(cni_cri::Error) -> Error {
    let op = op.into();
    move |source| Error::Runtime {
        op,
        source: Box::new(source),
    }
}

/// True when `program` is an executable file in a `PATH` directory.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

impl Containerd {
    /// Builds the sandbox image, starts containerd and imports the image;
    /// returns once CRI sees the image. Fails naming the missing program
    /// or the step (with the end of containerd's log).
    pub fn start(options: ContainerdOptions) -> Result<Containerd, Error> {
        if let Some(p) = PROGRAMS.iter().find(|p| !on_path(p)) {
            return Err(setup_err(
                "start containerd",
                format!(
                    "{p} is not on PATH (Debian: apt-get install containerd runc gcc libc6-dev)"
                ),
            ));
        }
        let tag = random_tag();
        let dir = std::env::temp_dir().join(format!("cni-rs-containerd-{tag}"));
        let socket = dir.join("containerd.sock");
        // sun_path holds 108 bytes, and the shim's ttrpc socket name is longer.
        if socket.as_os_str().len() > 90 {
            return Err(setup_err(
                "start containerd",
                format!(
                    "socket path {} is too long (set TMPDIR shorter)",
                    socket.display()
                ),
            ));
        }
        std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        // From here on, Drop cleans up whatever happens.
        let mut ctd = Containerd {
            image: format!("localhost/cni-rs/pause:{tag}"),
            tag,
            dir,
            socket,
            options,
            snapshotter: "overlayfs",
            process: None,
            sandboxes: Mutex::new(BTreeSet::new()),
        };
        let pause = image::build_pause(&ctd.dir)?;
        let tar = ctd.dir.join("pause-image.tar");
        std::fs::write(&tar, image::oci_image_tar(&pause, &ctd.image))
            .map_err(io_err(format!("write {}", tar.display())))?;
        ctd.spawn()?;
        ctd.wait_ready()?;
        if !ctd.overlayfs_ok()? {
            // Overlay cannot be mounted here (no module, or a root on
            // overlay itself): the plain-copy snapshotter works anywhere.
            ctd.terminate();
            ctd.snapshotter = "native";
            ctd.spawn()?;
            ctd.wait_ready()?;
        }
        ctd.import_image(&tar)?;
        Ok(ctd)
    }

    /// The random tag naming this instance's directory, image and cgroup.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The instance's directory (root, state, runc root, logs, config).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// containerd's gRPC socket (CRI and containerd's own API).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The sandbox image (`localhost/cni-rs/pause:<tag>`).
    pub fn sandbox_image(&self) -> &str {
        &self.image
    }

    /// The snapshotter in use (`overlayfs`, or `native` where overlay
    /// cannot be mounted).
    pub fn snapshotter(&self) -> &str {
        self.snapshotter
    }

    /// The cgroup (relative to each hierarchy's root) the sandboxes of
    /// [`Containerd::pod_config`] go under.
    pub fn cgroup_parent(&self) -> String {
        format!("/cni-rs-containerd-{}", self.tag)
    }

    /// containerd's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    /// The end of containerd's log (for failure messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// A CRI client on this instance, calls bounded by the options' timeout.
    pub fn client(&self) -> Result<RuntimeClient, Error> {
        Ok(RuntimeClient::new(&self.socket)
            .map_err(cri_err("CRI client"))?
            .with_timeout(self.options.timeout))
    }

    /// Waits until containerd's CRI `Status` reports NetworkReady (it has
    /// loaded a network config), asking every 20 ms for at most `timeout`.
    pub fn wait_network_ready(
        &self,
        cri: &mut RuntimeClient,
        timeout: Duration,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = cri.status(false).map_err(cri_err("CRI Status"))?;
            if status.network_ready() == Some(true) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(setup_err(
                    "wait for NetworkReady",
                    format!("containerd's NetworkReady stays false after {timeout:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A sandbox config for pod `name`: metadata (uid `<name>-<tag>`,
    /// namespace `cni-rs-test`), hostname, a log directory in the
    /// instance's directory, the instance's cgroup parent, and the label
    /// `cni-rs.dev/instance=<tag>`.
    pub fn pod_config(&self, name: &str) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: format!("{name}-{}", self.tag),
                namespace: "cni-rs-test".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: self.dir.join("logs").join(name).display().to_string(),
            labels: [("cni-rs.dev/instance".to_string(), self.tag.clone())].into(),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// `RunPodSandbox` through `client`, remembering the id for clean-up.
    pub fn run_pod_sandbox(
        &self,
        client: &mut RuntimeClient,
        config: PodSandboxConfig,
    ) -> Result<String, Error> {
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let id = client
            .run_pod_sandbox(config)
            .map_err(cri_err(format!("RunPodSandbox {name}")))?;
        self.track(&id);
        Ok(id)
    }

    /// Remembers a sandbox made some other way, for clean-up.
    pub fn track(&self, id: &str) {
        self.known().insert(id.to_string());
    }

    fn known(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.sandboxes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kills containerd with SIGKILL (its shims and sandboxes keep
    /// running, as after a crash).
    pub fn kill(&mut self) -> Result<(), Error> {
        if let Some(mut p) = self.process.take() {
            p.kill().map_err(io_err("kill containerd"))?;
            p.wait().map_err(io_err("wait for containerd"))?;
        }
        Ok(())
    }

    /// Starts containerd again on the same directories (killing it first
    /// if it runs); returns once it answers CRI calls.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill()?;
        self.spawn()?;
        self.wait_ready()
    }

    /// Makes containerd forget these sandboxes without tearing their
    /// network down, as a runtime that lost its state (a crash between
    /// its records and the network, a reinstall): their pause processes
    /// are killed (`ctr tasks kill`; containerd's CRI sees the exits and
    /// deletes the tasks), their containers removed from containerd's
    /// metadata (`ctr containers delete`), then containerd is killed and
    /// started again, so that CRI rebuilds its sandboxes from that
    /// metadata. No CNI DEL runs: the libcni cache files, the netns bind
    /// mounts (with the pod ends inside) and whatever the plugins made on
    /// the node stay. The ids stay tracked: clean-up still removes their
    /// cache files and mounts.
    pub fn forget_sandboxes(&mut self, ids: &[String]) -> Result<(), Error> {
        if ids.is_empty() {
            return Ok(());
        }
        for id in ids {
            self.ctr(&[
                "-n",
                CRI_NAMESPACE,
                "tasks",
                "kill",
                "--signal",
                "SIGKILL",
                id,
            ])?;
        }
        // CRI deletes an exited sandbox's task, then marks it not ready;
        // a container is removable once its task is gone.
        let mut cri = self.client()?;
        let wanted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let deadline = Instant::now() + self.options.timeout;
        loop {
            let ready: Vec<String> = cri
                .list_pod_sandbox(None)
                .map_err(cri_err("ListPodSandbox"))?
                .into_iter()
                .filter(|s| {
                    wanted.contains(s.id.as_str())
                        && s.state == cni_cri::v1::PodSandboxState::SandboxReady as i32
                })
                .map(|s| s.id)
                .collect();
            if ready.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(setup_err(
                    "forget sandboxes",
                    format!("still ready after SIGKILL: {ready:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for id in ids {
            let deadline = Instant::now() + self.options.timeout;
            loop {
                match self.ctr(&["-n", CRI_NAMESPACE, "containers", "delete", id]) {
                    Ok(_) => break,
                    Err(Error::Setup { reason, .. }) if reason.contains("not found") => break,
                    Err(e) if Instant::now() > deadline => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        self.restart()?;
        let listed: BTreeSet<String> = self
            .client()?
            .list_pod_sandbox(None)
            .map_err(cri_err("ListPodSandbox after the restart"))?
            .into_iter()
            .map(|s| s.id)
            .collect();
        match ids.iter().find(|id| listed.contains(*id)) {
            Some(id) => Err(setup_err(
                "forget sandboxes",
                format!("containerd still lists {id} after the restart"),
            )),
            None => Ok(()),
        }
    }

    fn running(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|p| matches!(p.try_wait(), Ok(None)))
    }

    fn write_config(&self) -> Result<PathBuf, Error> {
        let text = config_toml(&ConfigPaths {
            dir: &self.dir,
            socket: &self.socket,
            cni_bin_dir: &self.options.cni_bin_dir,
            cni_conf_dir: &self.options.cni_conf_dir,
            max_conf_num: self.options.max_conf_num,
            sandbox_image: &self.image,
            snapshotter: self.snapshotter,
        });
        let path = self.dir.join("config.toml");
        std::fs::write(&path, text).map_err(io_err(format!("write {}", path.display())))?;
        Ok(path)
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let config = self.write_config()?;
        let log_path = self.dir.join("containerd.log");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io_err(format!("open {}", log_path.display())))?;
        let log2 = log.try_clone().map_err(io_err("dup log file"))?;
        let mut cmd = Command::new("containerd");
        cmd.arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let child = match &self.options.netns {
            // Forked from a thread inside the namespace: containerd, the
            // plugins and shims it starts inherit it; the mount namespace
            // stays the machine's (the sandboxes' netns files are visible).
            Some(path) => cni_netns::Netns::open(path)
                .map_err(|e| Error::Kernel {
                    op: format!("open network namespace {}", path.display()),
                    source: Box::new(e),
                })?
                .run(move || cmd.spawn())
                .map_err(|e| Error::Kernel {
                    op: format!("enter network namespace {}", path.display()),
                    source: Box::new(e),
                })?,
            None => cmd.spawn(),
        }
        .map_err(io_err("start containerd"))?;
        self.process = Some(child);
        Ok(())
    }

    /// Waits until CRI answers `Version` (containerd exiting is a failure
    /// with its log).
    fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + self.options.timeout;
        let mut last = String::new();
        loop {
            if !self.running() {
                return Err(setup_err(
                    "start containerd",
                    format!("it exited; its log ends:\n{}", self.log_tail(20)),
                ));
            }
            if self.socket.exists() {
                let answer = RuntimeClient::new(&self.socket)
                    .map(|c| c.with_timeout(Duration::from_secs(5)))
                    .and_then(|mut c| c.version());
                match answer {
                    Ok(_) => return Ok(()),
                    Err(e) => last = e.to_string(),
                }
            }
            if Instant::now() > deadline {
                return Err(setup_err(
                    "start containerd",
                    format!(
                        "no CRI answer within {:?} ({last}); its log ends:\n{}",
                        self.options.timeout,
                        self.log_tail(20)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(io_err("run ctr"))?;
        if !out.status.success() {
            return Err(setup_err(
                format!("ctr {}", args.join(" ")),
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether containerd loaded its overlayfs snapshotter (`ctr plugins
    /// ls`: containerd's own check of the root directory).
    fn overlayfs_ok(&self) -> Result<bool, Error> {
        let list = self.ctr(&["plugins", "ls"])?;
        Ok(list.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 4
                && f[0] == "io.containerd.snapshotter.v1"
                && f[1] == "overlayfs"
                && f[3] == "ok"
        }))
    }

    fn import_image(&self, tar: &Path) -> Result<(), Error> {
        let tar = tar.display().to_string();
        self.ctr(&[
            "-n",
            CRI_NAMESPACE,
            "images",
            "import",
            "--snapshotter",
            self.snapshotter,
            &tar,
        ])?;
        let mut cri = self.client()?;
        let deadline = Instant::now() + self.options.timeout;
        while cri
            .image_status(&self.image)
            .map_err(cri_err("ImageStatus of the sandbox image"))?
            .is_none()
        {
            if Instant::now() > deadline {
                return Err(setup_err(
                    "import the sandbox image",
                    format!("CRI does not see {} after the import", self.image),
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Ok(())
    }

    fn terminate(&mut self) {
        let Some(mut p) = self.process.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(p.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(p.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = p.kill();
        let _ = p.wait();
    }

    /// The sandbox ids containerd has a directory for (also those a
    /// killed containerd left behind).
    fn sandbox_dirs(&self) -> Vec<String> {
        let dir = self.dir.join("root").join(CRI_PLUGIN).join("sandboxes");
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops and removes every sandbox (containerd started again if it
    /// does not run), then takes the instance down to nothing.
    fn clean_up(&mut self) {
        let mut ids: BTreeSet<String> = self.known().clone();
        ids.extend(self.sandbox_dirs());
        if !ids.is_empty() && !self.running() && self.spawn().is_ok() {
            let _ = self.wait_ready();
        }
        if self.running() {
            if let Ok(mut cri) = self.client() {
                if let Ok(list) = cri.list_pod_sandbox(None) {
                    ids.extend(list.into_iter().map(|s| s.id));
                }
                for id in &ids {
                    let _ = cri.stop_pod_sandbox(id);
                    let _ = cri.remove_pod_sandbox(id);
                }
            }
        }
        self.terminate();
        kill_leftovers(&self.socket, &self.cgroup_parent());
        unmount_under(&self.dir);
        remove_cgroups(&self.cgroup_parent());
        remove_libcni_cache(Path::new(LIBCNI_CACHE), &ids);
        for id in &ids {
            let _ = std::fs::remove_file(shim_socket(&self.socket, id));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.clean_up();
    }
}

/// The netns file of a sandbox, from containerd's verbose
/// `PodSandboxStatus` (`info["info"]`: the OCI spec's network namespace).
pub fn sandbox_netns(status: &PodSandboxStatusResponse) -> Option<PathBuf> {
    let info: serde_json::Value = serde_json::from_str(status.info.get("info")?).ok()?;
    info["runtimeSpec"]["linux"]["namespaces"]
        .as_array()?
        .iter()
        .find(|n| n["type"] == "network")?["path"]
        .as_str()
        .map(PathBuf::from)
}

/// The sandbox's pause process, from containerd's verbose `PodSandboxStatus`.
pub fn sandbox_pid(status: &PodSandboxStatusResponse) -> Option<u32> {
    let info: serde_json::Value = serde_json::from_str(status.info.get("info")?).ok()?;
    info["pid"].as_u64().and_then(|p| u32::try_from(p).ok())
}

/// The directories and names a config is made of.
struct ConfigPaths<'a> {
    dir: &'a Path,
    socket: &'a Path,
    cni_bin_dir: &'a Path,
    cni_conf_dir: &'a Path,
    max_conf_num: usize,
    sandbox_image: &'a str,
    snapshotter: &'a str,
}

/// containerd's `config.toml` (version 2) for one instance: everything it
/// writes under `dir`, the CNI directories given, snapshotters other than
/// overlayfs and native off.
fn config_toml(p: &ConfigPaths<'_>) -> String {
    let d = |sub: &str| toml_str(&p.dir.join(sub));
    format!(
        r#"version = 2
root = {root}
state = {state}
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs",
]

[grpc]
  address = {socket}

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {image}
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {bin_dir}
    conf_dir = {conf_dir}
    max_conf_num = {max_conf_num}

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{snapshotter}"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = {runc_root}
"#,
        root = d("root"),
        state = d("state"),
        socket = toml_str(p.socket),
        opt = d("opt"),
        image = toml_quote(p.sandbox_image),
        bin_dir = toml_str(p.cni_bin_dir),
        conf_dir = toml_str(p.cni_conf_dir),
        max_conf_num = p.max_conf_num,
        snapshotter = p.snapshotter,
        runc_root = d("runc"),
    )
}

fn toml_str(p: &Path) -> String {
    toml_quote(&p.display().to_string())
}

/// A TOML basic string.
fn toml_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn random_tag() -> String {
    format!("{:08x}", cni_types::random::random_u32())
}

/// The shim's socket for sandbox `id` (containerd 1.6's `SocketAddress`:
/// sha256 of `<address>/<namespace>/<id>` under `/run/containerd/s`).
fn shim_socket(address: &Path, id: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let key = address.join(CRI_NAMESPACE).join(id);
    let hex: String = Sha256::digest(key.as_os_str().as_encoded_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Path::new(SHIM_SOCKET_DIR).join(hex)
}

/// The process ids of this instance: its shims (started with `-address
/// <socket>`) and every process in its cgroup (the sandboxes' pause).
fn instance_processes(socket: &Path, cgroup_parent: &str) -> Vec<i32> {
    let socket = socket.as_os_str().as_encoded_bytes();
    let mut pids = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let mut cmdline = Vec::new();
        let _ = std::fs::File::open(e.path().join("cmdline"))
            .and_then(|mut f| f.read_to_end(&mut cmdline));
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let shim = args
            .windows(2)
            .any(|w| w[0] == b"-address" && w[1] == socket);
        let cgroup = std::fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
        let in_cgroup = cgroup.lines().any(|l| {
            l.splitn(3, ':').nth(2).is_some_and(|path| {
                path == cgroup_parent || path.starts_with(&format!("{cgroup_parent}/"))
            })
        });
        if shim || in_cgroup {
            pids.push(pid);
        }
    }
    pids
}

/// SIGKILLs the instance's shims and sandbox processes, and waits (a
/// while) until they are gone.
fn kill_leftovers(socket: &Path, cgroup_parent: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = instance_processes(socket, cgroup_parent);
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The mount points in `/proc/self/mountinfo` (octal escapes decoded).
pub(crate) fn mount_points() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mountinfo(m)))
        .collect()
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Lazily unmounts everything mounted under `dir` (netns bind mounts,
/// overlay root filesystems, /dev/shm), deepest first.
fn unmount_under(dir: &Path) {
    for _ in 0..5 {
        let mut mine: Vec<PathBuf> = mount_points()
            .into_iter()
            .filter(|m| m.starts_with(dir))
            .collect();
        if mine.is_empty() {
            return;
        }
        mine.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
        for m in mine {
            let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Removes `cgroup_parent` (and what is below it) in every cgroup
/// hierarchy mounted here.
fn remove_cgroups(cgroup_parent: &str) {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let roots: Vec<PathBuf> = text
        .lines()
        .filter(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|t| t.starts_with("cgroup ") || t.starts_with("cgroup2 "))
        })
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mountinfo(m)))
        .collect();
    for root in roots {
        let dir = root.join(cgroup_parent.trim_start_matches('/'));
        if dir.is_dir() {
            remove_cgroup_tree(&dir);
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    // A killed process leaves its cgroup a moment after it is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes libcni's cached results of these sandboxes
/// (`<network>-<id>-<ifname>`; ids are 64 hex digits, so no other
/// runtime's entry matches).
fn remove_libcni_cache(cache: &Path, ids: &BTreeSet<String>) {
    let Ok(rd) = std::fs::read_dir(cache) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if ids
            .iter()
            .any(|id| !id.is_empty() && name.contains(&format!("-{id}-")))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_only_the_instance_paths() {
        let text = config_toml(&ConfigPaths {
            dir: Path::new("/tmp/x"),
            socket: Path::new("/tmp/x/c.sock"),
            cni_bin_dir: Path::new("/opt/b\"in"),
            cni_conf_dir: Path::new("/tmp/conf"),
            max_conf_num: 3,
            sandbox_image: "localhost/p:1",
            snapshotter: "native",
        });
        for want in [
            "root = \"/tmp/x/root\"",
            "state = \"/tmp/x/state\"",
            "address = \"/tmp/x/c.sock\"",
            "path = \"/tmp/x/opt\"",
            "Root = \"/tmp/x/runc\"",
            "bin_dir = \"/opt/b\\\"in\"",
            "snapshotter = \"native\"",
            "restrict_oom_score_adj = true",
            "netns_mounts_under_state_dir = true",
            "max_conf_num = 3",
        ] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
        // Every absolute path in it is under the instance or given.
        for line in text.lines().filter(|l| l.contains("= \"/")) {
            assert!(
                line.contains("\"/tmp/x")
                    || line.contains("\"/opt/b")
                    || line.contains("\"/tmp/conf"),
                "{line}"
            );
        }
    }

    #[test]
    fn shim_socket_is_containerds_hash() {
        // Python's hashlib.sha256(b"/run/containerd/containerd.sock/k8s.io/abc").
        let p = shim_socket(Path::new("/run/containerd/containerd.sock"), "abc");
        assert_eq!(
            p,
            Path::new(SHIM_SOCKET_DIR)
                .join("a99a1752d3a0fadfb1f869026f16760475df03a572e20f4ccea9e6c1e5470b72")
        );
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape_mountinfo("/plain\\04"), "/plain\\04");
    }

    #[test]
    fn verbose_info_gives_netns_and_pid() {
        let mut s = PodSandboxStatusResponse::default();
        assert_eq!(sandbox_netns(&s), None);
        s.info.insert(
            "info".into(),
            serde_json::json!({"pid": 42, "runtimeSpec": {"linux": {"namespaces": [
                {"type": "pid"}, {"type": "network", "path": "/s/netns/cni-1"}]}}})
            .to_string(),
        );
        assert_eq!(sandbox_netns(&s), Some(PathBuf::from("/s/netns/cni-1")));
        assert_eq!(sandbox_pid(&s), Some(42));
    }
}
