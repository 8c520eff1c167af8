//! One CNI attachment's kernel work, in process through `cni-netns` and the
//! same work done by `ip -batch`, for comparison:
//!
//! veth with its peer created in the pod namespace, host end on a bridge and
//! up, pod end up with one IPv4 and one IPv6 address, default routes for
//! both families; then the veth is deleted.
//!
//! Needs root (it creates two namespaces of its own); skipped otherwise.

// A benchmark's setup failing is a broken benchmark: unwrap and expect stop
// it with the reason (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_netns::{AddressOptions, BridgeSpec, Handle, IpNetwork, KernelRoute, OwnedNetns, VethSpec};
use criterion::{criterion_group, criterion_main, Criterion};

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

fn attach_in_process(host: &Handle, pod_ns: &OwnedNetns, bridge: u32) -> u32 {
    // A plugin opens its pod handle per invocation, so that is measured too.
    let pod = Handle::in_netns(pod_ns).unwrap();
    // One request: host end created on the bridge and up.
    let hv = host
        .setup_veth_with(&VethSpec {
            peer_name: "eth0".into(),
            peer_netns: Some(pod_ns),
            up: true,
            master: Some(bridge),
            ..Default::default()
        })
        .unwrap();
    let eth0 = hv.parent_index.unwrap();
    pod.set_up(eth0).unwrap();
    pod.add_address(eth0, net("10.88.0.5/16"), AddressOptions::default())
        .unwrap();
    let nodad = AddressOptions {
        nodad: true,
        ..Default::default()
    };
    pod.add_address(eth0, net("fd00:88::5/64"), nodad).unwrap();
    for gw in ["10.88.0.1", "fd00:88::1"] {
        pod.add_route(&KernelRoute {
            oif: Some(eth0),
            ..KernelRoute::default_via(gw.parse().unwrap())
        })
        .unwrap();
    }
    hv.index
}

fn ip_batch(ns: &str, script: &str) {
    let mut child = Command::new("ip")
        .args(["-n", ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn ip");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "ip -n {ns} -batch failed");
}

fn attach_with_ip(host_ns: &str, pod_ns: &str) {
    ip_batch(
        host_ns,
        &format!(
            "link add vethbench0 type veth peer name eth0 netns {pod_ns}\n\
             link set vethbench0 master cnibr0\n\
             link set vethbench0 up\n"
        ),
    );
    ip_batch(
        pod_ns,
        "link set eth0 up\n\
         addr add 10.88.0.5/16 dev eth0\n\
         addr add fd00:88::5/64 dev eth0 nodad\n\
         route add default via 10.88.0.1 dev eth0\n\
         route add ::/0 via fd00:88::1 dev eth0\n",
    );
}

fn detach_with_ip(host_ns: &str) {
    let ok = Command::new("ip")
        .args(["-n", host_ns, "link", "del", "vethbench0"])
        .status()
        .expect("spawn ip")
        .success();
    assert!(ok, "ip link del failed");
}

fn bench(c: &mut Criterion) {
    if !cni_testkit::premise::is_root() {
        eprintln!("netns_attachment: skipped, needs root to create network namespaces");
        return;
    }
    let host_ns = OwnedNetns::new("cnibench-host").unwrap();
    let pod_ns = OwnedNetns::new("cnibench-pod").unwrap();
    // Run where a plugin runs: in the "host" namespace, so the host handle
    // is the current namespace (sysctls written inline). Criterion is not
    // Send, so this benchmark process moves its own main thread there.
    nix::sched::setns(&*host_ns, nix::sched::CloneFlags::CLONE_NEWNET)
        .expect("enter bench host namespace");
    measure(c, &host_ns, &pod_ns);
}

fn measure(c: &mut Criterion, host_ns: &OwnedNetns, pod_ns: &OwnedNetns) {
    let host = Handle::current().unwrap();
    let bridge = host
        .ensure_bridge(&BridgeSpec {
            name: "cnibr0".into(),
            ..Default::default()
        })
        .unwrap();

    // Setup and teardown, as the issue asks. Deleting a veth is dominated
    // by the kernel (unregister_netdevice waits for RCU), the same for both.
    let mut g = c.benchmark_group("attachment");
    g.sample_size(30).measurement_time(Duration::from_secs(8));
    g.bench_function("cni-netns", |b| {
        b.iter(|| {
            let veth = attach_in_process(&host, pod_ns, bridge.index);
            host.delete_link(veth).unwrap();
        })
    });
    g.bench_function("ip-batch", |b| {
        b.iter(|| {
            attach_with_ip(host_ns.name(), pod_ns.name());
            detach_with_ip(host_ns.name());
        })
    });
    g.finish();

    // The ADD half alone (what a pod start waits for); teardown untimed.
    let mut g = c.benchmark_group("attachment-add");
    g.sample_size(30).measurement_time(Duration::from_secs(8));
    g.bench_function("cni-netns", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let veth = attach_in_process(&host, pod_ns, bridge.index);
                total += start.elapsed();
                host.delete_link(veth).unwrap();
            }
            total
        })
    });
    g.bench_function("ip-batch", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                attach_with_ip(host_ns.name(), pod_ns.name());
                total += start.elapsed();
                detach_with_ip(host_ns.name());
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
