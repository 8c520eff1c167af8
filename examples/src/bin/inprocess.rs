//! A runtime that embeds the invoker and the plugins in-process: no
//! fork/exec, the same protocol (`dispatch`) and the same libcni cache.
//! Attaches one pod to a bridge + host-local + portmap network inside a
//! throwaway node namespace, prints the result, and detaches it.
//!
//! Run as root: `cargo run -p cni-examples --bin inprocess`.

// A command-line program: its report goes to stdout.
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use cni_exec::{CniConfig, InProcessExec, RuntimeConf};
use cni_netns::OwnedNetns;
use cni_plugins::{bridge::Bridge, host_local::HostLocal, loopback::Loopback, portmap::Portmap};
use cni_types::NetworkConfigList;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = OwnedNetns::new("cni-inproc-node")?;
    let pod = OwnedNetns::new("cni-inproc-pod")?;
    let state = std::env::temp_dir().join(format!("cni-inproc-{}", std::process::id()));

    // The plugins are values; delegation (bridge -> host-local) stays in-process.
    let exec = InProcessExec::builder()
        .register("bridge", Arc::new(Bridge::new()))
        .register("host-local", Arc::new(HostLocal))
        .register("portmap", Arc::new(Portmap::new()))
        .register("loopback", Arc::new(Loopback::new()))
        .build();
    let cni = CniConfig::new(vec!["/opt/cni/bin".into()], Arc::new(exec))
        .with_cache_dir(state.join("cache"));

    let list = NetworkConfigList::from_slice(
        serde_json::json!({
            "cniVersion": "1.1.0",
            "name": "inproc",
            "plugins": [
                {"type": "bridge", "bridge": "cniip0", "isGateway": true, "ipMasq": true,
                 "ipam": {"type": "host-local", "dataDir": state.join("ipam"),
                          "ranges": [[{"subnet": "10.98.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        })
        .to_string()
        .as_bytes(),
    )?;
    let mut rt = RuntimeConf {
        container_id: "inproc-demo".into(),
        netns: pod.netns().path().display().to_string(),
        ifname: "eth0".into(),
        ..Default::default()
    };
    rt.capability_args.insert(
        "portMappings".into(),
        serde_json::json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
    );

    // Plugins act on the namespace of the calling thread: run inside the node.
    let added = node.netns().run(|| cni.add_network_list(&list, &rt))??;
    println!("{}", String::from_utf8_lossy(&added.to_json_pretty()?));
    node.netns().run(|| cni.check_network_list(&list, &rt))??;
    node.netns().run(|| cni.del_network_list(&list, &rt))??;
    println!("attached, checked and detached in-process");
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}
