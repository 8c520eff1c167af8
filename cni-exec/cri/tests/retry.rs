//! The channel against an HTTP/2 server of the test's own: a request the
//! server refuses unprocessed (`REFUSED_STREAM`, `GOAWAY` before it) is
//! sent once more on a new connection; one it may have processed is not;
//! every request carries the call's deadline in `grpc-timeout`.

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cni_cri::grpc::{encode_frame, Channel};

#[derive(Clone, PartialEq, prost::Message)]
struct Ping {
    #[prost(string, tag = "1")]
    text: String,
}

/// What the server does with the first request of the first connection
/// (every later request is answered).
#[derive(Clone, Copy, Debug)]
enum First {
    /// `RST_STREAM` with `REFUSED_STREAM`.
    RefuseStream,
    /// `GOAWAY` (last stream 0) as soon as the connection is made.
    GoAway,
    /// `RST_STREAM` with `INTERNAL_ERROR` after reading the request: it
    /// may have been processed.
    ResetProcessed,
    /// Refuses every request (`REFUSED_STREAM`).
    RefuseAll,
}

#[derive(Debug, Default)]
struct Seen {
    connections: usize,
    requests: usize,
    answered: usize,
    timeouts: Vec<String>,
}

/// Serves `socket` on a thread of its own until the test ends.
fn serve(socket: &Path, first: First) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let state = Arc::clone(&seen);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::UnixListener::from_std(listener).unwrap();
            loop {
                let Ok((io, _)) = listener.accept().await else {
                    return;
                };
                let index = {
                    let mut s = state.lock().unwrap();
                    s.connections += 1;
                    s.connections
                };
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(io).await else {
                        return;
                    };
                    if index == 1 && matches!(first, First::GoAway) {
                        conn.abrupt_shutdown(h2::Reason::NO_ERROR);
                    }
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        let state = Arc::clone(&state);
                        tokio::spawn(answer(request, respond, first, state));
                    }
                });
            }
        });
    });
    seen
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    first: First,
    state: Arc<Mutex<Seen>>,
) {
    let n = {
        let mut s = state.lock().unwrap();
        s.requests += 1;
        if let Some(t) = request.headers().get("grpc-timeout") {
            s.timeouts.push(t.to_str().unwrap().to_string());
        }
        s.requests
    };
    match first {
        First::RefuseStream if n == 1 => return respond.send_reset(h2::Reason::REFUSED_STREAM),
        First::RefuseAll => return respond.send_reset(h2::Reason::REFUSED_STREAM),
        _ => {}
    }
    let mut body = request.into_body();
    let mut got = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    if matches!(first, First::ResetProcessed) && n == 1 {
        return respond.send_reset(h2::Reason::INTERNAL_ERROR);
    }
    let text = cni_cri::grpc::decode_frame::<Ping>(&got, 1024)
        .unwrap()
        .text;
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let mut stream = respond.send_response(head, false).unwrap();
    let reply = encode_frame(&Ping {
        text: format!("pong {text}"),
    });
    stream.send_data(Bytes::from(reply), false).unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    stream.send_trailers(trailers).unwrap();
    state.lock().unwrap().answered += 1;
}

fn channel(socket: PathBuf) -> Channel {
    Channel::new(socket)
        .unwrap()
        .with_timeout(Duration::from_secs(5))
}

fn ping(ch: &mut Channel) -> Result<Ping, cni_cri::Error> {
    ch.call("/test.Echo/Ping", &Ping { text: "a".into() })
}

/// `<digits><unit>` of `grpc-timeout` as a duration.
fn parse_timeout(v: &str) -> Duration {
    let (n, unit) = v.split_at(v.len() - 1);
    let n: u64 = n.parse().unwrap();
    match unit {
        "n" => Duration::from_nanos(n),
        "u" => Duration::from_micros(n),
        "m" => Duration::from_millis(n),
        "S" => Duration::from_secs(n),
        "M" => Duration::from_secs(n * 60),
        "H" => Duration::from_secs(n * 3600),
        u => panic!("unit {u}"),
    }
}

#[test]
fn a_refused_stream_is_sent_again_once_with_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let seen = serve(&socket, First::RefuseStream);
    let mut ch = channel(socket);
    assert_eq!(ping(&mut ch).unwrap().text, "pong a");
    let s = seen.lock().unwrap();
    assert_eq!((s.connections, s.requests, s.answered), (2, 2, 1), "{s:?}");
    assert_eq!(s.timeouts.len(), 2, "every request carries grpc-timeout");
    for t in &s.timeouts {
        let left = parse_timeout(t);
        assert!(
            left <= Duration::from_secs(5) && left > Duration::from_secs(3),
            "{t}"
        );
    }
}

#[test]
fn a_request_refused_by_goaway_is_sent_again_on_a_new_connection() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let seen = serve(&socket, First::GoAway);
    let mut ch = channel(socket);
    assert_eq!(ping(&mut ch).unwrap().text, "pong a");
    let s = seen.lock().unwrap();
    assert_eq!((s.connections, s.answered), (2, 1), "{s:?}");
}

#[test]
fn a_request_the_server_may_have_processed_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let seen = serve(&socket, First::ResetProcessed);
    let mut ch = channel(socket);
    let e = ping(&mut ch).unwrap_err();
    assert!(matches!(e, cni_cri::Error::Call { .. }), "{e:?}");
    assert_eq!(seen.lock().unwrap().requests, 1);
    // The next call works (on a new connection).
    assert_eq!(ping(&mut ch).unwrap().text, "pong a");
}

#[test]
fn a_request_refused_twice_fails_after_one_retry() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let seen = serve(&socket, First::RefuseAll);
    let mut ch = channel(socket);
    let e = ping(&mut ch).unwrap_err().to_string();
    assert!(
        e.contains("/test.Echo/Ping") && e.contains("refused"),
        "{e}"
    );
    assert_eq!(seen.lock().unwrap().requests, 2);
}
