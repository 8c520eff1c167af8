//! The exporter against a real OTLP/HTTP receiver that decodes with the
//! official `opentelemetry-proto` package (`cni_testkit::otlp`): what was
//! recorded arrives with the right ids, parents, attributes and status;
//! a dead, black-hole or 64 MB-reply endpoint costs at most the budget
//! (+1 s of margin), and the big reply is not read; header secrets never show in Debug or error text.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cni_testkit::otlp::{self, Mode, Receiver};
use cni_trace::{ExportConfig, Exporter, Overrides, TraceContext};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

const SECRET: &str = "s3cr3t-t0ken";

fn config(endpoint: &str, extra: &[(&str, &str)]) -> ExportConfig {
    let mut vars: HashMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    vars.insert("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.into());
    vars.insert(
        "OTEL_EXPORTER_OTLP_HEADERS".into(),
        format!("authorization=Bearer%20{SECRET}"),
    );
    ExportConfig::resolve(
        |k| vars.get(k).cloned(),
        &Overrides::default(),
        "exporter-test",
    )
    .unwrap()
    .unwrap()
}

/// Runs `f` with a subscriber recording into a fresh layer; its exporter.
fn record(config: ExportConfig, f: impl FnOnce()) -> Exporter {
    let (layer, exporter) = cni_trace::layer(config);
    let subscriber =
        tracing_subscriber::registry().with(layer.with_filter(cni_trace::default_filter()));
    tracing::subscriber::with_default(subscriber, f);
    exporter
}

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[test]
fn official_decoder_reads_what_was_recorded() {
    if !otlp::require() {
        return;
    }
    let rx = Receiver::start(Mode::Normal).unwrap();
    let mut inner_ctx = None;
    let exporter = record(config(&rx.endpoint(), &[]), || {
        let root = tracing::info_span!(
            "cni",
            otel.name = "cni ADD",
            otel.kind = "server",
            cni.command = "ADD",
            cni.error.code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_message = tracing::field::Empty,
        );
        let parent = TraceContext::from_values(PARENT, Some("vendor=x"), Some("k=v")).unwrap();
        cni_trace::set_remote_parent(&root, &parent);
        root.in_scope(|| {
            let step = tracing::info_span!("ipam", n = 7u64, neg = -3i64, ok = true, ratio = 0.5);
            step.in_scope(|| {
                inner_ctx = cni_trace::current_context();
                tracing::warn!(attempt = 2, "address busy, retrying");
                tracing::info!("not an event on the span");
            });
            // Debug-level spans are not recorded.
            tracing::debug_span!("noise").in_scope(|| {});
        });
        root.record("cni.error.code", 11u64);
        root.record("otel.status_code", "ERROR");
        root.record("otel.status_message", "no addresses left");
    });
    let sent = exporter.flush().unwrap();
    assert_eq!(sent, 2);

    let posts = rx.posts();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0]["path"], "/v1/traces");
    assert_eq!(posts[0]["content_type"], "application/x-protobuf");
    assert!(posts[0]["error"].is_null(), "{posts:?}");
    assert_eq!(
        posts[0]["headers"]["authorization"],
        format!("Bearer {SECRET}")
    );
    let spans = rx.spans();
    let by_name = |n: &str| spans.iter().find(|s| s["name"] == n).unwrap().clone();
    let root = by_name("cni ADD");
    let step = by_name("ipam");
    assert_eq!(root["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(root["parent_span_id"], "b7ad6b7169203331");
    assert_eq!(root["trace_state"], "vendor=x");
    assert_eq!(root["kind"], "SPAN_KIND_SERVER");
    assert_eq!(root["status"]["code"], "STATUS_CODE_ERROR");
    assert_eq!(root["status"]["message"], "no addresses left");
    assert_eq!(root["attributes"]["cni.command"], "ADD");
    // int64 travels as a JSON number here (protobuf's Python int).
    assert_eq!(root["attributes"]["cni.error.code"], 11);
    assert_eq!(root["service_name"], "exporter-test");
    assert_eq!(root["scope"]["name"], "cni-rs");
    assert_eq!(root["scope"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(step["trace_id"], root["trace_id"]);
    assert_eq!(step["parent_span_id"], root["span_id"]);
    assert_eq!(step["kind"], "SPAN_KIND_INTERNAL");
    assert_eq!(step["attributes"]["n"], 7);
    assert_eq!(step["attributes"]["neg"], -3);
    assert_eq!(step["attributes"]["ok"], true);
    assert_eq!(step["attributes"]["ratio"], 0.5);
    let events = step["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["name"], "address busy, retrying");
    assert_eq!(events[0]["attributes"]["attempt"], 2);
    assert!(step["start"].as_u64() <= step["end"].as_u64());
    assert!(root["start"].as_u64() <= step["start"].as_u64());
    // The context a child process would get: the step's own ids.
    let inner = inner_ctx.unwrap();
    assert_eq!(
        inner.traceparent(),
        format!(
            "00-0af7651916cd43dd8448eb211c80319c-{}-01",
            step["span_id"].as_str().unwrap()
        )
    );
    assert_eq!(inner.trace_state(), Some("vendor=x"));
    assert_eq!(inner.baggage(), Some("k=v"));
}

#[test]
fn unsampled_parent_records_nothing_and_propagates_unchanged() {
    if !otlp::require() {
        return;
    }
    let rx = Receiver::start(Mode::Normal).unwrap();
    let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let mut seen = None;
    let exporter = record(config(&rx.endpoint(), &[]), || {
        let root = tracing::info_span!("cni");
        cni_trace::set_remote_parent(&root, &TraceContext::parse_traceparent(unsampled).unwrap());
        root.in_scope(|| {
            tracing::info_span!("child").in_scope(|| seen = cni_trace::current_context());
        });
    });
    assert_eq!(exporter.flush().unwrap(), 0);
    assert_eq!(seen.unwrap().traceparent(), unsampled);
    assert!(rx.posts().is_empty());
}

fn one_span(config: ExportConfig) -> Exporter {
    record(config, || tracing::info_span!("cni").in_scope(|| {}))
}

fn assert_within_budget(what: &str, config: ExportConfig, expect_ok: bool) {
    let budget = config.timeout;
    let exporter = one_span(config);
    let start = Instant::now();
    let result = exporter.flush();
    let took = start.elapsed();
    // A second of margin: a flush without its budget would wait minutes
    // (an unroutable connect) or forever (the black hole); the test proves
    // the bound, not a speed on busy cores.
    assert!(
        took <= budget + Duration::from_secs(1),
        "{what}: flush took {took:?}, budget {budget:?}"
    );
    assert_eq!(result.is_ok(), expect_ok, "{what}: {result:?}");
    if let Err(e) = result {
        let text = format!("{e} {e:?}");
        assert!(!text.contains(SECRET), "{what}: secret in {text}");
    }
}

#[test]
fn dead_endpoint_within_budget() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The listener is gone: nothing listens on `port`.
    let c = config(&format!("http://127.0.0.1:{port}"), &[]);
    assert_within_budget("dead endpoint", c, false);
    // An unroutable address (connect times out rather than refused).
    let c = config(
        "http://192.0.2.1:4318",
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "150")],
    );
    assert_within_budget("unroutable endpoint", c, false);
}

#[test]
fn black_hole_within_budget() {
    if !otlp::require() {
        return;
    }
    let rx = Receiver::start(Mode::Blackhole).unwrap();
    assert_within_budget("black hole", config(&rx.endpoint(), &[]), false);
    assert_eq!(rx.posts().len(), 1, "the request was sent");
}

#[test]
fn a_64_megabyte_reply_is_not_read() {
    if !otlp::require() {
        return;
    }
    let rx = Receiver::start(Mode::Big).unwrap();
    assert_within_budget("64 MB reply", config(&rx.endpoint(), &[]), true);
    // The proof that the body was not read: the receiver could not send it
    // all (the exporter closed after its status line; 64 MB is more than
    // the sockets' buffers hold).
    let end = Instant::now() + Duration::from_secs(10);
    let replies = loop {
        let r = rx.replies();
        if !r.is_empty() || Instant::now() > end {
            break r;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        replies[0]["whole"], false,
        "the whole reply was read: {replies:?}"
    );
}

#[test]
fn secrets_never_in_debug() {
    let c = config("http://127.0.0.1:9", &[]);
    assert!(c.headers.iter().any(|(_, v)| v.contains(SECRET)));
    let exporter = one_span(c.clone());
    for text in [
        format!("{c:?}"),
        format!("{exporter:?}"),
        format!("{:?}", exporter.config()),
    ] {
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains("authorization"), "{text}");
    }
}

#[test]
fn own_receiver_and_tree() {
    let rx = cni_trace::receiver::Receiver::start().unwrap();
    let exporter = record(config(&rx.endpoint(), &[]), || {
        let root = tracing::info_span!("cnitool", otel.name = "cnitool ADD");
        root.in_scope(|| {
            tracing::info_span!("cni.exec", otel.name = "cni.exec bridge").in_scope(|| {
                tracing::info_span!(
                    "cni",
                    otel.name = "cni ADD",
                    cni.plugin = "bridge",
                    otel.status_code = "ERROR",
                    otel.status_message = "boom"
                )
                .in_scope(|| {});
            });
        });
    });
    assert_eq!(exporter.flush().unwrap(), 3);
    let spans = rx.spans();
    assert_eq!(spans.len(), 3);
    let tree = cni_trace::receiver::render_tree(&spans);
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(lines.len(), 3, "{tree}");
    assert!(lines[0].starts_with("cnitool ADD  "), "{tree}");
    assert!(lines[1].starts_with("  cni.exec bridge  "), "{tree}");
    assert!(lines[2].starts_with("    cni ADD [bridge]  "), "{tree}");
    assert!(lines[2].ends_with("ERROR: boom"), "{tree}");
}
