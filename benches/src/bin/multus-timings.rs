//! multus's own time per pod, three figures (all with the in-repo
//! Kubernetes API stand-in, `cni_testkit::multus_node`):
//!
//! * `overhead`: a whole thin ADD in-process as the binary does it (load
//!   the config, kubeconfig, client, GET pod, GET two NADs, cache write,
//!   PATCH network-status) with delegates that do nothing; median, p90 and
//!   min of 50.
//! * `beyond-delegates` (root, Go bridge + host-local): the `multus`
//!   binary's ADD with 3 bridge delegates in real namespaces next to the
//!   same three Go bridge ADDs run directly; medians of 15.
//! * `shim-vs-thin` (root, same delegates): per-pod ADD through
//!   `multus-shim` + `multus-daemon` and through the thin plugin; medians
//!   of 15.
//!
//! The multus binaries are those of the same build (this program's
//! directory) unless `--plugins DIR`; the Go plugins are `/usr/lib/cni`.
//!
//! ```text
//! cargo build --release -p cni-plugins -p cni-benches --bins
//! sudo target/release/multus-timings [overhead] [beyond-delegates] [shim-vs-thin] [--plugins DIR]
//! ```

// A measurement program: its figures go to stdout.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cni_benches::measure::{median, ms, require_root, run, Fallible};
use cni_multus::k8s::{ClientConfig, HttpKubeClient};
use cni_multus::{
    cmd_add, Delegate, DelegateExec, DelegateRuntime, Error as MultusError, NetConf, PodRequest,
};
use cni_testkit::multus_node::{
    add_fake_delegate_nads, BridgeNad, Call, MultusNode, PluginRun, GO_PLUGINS,
};
use cni_testkit::KubeApiServer;
use cni_types::{CniResult, GcAttachment, Interface};
use serde_json::{json, Value};

const PROGRAM: &str = "multus-timings";
const USAGE: &str =
    "usage: multus-timings [overhead] [beyond-delegates] [shim-vs-thin] [--plugins DIR]";

/// Delegates that do nothing: an interface named as asked.
struct Noop;

impl DelegateExec for Noop {
    fn add(&self, _: &Delegate, rt: &DelegateRuntime) -> Result<CniResult, MultusError> {
        Ok(CniResult {
            interfaces: vec![Interface {
                name: rt.ifname.clone(),
                sandbox: rt.netns.clone(),
                ..Default::default()
            }],
            ..Default::default()
        })
    }
    fn del(&self, _: &Delegate, _: &DelegateRuntime) -> Result<(), MultusError> {
        Ok(())
    }
    fn check(&self, _: &Delegate, _: &DelegateRuntime) -> Result<(), MultusError> {
        Ok(())
    }
    fn status(&self, _: &Delegate) -> Result<(), MultusError> {
        Ok(())
    }
    fn gc(&self, _: &Delegate, _: &[GcAttachment]) -> Result<(), MultusError> {
        Ok(())
    }
}

/// `overhead`: thin ADD in-process with no-op delegates.
fn overhead() -> Fallible<()> {
    let server = KubeApiServer::start()?;
    add_fake_delegate_nads(&server);
    server.add_pod(
        "ns1",
        "web",
        "uid-1",
        &[("k8s.v1.cni.cncf.io/networks", "net-a,net-b")],
    );
    let dir = tempfile::tempdir()?;
    let conf_bytes = serde_json::to_vec(
        &json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus",
        "kubeconfig": server.kubeconfig_path(), "clusterNetwork": "cluster",
        "cniDir": dir.path().join("cni"), "confDir": dir.path().join("conf")}),
    )?;
    let mut times = Vec::new();
    for i in 0..50 {
        let t = Instant::now();
        let conf = NetConf::from_slice(&conf_bytes)?;
        let kubeconfig = conf.kubeconfig.as_ref().ok_or("no kubeconfig")?;
        let client = HttpKubeClient::new(&ClientConfig::from_kubeconfig(
            kubeconfig,
            conf.api_timeout,
        )?)?;
        let req = PodRequest::new(
            &format!("c{i}"),
            "/run/netns/test",
            "eth0",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web;K8S_POD_UID=uid-1",
        )?;
        cmd_add(&conf, &req, Some(&client), &Noop)?;
        times.push(t.elapsed());
    }
    times.sort();
    let at = |q: usize| times.get(q).copied().unwrap_or_default();
    println!(
        "multus ADD in-process, delegates doing nothing (2 NADs + cluster), n=50: \
         median {:.2} ms, p90 {:.2} ms, min {:.2} ms",
        ms(at(25)),
        ms(at(45)),
        ms(at(0))
    );
    Ok(())
}

/// A node with a cluster network and NADs net-a, net-b, and pod `m`
/// attached to both.
fn node(prefix: &str, net: u8) -> Fallible<MultusNode> {
    let subnets: Vec<String> = (0..3)
        .map(|i| format!("10.{}.0.0/24", u16::from(net) + i))
        .collect();
    let bridges: Vec<String> = ["cl0", "ba0", "bb0"]
        .iter()
        .map(|b| format!("{prefix}{b}"))
        .collect();
    let n = MultusNode::start(
        prefix,
        &[
            BridgeNad::new("kube-system", "cluster", &bridges[0], &subnets[0]),
            BridgeNad::new("ns1", "net-a", &bridges[1], &subnets[1]),
            BridgeNad::new("ns1", "net-b", &bridges[2], &subnets[2]),
        ],
    )?;
    n.server.add_pod(
        "ns1",
        "m",
        "uid-m",
        &[("k8s.v1.cni.cncf.io/networks", "net-a,net-b")],
    );
    Ok(n)
}

fn call<'a>(n: &'a MultusNode, command: &'a str, cid: &'a str, ifname: &'a str) -> Call<'a> {
    Call {
        command,
        cid,
        pod: "m",
        ifname,
        netns: n.pod_path(),
    }
}

fn ok(r: PluginRun, what: &str) -> Fallible<Duration> {
    if !r.success {
        return Err(format!("{what} failed: {} {}", r.stdout, r.stderr).into());
    }
    Ok(r.took)
}

/// `beyond-delegates`: the multus binary vs its three delegates run
/// directly.
fn beyond_delegates(bins: &Path) -> Fallible<()> {
    let n = node("m", 210)?;
    let multus = bins.join("multus");
    let bridge = Path::new(GO_PLUGINS).join("bridge");
    let confs: Vec<(Value, &str)> = [
        ("cluster", "mcl0", "10.210.0.0/24", "eth0"),
        ("net-a", "mba0", "10.211.0.0/24", "net1"),
        ("net-b", "mbb0", "10.212.0.0/24", "net2"),
    ]
    .iter()
    .map(|(name, br, subnet, ifname)| {
        let mut v: Value = serde_json::from_str(&cni_testkit::multus_node::bridge_nad(
            br,
            subnet,
            &n.ipam_dir(),
            false,
        ))?;
        v["name"] = json!(name);
        Ok((v, *ifname))
    })
    .collect::<Fallible<_>>()?;
    let conf = n.multus_conf();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..15 {
        let cid = format!("m{i}");
        with.push(ok(
            n.run(&multus, &conf, call(&n, "ADD", &cid, "eth0"))?,
            "multus ADD",
        )?);
        ok(
            n.run(&multus, &conf, call(&n, "DEL", &cid, "eth0"))?,
            "multus DEL",
        )?;
        let t = Instant::now();
        for (c, ifname) in &confs {
            ok(
                n.run(&bridge, c, call(&n, "ADD", &cid, ifname))?,
                "bridge ADD",
            )?;
        }
        without.push(t.elapsed());
        for (c, ifname) in confs.iter().rev() {
            ok(
                n.run(&bridge, c, call(&n, "DEL", &cid, ifname))?,
                "bridge DEL",
            )?;
        }
    }
    let (with, without) = (median(with), median(without));
    println!(
        "multus ADD (3 Go bridge delegates), median of 15: {:.1} ms; the same 3 delegates run \
         directly {:.1} ms; multus beyond its delegates {:.1} ms",
        ms(with),
        ms(without),
        ms(with.saturating_sub(without))
    );
    Ok(())
}

/// `shim-vs-thin`: the same pod through shim + daemon and through the thin
/// plugin.
fn shim_vs_thin(bins: &Path) -> Fallible<()> {
    let n = node("t", 220)?;
    let _daemon = n.start_daemon(
        &bins.join("multus-daemon"),
        &n.daemon_config(),
        &n.socket_dir().join("multus.sock"),
    )?;
    let (shim, thin) = (bins.join("multus-shim"), bins.join("multus"));
    let (shim_conf, thin_conf) = (n.shim_conf(), n.thin_conf());
    let (mut thick_t, mut thin_t) = (Vec::new(), Vec::new());
    for i in 0..15 {
        let cid = format!("m{i}");
        thick_t.push(ok(
            n.run(&shim, &shim_conf, call(&n, "ADD", &cid, "eth0"))?,
            "shim ADD",
        )?);
        ok(
            n.run(&shim, &shim_conf, call(&n, "DEL", &cid, "eth0"))?,
            "shim DEL",
        )?;
        thin_t.push(ok(
            n.run(&thin, &thin_conf, call(&n, "ADD", &cid, "eth0"))?,
            "thin ADD",
        )?);
        ok(
            n.run(&thin, &thin_conf, call(&n, "DEL", &cid, "eth0"))?,
            "thin DEL",
        )?;
    }
    thick_t.sort();
    thin_t.sort();
    let at = |v: &[Duration], q: usize| ms(v.get(q).copied().unwrap_or_default());
    println!(
        "per-pod ADD (3 Go bridge delegates), median of 15: shim + daemon {:.1} ms (min {:.1}); \
         thin plugin {:.1} ms (min {:.1})",
        at(&thick_t, 7),
        at(&thick_t, 0),
        at(&thin_t, 7),
        at(&thin_t, 0)
    );
    Ok(())
}

fn measure() -> Fallible<()> {
    let mut sections = Vec::new();
    let mut bins: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--plugins" => bins = Some(args.next().ok_or("--plugins needs a value")?.into()),
            "overhead" | "beyond-delegates" | "shim-vs-thin" => sections.push(a),
            other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
        }
    }
    if sections.is_empty() {
        sections = ["overhead", "beyond-delegates", "shim-vs-thin"]
            .map(String::from)
            .to_vec();
    }
    let bins = match bins {
        Some(b) => b,
        None => std::env::current_exe()?
            .parent()
            .map(Path::to_path_buf)
            .ok_or("no directory of this program")?,
    };
    for s in &sections {
        match s.as_str() {
            "overhead" => overhead()?,
            "beyond-delegates" => {
                require_root(PROGRAM)?;
                beyond_delegates(&bins)?;
            }
            _ => {
                require_root(PROGRAM)?;
                shim_vs_thin(&bins)?;
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    run(PROGRAM, measure)
}
