//! kubelet's pod-resources API (`k8s.io/kubelet/pkg/apis/podresources/v1`):
//! the messages multus reads, written by hand with prost (no protoc), and a
//! blocking client for `v1.PodResourcesLister/List` over kubelet's unix
//! socket (gRPC = HTTP/2 with length-prefixed messages; multus-cni
//! `pkg/kubeletclient`).
//!
//! Unknown fields (CPU ids, memory, dynamic resources) are skipped by the
//! decoder, so newer kubelets answer fine. An answer is capped at
//! [`MAX_ANSWER`] bytes, as Go's `MaxCallRecvMsgSize`.
//!
//! ```
//! use cni_plugins::multus::podresources::*;
//! let answer = ListPodResourcesResponse {
//!     pod_resources: vec![PodResources {
//!         name: "web".into(),
//!         namespace: "ns".into(),
//!         containers: vec![ContainerResources {
//!             name: "c".into(),
//!             devices: vec![ContainerDevices {
//!                 resource_name: "intel.com/sriov".into(),
//!                 device_ids: vec!["0000:03:02.1".into()],
//!                 topology: None,
//!             }],
//!         }],
//!     }],
//! };
//! let frame = grpc_frame(&answer);
//! let back: ListPodResourcesResponse = decode_grpc_frame(&frame, MAX_ANSWER).unwrap();
//! assert_eq!(back, answer);
//! ```

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use crate::multus::Error;

/// Where kubelet serves the API (Go: `defaultPodResourcesPath` + `kubelet.sock`).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// The method multus calls.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";
/// The largest answer accepted (Go: `defaultPodResourcesMaxSize`, 16 MiB).
pub const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// Time for connecting and for the call (Go: 10 s each).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `ListPodResourcesRequest` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// Every pod kubelet runs.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `PodResources`: one pod.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Pod namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Its containers.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `ContainerResources`: one container (CPU, memory and dynamic resources
/// are not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    /// Container name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Device-plugin devices allocated to it.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// `ContainerDevices`: the devices of one resource.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    /// Extended resource name (`intel.com/sriov_netdevice`).
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// Device ids as the device plugin reported them (PCI addresses for SR-IOV).
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    /// NUMA placement.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// `TopologyInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TopologyInfo {
    /// NUMA nodes.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// `NUMANode`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumaNode {
    /// The node id (`ID`).
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// A gRPC message frame: a zero "compressed" flag, the length (big
/// endian u32), the protobuf bytes.
pub fn grpc_frame<M: prost::Message>(msg: &M) -> Vec<u8> {
    let body = msg.encode_to_vec();
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(0);
    // Messages here are far below 4 GiB (MAX_ANSWER).
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes one uncompressed gRPC frame holding exactly one message of at
/// most `max` bytes.
pub fn decode_grpc_frame<M: prost::Message + Default>(buf: &[u8], max: usize) -> Result<M, String> {
    let [flag, a, b, c, d, rest @ ..] = buf else {
        return Err(format!("answer of {} bytes has no gRPC frame", buf.len()));
    };
    if *flag != 0 {
        return Err("compressed gRPC answers are not supported".into());
    }
    let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    if len > max {
        return Err(format!(
            "gRPC message of {len} bytes is larger than the limit of {max}"
        ));
    }
    if rest.len() != len {
        return Err(format!(
            "gRPC frame announces {len} bytes but carries {}",
            rest.len()
        ));
    }
    M::decode(rest).map_err(|e| format!("malformed protobuf: {e}"))
}

fn lookup_err(socket: &Path, reason: impl Into<String>) -> Error {
    Error::DeviceLookup {
        resource: String::new(),
        source_name: socket.display().to_string(),
        reason: reason.into(),
    }
}

/// Calls `List` on the kubelet socket: connect, one unary call, the whole
/// exchange bounded by `timeout` and the answer by `max` bytes.
pub fn list(
    socket: &Path,
    timeout: Duration,
    max: usize,
) -> Result<ListPodResourcesResponse, Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| lookup_err(socket, format!("start I/O runtime: {e}")))?;
    let request = grpc_frame(&ListPodResourcesRequest {});
    let frame = rt.block_on(async {
        match tokio::time::timeout(timeout, unary_call(socket, LIST_PATH, request, max)).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    });
    let frame = frame.map_err(|r| lookup_err(socket, format!("{LIST_PATH}: {r}")))?;
    decode_grpc_frame(&frame, max).map_err(|r| lookup_err(socket, format!("{LIST_PATH}: {r}")))
}

fn grpc_status(headers: &http::HeaderMap) -> Option<(String, String)> {
    let code = headers
        .get("grpc-status")?
        .to_str()
        .unwrap_or("?")
        .to_string();
    let msg = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .unwrap_or("")
        .to_string();
    Some((code, msg))
}

/// One unary gRPC call; returns the raw answer frame.
async fn unary_call(
    socket: &Path,
    path: &str,
    request: Vec<u8>,
    max: usize,
) -> Result<Vec<u8>, String> {
    let io = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (client, conn) = h2::client::Builder::new()
        .max_header_list_size(64 * 1024)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = async {
        let mut client = client.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://localhost{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| format!("build request: {e}"))?;
        let (answer, mut send) = client
            .send_request(req, false)
            .map_err(|e| format!("send request: {e}"))?;
        send.send_data(Bytes::from(request), true)
            .map_err(|e| format!("send request body: {e}"))?;
        let answer = answer.await.map_err(|e| format!("read answer: {e}"))?;
        if answer.status() != http::StatusCode::OK {
            return Err(format!("HTTP status {}", answer.status()));
        }
        // A trailers-only answer carries the status in the headers.
        if let Some((code, msg)) = grpc_status(answer.headers()) {
            if code != "0" {
                return Err(format!("gRPC status {code}: {msg}"));
            }
        }
        let mut body = answer.into_body();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| format!("read answer body: {e}"))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if buf.len() + chunk.len() > max.saturating_add(5) {
                return Err(format!("answer larger than the limit of {max} bytes"));
            }
            buf.extend_from_slice(&chunk);
        }
        let trailers = body
            .trailers()
            .await
            .map_err(|e| format!("read trailers: {e}"))?;
        match trailers.as_ref().and_then(grpc_status) {
            Some((code, _)) if code == "0" => Ok(buf),
            Some((code, msg)) => Err(format!("gRPC status {code}: {msg}")),
            None if buf.is_empty() => Err("empty answer without gRPC status".into()),
            None => Err("answer without gRPC status".into()),
        }
    }
    .await;
    conn.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let m = ListPodResourcesResponse::default();
        let f = grpc_frame(&m);
        assert_eq!(f, [0, 0, 0, 0, 0]);
        assert_eq!(
            decode_grpc_frame::<ListPodResourcesResponse>(&f, 10).unwrap(),
            m
        );
        assert!(decode_grpc_frame::<ListPodResourcesResponse>(&[0, 0], 10).is_err());
        assert!(decode_grpc_frame::<ListPodResourcesResponse>(&[1, 0, 0, 0, 0], 10).is_err());
        let big = [0, 0, 0, 1, 0];
        assert!(decode_grpc_frame::<ListPodResourcesResponse>(&big, 10)
            .unwrap_err()
            .contains("larger than the limit"));
        assert!(
            decode_grpc_frame::<ListPodResourcesResponse>(&[0, 0, 0, 0, 2, 0xff, 0xff], 10)
                .unwrap_err()
                .contains("malformed")
        );
    }

    #[test]
    fn missing_socket_is_a_clear_error() {
        let e = list(
            Path::new("/nonexistent/kubelet.sock"),
            DEFAULT_TIMEOUT,
            MAX_ANSWER,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/kubelet.sock"), "{e}");
    }
}
