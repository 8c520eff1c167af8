//! `proto/runtime_v1.proto` declares part of the CRI's `runtime.v1` API.
//! This test compares each of its messages, fields and enum values with
//! the upstream `api.proto` (kubernetes/cri-api,
//! `pkg/apis/runtime/v1/api.proto`) named by `CRI_API_PROTO`: same full
//! names, and for each declared field the upstream field of that number
//! has the same name, type, label and message or enum type. A wrong field
//! number would otherwise decode to a silent default.
//!
//! The upstream file is not part of this repository; without
//! `CRI_API_PROTO` the test prints SKIP. Older upstream versions import
//! gogoproto: those imports and options are stripped before compiling.

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

fn compile(dir: &Path, file: &str) -> FileDescriptorSet {
    protox::compile([file], [dir]).unwrap_or_else(|e| panic!("compile {file}: {e}"))
}

/// Top-level messages and enums of package `runtime.v1`, by name.
fn index(
    fds: &FileDescriptorSet,
) -> (
    BTreeMap<String, DescriptorProto>,
    BTreeMap<String, EnumDescriptorProto>,
) {
    let mut messages = BTreeMap::new();
    let mut enums = BTreeMap::new();
    for f in fds.file.iter().filter(|f| f.package() == "runtime.v1") {
        for m in &f.message_type {
            messages.insert(m.name().to_string(), m.clone());
        }
        for e in &f.enum_type {
            enums.insert(e.name().to_string(), e.clone());
        }
    }
    (messages, enums)
}

/// The differences between our message `ours` and upstream's `theirs`.
fn compare_message(name: &str, ours: &DescriptorProto, theirs: &DescriptorProto) -> Vec<String> {
    let mut wrong = Vec::new();
    for f in &ours.field {
        let Some(u) = theirs.field.iter().find(|u| u.number() == f.number()) else {
            wrong.push(format!(
                "{name}.{}: upstream has no field {}",
                f.name(),
                f.number()
            ));
            continue;
        };
        let got = (f.name(), f.r#type(), f.label(), f.type_name());
        let want = (u.name(), u.r#type(), u.label(), u.type_name());
        if got != want {
            wrong.push(format!(
                "{name} field {}: ours {got:?}, upstream {want:?}",
                f.number()
            ));
        }
    }
    // Map entries are nested messages: their key and value types count.
    for n in &ours.nested_type {
        match theirs.nested_type.iter().find(|u| u.name() == n.name()) {
            Some(u) => wrong.extend(compare_message(&format!("{name}.{}", n.name()), n, u)),
            None => wrong.push(format!("{name}.{}: no such upstream type", n.name())),
        }
    }
    wrong
}

#[test]
fn declared_messages_match_the_upstream_cri_proto() {
    let Some(upstream) = std::env::var_os("CRI_API_PROTO") else {
        eprintln!(
            "SKIP declared_messages_match_the_upstream_cri_proto: set CRI_API_PROTO to the \
             path of kubernetes/cri-api's pkg/apis/runtime/v1/api.proto"
        );
        return;
    };
    let text = std::fs::read_to_string(&upstream).expect("read CRI_API_PROTO");
    let stripped: String = text
        .lines()
        .filter(|l| !l.contains("gogoproto"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("api.proto"), stripped).unwrap();
    let (their_messages, their_enums) = index(&compile(dir.path(), "api.proto"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let (our_messages, our_enums) = index(&compile(&root, "runtime_v1.proto"));
    assert!(!our_messages.is_empty() && !our_enums.is_empty());

    let mut wrong = Vec::new();
    for (name, ours) in &our_messages {
        match their_messages.get(name) {
            Some(theirs) => wrong.extend(compare_message(name, ours, theirs)),
            None => wrong.push(format!("message {name}: not in upstream")),
        }
    }
    for (name, ours) in &our_enums {
        let Some(theirs) = their_enums.get(name) else {
            wrong.push(format!("enum {name}: not in upstream"));
            continue;
        };
        for v in &ours.value {
            match theirs.value.iter().find(|u| u.number() == v.number()) {
                Some(u) if u.name() == v.name() => {}
                other => wrong.push(format!(
                    "enum {name} value {}: ours {}, upstream {:?}",
                    v.number(),
                    v.name(),
                    other.map(|u| u.name())
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "differences from upstream:\n{}",
        wrong.join("\n")
    );
    eprintln!(
        "{} messages and {} enums match the upstream CRI proto",
        our_messages.len(),
        our_enums.len()
    );
}
