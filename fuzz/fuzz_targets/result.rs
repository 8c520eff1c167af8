//! Results in every version: parse with each default version, print in
//! every version, and check that printing is stable (what we print parses
//! back to the same result, and prints the same again).
#![no_main]

use cni_types::{CniResult, Version, VersionReply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, json)) = data.split_first() else {
        return;
    };
    let default = Version::ALL[usize::from(selector) % Version::ALL.len()];
    let _ = VersionReply::from_slice(json);
    let _ = serde_json::from_slice::<cni_types::CniError>(json);
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    if let Ok((_, result)) = CniResult::from_value(&value, default) {
        for target in Version::ALL {
            let _ = CniResult::convert_value(&value, default, target);
            let _ = result.to_json_pretty(target);
            let Ok(printed) = result.to_value(target) else {
                continue;
            };
            let (version, back) = CniResult::from_value(&printed, default)
                .expect("a printed result must parse again");
            assert_eq!(version, target);
            let reprinted = back
                .to_value(target)
                .expect("a parsed result must print again");
            assert_eq!(printed, reprinted, "printing is not stable in {target}");
            if target >= Version::V1_0_0 {
                // 1.x carries every field: nothing is lost.
                assert_eq!(back, result, "1.x round trip lost data");
            }
        }
    }
    for version in Version::ALL {
        let _ = CniResult::from_value_as(&value, version);
    }
});
