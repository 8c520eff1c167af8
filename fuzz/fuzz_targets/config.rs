//! Network configs and conflists: every public decoder on arbitrary bytes,
//! then every accessor on what decoded, and a re-serialization round trip.
#![no_main]

use cni_types::{NetworkConfig, NetworkConfigList};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(conf) = NetworkConfig::from_slice(data) {
        exercise_conf(&conf);
        // What we print must read back as the same config.
        let again =
            NetworkConfig::from_slice(&conf.to_bytes()).expect("a printed config must parse again");
        assert_eq!(again.name, conf.name);
        assert_eq!(again.cni_version, conf.cni_version);
        assert_eq!(again.plugin_type, conf.plugin_type);
    }
    let _ = cni_exec::conf::conf_from_bytes(data);
    if let Ok(mut list) = NetworkConfigList::from_slice(data) {
        let _ = list.version();
        for p in list.plugins.clone() {
            if let Ok(conf) = NetworkConfig::from_map(p) {
                exercise_conf(&conf);
            }
        }
        let extra = list.plugins.clone();
        let _ = list.append_plugins(extra);
    }
    if let Ok(list) = NetworkConfigList::from_single_conf(data) {
        assert_eq!(list.plugins.len(), 1);
        let _ = list.version();
    }
});

fn exercise_conf(conf: &NetworkConfig) {
    let _ = conf.version();
    let _ = conf.validate_name();
    let _ = conf.ipam_type();
    let _ = conf.prev_result();
    let _ = conf.valid_attachments();
    let _ = conf.args_cni();
    let _ = conf.parse_as::<serde_json::Value>();
    if let Ok(v) = conf.version() {
        if let Ok(Some(prev)) = conf.prev_result() {
            let _ = prev.to_json_pretty(v);
        }
    }
}
