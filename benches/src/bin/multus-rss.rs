//! The multus daemon's memory: `multus-daemon` (the binary of the same
//! build) started against the in-repo Kubernetes API stand-in, its RSS read
//! from `/proc/<pid>/status` (`VmRSS`, `VmHWM`) at idle and while 50 (or
//! `--adds N`) ADDs are in flight at once, sent straight to its socket as
//! the shim would. Each pod has the cluster network and one NAD from its
//! annotation; the delegates are a script that holds each ADD for
//! `--hold` seconds (default 2) so every request is in the daemon at the
//! same time. Delegates are processes of their own: their memory is not the
//! daemon's (in Go's reports, ~55 MB per concurrent delegate was the
//! delegates'); `connectionLimit` caps how many run at once.
//!
//! ```text
//! cargo build --release -p cni-plugins -p cni-benches --bins
//! sudo target/release/multus-rss [--adds N] [--hold SECS] [--limit N]
//! ```

// A measurement program: its figures go to stdout.
#![allow(clippy::print_stdout)]

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_benches::measure::{require_root, run, Fallible};
use cni_multus::thick::{api::CniRequest, http};
use cni_netns::OwnedNetns;
use cni_testkit::KubeApiServer;
use serde_json::json;

const PROGRAM: &str = "multus-rss";

/// The daemon process, killed on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB.
fn memory(pid: u32) -> Fallible<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Fallible<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status").into())
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The delegate: reads its config, holds, answers a 0.3.1 result.
fn delegate_script(dir: &Path, hold: f64) -> Fallible<()> {
    std::fs::create_dir_all(dir)?;
    let script = format!(
        "#!/bin/sh\n/bin/cat > /dev/null\n\
         case \"$CNI_COMMAND\" in\n\
         ADD) /bin/sleep {hold}; printf '{{\"cniVersion\":\"0.3.1\",\"interfaces\":[{{\"name\":\"%s\"}}],\"ips\":[{{\"version\":\"4\",\"address\":\"10.1.2.3/24\",\"interface\":0}}]}}' \"$CNI_IFNAME\" ;;\n\
         esac\n"
    );
    let p = dir.join("hold");
    std::fs::write(&p, script)?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn post_cni(sock: &Path, body: &[u8]) -> Fallible<(u16, Vec<u8>)> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    let mut req = format!(
        "POST /cni HTTP/1.1\r\nHost: multus\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req)?;
    Ok(http::read_response(&s)?)
}

fn request(command: &str, i: usize, netns: &Path, bin: &Path) -> Vec<u8> {
    let mut r = CniRequest::default();
    let cid = format!("rss-{i:04}");
    let args =
        format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod-{i};K8S_POD_UID=uid-{i}");
    let netns = netns.display().to_string();
    let bin = bin.display().to_string();
    for (k, v) in [
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", &cid),
        ("CNI_NETNS", &netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", &bin),
        ("CNI_ARGS", &args),
    ] {
        r.env.insert(k.into(), v.into());
    }
    r.config =
        br#"{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim"}"#.to_vec();
    r.to_vec()
}

struct Options {
    adds: usize,
    hold: f64,
    limit: Option<usize>,
}

fn options() -> Fallible<Options> {
    let mut o = Options {
        adds: 50,
        hold: 2.0,
        limit: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--adds" => o.adds = value()?.parse()?,
            "--hold" => o.hold = value()?.parse()?,
            "--limit" => o.limit = Some(value()?.parse()?),
            other => {
                return Err(format!(
                "unknown argument {other:?}; usage: {PROGRAM} [--adds N] [--hold SECS] [--limit N]"
            )
                .into())
            }
        }
    }
    Ok(o)
}

fn measure(o: &Options) -> Fallible<()> {
    require_root(PROGRAM)?;
    let here = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .ok_or("no directory of this program")?;
    let daemon_bin = here.join("multus-daemon");
    if !daemon_bin.exists() {
        return Err(format!(
            "{} is missing (build cni-plugins' bins)",
            daemon_bin.display()
        )
        .into());
    }
    let tmp = tempfile::tempdir()?;
    let bin = tmp.path().join("bin");
    delegate_script(&bin, o.hold)?;
    let netns = OwnedNetns::new("mrss")?;
    let netns_path = PathBuf::from("/run/netns").join(netns.name());

    let server = KubeApiServer::start()?;
    server.add_nad(
        "kube-system",
        "cluster",
        r#"{"cniVersion":"0.3.1","name":"cluster","type":"hold"}"#,
    );
    server.add_nad(
        "ns1",
        "side",
        r#"{"cniVersion":"0.3.1","name":"side","type":"hold"}"#,
    );
    for i in 0..o.adds {
        server.add_pod(
            "ns1",
            &format!("pod-{i}"),
            &format!("uid-{i}"),
            &[("k8s.v1.cni.cncf.io/networks", "side")],
        );
    }
    let mut config = json!({"socketDir": tmp.path().join("sock"), "cniDir": tmp.path().join("cni"),
        "binDir": bin, "kubeconfig": server.kubeconfig_path(), "clusterNetwork": "cluster",
        "cniVersion": "0.3.1"});
    if let Some(l) = o.limit {
        config["connectionLimit"] = json!(l);
        config["connectionLimitWaitSeconds"] = json!(600);
    }
    let config_path = tmp.path().join("daemon-config.json");
    std::fs::write(&config_path, config.to_string())?;
    let child = Command::new(&daemon_bin)
        .arg("--config")
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let daemon = Daemon(child);
    let pid = daemon.0.id();
    let sock = tmp.path().join("sock/multus.sock");
    let start = Instant::now();
    while !sock.exists() {
        if start.elapsed() > Duration::from_secs(20) {
            return Err("the daemon did not open its socket in 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Idle: started, its watch cache filled.
    std::thread::sleep(Duration::from_secs(2));
    let (idle, _) = memory(pid)?;

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::SeqCst) {
                if let Ok((rss, _)) = memory(pid) {
                    peak = peak.max(rss);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let t = Instant::now();
    let threads: Vec<_> = (0..o.adds)
        .map(|i| {
            let body = request("ADD", i, &netns_path, &bin);
            let sock = sock.clone();
            std::thread::spawn(move || post_cni(&sock, &body).map_err(|e| e.to_string()))
        })
        .collect();
    let mut failed = Vec::new();
    for t in threads {
        match t.join().map_err(|_| "a request thread panicked")? {
            Ok((200, _)) => {}
            Ok((s, b)) => failed.push(format!("{s}: {}", String::from_utf8_lossy(&b))),
            Err(e) => failed.push(e),
        }
    }
    let took = t.elapsed();
    stop.store(true, Ordering::SeqCst);
    let peak = sampler.join().map_err(|_| "the sampler panicked")?;
    let (after, hwm) = memory(pid)?;
    if let Some(f) = failed.first() {
        return Err(format!("{} of {} ADDs failed, first: {f}", failed.len(), o.adds).into());
    }
    for i in 0..o.adds {
        let (s, b) = post_cni(&sock, &request("DEL", i, &netns_path, &bin))?;
        if s != 200 {
            return Err(format!("DEL {i}: {s} {}", String::from_utf8_lossy(&b)).into());
        }
    }
    let limit = o
        .limit
        .map_or("unlimited".to_string(), |l| format!("connectionLimit {l}"));
    println!(
        "multus-daemon RSS, {} concurrent ADDs (2 delegates each, held {:.1} s; {limit}):",
        o.adds, o.hold
    );
    println!("  idle:                 {:7.1} MiB", mib(idle));
    println!(
        "  peak during the ADDs: {:7.1} MiB (VmHWM {:.1} MiB), all done in {:.1} s",
        mib(peak),
        mib(hwm),
        took.as_secs_f64()
    );
    println!("  after the ADDs:       {:7.1} MiB", mib(after));
    println!(
        "  per request in flight: {:.2} MiB ((peak - idle) / {})",
        mib(peak.saturating_sub(idle)) / o.adds as f64,
        o.adds
    );
    Ok(())
}

fn main() -> ExitCode {
    run(PROGRAM, || measure(&options()?))
}
