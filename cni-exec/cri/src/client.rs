//! The CRI client: [`RuntimeClient`] and helpers on the [`crate::v1`]
//! messages.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::grpc::Channel;
use crate::v1::*;
use crate::Error;

/// The CRI version this client speaks (`VersionRequest.version`).
pub const API_VERSION: &str = "v1";
/// How long a call may take by default: kubelet's
/// `--runtime-request-timeout` default (2 minutes). `RunPodSandbox` runs
/// the CNI ADD, which may wait on IPv6 duplicate address detection.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The runtime condition saying the runtime is up.
pub const RUNTIME_READY: &str = "RuntimeReady";
/// The runtime condition saying the pod network (CNI) is ready.
pub const NETWORK_READY: &str = "NetworkReady";

const RUNTIME_SERVICE: &str = "/runtime.v1.RuntimeService/";
const IMAGE_SERVICE: &str = "/runtime.v1.ImageService/";

impl StatusResponse {
    /// The condition named `kind` ([`RUNTIME_READY`], [`NETWORK_READY`]).
    pub fn condition(&self, kind: &str) -> Option<&RuntimeCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.r#type == kind)
    }

    /// The `NetworkReady` condition's status (`None` when not reported).
    pub fn network_ready(&self) -> Option<bool> {
        self.condition(NETWORK_READY).map(|c| c.status)
    }
}

impl PodSandboxNetworkStatus {
    /// Every address, primary first; strings that are not addresses are
    /// left out.
    pub fn ips(&self) -> Vec<IpAddr> {
        std::iter::once(self.ip.as_str())
            .chain(self.additional_ips.iter().map(|p| p.ip.as_str()))
            .filter_map(|s| s.parse().ok())
            .collect()
    }
}

impl PodSandboxStatus {
    /// Its network namespace is the node's (`NamespaceMode::Node`:
    /// Kubernetes `hostNetwork`).
    pub fn uses_node_network(&self) -> bool {
        self.linux
            .as_ref()
            .and_then(|l| l.namespaces.as_ref())
            .and_then(|n| n.options.as_ref())
            .is_some_and(|o| o.network == NamespaceMode::Node as i32)
    }
}

impl PodSandboxStatusResponse {
    /// The sandbox's addresses, primary first (empty when it has none).
    pub fn ips(&self) -> Vec<IpAddr> {
        self.status
            .as_ref()
            .and_then(|s| s.network.as_ref())
            .map(PodSandboxNetworkStatus::ips)
            .unwrap_or_default()
    }
}

/// A blocking CRI client on a runtime's socket (see the [crate]
/// documentation). One client serves one thread at a time: make one per
/// thread for calls in parallel.
#[derive(Debug)]
pub struct RuntimeClient {
    channel: Channel,
}

impl RuntimeClient {
    /// A client of the runtime at `socket`, with [`DEFAULT_TIMEOUT`] per
    /// call; it connects on the first call.
    pub fn new(socket: impl Into<PathBuf>) -> Result<RuntimeClient, Error> {
        Ok(RuntimeClient {
            channel: Channel::new(socket)?.with_timeout(DEFAULT_TIMEOUT),
        })
    }

    /// Sets the time each call may take.
    pub fn with_timeout(mut self, timeout: Duration) -> RuntimeClient {
        self.channel = self.channel.with_timeout(timeout);
        self
    }

    /// The underlying channel.
    pub fn channel(&mut self) -> &mut Channel {
        &mut self.channel
    }

    fn runtime<Req, Resp>(&mut self, method: &str, request: &Req) -> Result<Resp, Error>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.channel
            .call(&format!("{RUNTIME_SERVICE}{method}"), request)
    }

    /// `Version`: the runtime's name and versions.
    pub fn version(&mut self) -> Result<VersionResponse, Error> {
        self.runtime(
            "Version",
            &VersionRequest {
                version: API_VERSION.into(),
            },
        )
    }

    /// `Status`: the runtime's conditions ([`StatusResponse::network_ready`]).
    pub fn status(&mut self, verbose: bool) -> Result<StatusResponse, Error> {
        self.runtime("Status", &StatusRequest { verbose })
    }

    /// `RunPodSandbox` with the default runtime handler: creates and starts
    /// the sandbox (its network set up by CNI ADD); returns its id.
    pub fn run_pod_sandbox(&mut self, config: PodSandboxConfig) -> Result<String, Error> {
        let answer: RunPodSandboxResponse = self.runtime(
            "RunPodSandbox",
            &RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            },
        )?;
        Ok(answer.pod_sandbox_id)
    }

    /// `PodSandboxStatus`; `verbose` adds the runtime's information
    /// (`info`).
    pub fn pod_sandbox_status(
        &mut self,
        id: &str,
        verbose: bool,
    ) -> Result<PodSandboxStatusResponse, Error> {
        self.runtime(
            "PodSandboxStatus",
            &PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose,
            },
        )
    }

    /// `StopPodSandbox`: stops the sandbox and tears its network down (CNI
    /// DEL). Idempotent.
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), Error> {
        let _: StopPodSandboxResponse = self.runtime(
            "StopPodSandbox",
            &StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    /// `RemovePodSandbox`: removes a stopped sandbox. Idempotent.
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), Error> {
        let _: RemovePodSandboxResponse = self.runtime(
            "RemovePodSandbox",
            &RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    /// `ListPodSandbox`: the sandboxes matching `filter` (all without one).
    pub fn list_pod_sandbox(
        &mut self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, Error> {
        let answer: ListPodSandboxResponse =
            self.runtime("ListPodSandbox", &ListPodSandboxRequest { filter })?;
        Ok(answer.items)
    }

    /// `ImageService/ImageStatus`: the image named `image`, `None` when the
    /// runtime does not have it.
    pub fn image_status(&mut self, image: &str) -> Result<Option<Image>, Error> {
        let answer: ImageStatusResponse = self.channel.call(
            &format!("{IMAGE_SERVICE}ImageStatus"),
            &ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    annotations: HashMap::new(),
                }),
                verbose: false,
            },
        )?;
        Ok(answer.image)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::{decode_frame, encode_frame, MAX_ANSWER};
    use std::collections::HashMap;
    use std::net::IpAddr;

    /// Hand-encoded protobuf: (tag << 3 | wire type), then the value.
    fn field_bytes(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![tag << 3 | 2, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn field_numbers_match_the_proto() {
        // PodSandboxStatusResponse{status{id:"s", state:NOTREADY,
        // network{ip:"10.0.0.2", additional_ips[{ip:"fd00::2"}]}},
        // info{"info":"{}"}} built byte by byte from api.proto's numbers.
        let mut network = field_bytes(1, b"10.0.0.2");
        network.extend(field_bytes(2, &field_bytes(1, b"fd00::2")));
        let mut status = field_bytes(1, b"s");
        status.extend([3 << 3, 1]);
        status.extend(field_bytes(5, &network));
        // linux{namespaces{options{network: NODE, pid: CONTAINER}}}
        status.extend(field_bytes(
            6,
            &field_bytes(1, &field_bytes(2, &[1 << 3, 2, 2 << 3, 1])),
        ));
        let mut info_entry = field_bytes(1, b"info");
        info_entry.extend(field_bytes(2, b"{}"));
        let mut msg = field_bytes(1, &status);
        msg.extend(field_bytes(2, &info_entry));
        // An unknown field (containers_statuses = 3) and timestamp = 4.
        msg.extend(field_bytes(3, b"\x0a\x01x"));
        msg.extend([4 << 3, 42]);
        let mut frame = vec![0, 0, 0, 0, msg.len() as u8];
        frame.extend(&msg);
        let r: PodSandboxStatusResponse = decode_frame(&frame, MAX_ANSWER).unwrap();
        let s = r.status.as_ref().unwrap();
        assert_eq!(s.id, "s");
        assert_eq!(s.state, PodSandboxState::SandboxNotready as i32);
        assert!(s.uses_node_network());
        assert_eq!(
            r.ips(),
            vec![
                "10.0.0.2".parse::<IpAddr>().unwrap(),
                "fd00::2".parse().unwrap()
            ]
        );
        assert_eq!(r.info["info"], "{}");
    }

    #[test]
    fn requests_encode_with_the_proto_numbers() {
        let req = RunPodSandboxRequest {
            config: Some(PodSandboxConfig {
                hostname: "h".into(),
                linux: Some(LinuxPodSandboxConfig {
                    cgroup_parent: "/p".into(),
                    security_context: Some(LinuxSandboxSecurityContext {
                        namespace_options: Some(NamespaceOption {
                            network: NamespaceMode::Node as i32,
                            ..Default::default()
                        }),
                    }),
                    sysctls: HashMap::new(),
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        };
        let f = encode_frame(&req);
        let mut config = field_bytes(2, b"h");
        // linux{cgroup_parent, security_context{namespace_options{network: NODE}}}
        let mut linux = field_bytes(1, b"/p");
        linux.extend(field_bytes(2, &field_bytes(1, &[1 << 3, 2])));
        config.extend(field_bytes(8, &linux));
        assert_eq!(&f[5..], field_bytes(1, &config).as_slice());
    }

    #[test]
    fn status_conditions() {
        let s = StatusResponse {
            status: Some(RuntimeStatus {
                conditions: vec![
                    RuntimeCondition {
                        r#type: RUNTIME_READY.into(),
                        status: true,
                        ..Default::default()
                    },
                    RuntimeCondition {
                        r#type: NETWORK_READY.into(),
                        status: false,
                        reason: "NetworkPluginNotReady".into(),
                        message: "cni config uninitialized".into(),
                    },
                ],
            }),
            info: HashMap::new(),
        };
        assert_eq!(s.network_ready(), Some(false));
        assert!(s.condition(RUNTIME_READY).unwrap().status);
        assert_eq!(StatusResponse::default().network_ready(), None);
    }
}
