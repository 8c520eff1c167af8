//! Firewall costs with 50 and 1000 attachments present, each in a
//! throwaway network namespace (root):
//!
//! * `nft`: port-mapping and masquerade ADD/DEL through the `nft` process
//!   backend, wall time next to the nft processes' own CPU time;
//! * `native`: port-mapping ADD/DEL, native nf_tables netlink next to the
//!   `nft` process, and a GC of every attachment;
//! * `exec`: one port-mapping ADD or DEL in a fresh process (this program
//!   re-exec'd), what a plugin exec pays, next to a process doing nothing;
//! * `close`: closing the netlink socket after a DEL (elements expire, so
//!   nothing waits for an RCU grace period) next to after a deleting GC.
//!
//! ```text
//! cargo build --release -p cni-benches --bin firewall-cost
//! target/release/firewall-cost [nft|native|exec|close ...]   # default: all
//! ```

// A measurement program: its figures go to stdout.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use cni_benches::measure::{median, ms, require_root, run, time, Fallible};
use cni_firewall::{
    AttachmentId, Firewall, HostPortMapping, MasqueradeSpec, NativeFirewall, NftFirewall,
    PortMappingSpec, Protocol, RuleKind, RuleSpec,
};
use cni_netns::OwnedNetns;

const PROGRAM: &str = "firewall-cost";

/// Attachment `i` of network `net`: 10.x.y.z, a TCP and a UDP mapping.
fn pm(net: &str, i: u32) -> Fallible<RuleSpec> {
    let mut s = PortMappingSpec::new(AttachmentId::new(net, format!("{i:064x}"), "eth0"));
    s.container_v4 = Some(address(i).parse()?);
    s.mappings = vec![
        HostPortMapping {
            host_port: u16::try_from(10000 + 2 * i)?,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        },
        HostPortMapping {
            host_port: u16::try_from(10001 + 2 * i)?,
            container_port: 53,
            protocol: Protocol::Udp,
            host_ip: None,
        },
    ];
    Ok(RuleSpec::PortMappings(s))
}

fn masq(net: &str, i: u32) -> Fallible<RuleSpec> {
    Ok(RuleSpec::Masquerade(MasqueradeSpec {
        attachment: AttachmentId::new(net, format!("{i:064x}"), "eth0"),
        addresses: vec![address(i).parse()?],
    }))
}

fn address(i: u32) -> String {
    format!(
        "10.{}.{}.{}/16",
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    )
}

/// CPU time (user + system) of all reaped child processes so far: the nft
/// processes' own cost, which unlike wall time does not depend on what else
/// the machine is doing.
fn children_cpu() -> Duration {
    // SAFETY: rusage is plain integers, for which all-zero is a value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given, which outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_usec).unwrap_or(0) * 1000,
        )
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs `f`, returning (wall time, children's CPU time).
fn timed(f: impl FnOnce() -> Fallible<()>) -> Fallible<(Duration, Duration)> {
    let cpu = children_cpu();
    let wall = time(f)?;
    Ok((wall, children_cpu() - cpu))
}

/// Port mappings and masquerade through the `nft` process backend.
fn nft_process() -> Fallible<()> {
    let ns = OwnedNetns::new("fwperf")?;
    let fw = NftFirewall::in_netns(ns.path());
    let mut present = 0u32;
    for target in [50u32, 1000] {
        while present < target {
            fw.add(&pm("perfnet", present)?)?;
            fw.add(&masq("perfnet", present)?)?;
            present += 1;
        }
        let mut samples: [Vec<(Duration, Duration)>; 5] = Default::default();
        for round in 0..21 {
            let probe = 20000 + round;
            let (p, m) = (pm("perfnet", probe)?, masq("perfnet", probe)?);
            samples[0].push(timed(|| Ok(fw.add(&p)?))?);
            samples[1].push(timed(|| Ok(fw.delete(&p)?))?);
            samples[2].push(timed(|| Ok(fw.delete(&p)?))?);
            samples[3].push(timed(|| Ok(fw.add(&m)?))?);
            samples[4].push(timed(|| Ok(fw.delete(&m)?))?);
        }
        let fmt = |v: &Vec<(Duration, Duration)>| {
            let wall = median(v.iter().map(|x| x.0).collect());
            let cpu = median(v.iter().map(|x| x.1).collect());
            format!("{:.1} ms (nft cpu {:.1} ms)", ms(wall), ms(cpu))
        };
        // One nft process that does nothing (lists a missing table): the
        // fixed cost of spawning nft on this machine, under its current load.
        let mut baseline = vec![];
        for _ in 0..21 {
            baseline.push(time(|| Ok(fw.list(RuleKind::MacSpoofCheck)?))?);
        }
        let t = Instant::now();
        let listed = fw.list(RuleKind::PortMapping)?;
        let list_time = t.elapsed();
        if listed.len() != present as usize {
            return Err(format!("listed {} attachments, {present} present", listed.len()).into());
        }
        println!(
            "nft process: {present:>5} attachments present (medians of 21):\n  port mappings add {}\n  port mappings del {}\n  port mappings del again {}\n  masquerade add {}\n  masquerade del {}\n  list all {:.1} ms; nft no-op {:.1} ms",
            fmt(&samples[0]),
            fmt(&samples[1]),
            fmt(&samples[2]),
            fmt(&samples[3]),
            fmt(&samples[4]),
            ms(list_time),
            ms(median(baseline)),
        );
    }
    Ok(())
}

/// Port-mapping ADD/DEL, native netlink next to the `nft` process.
fn native_vs_nft() -> Fallible<()> {
    for backend in ["native", "nft"] {
        let ns = OwnedNetns::new("fwnperf")?;
        let fw: Box<dyn Firewall> = match backend {
            "native" => Box::new(NativeFirewall::in_netns(ns.path())),
            _ => Box::new(NftFirewall::in_netns(ns.path())),
        };
        // Fill through the native backend (fast); both read the same state.
        let filler = NativeFirewall::in_netns(ns.path());
        let mut present = 0u32;
        for target in [50u32, 1000] {
            while present < target {
                filler.add(&pm("perf", present)?)?;
                present += 1;
            }
            let (mut add, mut del) = (Vec::new(), Vec::new());
            for round in 0..21 {
                let probe = pm("perf", 20000 + round)?;
                add.push(time(|| Ok(fw.add(&probe)?))?);
                del.push(time(|| Ok(fw.delete(&probe)?))?);
            }
            println!(
                "{backend:>6}: {present:>4} attachments: port mappings add {:.2} ms, del {:.2} ms (medians of 21)",
                ms(median(add)),
                ms(median(del))
            );
        }
        // GC of every attachment: one batch of a few thousand messages.
        let t = Instant::now();
        let removed = fw.gc(RuleKind::PortMapping, "perf", &[])?;
        println!(
            "{backend:>6}: gc of {} attachments {:.1} ms",
            removed.len(),
            ms(t.elapsed())
        );
        if removed.len() != present as usize || !fw.list(RuleKind::PortMapping)?.is_empty() {
            return Err(format!("{backend}: gc removed {} of {present}", removed.len()).into());
        }
    }
    Ok(())
}

/// The child of [`exec_cost`]: one port-mapping call through the backend
/// `CNI_FIREWALL_BACKEND` picks, as a plugin binary makes it.
fn exec_child(netns: &str, what: &str, id: &str) -> Fallible<()> {
    let fw = cni_plugins::binary::firewall_backend().firewall(Some(Path::new(netns)), 0);
    let spec = pm("perf", id.parse()?)?;
    match what {
        "add" => fw.add(&spec)?,
        "del" => fw.delete(&spec)?,
        _ => {}
    }
    Ok(())
}

/// One port-mapping ADD or DEL in a fresh process, per backend.
fn exec_cost() -> Fallible<()> {
    let exe = std::env::current_exe()?;
    let exec = |ns: &OwnedNetns, backend: &str, what: &str, i: u32| -> Fallible<Duration> {
        let t = Instant::now();
        let st = Command::new(&exe)
            .args([
                "--child",
                &ns.path().to_string_lossy(),
                what,
                &i.to_string(),
            ])
            .env("CNI_FIREWALL_BACKEND", backend)
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            return Err(format!("{backend} {what} {i}: child {st}").into());
        }
        Ok(t.elapsed())
    };
    for backend in ["native", "nft"] {
        let ns = OwnedNetns::new("fwnexec")?;
        let filler = NativeFirewall::in_netns(ns.path());
        let mut present = 0u32;
        for target in [50u32, 1000] {
            while present < target {
                filler.add(&pm("perf", present)?)?;
                present += 1;
            }
            let (mut add, mut del) = (Vec::new(), Vec::new());
            for round in 0..11 {
                add.push(exec(&ns, backend, "add", 20000 + round)?);
                del.push(exec(&ns, backend, "del", 20000 + round)?);
            }
            // The process alone: a child that does nothing.
            let mut idle = Vec::new();
            for _ in 0..11 {
                idle.push(exec(&ns, backend, "none", 0)?);
            }
            println!(
                "{backend:>6}: {present:>4} attachments, exec'd: add {:.2} ms, del {:.2} ms (process alone {:.2} ms; medians of 11)",
                ms(median(add)),
                ms(median(del)),
                ms(median(idle)),
            );
        }
    }
    Ok(())
}

/// A DEL makes its elements expire rather than deleting them, so closing
/// the netlink socket (a plugin's exit) does not wait for the kernel to
/// free deleted objects after an RCU grace period (5-20 ms here).
fn socket_close() -> Fallible<()> {
    let ns = OwnedNetns::new("fwnclose")?;
    let mut closes = Vec::new();
    for i in 0..11 {
        let fw = NativeFirewall::in_netns(ns.path());
        fw.add(&pm("close", i)?)?;
        fw.delete(&pm("close", i)?)?;
        let t = Instant::now();
        drop(fw);
        closes.push(t.elapsed());
    }
    // GC (a real delete) for comparison.
    let fw = NativeFirewall::in_netns(ns.path());
    fw.add(&pm("close", 99)?)?;
    fw.gc(RuleKind::PortMapping, "close", &[])?;
    let t = Instant::now();
    drop(fw);
    println!(
        "socket close after DEL {:.3} ms (median of 11), after a deleting GC {:.3} ms",
        ms(median(closes)),
        ms(t.elapsed())
    );
    Ok(())
}

fn main() -> ExitCode {
    run(PROGRAM, || {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if let [flag, netns, what, id] = args.as_slice() {
            if flag == "--child" {
                return exec_child(netns, what, id);
            }
        }
        require_root(PROGRAM)?;
        let all = ["nft", "native", "exec", "close"];
        let picked: Vec<&str> = if args.is_empty() {
            all.to_vec()
        } else {
            args.iter().map(String::as_str).collect()
        };
        for what in picked {
            match what {
                "nft" => nft_process()?,
                "native" => native_vs_nft()?,
                "exec" => exec_cost()?,
                "close" => socket_close()?,
                other => {
                    return Err(format!("unknown measurement {other:?} (one of {all:?})").into())
                }
            }
        }
        Ok(())
    })
}
