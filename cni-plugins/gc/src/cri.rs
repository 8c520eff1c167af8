//! The collector's view of a CRI runtime.

use std::path::PathBuf;
use std::sync::Mutex;

use cni_cri::v1::PodSandboxState;
use cni_cri::RuntimeClient;

use crate::collector::{RuntimeSandbox, SandboxLister};
use crate::Error;

/// The collector's view of a CRI runtime (`cni-gc`'s, and a runtime
/// embedding [`crate::collector`]'s): `ListPodSandbox` without a filter,
/// each sandbox ready when its state is `SANDBOX_READY`. A call that fails
/// (no socket, no answer within the client's timeout, a gRPC error) is the
/// reason the collector gives for doing nothing.
///
/// ```no_run
/// use std::time::Duration;
/// use cni_cri::RuntimeClient;
/// use cni_gc::{CriSandboxes, SandboxLister};
///
/// let client = RuntimeClient::new("/run/containerd/containerd.sock")?
///     .with_timeout(Duration::from_secs(10));
/// let runtime = CriSandboxes::new(client);
/// match runtime.list_sandboxes() {
///     Ok(sandboxes) => sandboxes.iter().for_each(|s| eprintln!("{} ready: {}", s.id, s.ready)),
///     Err(why) => eprintln!("{}: {why}", runtime.describe()),
/// }
/// # Ok::<(), cni_gc::Error>(())
/// ```
#[derive(Debug)]
pub struct CriSandboxes {
    socket: PathBuf,
    // `SandboxLister` takes `&self`; a client makes one call at a time.
    client: Mutex<RuntimeClient>,
}

impl CriSandboxes {
    /// Lists sandboxes through `client`.
    pub fn new(mut client: RuntimeClient) -> CriSandboxes {
        CriSandboxes {
            socket: client.channel().socket().to_path_buf(),
            client: Mutex::new(client),
        }
    }
}

/// The `cri.request` span of one CRI call (OpenTelemetry's RPC
/// attributes).
fn request_span(method: &'static str) -> tracing::Span {
    cni_types::step_span!(
        "cri.request",
        rpc.system = "grpc",
        rpc.service = "runtime.v1.RuntimeService",
        rpc.method = method
    )
}

impl SandboxLister for CriSandboxes {
    fn list_sandboxes(&self) -> Result<Vec<RuntimeSandbox>, Error> {
        let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        let span = request_span("ListPodSandbox");
        let items = cni_types::trace::in_step(span, || client.list_pod_sandbox(None))?;
        Ok(items
            .into_iter()
            .map(|s| RuntimeSandbox {
                ready: s.state == PodSandboxState::SandboxReady as i32,
                id: s.id,
                node_network: false,
            })
            .collect())
    }

    /// `PodSandboxStatus`: its network namespace mode is `NODE`.
    fn uses_node_network(&self, id: &str) -> Result<bool, Error> {
        let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        let span = request_span("PodSandboxStatus");
        let status = cni_types::trace::in_step(span, || client.pod_sandbox_status(id, false))?;
        Ok(status.status.is_some_and(|s| s.uses_node_network()))
    }

    fn describe(&self) -> String {
        format!("the CRI runtime at {}", self.socket.display())
    }
}
