//! cni-exec: the cost of the protocol layers themselves.
//!
//! * `dispatch/noop_add`: the skel protocol around a plugin whose ADD does
//!   nothing (env parsing and validation, stdin decoding, version checks,
//!   result printing).
//! * `invoke/in_process_add_1`: the runtime's own overhead for one plugin
//!   call excluding the plugin: `CniConfig::add_network_list` of a
//!   one-plugin list through the in-process executor (config building,
//!   capability injection, dispatch, result decoding), with the result
//!   cache written to a tmpfs-backed (or temp) directory.
//! * `invoke/in_process_check_3`: CHECK of a three-plugin list (reads and
//!   converts the cached result, three plugin calls with `prevResult`): per
//!   plugin call is a third of it.

// A benchmark's setup failing is a broken benchmark: unwrap and expect stop
// it with the reason (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use cni_exec::{
    dispatch, CniConfig, Env, InProcessExec, NoNetnsGuard, Plugin, Request, RuntimeConf,
};
use cni_types::{CniError, CniResult, IpConfig, NetworkConfigList};
use criterion::{criterion_group, criterion_main, Criterion};

struct Noop;

impl Plugin for Noop {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "noop"
    }
    fn add(&self, _req: &Request) -> Result<CniResult, CniError> {
        let mut r = CniResult::default();
        r.ips
            .push(IpConfig::new("10.1.0.5/24".parse().expect("literal CIDR")));
        Ok(r)
    }
    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

const CONF: &[u8] = br#"{"cniVersion":"1.1.0","name":"bench-net","type":"noop","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}"#;

fn cache_dir() -> tempfile::TempDir {
    // Prefer tmpfs so the figure is the invoker's, not the disk's fsync.
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

fn bench(c: &mut Criterion) {
    let env = Env::new([
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "0123456789abcdef"),
        ("CNI_NETNS", "/run/netns/bench"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=pod"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]);
    c.bench_function("dispatch/noop_add", |b| {
        b.iter(|| {
            let out = dispatch(&Noop, black_box(&env), black_box(CONF));
            assert_eq!(out.exit_code, 0);
            out
        })
    });

    let exec = InProcessExec::builder()
        .register("noop", Arc::new(Noop))
        .netns_guard(Arc::new(NoNetnsGuard))
        .build();
    let dir = cache_dir();
    let cni =
        CniConfig::new(vec!["/opt/cni/bin".into()], Arc::new(exec)).with_cache_dir(dir.path());
    let rt = RuntimeConf {
        container_id: "0123456789abcdef".into(),
        netns: "/run/netns/bench".into(),
        ifname: "eth0".into(),
        args: vec![("K8S_POD_NAME".into(), "pod".into())],
        capability_args: serde_json::from_str(
            r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#,
        )
        .expect("literal JSON"),
    };
    let one = NetworkConfigList::from_slice(
        br#"{"cniVersion":"1.1.0","name":"bench-net","plugins":[{"type":"noop","capabilities":{"portMappings":true}}]}"#,
    )
    .expect("literal conflist");
    c.bench_function("invoke/in_process_add_1", |b| {
        b.iter(|| {
            cni.add_network_list(black_box(&one), black_box(&rt))
                .expect("add")
        })
    });
    let three = NetworkConfigList::from_slice(
        br#"{"cniVersion":"1.1.0","name":"bench-net3","plugins":[{"type":"noop"},{"type":"noop"},{"type":"noop"}]}"#,
    )
    .expect("literal conflist");
    cni.add_network_list(&three, &rt).expect("add");
    c.bench_function("invoke/in_process_check_3", |b| {
        b.iter(|| {
            cni.check_network_list(black_box(&three), black_box(&rt))
                .expect("check")
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
