//! Just enough HTTP/1.1 for the daemon's socket and the metrics port: one
//! request per connection (`Connection: close`), bodies sized by
//! `Content-Length` and bounded, no chunked encoding (the shim never sends
//! it). A blocking std implementation: the daemon serves one thread per
//! connection and needs no async runtime.

use std::io::{BufRead, BufReader, Read, Write};

use crate::Error;

/// The largest request head (request line and headers) read.
pub const MAX_HEAD: usize = 16 << 10;
/// The largest request body accepted (a CNI config with a big
/// `prevResult` is a few KiB; 4 MiB is far beyond any real one).
pub const MAX_BODY: usize = 4 << 20;

/// One request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`...
    pub method: String,
    /// The path, query string included.
    pub path: String,
    /// The body.
    pub body: Vec<u8>,
}

/// Why a request could not be read; [`ReadError::status`] is the reply.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed or the read failed (nothing to answer).
    Closed,
    /// Malformed request (400).
    Bad(String),
    /// Body over the limit (413).
    TooLarge(usize),
}

impl ReadError {
    /// The HTTP status to answer with, if any.
    pub fn status(&self) -> Option<u16> {
        match self {
            ReadError::Closed => None,
            ReadError::Bad(_) => Some(400),
            ReadError::TooLarge(_) => Some(413),
        }
    }

    /// A message for the reply.
    pub fn message(&self) -> String {
        match self {
            ReadError::Closed => "connection closed".into(),
            ReadError::Bad(m) => format!("bad request: {m}"),
            ReadError::TooLarge(n) => {
                format!("request body of {n} bytes is over the limit of {MAX_BODY}")
            }
        }
    }
}

fn read_line(r: &mut impl BufRead, budget: &mut usize) -> Result<String, ReadError> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(*budget as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|_| ReadError::Closed)?;
    if n == 0 {
        return Err(ReadError::Closed);
    }
    if n > *budget {
        return Err(ReadError::Bad("request head too large".into()));
    }
    *budget -= n;
    if !line.ends_with(b"\n") {
        return Err(ReadError::Bad("truncated request head".into()));
    }
    String::from_utf8(line)
        .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
        .map_err(|_| ReadError::Bad("request head is not UTF-8".into()))
}

/// Reads one request from `stream`.
pub fn read_request(stream: impl Read) -> Result<Request, ReadError> {
    let mut r = BufReader::new(stream);
    let mut budget = MAX_HEAD;
    let line = read_line(&mut r, &mut budget)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Bad(format!("request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !path.starts_with('/') {
        return Err(ReadError::Bad(format!("request line {line:?}")));
    }
    let mut length = 0usize;
    loop {
        let h = read_line(&mut r, &mut budget)?;
        if h.is_empty() {
            break;
        }
        let Some((k, v)) = h.split_once(':') else {
            return Err(ReadError::Bad(format!("header {h:?}")));
        };
        let k = k.trim().to_ascii_lowercase();
        if k == "content-length" {
            length = v
                .trim()
                .parse()
                .map_err(|_| ReadError::Bad(format!("Content-Length {:?}", v.trim())))?;
        } else if k == "transfer-encoding" {
            return Err(ReadError::Bad("Transfer-Encoding is not supported".into()));
        }
    }
    if length > MAX_BODY {
        return Err(ReadError::TooLarge(length));
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)
        .map_err(|_| ReadError::Bad("body shorter than Content-Length".into()))?;
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Writes a whole response and closes the exchange.
pub fn write_response(
    mut stream: impl Write,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    stream.write_all(&out)?;
    stream.flush()
}

/// Sends `POST path` with a JSON body and reads the response: (status,
/// body).
pub fn post(
    mut stream: impl Read + Write,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), Error> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: multus\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    let proto = |reason: String| Error::DaemonProtocol {
        op: "exchange with the multus daemon",
        reason,
    };
    stream
        .write_all(&out)
        .map_err(|e| proto(format!("send request: {e}")))?;
    read_response(stream)
}

/// Reads a response: (status, body).
pub fn read_response(stream: impl Read) -> Result<(u16, Vec<u8>), Error> {
    let proto = |reason: String| Error::DaemonProtocol {
        op: "read the multus daemon's reply",
        reason,
    };
    let mut r = BufReader::new(stream);
    let mut budget = MAX_HEAD;
    let line = read_line(&mut r, &mut budget).map_err(|e| proto(e.message()))?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| proto(format!("status line {line:?}")))?;
    let mut length = None;
    loop {
        let h = read_line(&mut r, &mut budget).map_err(|e| proto(e.message()))?;
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<usize>().ok();
            }
        }
    }
    let mut body = Vec::new();
    match length {
        Some(n) if n <= MAX_BODY => {
            body.resize(n, 0);
            r.read_exact(&mut body)
                .map_err(|e| proto(format!("read body: {e}")))?;
        }
        Some(n) => return Err(proto(format!("reply of {n} bytes is too large"))),
        None => {
            r.take(MAX_BODY as u64)
                .read_to_end(&mut body)
                .map_err(|e| proto(format!("read body: {e}")))?;
        }
    }
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let mut wire = Vec::new();
        let head = "POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
        wire.extend_from_slice(head.as_bytes());
        let r = read_request(&wire[..]).unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/cni"));
        assert_eq!(r.body, b"{}");
    }

    #[test]
    fn bad_requests() {
        for bad in [
            "garbage\r\n\r\n",
            "GET /x HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "GET /x HTTP/1.1\r\nnocolon\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
            "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(
                read_request(bad.as_bytes()).unwrap_err().status(),
                Some(400),
                "{bad}"
            );
        }
        let big = format!(
            "POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(
            read_request(big.as_bytes()).unwrap_err().status(),
            Some(413)
        );
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(
            read_request(long.as_bytes()).unwrap_err().status(),
            Some(400)
        );
        assert!(read_request(&b""[..]).unwrap_err().status().is_none());
    }

    #[test]
    fn response_round_trip() {
        let mut out = Vec::new();
        write_response(&mut out, 500, "application/json", b"{\"a\":1}").unwrap();
        let (s, b) = read_response(&out[..]).unwrap();
        assert_eq!((s, b.as_slice()), (500, &b"{\"a\":1}"[..]));
    }
}
