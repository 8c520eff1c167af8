//! The workspace's step spans: how a crate opens a span for a step that
//! takes time, records the step's failure on it, and keeps the span's
//! parent when the step's work hops to another thread.
//!
//! Spans are plain [`tracing`] spans; what exports them (OTLP, a printed
//! tree) is the binary's subscriber. With no subscriber the macros and
//! functions here cost a branch each: no field is formatted, nothing
//! allocates.
//!
//! The error convention is OpenTelemetry's, as `tracing-opentelemetry`
//! maps it: a failed step's span carries `otel.status_code = "ERROR"` and
//! `otel.status_message = <the error's text>`. [`step_span!`](crate::step_span) declares both
//! fields (empty), so that [`record_error`] can fill them in: a field a
//! span did not declare cannot be recorded later.
//!
//! ```
//! use cni_types::step_span;
//! use cni_types::trace::in_step;
//!
//! let name = "eth0";
//! let made: Result<(), String> = in_step(
//!     step_span!("link.create", link.kind = "veth", link.name = %name),
//!     || Err("File exists".into()),
//! );
//! assert!(made.is_err()); // and the span says ERROR, "File exists"
//! ```
//!
//! A thread that does part of a step starts with no current span and, in
//! a program that set its subscriber for one thread only
//! (`tracing::subscriber::with_default`), with no subscriber either:
//! capture [`Parent::current`] before spawning it and run the thread's
//! work in [`Parent::run`].

use std::fmt::Display;

use tracing::{Dispatch, Span};

#[doc(hidden)]
pub use tracing as __tracing;

/// An `INFO` span named `$name` with the given fields (tracing's field
/// syntax: `link.name = %name`, `route.count = routes.len()`, no trailing
/// comma) and the two empty status fields [`record_error`] fills in
/// (`otel.status_code`, `otel.status_message`).
#[macro_export]
macro_rules! step_span {
    ($name:literal $(, $($field:tt)+)?) => {
        $crate::trace::__tracing::info_span!(
            $name,
            $($($field)+,)?
            otel.status_code = $crate::trace::__tracing::field::Empty,
            otel.status_message = $crate::trace::__tracing::field::Empty
        )
    };
}

/// Marks `span` failed with `error`'s text (OpenTelemetry's
/// `otel.status_code = "ERROR"`, `otel.status_message`); the span must
/// declare both fields ([`step_span!`](crate::step_span) does). Nothing is formatted when
/// no subscriber takes the span.
pub fn record_error(span: &Span, error: &(impl Display + ?Sized)) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_message", tracing::field::display(error));
}

/// Marks `span` failed when `result` is an error ([`record_error`]) and
/// returns `result`.
pub fn record_result<T, E: Display>(span: &Span, result: Result<T, E>) -> Result<T, E> {
    if let Err(e) = &result {
        record_error(span, e);
    }
    result
}

/// Runs `step` inside `span` (its spans are the span's children) and
/// marks the span failed when the step fails ([`record_result`]).
pub fn in_step<T, E: Display>(span: Span, step: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let result = span.in_scope(step);
    record_result(&span, result)
}

/// The current span and subscriber of a thread, carried to another
/// thread so that the spans made there keep their parent (tracing's
/// current span, and a subscriber set with `with_default`, are
/// thread-local).
#[derive(Debug, Clone)]
pub struct Parent {
    /// `None` without a subscriber: nothing to carry.
    dispatch: Option<Dispatch>,
    span: Span,
}

impl Parent {
    /// The calling thread's current span and subscriber.
    pub fn current() -> Parent {
        let dispatch = tracing::dispatcher::get_default(|d| {
            (!d.is::<tracing::subscriber::NoSubscriber>()).then(|| d.clone())
        });
        Parent {
            dispatch,
            span: Span::current(),
        }
    }

    /// Runs `f` with the captured subscriber as the default and inside the
    /// captured span: call it on the other thread. Without a subscriber it
    /// only calls `f` (a scoped default would make every later lookup of
    /// the default subscriber, on every thread, take the slower path).
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.dispatch {
            Some(dispatch) => tracing::dispatcher::with_default(dispatch, || self.span.in_scope(f)),
            None => f(),
        }
    }
}
