//! multus's limits: the daemon's cap on concurrent CNI requests
//! (`connectionLimit`, `connectionLimitWaitSeconds`) with a slow delegate
//! that logs when it runs, and the API request timeout
//! (`apiRequestTimeoutSeconds`) against a slow API server.
#![cfg(feature = "multus")]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::nodenet::Ns;
use cni_multus::flow::get_pod;
use cni_multus::thick::{self, api::CniRequest, http, DaemonConfig};
use cni_multus::{kube_client, NetConf, PodRequest};
use cni_testkit::KubeApiServer;
use serde_json::{json, Value};

/// A delegate that takes `secs` per ADD and logs its start and end.
fn slow_plugin(dir: &Path, secs: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let log = dir.join("runs.log");
    let script = format!(
        "#!/bin/sh\n/bin/cat > /dev/null\n\
         case \"$CNI_COMMAND\" in\n\
         ADD) echo \"start $(/bin/date +%s%N)\" >> '{log}'; /bin/sleep {secs}; echo \"end $(/bin/date +%s%N)\" >> '{log}'; \
              printf '{{\"cniVersion\":\"0.3.1\"}}' ;;\n\
         esac\n",
        log = log.display()
    );
    let p = dir.join("slow");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The most delegates that ran at once, from the slow plugin's log.
fn max_concurrent(dir: &Path) -> usize {
    let text = std::fs::read_to_string(dir.join("runs.log")).unwrap_or_default();
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .filter_map(|l| {
            let (what, t) = l.split_once(' ')?;
            Some((t.trim().parse().ok()?, if what == "start" { 1 } else { -1 }))
        })
        .collect();
    // Ends sort before starts at the same instant.
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as usize
}

struct Daemon {
    handle: Option<thick::DaemonHandle>,
    dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }
}

fn daemon(limit: Value) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    slow_plugin(&dir.path().join("bin"), "0.6");
    let mut c = json!({"socketDir": dir.path().join("sock"), "cniDir": dir.path().join("cni"),
        "binDir": dir.path().join("bin"),
        "delegates": [{"cniVersion": "0.3.1", "name": "slow-net", "type": "slow"}]});
    for (k, v) in limit.as_object().unwrap() {
        c[k] = v.clone();
    }
    let config = DaemonConfig::from_slice(c.to_string().as_bytes(), Path::new("test")).unwrap();
    let h = thick::start_with(config, None, Arc::new(cni_exec::ProcessExec::new())).unwrap();
    Daemon {
        handle: Some(h),
        dir,
    }
}

fn post(sock: &Path, path: &str, body: &[u8]) -> (u16, Value) {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).unwrap();
    let (status, b) = http::read_response(&s).unwrap();
    (status, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

fn healthz(sock: &Path) -> u16 {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    http::read_response(&s).unwrap().0
}

fn add_body(cid: &str, netns: &str, bin: &Path) -> Vec<u8> {
    let mut r = CniRequest::default();
    for (k, v) in [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", cid),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", &bin.display().to_string()),
    ] {
        r.env.insert(k.into(), v.into());
    }
    r.config =
        br#"{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim"}"#.to_vec();
    r.to_vec()
}

/// Sends `n` ADDs at once; their statuses and bodies, and the time taken.
fn burst(d: &Daemon, pod: &Ns, n: usize) -> (Vec<(u16, Value)>, Duration) {
    let sock = d.handle.as_ref().unwrap().socket().to_path_buf();
    let bin = d.dir.path().join("bin");
    let start = Instant::now();
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let body = add_body(&format!("cid-{i}"), &pod.path(), &bin);
            let sock = sock.clone();
            std::thread::spawn(move || post(&sock, "/cni", &body))
        })
        .collect();
    let out = threads.into_iter().map(|t| t.join().unwrap()).collect();
    (out, start.elapsed())
}

#[test]
fn connection_limit_serialises_requests_then_fails_clearly() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let pod = Ns::new("mlimpod");

    // Limit 2, ample wait: all four succeed, never more than two at once.
    let d = daemon(json!({"connectionLimit": 2, "connectionLimitWaitSeconds": 30}));
    let sock = d.handle.as_ref().unwrap().socket().to_path_buf();
    let prober = {
        let sock = sock.clone();
        std::thread::spawn(move || {
            // Health answers while the slots are taken.
            std::thread::sleep(Duration::from_millis(200));
            healthz(&sock)
        })
    };
    let (out, took) = burst(&d, &pod, 4);
    for (s, v) in &out {
        assert_eq!(*s, 200, "{v}");
    }
    assert_eq!(prober.join().unwrap(), 200);
    assert_eq!(max_concurrent(&d.dir.path().join("bin")), 2);
    assert!(took >= Duration::from_millis(1200), "took {took:?}");
    drop(d);

    // Limit 1, short wait: one runs, the others get code 11 in time.
    let d = daemon(json!({"connectionLimit": 1, "connectionLimitWaitSeconds": 0.2}));
    let (out, _) = burst(&d, &pod, 3);
    let ok = out.iter().filter(|(s, _)| *s == 200).count();
    let busy: Vec<&Value> = out
        .iter()
        .filter(|(s, _)| *s == 503)
        .map(|(_, v)| v)
        .collect();
    assert_eq!((ok, busy.len()), (1, 2), "{out:?}");
    for e in busy {
        assert_eq!(e["code"], 11, "{e}");
        let msg = e["msg"].as_str().unwrap();
        assert!(
            msg.contains("connectionLimit 1") && msg.contains("busy"),
            "{msg}"
        );
    }
    assert_eq!(max_concurrent(&d.dir.path().join("bin")), 1);

    // Through the real shim: the runtime sees the daemon's error, code 11.
    let sock = d.handle.as_ref().unwrap().socket().to_path_buf();
    let body = add_body("cid-held", &pod.path(), &d.dir.path().join("bin"));
    let held = std::thread::spawn(move || post(&sock, "/cni", &body));
    std::thread::sleep(Duration::from_millis(150));
    let shim_conf = json!({"cniVersion": "0.3.1", "name": "multus-cni-network",
        "type": "multus-shim", "socketDir": d.dir.path().join("sock")});
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_multus-shim"))
        .env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "cid-shim")
        .env("CNI_NETNS", pod.path())
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", d.dir.path().join("bin"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(shim_conf.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("connectionLimit 1"),
        "{e}"
    );
    assert_eq!(held.join().unwrap().0, 200);

    // Unlimited (Go's default): all three run together.
    let d = daemon(json!({}));
    let (out, _) = burst(&d, &pod, 3);
    assert!(out.iter().all(|(s, _)| *s == 200), "{out:?}");
    assert_eq!(max_concurrent(&d.dir.path().join("bin")), 3);

    // Go refuses a limit of 0 or less at start.
    let e = DaemonConfig::from_slice(br#"{"connectionLimit": 0}"#, Path::new("t")).unwrap_err();
    assert!(e.to_string().contains("greater than 0"), "{e}");
}

fn conf(server: &KubeApiServer, extra: Value) -> NetConf {
    let mut v = json!({"name": "m", "type": "multus", "clusterNetwork": "c",
        "kubeconfig": server.kubeconfig_path()});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    NetConf::from_slice(v.to_string().as_bytes()).unwrap()
}

#[test]
fn api_request_timeout_is_configurable_for_distant_control_planes() {
    let server = KubeApiServer::start().unwrap();
    server.add_pod("ns1", "web", "uid-web", &[]);
    server.set_response_delay(Duration::from_millis(1200));
    let req = PodRequest::new(
        "c1",
        "/run/netns/x",
        "eth0",
        "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web;K8S_POD_UID=uid-web",
    )
    .unwrap();

    // The default (each request bounded by apiTimeoutSeconds, 2.5 s) is
    // enough for 1.2 s; a 0.5 s request timeout is not, and ADD says so.
    let c = conf(
        &server,
        json!({"apiRequestTimeoutSeconds": 0.5, "apiTimeoutSeconds": 1}),
    );
    assert_eq!(c.api_request_timeout, Duration::from_millis(500));
    let k = kube_client(&c).unwrap().unwrap();
    let start = Instant::now();
    let e = get_pod(&k, &req, c.api_timeout, false).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(e.code(), cni_types::ErrorCode::TryAgainLater, "{e}");

    // A distant control plane: 1.2 s per request, fine with 3 s per
    // request even though the pod poll budget is 1 s.
    let c = conf(
        &server,
        json!({"apiRequestTimeoutSeconds": 3, "apiTimeoutSeconds": 1}),
    );
    let k = kube_client(&c).unwrap().unwrap();
    let pod = get_pod(&k, &req, c.api_timeout, false).unwrap().unwrap();
    assert_eq!(pod.uid, "uid-web");

    // Default: apiRequestTimeoutSeconds follows apiTimeoutSeconds.
    let c = conf(&server, json!({"apiTimeoutSeconds": 4}));
    assert_eq!(c.api_request_timeout, Duration::from_secs(4));
    let c = conf(&server, json!({}));
    assert_eq!(c.api_request_timeout, Duration::from_millis(2500));
    for bad in [json!(0), json!(-1), json!("5"), json!(601)] {
        let mut v = json!({"name": "m", "type": "multus", "clusterNetwork": "c"});
        v["apiRequestTimeoutSeconds"] = bad.clone();
        let e = NetConf::from_slice(v.to_string().as_bytes()).unwrap_err();
        assert!(
            e.to_string().contains("apiRequestTimeoutSeconds"),
            "{bad}: {e}"
        );
    }
}

/// The `multus-daemon` binary on a temporary socket directory, killed on
/// drop.
struct DaemonProcess {
    child: std::process::Child,
    sock: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl DaemonProcess {
    fn start() -> DaemonProcess {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("daemon-config.json");
        std::fs::write(
            &config,
            json!({"socketDir": dir.path().join("sock"), "clusterNetwork": "cluster",
                "cniDir": dir.path().join("cni"), "binDir": dir.path().join("bin")})
            .to_string(),
        )
        .unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_multus-daemon"))
            .arg("--config")
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let sock = dir.path().join("sock/multus.sock");
        let start = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(start.elapsed() < Duration::from_secs(30), "daemon socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        DaemonProcess {
            child,
            sock,
            _dir: dir,
        }
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// #31.3: a daemon that cannot create a thread for a connection (its
/// cgroup's `pids.max` reached) answers 503 "try again" (code 11) and keeps
/// serving, where `std::thread::spawn` panicked in the accept thread and
/// the daemon stopped answering.
#[test]
fn daemon_survives_when_no_thread_can_be_created() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let cgroup = match crate::common::PidsCgroup::new() {
        Ok(c) => c,
        Err(why) => {
            cni_testkit::premise::require(false, &format!("needs a pids cgroup: {why}"));
            return;
        }
    };
    let mut d = DaemonProcess::start();
    cgroup.add(d.child.id());
    cgroup.set_max(cgroup.current() + 1);
    let idle: Vec<_> = (0..3)
        .map(|_| UnixStream::connect(&d.sock).unwrap())
        .collect();
    let bin = std::path::PathBuf::from("/nonexistent");
    let (status, body) = post(&d.sock, "/cni", &add_body("c1", "/nonexistent", &bin));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], 11, "{body}");
    assert!(d.child.try_wait().unwrap().is_none(), "the daemon died");
    drop(idle);
    cgroup.set_max(10_000);
    let start = Instant::now();
    while healthz(&d.sock) != 200 {
        assert!(start.elapsed() < Duration::from_secs(30), "serving again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// #31.10: with all 256 connection slots held, `/healthz` and `/readyz`
/// are still answered 200 (a kubelet probe must not fail for a busy
/// daemon), while a CNI request gets 503 "try again" (code 11).
#[test]
fn health_is_answered_when_every_connection_slot_is_taken() {
    let d = daemon(json!({}));
    let sock = d.handle.as_ref().unwrap().socket().to_path_buf();
    // Idle connections hold a slot each while the daemon waits for them.
    let idle: Vec<_> = (0..cni_files::daemon::DEFAULT_MAX_CONNECTIONS)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    assert_eq!(healthz(&sock), 200, "healthz");
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(http::read_response(&s).unwrap().0, 200, "readyz");
    let (status, body) = post(&sock, "/cni", b"{}");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], 11, "{body}");
    drop(idle);
}

/// #36.4: with more idle connections held open than the daemon serves
/// and its overflow holds (256 + 64), `/healthz` and `/readyz` answer 200
/// within a kubelet probe's 1 s (they took 44 s behind 300 idle ones), a
/// CNI request gets 503 "try again" (code 11) within 1 s, and so does an
/// idle connection over the cap that never sends anything.
#[test]
fn health_and_busy_answer_at_once_with_idle_connections_past_the_cap() {
    let d = daemon(json!({}));
    let sock = d.handle.as_ref().unwrap().socket().to_path_buf();
    let idle: Vec<_> = (0..400)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    let timed = |request: &[u8]| {
        let started = Instant::now();
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request).unwrap();
        let (status, body) = http::read_response(&s).unwrap();
        (status, body, started.elapsed())
    };
    for path in ["/healthz", "/readyz"] {
        let (status, _, took) = timed(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(status, 200, "{path}");
        assert!(took < Duration::from_secs(4), "{path} after {took:?}");
    }
    let (status, body, took) =
        timed(b"POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!((status, &body["code"]), (503, &json!(11)), "{body}");
    assert!(took < Duration::from_secs(4), "busy after {took:?}");
    let newest = idle.last().unwrap();
    newest
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (status, body) = http::read_response(newest).unwrap();
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    drop(idle);
}
