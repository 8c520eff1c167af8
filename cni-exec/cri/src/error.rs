//! The crate's error enum.

use std::path::PathBuf;

/// Why a gRPC call (and so a CRI call) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A gRPC frame does not decode ([`crate::grpc::decode_frame`]).
    #[error("malformed gRPC frame: {reason}")]
    DecodeFrame {
        /// Why.
        reason: String,
    },
    /// A gRPC call failed before the server gave a status: connecting, the
    /// HTTP/2 exchange, the time limit, the answer's size or decoding.
    #[error("gRPC call {method} on {socket}: {reason}")]
    Call {
        /// The unix socket called.
        socket: PathBuf,
        /// The method (`/package.Service/Method`; empty before any call).
        method: String,
        /// Why.
        reason: String,
    },
    /// The server answered a gRPC call with a non-zero status.
    #[error("gRPC call {method} on {socket}: gRPC status {code}: {message}")]
    Status {
        /// The unix socket called.
        socket: PathBuf,
        /// The method.
        method: String,
        /// The gRPC status code (5 NOT_FOUND, 14 UNAVAILABLE, ...).
        code: u32,
        /// The server's message.
        message: String,
    },
}

impl Error {
    /// The gRPC status code the server answered with, if it answered with
    /// one.
    pub fn status_code(&self) -> Option<u32> {
        match self {
            Error::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}
