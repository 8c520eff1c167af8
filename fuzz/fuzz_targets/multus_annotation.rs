//! multus's network-selection annotation (comma and JSON forms), the API
//! objects it comes in (Pod, NetworkAttachmentDefinition), the multus
//! config, the delegate cache, and the delegates built from selections.
#![no_main]

use cni_multus::{
    cache, delegate,
    k8s::{NetworkAttachmentDefinition, Pod},
    selection, Delegate, NetConf,
};
use libfuzzer_sys::fuzz_target;

enum Target {
    Annotation {
        value: String,
        default_namespace: String,
    },
    Pod(Vec<u8>),
    Nad(Vec<u8>),
    NetConf(Vec<u8>),
    Cache(Vec<u8>),
    Mac(String),
    Delegate {
        config: String,
        annotation: String,
    },
}

/// Input: one selector byte, then the target's bytes; two-part targets
/// split them at the first NUL. Plain bytes so that seeds are plain files.
fn decode(data: &[u8]) -> Option<Target> {
    let (&selector, rest) = data.split_first()?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (a, b) = match rest.iter().position(|c| *c == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b""[..]),
    };
    Some(match selector % 7 {
        0 => Target::Annotation {
            value: text(a),
            default_namespace: text(b),
        },
        1 => Target::Pod(rest.to_vec()),
        2 => Target::Nad(rest.to_vec()),
        3 => Target::NetConf(rest.to_vec()),
        4 => Target::Cache(rest.to_vec()),
        5 => Target::Mac(text(rest)),
        _ => Target::Delegate {
            config: text(a),
            annotation: text(b),
        },
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(target) = decode(data) else {
        return;
    };
    run(target);
});

fn run(target: Target) {
    match target {
        Target::Annotation {
            value,
            default_namespace,
        } => {
            for key in [
                selection::NETWORKS_ANNOTATION,
                selection::DEFAULT_NETWORK_ANNOTATION,
            ] {
                if let Ok(nets) = selection::parse_networks(key, &value, &default_namespace) {
                    for n in &nets {
                        assert!(
                            selection::is_dns1123_subdomain(&n.name),
                            "name {:?} passed",
                            n.name
                        );
                        assert!(
                            selection::is_dns1123_label(&n.namespace),
                            "namespace {:?} passed",
                            n.namespace
                        );
                    }
                }
            }
        }
        Target::Pod(body) => {
            if let Ok(pod) = Pod::from_json(&body) {
                let _ = pod.is_static();
                if let Some(a) = pod.annotations.get(selection::NETWORKS_ANNOTATION) {
                    let _ = selection::parse_networks(
                        selection::NETWORKS_ANNOTATION,
                        a,
                        &pod.namespace,
                    );
                }
            }
        }
        Target::Nad(body) => {
            if let Ok(nad) = NetworkAttachmentDefinition::from_json(&body) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&nad.config) {
                    let _ = Delegate::from_value(v, None);
                }
            }
        }
        Target::NetConf(body) => {
            if let Ok(conf) = NetConf::from_slice(&body) {
                let _ = conf.runtime_config.capability_args();
                let _ = conf.is_system_namespace("kube-system");
                let _ = conf.may_reference("default", "other");
                let _ = delegate::plan_ifnames(&conf.delegates, "eth0");
            }
        }
        Target::Cache(body) => {
            if let Ok(delegates) = cache::decode(&body) {
                // What we write must read back.
                let again =
                    cache::decode(&cache::encode(&delegates)).expect("an encoded cache decodes");
                assert_eq!(again.len(), delegates.len());
            }
        }
        Target::Mac(s) => {
            if let Some(b) = selection::parse_hw_addr(&s) {
                assert!(matches!(b.len(), 6 | 8 | 20));
            }
        }
        Target::Delegate { config, annotation } => {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&config) else {
                return;
            };
            let nets =
                selection::parse_networks(selection::NETWORKS_ANNOTATION, &annotation, "default")
                    .unwrap_or_default();
            let mut delegates = Vec::new();
            for n in nets.iter().take(8) {
                if let Ok(mut d) = Delegate::from_value(value.clone(), Some(n)) {
                    let _ = d.network_name();
                    let _ = d.cni_version();
                    let _ = d.plugin_type();
                    let _ = d.config_bytes();
                    d.default_cni_version("1.0.0");
                    let _ = d.ifname("eth0", delegates.len());
                    delegates.push(d);
                }
            }
            let _ = delegate::plan_ifnames(&delegates, "eth0");
            let _ = delegate::check_gateways(&mut delegates);
        }
    }
}
