//! multus's kubeconfig parser (YAML) on arbitrary text. Relative file
//! paths in it resolve under an empty directory.
#![no_main]

use std::path::Path;
use std::time::Duration;

use cni_multus::k8s::ClientConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = ClientConfig::from_kubeconfig_str(
        text,
        Path::new("/nonexistent-cni-fuzz"),
        "fuzz.kubeconfig",
        Duration::from_secs(1),
    );
});
