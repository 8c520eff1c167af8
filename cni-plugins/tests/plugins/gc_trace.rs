//! cni-gc in the runtime's trace: run with a `TRACEPARENT` and the `OTEL_*`
//! variables naming an OTLP/HTTP receiver (decoding with the official
//! `opentelemetry-proto` package), a pass is one `cni-gc.pass` span, the
//! caller's child, with its CRI requests under it; a pass that cannot reach
//! its runtime is refused and its span says ERROR.

use std::process::Command;
use std::time::Duration;

use cni_testkit::otlp::{self, Mode, Receiver};

const TRACE: &str = "1f2e3d4c5b6a79881f2e3d4c5b6a7988";
const CALLER_SPAN: &str = "0123456789abcdef";

#[test]
fn a_pass_is_one_span_under_the_caller() {
    if !otlp::require() {
        return;
    }
    let rx = Receiver::start(Mode::Normal).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for sub in ["conf", "cache/results", "bin"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cni-gc"))
        .arg("--cri-socket")
        .arg(dir.path().join("no-runtime.sock"))
        .arg("--conf-dir")
        .arg(dir.path().join("conf"))
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .arg("--bin-dir")
        .arg(dir.path().join("bin"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint())
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
        .env("TRACEPARENT", format!("00-{TRACE}-{CALLER_SPAN}-01"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "refused: {out:?}");
    let spans = rx.wait_spans(2, Duration::from_secs(10));
    let pass = spans
        .iter()
        .find(|s| s["name"] == "cni-gc.pass")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(pass["trace_id"], TRACE);
    assert_eq!(pass["parent_span_id"], CALLER_SPAN);
    assert_eq!(pass["service_name"], "cni-gc");
    assert_eq!(pass["status"]["code"], "STATUS_CODE_ERROR", "{pass:#}");
    let cri = spans
        .iter()
        .find(|s| s["name"] == "cri.request")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(cri["parent_span_id"], pass["span_id"], "{spans:#?}");
    assert_eq!(cri["status"]["code"], "STATUS_CODE_ERROR", "{cri:#}");
}
