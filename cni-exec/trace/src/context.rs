//! W3C trace context carried in the environment: `TRACEPARENT`,
//! `TRACESTATE` and `BAGGAGE` (OpenTelemetry's "environment variables as
//! context carriers", as libcni passes them to plugins).
//!
//! An invalid `TRACEPARENT` is ignored (parsing gives `None`, never an
//! error); an invalid or oversized `TRACESTATE` or `BAGGAGE` is dropped.

use std::fmt;

/// The environment variable holding the W3C `traceparent`.
pub const TRACEPARENT: &str = "TRACEPARENT";
/// The environment variable holding the W3C `tracestate`.
pub const TRACESTATE: &str = "TRACESTATE";
/// The environment variable holding the W3C `baggage`.
pub const BAGGAGE: &str = "BAGGAGE";

/// The longest `TRACESTATE` carried (W3C: 32 members; 512 characters is
/// what every vendor must propagate).
pub const MAX_TRACESTATE: usize = 512;
/// The longest `BAGGAGE` carried (W3C baggage: 8192 bytes).
pub const MAX_BAGGAGE: usize = 8192;

/// One span's context: trace id, span id, flags, and the opaque
/// `tracestate` and `baggage` passed along unchanged.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
    trace_state: Option<String>,
    baggage: Option<String>,
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Baggage may carry user data: its length only.
        f.debug_struct("TraceContext")
            .field("traceparent", &self.traceparent())
            .field("trace_state", &self.trace_state)
            .field("baggage_len", &self.baggage.as_ref().map(String::len))
            .finish()
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Lowercase hex of exactly `N` bytes.
fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (hex_digit(b[2 * i])? << 4) | hex_digit(b[2 * i + 1])?;
    }
    Some(out)
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Printable ASCII only (W3C tracestate and baggage are ASCII text), not
/// empty, at most `max` bytes.
fn carried(value: Option<&str>, max: usize) -> Option<String> {
    let v = value?.trim();
    (!v.is_empty() && v.len() <= max && v.bytes().all(|b| (0x20..=0x7e).contains(&b)))
        .then(|| v.to_string())
}

impl TraceContext {
    /// A context from its parts; `None` when an id is all zeros.
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Option<Self> {
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags,
            trace_state: None,
            baggage: None,
        })
    }

    /// Parses a W3C `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase
    /// only; all-zero ids and version `ff` are invalid; a higher version is
    /// read for its first four fields and may carry more (`-...`) after them.
    pub fn parse_traceparent(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() < 55 {
            return None;
        }
        let version = parse_hex::<1>(s.get(0..2)?)?[0];
        if version == 0xff {
            return None;
        }
        if version == 0 && b.len() != 55 {
            return None;
        }
        if b.len() > 55 && b[55] != b'-' {
            return None;
        }
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let trace_id = parse_hex::<16>(s.get(3..35)?)?;
        let span_id = parse_hex::<8>(s.get(36..52)?)?;
        let flags = parse_hex::<1>(s.get(53..55)?)?[0];
        // A future version keeps only the flags this version defines.
        let flags = if version == 0 { flags } else { flags & 1 };
        TraceContext::new(trace_id, span_id, flags)
    }

    /// The context the three variables carry; `None` when `traceparent` is
    /// missing or invalid (then `tracestate` and `baggage` are ignored too).
    pub fn from_values(
        traceparent: &str,
        tracestate: Option<&str>,
        baggage: Option<&str>,
    ) -> Option<Self> {
        let mut ctx = TraceContext::parse_traceparent(traceparent)?;
        ctx.trace_state = carried(tracestate, MAX_TRACESTATE);
        ctx.baggage = carried(baggage, MAX_BAGGAGE);
        Some(ctx)
    }

    /// The context in an environment read through `get` (a plugin's `Env`,
    /// a `PluginEnv`'s variables); unset and empty read alike.
    pub fn from_lookup<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        TraceContext::from_values(get(TRACEPARENT)?, get(TRACESTATE), get(BAGGAGE))
    }

    /// The context in this process's environment.
    pub fn from_process_env() -> Option<Self> {
        let get = |k: &str| std::env::var(k).ok();
        let (tp, ts, bg) = (get(TRACEPARENT)?, get(TRACESTATE), get(BAGGAGE));
        TraceContext::from_values(&tp, ts.as_deref(), bg.as_deref())
    }

    /// The same trace and carried values with another span id.
    pub fn with_span_id(&self, span_id: [u8; 8]) -> Self {
        TraceContext {
            span_id,
            ..self.clone()
        }
    }

    /// Replaces the carried `tracestate` (dropped when invalid).
    pub fn with_trace_state(mut self, trace_state: Option<&str>) -> Self {
        self.trace_state = carried(trace_state, MAX_TRACESTATE);
        self
    }

    /// Replaces the carried `baggage` (dropped when invalid).
    pub fn with_baggage(mut self, baggage: Option<&str>) -> Self {
        self.baggage = carried(baggage, MAX_BAGGAGE);
        self
    }

    /// The trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The (parent) span id.
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The trace flags.
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// The sampled flag: the caller records this trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The carried `tracestate`.
    pub fn trace_state(&self) -> Option<&str> {
        self.trace_state.as_deref()
    }

    /// The carried `baggage`.
    pub fn baggage(&self) -> Option<&str> {
        self.baggage.as_deref()
    }

    /// The `traceparent` text (version `00`).
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            to_hex(&self.trace_id),
            to_hex(&self.span_id),
            self.flags
        )
    }

    /// The variables to set on a child process: `TRACEPARENT`, and
    /// `TRACESTATE` and `BAGGAGE` when carried.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![(TRACEPARENT, self.traceparent())];
        if let Some(ts) = &self.trace_state {
            v.push((TRACESTATE, ts.clone()));
        }
        if let Some(b) = &self.baggage {
            v.push((BAGGAGE, b.clone()));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn w3c_examples() {
        let c = TraceContext::parse_traceparent(TP).unwrap();
        assert_eq!(c.traceparent(), TP);
        assert!(c.sampled());
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!TraceContext::parse_traceparent(unsampled)
            .unwrap()
            .sampled());
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(TraceContext::parse_traceparent(bad), None, "{bad:?}");
        }
        // A higher version: the four known fields, more after a dash.
        let v1 = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-what-ever";
        let c = TraceContext::parse_traceparent(v1).unwrap();
        assert_eq!(c.traceparent(), TP);
    }

    #[test]
    fn carried_values_bounded() {
        let c = TraceContext::from_values(TP, Some("congo=t61rcWkgMzE"), Some("k=v")).unwrap();
        assert_eq!(
            c.env_vars(),
            vec![
                (TRACEPARENT, TP.to_string()),
                (TRACESTATE, "congo=t61rcWkgMzE".to_string()),
                (BAGGAGE, "k=v".to_string())
            ]
        );
        let long = "a=".to_string() + &"b".repeat(MAX_TRACESTATE);
        let c = TraceContext::from_values(TP, Some(&long), Some("k=\u{7}")).unwrap();
        assert_eq!(c.trace_state(), None);
        assert_eq!(c.baggage(), None);
        assert_eq!(TraceContext::from_values("junk", Some("a=b"), None), None);
    }

    proptest! {
        #[test]
        fn round_trip(t in any::<[u8; 16]>(), s in any::<[u8; 8]>(), f in any::<u8>()) {
            match TraceContext::new(t, s, f) {
                Some(c) => {
                    let back = TraceContext::parse_traceparent(&c.traceparent());
                    prop_assert_eq!(back, Some(c));
                }
                None => prop_assert!(t == [0; 16] || s == [0; 8]),
            }
        }

        #[test]
        fn garbage_never_panics(s in ".{0,80}", ts in ".{0,40}") {
            let _ = TraceContext::from_values(&s, Some(&ts), Some(&s));
        }

        #[test]
        fn near_misses_never_panic(s in "[0-9a-fA-F-]{50,60}") {
            if let Some(c) = TraceContext::parse_traceparent(&s) {
                prop_assert_eq!(c.traceparent().len(), 55);
            }
        }
    }
}
