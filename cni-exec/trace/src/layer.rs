//! The recorder: a `tracing_subscriber::Layer` that gives every span an
//! OpenTelemetry identity (trace id, span id, parent), turns its fields
//! into attributes and its WARN/ERROR events into span events, and keeps
//! finished spans in a bounded buffer for [`Exporter::flush`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TracingEvent, Level, Metadata, Subscriber};
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

use crate::config::ExportConfig;
use crate::context::TraceContext;
use crate::proto::{self, Batch, KeyValue, SpanKind, Status, StatusCode, Value};
use crate::Error;

/// The instrumentation scope's name on every span we send.
pub const SCOPE_NAME: &str = "cni-rs";
/// The most finished spans kept between flushes; more are dropped (and
/// counted, [`Exporter::dropped`]).
pub const MAX_BUFFERED_SPANS: usize = 4096;
/// The most events kept on one span.
pub const MAX_EVENTS_PER_SPAN: usize = 128;

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn random_span_id() -> [u8; 8] {
    loop {
        let id = cni_types::random::random_u64();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

fn random_trace_id() -> [u8; 16] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&cni_types::random::random_u64().to_be_bytes());
    t[8..].copy_from_slice(&random_span_id());
    t
}

/// What the layer keeps in a span's extensions while it is open.
struct SpanData {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    sampled: bool,
    /// The remote parent given to this span or an ancestor: propagated
    /// unchanged when not sampled.
    remote: Option<TraceContext>,
    trace_state: Option<String>,
    baggage: Option<String>,
    name: String,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
    events: Vec<proto::Event>,
    status: Status,
    start: u64,
}

impl SpanData {
    fn context(&self) -> Option<TraceContext> {
        if !self.sampled {
            return self.remote.clone();
        }
        Some(
            TraceContext::new(self.trace_id, self.span_id, 1)?
                .with_trace_state(self.trace_state.as_deref())
                .with_baggage(self.baggage.as_deref()),
        )
    }
}

/// Fields to attributes, with the `otel.*` fields read as
/// tracing-opentelemetry reads them.
struct Fields<'a> {
    data: &'a mut SpanData,
}

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let key = field.name();
        let text = |v: &Value| match v {
            Value::Str(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::I64(i) => i.to_string(),
            Value::F64(f) => f.to_string(),
        };
        match key {
            "otel.name" => self.data.name = text(&value),
            "otel.kind" => {
                if let Some(k) = SpanKind::parse(&text(&value)) {
                    self.data.kind = k;
                }
            }
            "otel.status_code" => {
                let t = text(&value);
                if t.eq_ignore_ascii_case("error") {
                    self.data.status.code = StatusCode::Error;
                } else if t.eq_ignore_ascii_case("ok") {
                    self.data.status.code = StatusCode::Ok;
                }
            }
            "otel.status_message" => self.data.status.message = text(&value),
            _ => match self.data.attributes.iter_mut().find(|kv| kv.key == key) {
                Some(kv) => kv.value = value,
                None => self.data.attributes.push(KeyValue {
                    key: key.to_string(),
                    value,
                }),
            },
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        let v = i64::try_from(value).map_or_else(|_| Value::Str(value.to_string()), Value::I64);
        self.put(field, v);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::F64(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, Value::Str(format!("{value:?}")));
    }
}

/// An event's fields: `message` is its name, the rest attributes.
#[derive(Default)]
struct EventFields {
    name: String,
    attributes: Vec<KeyValue>,
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.name = value.to_string();
        } else {
            self.attributes.push(KeyValue::str(field.name(), value));
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.attributes.push(KeyValue {
            key: field.name().to_string(),
            value: Value::I64(value),
        });
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attributes.push(KeyValue {
            key: field.name().to_string(),
            value: Value::Bool(value),
        });
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

struct Shared {
    spans: Mutex<Vec<proto::Span>>,
    dropped: AtomicU64,
    config: ExportConfig,
}

/// The recording layer, made by [`layer`]: gives every span a trace id,
/// span id and parent, its fields as attributes, its WARN/ERROR events as
/// span events, and keeps finished spans for [`Exporter::flush`].
pub struct OtlpLayer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for OtlpLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpLayer")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// The exporting end of a [`layer`]: sends what the layer recorded.
#[derive(Clone)]
pub struct Exporter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// A recording layer and its exporter, for `config`.
pub fn layer(config: ExportConfig) -> (OtlpLayer, Exporter) {
    let shared = Arc::new(Shared {
        spans: Mutex::new(Vec::new()),
        dropped: AtomicU64::new(0),
        config,
    });
    (
        OtlpLayer {
            shared: shared.clone(),
        },
        Exporter { shared },
    )
}

/// The per-layer filter the layer is meant to run with: spans of level
/// INFO and above, events of WARN and ERROR (which become span events).
pub fn default_filter() -> FilterFn<fn(&Metadata<'_>) -> bool> {
    fn wanted(m: &Metadata<'_>) -> bool {
        if m.is_span() {
            *m.level() <= Level::INFO
        } else {
            *m.level() <= Level::WARN
        }
    }
    FilterFn::new(wanted as fn(&Metadata<'_>) -> bool)
}

impl Exporter {
    /// The finished spans recorded since the last flush, as a batch (the
    /// buffer is emptied).
    pub fn drain(&self) -> Batch {
        let spans = match self.shared.spans.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        Batch {
            resource: self
                .shared
                .config
                .resource
                .iter()
                .map(|(k, v)| KeyValue::str(k.clone(), v.clone()))
                .collect(),
            scope_name: SCOPE_NAME.to_string(),
            scope_version: env!("CARGO_PKG_VERSION").to_string(),
            spans,
        }
    }

    /// Sends the finished spans in one POST within the configured budget;
    /// the number sent (0: nothing to send, no connection made). The spans
    /// are gone either way: a failed export is not retried.
    pub fn flush(&self) -> Result<usize, Error> {
        let batch = self.drain();
        if batch.spans.is_empty() {
            return Ok(0);
        }
        crate::export::post(&self.shared.config, &proto::encode_request(&batch))?;
        Ok(batch.spans.len())
    }

    /// How many finished spans were dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// The configuration.
    pub fn config(&self) -> &ExportConfig {
        &self.shared.config
    }
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let parent = span.parent().and_then(|p| {
            let ext = p.extensions();
            let d = ext.get::<SpanData>()?;
            Some((
                d.trace_id,
                d.span_id,
                d.sampled,
                d.remote.clone(),
                d.trace_state.clone(),
                d.baggage.clone(),
            ))
        });
        let mut data = match parent {
            Some((trace_id, parent_id, sampled, remote, trace_state, baggage)) => SpanData {
                trace_id,
                span_id: random_span_id(),
                parent: Some(parent_id),
                sampled,
                remote,
                trace_state,
                baggage,
                name: String::new(),
                kind: SpanKind::Internal,
                attributes: Vec::new(),
                events: Vec::new(),
                status: Status::default(),
                start: 0,
            },
            None => SpanData {
                trace_id: random_trace_id(),
                span_id: random_span_id(),
                parent: None,
                sampled: true,
                remote: None,
                trace_state: None,
                baggage: None,
                name: String::new(),
                kind: SpanKind::Internal,
                attributes: Vec::new(),
                events: Vec::new(),
                status: Status::default(),
                start: 0,
            },
        };
        data.name = attrs.metadata().name().to_string();
        attrs.record(&mut Fields { data: &mut data });
        data.start = now_nanos();
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(data) = span.extensions_mut().get_mut::<SpanData>() {
                values.record(&mut Fields { data });
            }
        }
    }

    fn on_event(&self, event: &TracingEvent<'_>, ctx: Context<'_, S>) {
        if !matches!(*event.metadata().level(), Level::WARN | Level::ERROR) {
            return;
        }
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut ext = span.extensions_mut();
        let Some(data) = ext.get_mut::<SpanData>() else {
            return;
        };
        if !data.sampled || data.events.len() >= MAX_EVENTS_PER_SPAN {
            return;
        }
        let mut fields = EventFields::default();
        event.record(&mut fields);
        fields.attributes.push(KeyValue::str(
            "level",
            event.metadata().level().as_str().to_string(),
        ));
        data.events.push(proto::Event {
            time_unix_nano: now_nanos(),
            name: fields.name,
            attributes: fields.attributes,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(d) = span.extensions_mut().remove::<SpanData>() else {
            return;
        };
        if !d.sampled {
            return;
        }
        let record = proto::Span {
            trace_id: d.trace_id,
            span_id: d.span_id,
            trace_state: d.trace_state.unwrap_or_default(),
            parent_span_id: d.parent,
            name: d.name,
            kind: d.kind,
            start_time_unix_nano: d.start,
            end_time_unix_nano: now_nanos().max(d.start),
            attributes: d.attributes,
            events: d.events,
            status: d.status,
        };
        let mut spans = match self.shared.spans.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        if spans.len() < MAX_BUFFERED_SPANS {
            spans.push(record);
        } else {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs `f` on the layer's data of `span`, when the global or current
/// subscriber is a [`Registry`] stack holding the layer.
fn with_data<T>(span: &tracing::Span, f: impl FnOnce(&mut SpanData) -> T) -> Option<T> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let span = registry.span(id)?;
        let mut ext = span.extensions_mut();
        ext.get_mut::<SpanData>().map(f)
    })
    .flatten()
}

/// Makes `span` a child of the remote `parent` (the caller's
/// `TRACEPARENT`): its trace id, parent span id, sampling decision and
/// carried values come from `parent`. Call it before the span's children
/// are created (they take their ids at creation). Per span, so a
/// long-running daemon gives each request its own remote parent. Does
/// nothing when the span is not recorded by a [`layer`].
pub fn set_remote_parent(span: &tracing::Span, parent: &TraceContext) {
    with_data(span, |d| {
        d.trace_id = parent.trace_id();
        d.parent = Some(parent.span_id());
        d.sampled = parent.sampled();
        d.trace_state = parent.trace_state().map(str::to_string);
        d.baggage = parent.baggage().map(str::to_string);
        d.remote = Some(parent.clone());
    });
}

/// The context to hand a child process for `span`: its own ids when
/// recorded and sampled; the remote parent unchanged when the trace is
/// not sampled; `None` when no [`layer`] records it.
pub fn context_of(span: &tracing::Span) -> Option<TraceContext> {
    with_data(span, |d| d.context()).flatten()
}

/// [`context_of`] the current span.
pub fn current_context() -> Option<TraceContext> {
    context_of(&tracing::Span::current())
}
