//! flannel's `subnet.env` parser, then the delegate rendering on what it
//! parsed with a fuzzed flannel config.
#![no_main]

use std::path::Path;

use cni_plugins::flannel::{delegate, subnet_env::SubnetEnv, FlannelConf};
use libfuzzer_sys::fuzz_target;

// Input: `subnet.env` text, a NUL byte, the flannel config (JSON; a fixed
// one when it does not decode). Plain bytes so that seeds are plain files.
fuzz_target!(|data: &[u8]| {
    let (env_text, conf_text) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let parsed = SubnetEnv::parse(
        &String::from_utf8_lossy(env_text),
        Path::new("/run/flannel/subnet.env"),
    );
    let Ok(env) = parsed else {
        return;
    };
    let conf: FlannelConf = serde_json::from_slice(conf_text).unwrap_or_else(|_| {
        serde_json::from_str(r#"{"cniVersion":"1.0.0","name":"cbr0","type":"flannel"}"#)
            .expect("fixed flannel config")
    });
    if let Some(d) = &conf.delegate {
        let _ = delegate::check_delegate(d);
    }
    if let Ok(rendered) = delegate::render(&conf, &env) {
        // The rendered delegate is what gets saved and re-read on DEL.
        let bytes = serde_json::to_vec(&rendered).expect("a rendered delegate prints");
        let _ = cni_types::NetworkConfig::from_slice(&bytes);
    }
});
