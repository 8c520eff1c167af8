//! A runtime's view of configs as data: a conflist read from disk is
//! edited through the typed API and plugin-specific keys, embedded in the
//! runtime's own serde struct, and written back; what was not touched keeps
//! its order and values.
#![allow(clippy::print_stdout)]

use cni_types::{NetworkConfig, NetworkConfigList};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The runtime's own record, with the CNI list inside.
#[derive(Serialize, Deserialize)]
struct SandboxNetwork {
    sandbox: String,
    network: NetworkConfigList,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = br#"{"cniVersion":"1.0.0","name":"pods","plugins":[
        {"type":"bridge","bridge":"cni0","isGateway":true,
         "ipam":{"type":"host-local","subnet":"10.22.0.0/16"}},
        {"type":"portmap","capabilities":{"portMappings":true}}]}"#;
    let mut list = NetworkConfigList::from_slice(text)?;

    // Edit the first plugin as a typed config, then put it back.
    let mut bridge = NetworkConfig::from_map(list.plugins[0].clone())?;
    bridge.ip_masq = true;
    bridge.set_specific("bridge", json!("br-pods"))?;
    assert_eq!(bridge.specific()["isGateway"], true); // untouched, kept
    list.plugins[0] = bridge.to_map();
    list.disable_check = true;

    // A plugin built in code, no JSON text.
    let tuning = NetworkConfig::builder("pods", "tuning")
        .specific("sysctl", json!({"net.core.somaxconn": "512"}))
        .build()?;
    list.push_plugin(&tuning)?;

    // Inside the runtime's own struct, through serde.
    let record = SandboxNetwork {
        sandbox: "abc123".into(),
        network: list,
    };
    let saved = serde_json::to_string_pretty(&record)?;
    let back: SandboxNetwork = serde_json::from_str(&saved)?;
    assert!(back.network.disable_check);
    assert_eq!(back.network.plugins[0]["bridge"], "br-pods");
    assert_eq!(back.network.plugins[0]["ipMasq"], true);
    assert_eq!(back.network.plugins[2]["type"], "tuning");
    assert_eq!(back.sandbox, "abc123");
    println!("{}", String::from_utf8(back.network.to_bytes())?);
    Ok(())
}
