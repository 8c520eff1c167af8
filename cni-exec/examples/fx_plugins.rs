//! The test fixture plugins as one binary, chosen by the name it is run as
//! (`fx-main` or `fx-ipam`, symlinks made by the tests). Used only by the
//! cni-exec tests that compare the exec and in-process paths.

#[path = "../tests/exec/support/fixture.rs"]
mod fixture;

fn main() {
    let name = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    match name.as_str() {
        "fx-main" => cni_exec::run(&fixture::FxMain),
        _ => cni_exec::run(&fixture::FxIpam),
    }
}
