//! `src/runtime.v1.rs` is exactly what `prost-build` generates from
//! `proto/runtime_v1.proto` (compiled by `protox`: no `protoc` binary).
//! After changing the proto: `REGENERATE=1 cargo test -p cni-cri --test
//! generated`, and commit both.

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn committed_messages_are_generated_from_the_proto() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(["runtime_v1.proto"], [root.join("proto")])
        .expect("proto/runtime_v1.proto compiles");
    let out = tempfile::tempdir().unwrap();
    prost_build::Config::new()
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("prost-build generates the messages");
    let fresh = std::fs::read(out.path().join("runtime.v1.rs")).unwrap();
    let committed = root.join("src/runtime.v1.rs");
    if std::env::var_os("REGENERATE").is_some() {
        std::fs::write(&committed, &fresh).unwrap();
        return;
    }
    let old = std::fs::read(&committed).unwrap();
    assert!(
        old == fresh,
        "src/runtime.v1.rs is not what proto/runtime_v1.proto generates: run \
         REGENERATE=1 cargo test -p cni-cri --test generated"
    );
}
