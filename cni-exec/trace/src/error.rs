//! The crate's one error type.

/// What can go wrong configuring or running the exporter, or decoding OTLP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An endpoint that is not `http://host[:port][/path]`.
    #[error("invalid OTLP endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An `https://` endpoint: TLS is not implemented (no export).
    #[error("OTLP endpoint {0:?} uses https, which this exporter does not support")]
    HttpsUnsupported(String),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` other than `http/protobuf`.
    #[error("OTLP protocol {0:?} is not supported (only http/protobuf)")]
    UnsupportedProtocol(String),
    /// The host name did not resolve (in time).
    #[error("cannot resolve OTLP host {0:?}")]
    Resolve(String),
    /// Connecting, writing or reading failed.
    #[error("OTLP export to {endpoint}: {source}")]
    Io {
        /// `host:port`.
        endpoint: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The time budget ran out.
    #[error("OTLP export to {0}: time budget of the export ran out")]
    Timeout(String),
    /// The collector answered with a non-2xx status or no status line.
    #[error("OTLP export to {endpoint}: HTTP status {status:?}")]
    Status {
        /// `host:port`.
        endpoint: String,
        /// The status code; `None` when the reply had no status line.
        status: Option<u16>,
    },
    /// Bytes that are not the OTLP subset the decoder reads.
    #[error("OTLP decode: {0}")]
    Decode(&'static str),
}
