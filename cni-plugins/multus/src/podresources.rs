//! kubelet's pod-resources API (`k8s.io/kubelet/pkg/apis/podresources/v1`):
//! the messages multus reads, written by hand with prost (no protoc), and
//! `v1.PodResourcesLister/List` over kubelet's unix socket (multus-cni
//! `pkg/kubeletclient`), called through [`cni_cri::grpc`].
//!
//! Unknown fields (CPU ids, memory, dynamic resources) are skipped by the
//! decoder, so newer kubelets answer fine. An answer is capped at
//! [`MAX_ANSWER`] bytes, as Go's `MaxCallRecvMsgSize`.
//!
//! ```
//! use cni_cri::grpc::{decode_frame, encode_frame};
//! use cni_multus::podresources::*;
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
//! let frame = encode_frame(&answer);
//! let back: ListPodResourcesResponse = decode_frame(&frame, MAX_ANSWER).unwrap();
//! assert_eq!(back, answer);
//! ```

use std::path::Path;
use std::time::Duration;

use cni_cri::grpc::Channel;

use crate::Error;

/// Where kubelet serves the API (Go: `defaultPodResourcesPath` + `kubelet.sock`).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// The method multus calls.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";
/// The largest answer accepted (Go: `defaultPodResourcesMaxSize`, 16 MiB).
pub const MAX_ANSWER: usize = cni_cri::grpc::MAX_ANSWER;
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

/// Calls `List` on the kubelet socket: connect, one unary call, the whole
/// exchange bounded by `timeout` and the answer by `max` bytes.
pub fn list(
    socket: &Path,
    timeout: Duration,
    max: usize,
) -> Result<ListPodResourcesResponse, Error> {
    let lookup_err = |e: cni_cri::Error| Error::DeviceLookup {
        resource: String::new(),
        source_name: socket.display().to_string(),
        reason: e.to_string(),
    };
    let mut channel = Channel::new(socket)
        .map_err(lookup_err)?
        .with_timeout(timeout)
        .with_max_answer(max);
    channel
        .call(LIST_PATH, &ListPodResourcesRequest {})
        .map_err(lookup_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_socket_is_a_clear_error() {
        let e = list(
            Path::new("/nonexistent/kubelet.sock"),
            DEFAULT_TIMEOUT,
            MAX_ANSWER,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/kubelet.sock"), "{e}");
        assert!(e.to_string().contains(LIST_PATH), "{e}");
    }
}
