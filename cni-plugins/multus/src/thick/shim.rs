//! The shim (multus-cni `cmd/multus-shim`, `pkg/server/api/shim.go`): a CNI
//! plugin that forwards every command to the daemon over its socket and
//! returns the daemon's reply. Beyond the reference: when the daemon cannot
//! be reached, DEL runs the thin plugin's DEL in-process from the on-disk
//! delegate cache, so a pod can always be torn down.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use cni_exec::{Plugin, Request};
use cni_types::{CniError, CniResult, ErrorCode};
use serde_json::{Map, Value};

use super::api::{self, CniRequest, CniResponse};
use super::config::{DEFAULT_SOCKET_DIR, SOCKET_NAME};
use super::http;
use super::plugin::conf_for_cached_del;
use crate::runtime::PodRequest;
use crate::Error;
use crate::{cmd_del, LibcniDelegates};

/// How long the shim waits for the daemon's reply (an ADD may wait for the
/// readiness indicator and the API).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// The shim plugin.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shim;

/// The daemon's socket named by a shim configuration (`socketDir`; absent,
/// null or empty: the default). A `socketDir` that is not a string is
/// refused (code 7, naming the key) rather than taken for the default.
pub fn socket_path(stdin: &[u8]) -> Result<PathBuf, Error> {
    let m: Map<String, Value> = serde_json::from_slice(stdin).unwrap_or_default();
    let dir =
        crate::conf::string(&m, "socketDir")?.unwrap_or_else(|| DEFAULT_SOCKET_DIR.to_string());
    Ok(PathBuf::from(dir).join(SOCKET_NAME))
}

/// The request the shim sends for `req`.
pub fn cni_request(req: &Request) -> CniRequest {
    let mut r = CniRequest {
        config: req.stdin.clone(),
        ..Default::default()
    };
    for (k, v) in [
        ("CNI_COMMAND", req.command.as_str()),
        ("CNI_CONTAINERID", req.container_id.as_str()),
        ("CNI_NETNS", req.netns.as_str()),
        ("CNI_IFNAME", req.ifname.as_str()),
        ("CNI_ARGS", req.args_raw.as_str()),
        ("CNI_PATH", req.path_raw.as_str()),
    ] {
        r.env.insert(k.into(), v.into());
    }
    // The trace context goes to the daemon as it would to a plugin: this
    // call's span when it is recorded, else the one the shim was given.
    let ctx =
        cni_trace::current_context().or_else(|| cni_exec::exec::inbound_trace_context().cloned());
    if let Some(ctx) = ctx {
        for (k, v) in ctx.env_vars() {
            r.env.insert(k.into(), v);
        }
    }
    r
}

/// Sends `request` to the daemon at `socket`; `Ok` is the daemon's
/// successful reply, a daemon failure is its CNI error.
pub fn send(
    socket: &std::path::Path,
    endpoint: &str,
    request: &CniRequest,
) -> Result<Result<CniResponse, CniError>, Error> {
    let stream = UnixStream::connect(socket).map_err(|source| Error::DaemonUnreachable {
        path: socket.to_path_buf(),
        source,
    })?;
    let _ = stream.set_read_timeout(Some(REPLY_TIMEOUT));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let (status, body) = http::post(&stream, endpoint, &request.to_vec())?;
    if status == 200 {
        let resp = serde_json::from_slice(&body).map_err(|e| Error::DaemonProtocol {
            op: "decode the multus daemon's reply",
            reason: e.to_string(),
        })?;
        return Ok(Ok(resp));
    }
    Ok(Err(serde_json::from_slice::<CniError>(&body)
        .unwrap_or_else(|_| {
            CniError::internal(format!(
                "multus daemon answered {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ))
        })))
}

fn forward(req: &Request) -> Result<Result<CniResponse, CniError>, Error> {
    // Go's shimConfig: the shim's own logging settings.
    crate::logging::configure_global(&crate::logging::shim_log_config(&req.stdin)?);
    send(
        &socket_path(&req.stdin)?,
        api::CNI_ENDPOINT,
        &cni_request(req),
    )
}

/// The daemon's reply to `req`; a daemon failure is its error reply,
/// passed on unchanged.
fn answer(req: &Request) -> Result<CniResponse, Error> {
    forward(req)?.map_err(Error::reply)
}

/// DEL without the daemon: the thin plugin's DEL from the delegate cache
/// (no API client: DEL never needs one when the cache is there).
pub fn fallback_del(req: &Request) -> Result<(), CniError> {
    let conf = conf_for_cached_del(&req.stdin, &Map::new())?;
    let pod = PodRequest::new(&req.container_id, &req.netns, &req.ifname, &req.args_raw)?;
    let exec = LibcniDelegates::new(
        conf.bin_dir.clone(),
        &req.path,
        conf.cni_dir.clone(),
        req.exec().clone(),
    );
    Ok(cmd_del(&conf, &pod, None, &exec)?)
}

impl Plugin for Shim {
    type Error = Error;

    fn name(&self) -> &str {
        "multus-shim"
    }

    fn add(&self, req: &Request) -> Result<CniResult, Error> {
        let resp = answer(req)?;
        let Some(v) = resp.result else {
            return Err(Error::reply(CniError::new(
                ErrorCode::DecodingFailure,
                "multus daemon sent no result for ADD",
                "",
            )));
        };
        let (_, r) = CniResult::from_value(&v, req.version)?;
        Ok(r)
    }

    fn del(&self, req: &Request) -> Result<(), Error> {
        match forward(req) {
            Ok(r) => r.map(|_| ()).map_err(Error::reply),
            Err(e @ Error::DaemonUnreachable { .. }) => {
                tracing::warn!("{e}; deleting from the delegate cache in-process");
                fallback_del(req).map_err(Error::reply)
            }
            Err(e) => Err(e),
        }
    }

    fn check(&self, req: &Request) -> Result<(), Error> {
        answer(req).map(|_| ())
    }

    fn status(&self, req: &Request) -> Result<(), Error> {
        answer(req).map(|_| ())
    }

    fn gc(&self, req: &Request) -> Result<(), Error> {
        answer(req).map(|_| ())
    }

    /// The daemon decides (it GCs from multus's own cache).
    fn gc_needs_valid_attachments(&self) -> bool {
        false
    }
}
