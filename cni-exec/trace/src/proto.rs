//! The OTLP subset we send, as data, with a protobuf encoder and decoder
//! for exactly these messages (no code generator, no protobuf crate).
//!
//! Field numbers are those of the official `opentelemetry-proto`
//! definitions (v1.x), cited at each message:
//! `collector/trace/v1/trace_service.proto`, `trace/v1/trace.proto`,
//! `resource/v1/resource.proto`, `common/v1/common.proto`. The tests in
//! `tests/` decode our bytes with the official Python package.

use crate::Error;

/// An attribute value (`AnyValue`'s scalar cases).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `string_value = 1`.
    Str(String),
    /// `bool_value = 2`.
    Bool(bool),
    /// `int_value = 3`.
    I64(i64),
    /// `double_value = 4`.
    F64(f64),
}

/// One attribute (`KeyValue`: `key = 1`, `value = 2`).
#[derive(Clone, Debug, PartialEq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
}

impl KeyValue {
    /// A string attribute.
    pub fn str(key: impl Into<String>, value: impl Into<String>) -> Self {
        KeyValue {
            key: key.into(),
            value: Value::Str(value.into()),
        }
    }
}

/// `Span.SpanKind`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpanKind {
    /// `SPAN_KIND_UNSPECIFIED = 0`.
    Unspecified,
    /// `SPAN_KIND_INTERNAL = 1`.
    #[default]
    Internal,
    /// `SPAN_KIND_SERVER = 2`.
    Server,
    /// `SPAN_KIND_CLIENT = 3`.
    Client,
    /// `SPAN_KIND_PRODUCER = 4`.
    Producer,
    /// `SPAN_KIND_CONSUMER = 5`.
    Consumer,
}

impl SpanKind {
    fn number(self) -> u64 {
        match self {
            SpanKind::Unspecified => 0,
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
            SpanKind::Producer => 4,
            SpanKind::Consumer => 5,
        }
    }

    fn from_number(n: u64) -> SpanKind {
        match n {
            1 => SpanKind::Internal,
            2 => SpanKind::Server,
            3 => SpanKind::Client,
            4 => SpanKind::Producer,
            5 => SpanKind::Consumer,
            _ => SpanKind::Unspecified,
        }
    }

    /// `client`, `server`, `internal`, `producer`, `consumer` (the values
    /// of the `otel.kind` field), any case.
    pub fn parse(s: &str) -> Option<SpanKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "client" => SpanKind::Client,
            "server" => SpanKind::Server,
            "internal" => SpanKind::Internal,
            "producer" => SpanKind::Producer,
            "consumer" => SpanKind::Consumer,
            _ => return None,
        })
    }
}

/// `Status.StatusCode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusCode {
    /// `STATUS_CODE_UNSET = 0`.
    #[default]
    Unset,
    /// `STATUS_CODE_OK = 1`.
    Ok,
    /// `STATUS_CODE_ERROR = 2`.
    Error,
}

/// `Status` (`message = 2`, `code = 3`; field 1 is reserved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: StatusCode,
    /// The message (for errors).
    pub message: String,
}

/// `Span.Event` (`time_unix_nano = 1` fixed64, `name = 2`,
/// `attributes = 3`).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// When, in nanoseconds since the Unix epoch.
    pub time_unix_nano: u64,
    /// The name (the log message).
    pub name: String,
    /// The event's fields.
    pub attributes: Vec<KeyValue>,
}

/// A finished span (`Span` in `trace.proto`).
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// `trace_id = 1` (16 bytes).
    pub trace_id: [u8; 16],
    /// `span_id = 2` (8 bytes).
    pub span_id: [u8; 8],
    /// `trace_state = 3`.
    pub trace_state: String,
    /// `parent_span_id = 4` (absent for a root span).
    pub parent_span_id: Option<[u8; 8]>,
    /// `name = 5`.
    pub name: String,
    /// `kind = 6`.
    pub kind: SpanKind,
    /// `start_time_unix_nano = 7` (fixed64).
    pub start_time_unix_nano: u64,
    /// `end_time_unix_nano = 8` (fixed64).
    pub end_time_unix_nano: u64,
    /// `attributes = 9`.
    pub attributes: Vec<KeyValue>,
    /// `events = 11`.
    pub events: Vec<Event>,
    /// `status = 15`.
    pub status: Status,
}

impl Span {
    /// The attribute named `key`.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| &kv.value)
    }
}

/// One `ResourceSpans` with one `ScopeSpans`: what one process sends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// `Resource.attributes = 1` (`service.name`, ...).
    pub resource: Vec<KeyValue>,
    /// `InstrumentationScope.name = 1`.
    pub scope_name: String,
    /// `InstrumentationScope.version = 2`.
    pub scope_version: String,
    /// `ScopeSpans.spans = 2`.
    pub spans: Vec<Span>,
}

// ---- encoder ----

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u64, wire: u64) {
    varint(out, (field << 3) | wire);
}

fn bytes_field(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn message(out: &mut Vec<u8>, field: u64, build: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    build(&mut inner);
    bytes_field(out, field, &inner);
}

fn fixed64(out: &mut Vec<u8>, field: u64, v: u64) {
    tag(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

fn key_value(out: &mut Vec<u8>, field: u64, kv: &KeyValue) {
    message(out, field, |m| {
        bytes_field(m, 1, kv.key.as_bytes()); // KeyValue.key = 1
        message(m, 2, |v| match &kv.value {
            // KeyValue.value = 2 (AnyValue)
            Value::Str(s) => bytes_field(v, 1, s.as_bytes()),
            Value::Bool(b) => {
                tag(v, 2, VARINT);
                varint(v, u64::from(*b));
            }
            Value::I64(i) => {
                tag(v, 3, VARINT);
                varint(v, *i as u64);
            }
            Value::F64(f) => fixed64(v, 4, f.to_bits()),
        });
    });
}

fn span(out: &mut Vec<u8>, s: &Span) {
    // ScopeSpans.spans = 2
    message(out, 2, |m| {
        bytes_field(m, 1, &s.trace_id);
        bytes_field(m, 2, &s.span_id);
        if !s.trace_state.is_empty() {
            bytes_field(m, 3, s.trace_state.as_bytes());
        }
        if let Some(p) = &s.parent_span_id {
            bytes_field(m, 4, p);
        }
        bytes_field(m, 5, s.name.as_bytes());
        tag(m, 6, VARINT);
        varint(m, s.kind.number());
        fixed64(m, 7, s.start_time_unix_nano);
        fixed64(m, 8, s.end_time_unix_nano);
        for kv in &s.attributes {
            key_value(m, 9, kv);
        }
        for e in &s.events {
            message(m, 11, |ev| {
                fixed64(ev, 1, e.time_unix_nano);
                bytes_field(ev, 2, e.name.as_bytes());
                for kv in &e.attributes {
                    key_value(ev, 3, kv);
                }
            });
        }
        if s.status != Status::default() {
            message(m, 15, |st| {
                if !s.status.message.is_empty() {
                    bytes_field(st, 2, s.status.message.as_bytes());
                }
                let code = match s.status.code {
                    StatusCode::Unset => 0,
                    StatusCode::Ok => 1,
                    StatusCode::Error => 2,
                };
                tag(st, 3, VARINT);
                varint(st, code);
            });
        }
    });
}

/// Encodes an `ExportTraceServiceRequest` (`resource_spans = 1`) holding
/// `batch`: `ResourceSpans` (`resource = 1`, `scope_spans = 2`),
/// `ScopeSpans` (`scope = 1`, `spans = 2`).
pub fn encode_request(batch: &Batch) -> Vec<u8> {
    let mut out = Vec::new();
    message(&mut out, 1, |rs| {
        message(rs, 1, |r| {
            for kv in &batch.resource {
                key_value(r, 1, kv);
            }
        });
        message(rs, 2, |ss| {
            message(ss, 1, |scope| {
                bytes_field(scope, 1, batch.scope_name.as_bytes());
                if !batch.scope_version.is_empty() {
                    bytes_field(scope, 2, batch.scope_version.as_bytes());
                }
            });
            for s in &batch.spans {
                span(ss, s);
            }
        });
    });
    out
}

// ---- decoder ----

/// A field as read from the wire.
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, Error> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or(Error::Decode("truncated varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::Decode("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.buf.len() {
            return Err(Error::Decode("truncated field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, Error> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = key >> 3;
        let value = match key & 7 {
            VARINT => Field::Varint(self.varint()?),
            FIXED64 => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Field::Fixed64(u64::from_le_bytes(a))
            }
            LEN => {
                let n = usize::try_from(self.varint()?)
                    .map_err(|_| Error::Decode("length too large"))?;
                Field::Bytes(self.take(n)?)
            }
            FIXED32 => {
                self.take(4)?;
                Field::Fixed32
            }
            _ => return Err(Error::Decode("unsupported wire type")),
        };
        Ok(Some((field, value)))
    }
}

/// Calls `f` for each field of the message in `buf`.
fn fields<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u64, Field<'a>) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut r = Reader { buf };
    while let Some((n, v)) = r.next()? {
        f(n, v)?;
    }
    Ok(())
}

fn text(b: &[u8]) -> Result<String, Error> {
    String::from_utf8(b.to_vec()).map_err(|_| Error::Decode("string is not UTF-8"))
}

fn id<const N: usize>(b: &[u8]) -> Result<[u8; N], Error> {
    b.try_into()
        .map_err(|_| Error::Decode("id of a wrong length"))
}

fn decode_key_value(buf: &[u8]) -> Result<KeyValue, Error> {
    let mut key = String::new();
    let mut value = Value::Str(String::new());
    fields(buf, |n, f| {
        match (n, f) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) => fields(b, |n, f| {
                match (n, f) {
                    (1, Field::Bytes(s)) => value = Value::Str(text(s)?),
                    (2, Field::Varint(v)) => value = Value::Bool(v != 0),
                    (3, Field::Varint(v)) => value = Value::I64(v as i64),
                    (4, Field::Fixed64(v)) => value = Value::F64(f64::from_bits(v)),
                    _ => {}
                }
                Ok(())
            })?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(KeyValue { key, value })
}

fn decode_span(buf: &[u8]) -> Result<Span, Error> {
    let mut s = Span {
        trace_id: [0; 16],
        span_id: [0; 8],
        trace_state: String::new(),
        parent_span_id: None,
        name: String::new(),
        kind: SpanKind::Unspecified,
        start_time_unix_nano: 0,
        end_time_unix_nano: 0,
        attributes: Vec::new(),
        events: Vec::new(),
        status: Status::default(),
    };
    fields(buf, |n, f| {
        match (n, f) {
            (1, Field::Bytes(b)) => s.trace_id = id(b)?,
            (2, Field::Bytes(b)) => s.span_id = id(b)?,
            (3, Field::Bytes(b)) => s.trace_state = text(b)?,
            (4, Field::Bytes(b)) if !b.is_empty() => s.parent_span_id = Some(id(b)?),
            (5, Field::Bytes(b)) => s.name = text(b)?,
            (6, Field::Varint(v)) => s.kind = SpanKind::from_number(v),
            (7, Field::Fixed64(v)) => s.start_time_unix_nano = v,
            (8, Field::Fixed64(v)) => s.end_time_unix_nano = v,
            (9, Field::Bytes(b)) => s.attributes.push(decode_key_value(b)?),
            (11, Field::Bytes(b)) => {
                let mut e = Event {
                    time_unix_nano: 0,
                    name: String::new(),
                    attributes: Vec::new(),
                };
                fields(b, |n, f| {
                    match (n, f) {
                        (1, Field::Fixed64(v)) => e.time_unix_nano = v,
                        (2, Field::Bytes(b)) => e.name = text(b)?,
                        (3, Field::Bytes(b)) => e.attributes.push(decode_key_value(b)?),
                        _ => {}
                    }
                    Ok(())
                })?;
                s.events.push(e);
            }
            (15, Field::Bytes(b)) => fields(b, |n, f| {
                match (n, f) {
                    (2, Field::Bytes(m)) => s.status.message = text(m)?,
                    (3, Field::Varint(1)) => s.status.code = StatusCode::Ok,
                    (3, Field::Varint(2)) => s.status.code = StatusCode::Error,
                    _ => {}
                }
                Ok(())
            })?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(s)
}

/// Decodes an `ExportTraceServiceRequest`: one [`Batch`] per
/// `ScopeSpans` (its resource repeated). Unknown fields are skipped.
pub fn decode_request(buf: &[u8]) -> Result<Vec<Batch>, Error> {
    let mut out = Vec::new();
    fields(buf, |n, f| {
        let (1, Field::Bytes(rs)) = (n, f) else {
            return Ok(());
        };
        let mut resource = Vec::new();
        let mut scopes = Vec::new();
        fields(rs, |n, f| {
            match (n, f) {
                (1, Field::Bytes(r)) => fields(r, |n, f| {
                    if let (1, Field::Bytes(kv)) = (n, f) {
                        resource.push(decode_key_value(kv)?);
                    }
                    Ok(())
                })?,
                (2, Field::Bytes(ss)) => {
                    let mut batch = Batch::default();
                    fields(ss, |n, f| {
                        match (n, f) {
                            (1, Field::Bytes(scope)) => fields(scope, |n, f| {
                                match (n, f) {
                                    (1, Field::Bytes(b)) => batch.scope_name = text(b)?,
                                    (2, Field::Bytes(b)) => batch.scope_version = text(b)?,
                                    _ => {}
                                }
                                Ok(())
                            })?,
                            (2, Field::Bytes(sp)) => batch.spans.push(decode_span(sp)?),
                            _ => {}
                        }
                        Ok(())
                    })?;
                    scopes.push(batch);
                }
                _ => {}
            }
            Ok(())
        })?;
        for mut b in scopes {
            b.resource = resource.clone();
            out.push(b);
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Batch {
        Batch {
            resource: vec![KeyValue::str("service.name", "bridge")],
            scope_name: "cni-rs".into(),
            scope_version: "0.1.0".into(),
            spans: vec![Span {
                trace_id: [7; 16],
                span_id: [8; 8],
                trace_state: "a=b".into(),
                parent_span_id: Some([9; 8]),
                name: "cni ADD".into(),
                kind: SpanKind::Server,
                start_time_unix_nano: 1,
                end_time_unix_nano: u64::MAX,
                attributes: vec![
                    KeyValue::str("s", "v"),
                    KeyValue {
                        key: "i".into(),
                        value: Value::I64(-5),
                    },
                    KeyValue {
                        key: "b".into(),
                        value: Value::Bool(true),
                    },
                    KeyValue {
                        key: "f".into(),
                        value: Value::F64(1.5),
                    },
                ],
                events: vec![Event {
                    time_unix_nano: 3,
                    name: "warn".into(),
                    attributes: vec![KeyValue::str("k", "v")],
                }],
                status: Status {
                    code: StatusCode::Error,
                    message: "boom".into(),
                },
            }],
        }
    }

    #[test]
    fn round_trip() {
        let b = sample();
        assert_eq!(decode_request(&encode_request(&b)).unwrap(), vec![b]);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_request(&bytes);
        }

        #[test]
        fn truncations_never_panic(cut in 0usize..400) {
            let bytes = encode_request(&sample());
            let _ = decode_request(&bytes[..cut.min(bytes.len())]);
        }
    }
}
