//! cni-types: parse + convert + serialize of a typical dual-stack bridge
//! result (what a runtime does with every ADD reply and cached result).

// A benchmark's setup failing is a broken benchmark: unwrap and expect stop
// it with the reason (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use cni_types::{CniResult, NetworkConfig, Version};
use criterion::{criterion_group, criterion_main, Criterion};

const BRIDGE_RESULT: &[u8] = br#"{
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "cni0", "mac": "e2:6f:8c:1a:4b:01"},
        {"name": "veth1b2c3d4e", "mac": "5a:9c:0d:7e:21:44"},
        {"name": "eth0", "mac": "0a:58:0a:f4:01:05", "sandbox": "/var/run/netns/cni-6d4f0a7e-1c2b-4a5d-9e8f-0123456789ab"}
    ],
    "ips": [
        {"interface": 2, "address": "10.244.1.5/24", "gateway": "10.244.1.1"},
        {"interface": 2, "address": "fd00:10:244:1::5/64", "gateway": "fd00:10:244:1::1"}
    ],
    "routes": [
        {"dst": "0.0.0.0/0", "gw": "10.244.1.1"},
        {"dst": "10.244.0.0/16"},
        {"dst": "::/0", "gw": "fd00:10:244:1::1"}
    ],
    "dns": {"nameservers": ["10.96.0.10"], "search": ["default.svc.cluster.local", "svc.cluster.local"]}
}"#;

const CONFIG: &[u8] = br#"{"cniVersion":"1.0.0","name":"cbr0","type":"bridge","bridge":"cni0",
"isGateway":true,"ipMasq":true,"hairpinMode":true,"ipam":{"type":"host-local",
"ranges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]],
"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]},
"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}"#;

fn bench(c: &mut Criterion) {
    c.bench_function("result parse+convert(0.4.0)+serialize", |b| {
        b.iter(|| {
            let (_, r) = CniResult::from_slice(black_box(BRIDGE_RESULT), Version::V1_0_0).unwrap();
            black_box(r.to_json_pretty(Version::V0_4_0).unwrap())
        })
    });
    c.bench_function("result parse+serialize(1.0.0)", |b| {
        b.iter(|| {
            let (v, r) = CniResult::from_slice(black_box(BRIDGE_RESULT), Version::V1_0_0).unwrap();
            black_box(r.to_json_pretty(v).unwrap())
        })
    });
    c.bench_function("network config parse", |b| {
        b.iter(|| black_box(NetworkConfig::from_slice(black_box(CONFIG)).unwrap()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
