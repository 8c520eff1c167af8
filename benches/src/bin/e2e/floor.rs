//! The kernel floor: the kernel work of one chain ADD (bridge, host-local
//! and portmap) done in-process through `cni-netns`, without our plugins
//! (no process, no IPAM store, no config parsing): the veth pair created
//! into the pod namespace on the bridge and up, both ends (with
//! `accept_ra` off, as `setup_veth_with` does), the chain's other settings,
//! the pod end's address and default route, the port read back, and the nf_tables elements our ADD installs (masquerade and
//! one port mapping, native backend). DEL is measured in two parts: the
//! firewall elements' removal, and the deletion of the veth alone (the
//! kernel's unregister path, what most of a DEL waits for).
//!
//! Run for N pods back to back in a fresh node namespace, the ADD p50 is
//! taken over 0..N existing attachments, as the plugins' scaling figure.

use std::time::{Duration, Instant};

use cni_netns::firewall::{
    AttachmentId, Firewall, HostPortMapping, MasqueradeSpec, NativeFirewall, PortMappingSpec,
    Protocol, RuleSpec,
};
use cni_netns::{
    sysctl, AddressOptions, BridgeSpec, Handle, IpNetwork, Ipv4Conf, KernelRoute, OperState,
    OwnedNetns, VethSpec,
};

use super::{Fallible, Samples, INTERRUPTED};

/// The floor's latencies, in seconds.
pub(crate) struct FloorReport {
    /// ADD: everything the kernel does for one attachment.
    pub(crate) add: Samples,
    /// DEL: the firewall elements' removal.
    pub(crate) del_fw: Samples,
    /// DEL: the host veth's deletion alone.
    pub(crate) del_veth: Samples,
    /// ADD by step: the veth (created on the bridge, both ends up,
    /// `accept_ra`), the chain's other settings, the pod end's address and
    /// route, the
    /// masquerade and the port mapping
    /// elements, the wait for the host end to be operationally up.
    pub(crate) steps: [(&'static str, Samples); 6],
    /// Not part of ADD: right after each ADD, the start of two `/bin/true`
    /// processes (ours-exec runs two: bridge, with host-local in it, and
    /// portmap), to see whether a process start itself slows down as the
    /// node grows (its CPUs shared with the kernel's per-port work).
    pub(crate) starts: Samples,
}

/// Pod `i`'s address in 10.250.0.0/16 (.0.1 is the gateway).
fn pod_address(i: usize) -> Fallible<IpNetwork> {
    format!("10.250.{}.{}/16", 1 + i / 250, 2 + i % 250)
        .parse()
        .map_err(|e| format!("pod address {i}: {e}"))
}

fn specs(i: usize, address: IpNetwork) -> Fallible<(RuleSpec, RuleSpec)> {
    let id = AttachmentId::new("floor", format!("floor-{i:05}"), "eth0");
    let masq = RuleSpec::Masquerade(MasqueradeSpec {
        attachment: id.clone(),
        addresses: vec![address],
    });
    let mut pm = PortMappingSpec::new(id);
    pm.container_v4 = match address {
        IpNetwork::V4(n) => Some(n),
        IpNetwork::V6(_) => None,
    };
    pm.mappings = vec![HostPortMapping {
        host_port: u16::try_from(20000 + i).map_err(|e| e.to_string())?,
        container_port: 80,
        protocol: Protocol::Tcp,
        host_ip: None,
    }];
    Ok((masq, RuleSpec::PortMappings(pm)))
}

/// The floor for `n` attachments in a fresh node namespace.
pub(crate) fn run(n: usize) -> Fallible<FloorReport> {
    let node = OwnedNetns::new("cnibench-floor").map_err(|e| e.to_string())?;
    super::experiment_node(&node)?;
    let mut pods = Vec::with_capacity(n);
    for _ in 0..n {
        pods.push(OwnedNetns::new("cnibench-fpod").map_err(|e| e.to_string())?);
    }
    node.netns()
        .run(|| attach_all(&pods))
        .map_err(|e| e.to_string())?
}

fn attach_all(pods: &[OwnedNetns]) -> Fallible<FloorReport> {
    let e = |e: cni_netns::Error| e.to_string();
    // The node's setup; each pod below gets a handle of its own, as each
    // plugin process opens one (and with it looks `/proc/sys/net/ipv6` up).
    let host = Handle::current().map_err(e)?;
    let fw = NativeFirewall::new();
    let bridge = host
        .ensure_bridge(&BridgeSpec {
            name: "cbfloor".into(),
            ..Default::default()
        })
        .map_err(e)?;
    host.set_up(bridge.index).map_err(e)?;
    let gw: IpNetwork = "10.250.0.1/16".parse().map_err(|e| format!("{e}"))?;
    host.add_address(bridge.index, gw, AddressOptions::default())
        .map_err(e)?;
    let mut add = Samples::default();
    let mut steps: [(&'static str, Samples); 6] = [
        ("veth", Samples::default()),
        ("settings", Samples::default()),
        ("pod end", Samples::default()),
        ("masquerade", Samples::default()),
        ("port mapping", Samples::default()),
        ("port up", Samples::default()),
    ];
    let mut veths = Vec::with_capacity(pods.len());
    let mut starts = Samples::default();
    for (i, pod_ns) in pods.iter().enumerate() {
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("interrupted".into());
        }
        let address = pod_address(i)?;
        let (masq, pm) = specs(i, address)?;
        let t = Instant::now();
        let mut lap = t;
        let mut step = |k: usize| {
            let now = Instant::now();
            steps[k].1 .0.push((now - lap).as_secs_f64());
            lap = now;
        };
        let pod = Handle::in_netns(pod_ns.netns()).map_err(e)?;
        let host = Handle::current().map_err(e)?;
        let hv = host
            .setup_veth_with(&VethSpec {
                peer_name: "eth0".into(),
                peer_netns: Some(pod_ns.netns()),
                up: true,
                master: Some(bridge.index),
                ..Default::default()
            })
            .map_err(e)?;
        let eth0 = hv.parent_index.ok_or("veth without peer index")?;
        pod.set_up(eth0).map_err(e)?;
        step(0);
        // The settings the chain's ADD reads and writes besides the host
        // end's `accept_ra` (in the veth step): the bridge's `accept_ra`
        // (a sysctl, through the handle's open `/proc/sys/net/ipv6`), the
        // IPv4 forwarding switch (netlink), the pod end's `accept_dad` (a
        // sysctl: one lookup of the pod's `/proc/sys/net/ipv6`, linear in
        // the node's namespaces) and `arp_notify`, portmap's
        // `route_localnet` on the bridge (netlink).
        let _ = host.sysctl_set(&sysctl::accept_ra(&bridge.name), "0");
        let _ = host.forwarding(false).map_err(e)?;
        let _ = pod.sysctl_set_in("net/ipv6/conf/eth0", &[("accept_dad", "0")]);
        let _ = pod.set_ipv4_conf(eth0, &[(Ipv4Conf::ArpNotify, 1)]);
        let _ = host.set_ipv4_conf(bridge.index, &[(Ipv4Conf::RouteLocalnet, 1)]);
        step(1);
        pod.add_address(eth0, address, AddressOptions::default())
            .map_err(e)?;
        pod.add_route(&KernelRoute {
            oif: Some(eth0),
            ..KernelRoute::default_via(gw.ip())
        })
        .map_err(e)?;
        step(2);
        fw.add(&masq).map_err(e)?;
        step(3);
        fw.add(&pm).map_err(e)?;
        step(4);
        // The bridge's (and Go's) wait for the host end to be
        // operationally up: the kernel's linkwatch work, asynchronous to
        // the requests above, polled as the bridge polls.
        let up = host
            .wait_oper_up(hv.index, Duration::from_secs(3))
            .map_err(e)?;
        if up.oper_state != OperState::Up {
            return Err("the host end of the veth never came up".into());
        }
        step(5);
        add.0.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..2 {
            std::process::Command::new("/bin/true")
                .status()
                .map_err(|e| format!("/bin/true: {e}"))?;
        }
        starts.0.push(t.elapsed().as_secs_f64());
        veths.push((hv.index, masq, pm));
    }
    let (mut del_fw, mut del_veth) = (Samples::default(), Samples::default());
    for (index, masq, pm) in veths {
        let t = Instant::now();
        fw.delete(&pm).map_err(e)?;
        fw.delete(&masq).map_err(e)?;
        del_fw.0.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        host.delete_link(index).map_err(e)?;
        del_veth.0.push(t.elapsed().as_secs_f64());
    }
    Ok(FloorReport {
        add,
        del_fw,
        del_veth,
        steps,
        starts,
    })
}
