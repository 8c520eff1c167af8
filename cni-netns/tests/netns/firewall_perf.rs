//! Cost of one ADD and one DEL of port mappings (and masquerade) with 50
//! and 1000 attachments already present (root; ignored by default):
//!
//! ```text
//! cargo test -p cni-netns --release --test netns firewall_perf:: -- --ignored --nocapture
//! ```

#![allow(clippy::print_stdout)] // a measurement prints its figures

use std::time::{Duration, Instant};

use crate::firewall_common::*;
use cni_netns::firewall::{
    AttachmentId, Firewall, MasqueradeSpec, NftFirewall, PortMapping, PortMappingSpec, Protocol,
    RuleSpec,
};

fn pm(i: u32) -> PortMappingSpec {
    let mut s = PortMappingSpec::new(AttachmentId::new("perfnet", format!("{i:064x}"), "eth0"));
    s.container_v4 = Some(
        format!("10.{}.{}.{}/8", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
            .parse()
            .unwrap(),
    );
    s.mappings = vec![
        PortMapping {
            host_port: (10000 + 2 * i) as u16,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        },
        PortMapping {
            host_port: (10001 + 2 * i) as u16,
            container_port: 53,
            protocol: Protocol::Udp,
            host_ip: None,
        },
    ];
    s
}

fn masq(i: u32) -> MasqueradeSpec {
    MasqueradeSpec {
        attachment: AttachmentId::new("perfnet", format!("{i:064x}"), "eth0"),
        addresses: vec![
            format!("10.{}.{}.{}/8", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
                .parse()
                .unwrap(),
        ],
    }
}

/// CPU time (user + system) of all reaped child processes so far: the nft
/// processes' own cost, which unlike wall time does not depend on what else
/// the machine is doing.
fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs `f`, returning (wall time, children's CPU time).
fn timed(f: impl FnOnce()) -> (Duration, Duration) {
    let cpu = children_cpu();
    let t = Instant::now();
    f();
    (t.elapsed(), children_cpu() - cpu)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
#[ignore = "measurement; run with --ignored --nocapture as root"]
fn add_and_delete_cost_with_50_and_1000_attachments() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwperf");
    let fw = NftFirewall::in_netns(ns.path());
    let mut present = 0u32;
    for target in [50u32, 1000] {
        while present < target {
            fw.add(&RuleSpec::PortMappings(pm(present))).unwrap();
            fw.add(&RuleSpec::Masquerade(masq(present))).unwrap();
            present += 1;
        }
        let mut samples: [Vec<(Duration, Duration)>; 5] = Default::default();
        for round in 0..21 {
            let probe = 20000 + round;
            samples[0].push(timed(|| {
                fw.add(&RuleSpec::PortMappings(pm(probe))).unwrap()
            }));
            samples[1].push(timed(|| {
                fw.delete(&RuleSpec::PortMappings(pm(probe))).unwrap()
            }));
            samples[2].push(timed(|| {
                fw.delete(&RuleSpec::PortMappings(pm(probe))).unwrap()
            }));
            samples[3].push(timed(|| {
                fw.add(&RuleSpec::Masquerade(masq(probe))).unwrap()
            }));
            samples[4].push(timed(|| {
                fw.delete(&RuleSpec::Masquerade(masq(probe))).unwrap()
            }));
        }
        let fmt = |v: &Vec<(Duration, Duration)>| {
            let wall = median(v.iter().map(|x| x.0).collect());
            let cpu = median(v.iter().map(|x| x.1).collect());
            format!(
                "{:.1} ms (nft cpu {:.1} ms)",
                wall.as_secs_f64() * 1e3,
                cpu.as_secs_f64() * 1e3
            )
        };
        // One nft process that does nothing (lists a missing table): the
        // fixed cost of spawning nft on this machine, under its current load.
        let mut baseline = vec![];
        for _ in 0..21 {
            let t = Instant::now();
            fw.list(cni_netns::firewall::RuleKind::MacSpoofCheck)
                .unwrap();
            baseline.push(t.elapsed());
        }
        let t = Instant::now();
        let listed = fw.list(cni_netns::firewall::RuleKind::PortMapping).unwrap();
        let list_time = t.elapsed();
        assert_eq!(listed.len(), present as usize);
        println!(
            "{present:>5} attachments present (medians of 21):\n  port mappings add {}\n  port mappings del {}\n  port mappings del again {}\n  masquerade add {}\n  masquerade del {}\n  list all {:.1} ms; nft no-op {:.1} ms",
            fmt(&samples[0]),
            fmt(&samples[1]),
            fmt(&samples[2]),
            fmt(&samples[3]),
            fmt(&samples[4]),
            list_time.as_secs_f64() * 1e3,
            median(baseline).as_secs_f64() * 1e3,
        );
    }
}
