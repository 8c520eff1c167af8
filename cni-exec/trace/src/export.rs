//! One bounded OTLP/HTTP POST over a plain `TcpStream`: connect, write and
//! read all come out of one time budget, and only the status line of the
//! reply is read (at most [`MAX_STATUS_LINE`] bytes).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::config::ExportConfig;
use crate::Error;

/// The most of a reply read: its status line fits, a 10 MB body is never
/// read.
pub const MAX_STATUS_LINE: usize = 1024;

/// The time left before `deadline`, or [`Error::Timeout`].
fn left(deadline: Instant, endpoint: &str) -> Result<Duration, Error> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d < Duration::from_millis(1) {
        return Err(Error::Timeout(endpoint.to_string()));
    }
    Ok(d)
}

/// The addresses of `host:port`, within the budget: an IP literal is read
/// at once; a name is resolved on a thread of its own (the resolver has no
/// timeout), abandoned when the budget runs out.
fn resolve(host: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, Error> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let (tx, rx) = mpsc::channel();
    let name = host.to_string();
    std::thread::Builder::new()
        .name("cni-trace-resolve".into())
        .spawn(move || {
            let r = (name.as_str(), port)
                .to_socket_addrs()
                .map(|a| a.collect::<Vec<_>>());
            let _ = tx.send(r);
        })
        .map_err(|_| Error::Resolve(host.to_string()))?;
    match rx.recv_timeout(left(deadline, host)?) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(_) => Err(Error::Resolve(host.to_string())),
        Err(_) => Err(Error::Timeout(host.to_string())),
    }
}

/// POSTs `body` (an encoded `ExportTraceServiceRequest`) to the
/// configured endpoint; `Ok` on a 2xx status. Never takes longer than the
/// configured budget (plus scheduling slack).
pub fn post(config: &ExportConfig, body: &[u8]) -> Result<u16, Error> {
    let deadline = Instant::now() + config.timeout;
    let ep = &config.endpoint;
    let authority = ep.authority();
    let io = |source| Error::Io {
        endpoint: authority.clone(),
        source,
    };
    let timed_out = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    };
    let mut stream = None;
    let mut last = None;
    for addr in resolve(&ep.host, ep.port, deadline)? {
        match TcpStream::connect_timeout(&addr, left(deadline, &authority)?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = match (stream, last) {
        (Some(s), _) => s,
        (None, Some(e)) if timed_out(&e) => return Err(Error::Timeout(authority)),
        (None, Some(e)) => return Err(io(e)),
        (None, None) => return Err(Error::Resolve(ep.host.clone())),
    };
    let _ = stream.set_nodelay(true);

    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n",
        ep.path,
        authority,
        body.len()
    );
    for (k, v) in &config.headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    for chunk in request.chunks(64 * 1024) {
        stream
            .set_write_timeout(Some(left(deadline, &authority)?))
            .map_err(io)?;
        stream.write_all(chunk).map_err(|e| {
            if timed_out(&e) {
                Error::Timeout(authority.clone())
            } else {
                io(e)
            }
        })?;
    }

    // The status line only.
    let mut reply = Vec::with_capacity(128);
    let mut buf = [0u8; 256];
    while !reply.windows(2).any(|w| w == b"\r\n") && reply.len() < MAX_STATUS_LINE {
        stream
            .set_read_timeout(Some(left(deadline, &authority)?))
            .map_err(io)?;
        let want = buf.len().min(MAX_STATUS_LINE - reply.len());
        match stream.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if timed_out(&e) => return Err(Error::Timeout(authority)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    let status = std::str::from_utf8(&reply)
        .ok()
        .and_then(|r| r.strip_prefix("HTTP/1."))
        .and_then(|r| r.get(2..5))
        .and_then(|code| code.parse::<u16>().ok());
    match status {
        Some(code) if (200..300).contains(&code) => Ok(code),
        status => Err(Error::Status {
            endpoint: authority,
            status,
        }),
    }
}
