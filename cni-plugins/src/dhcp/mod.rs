//! The `dhcp` IPAM plugin: a thin client of the `dhcp daemon`, which runs
//! the DHCP clients in the pods' namespaces and holds the leases (see
//! [`daemon`]). Each command is one request over the daemon's unix socket
//! in newline-delimited JSON ([`cni_ipam::dhcp::rpc`]); Go's gob RPC is
//! not spoken.
//!
//! - ADD: the daemon acquires a lease (or returns the one it holds) and
//!   answers the result: the address with the prefix of option 1, the
//!   gateway from option 3, routes from option 121 (else 33 and a default
//!   via option 3), DNS from 6/15/119 when requested.
//! - DEL: the daemon releases the lease unicast from the leased address
//!   and forgets it.
//! - CHECK: the lease is held and its address is on the interface.
//! - GC: the daemon releases the leases of this network whose attachment
//!   is not in `cni.dev/valid-attachments`.
//! - STATUS: code 50 while the daemon does not answer.
//!
//! An unreachable daemon is code 11 ("try again later"); the plugin never
//! waits longer than the acquire deadline plus a margin.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::dhcp::Dhcp;
//!
//! let conf = br#"{"cniVersion": "1.1.0", "name": "n", "type": "macvlan",
//!     "ipam": {"type": "dhcp", "daemonSocketPath": "/nonexistent/dhcp.sock"}}"#;
//! let env = |command| Env::new([
//!     ("CNI_COMMAND", command), ("CNI_CONTAINERID", "c1"), ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"), ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let reply: serde_json::Value = serde_json::from_slice(&dispatch(&Dhcp, &env("ADD"), conf).stdout)?;
//! assert_eq!(reply["code"], 11);
//! let reply: serde_json::Value = serde_json::from_slice(&dispatch(&Dhcp, &env("STATUS"), conf).stdout)?;
//! assert_eq!(reply["code"], 50);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod config;
pub mod daemon;
mod error;
mod pod;

use std::path::Path;
use std::time::Duration;

use cni_exec::{Plugin, Request};
use cni_ipam::dhcp::rpc::{self, DaemonOp, DaemonRequest};
use cni_types::{CniError, CniResult, ErrorCode, Version};

use self::config::DhcpConfig;
pub use error::{Error, Result};

/// How long past its acquire deadline the plugin waits for the daemon
/// (a renew, a release and the netlink work around them fit in it).
const REPLY_MARGIN: Duration = Duration::from_secs(10);
/// Go's `-resendtimeout`: what the plugin assumes when the network does
/// not set `resendTimeout`.
const DEFAULT_RESEND_TIMEOUT: Duration = Duration::from_secs(208);

/// The `dhcp` plugin. `main` runs it, or the daemon for `dhcp daemon`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Dhcp;

/// Sends `op` for this request to the daemon and returns its result, if any.
fn ask(req: &Request, op: DaemonOp, conf: &DhcpConfig) -> Result<Option<serde_json::Value>> {
    let request = DaemonRequest {
        op,
        container_id: req.container_id.clone(),
        netns: absolute(&req.netns),
        ifname: req.ifname.clone(),
        args: req.args_raw.clone(),
        config: serde_json::from_slice(&req.stdin).map_err(|e| Error::StdinNotJson {
            reason: e.to_string(),
        })?,
    };
    let wait = match op {
        DaemonOp::Status => Duration::from_secs(5),
        _ => conf.resend_timeout.unwrap_or(DEFAULT_RESEND_TIMEOUT) + REPLY_MARGIN,
    };
    let reply = rpc::call(&conf.socket_path(), &request, wait)?;
    match reply.error {
        Some(e) => Err(crate::Error::Cni(e).into()),
        None => Ok(reply.result),
    }
}

/// The daemon may run in another working directory (Go does the same).
fn absolute(netns: &str) -> String {
    if netns.is_empty() || Path::new(netns).is_absolute() {
        return netns.to_owned();
    }
    std::env::current_dir()
        .map(|d| d.join(netns).display().to_string())
        .unwrap_or_else(|_| netns.to_owned())
}

impl Plugin for Dhcp {
    type Error = Error;

    fn name(&self) -> &str {
        "dhcp"
    }

    /// ADD: the lease's result.
    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = DhcpConfig::from_network_config(&req.config)?;
        let value = ask(req, DaemonOp::Add, &conf)?.ok_or(Error::NoResult)?;
        Ok(CniResult::from_value_as(&value, Version::V1_1_0)?)
    }

    /// DEL: release and forget the lease.
    fn del(&self, req: &Request) -> Result<()> {
        let conf = DhcpConfig::from_network_config(&req.config)?;
        ask(req, DaemonOp::Del, &conf).map(drop)
    }

    /// CHECK: the daemon holds the lease and the address is on the interface.
    fn check(&self, req: &Request) -> Result<()> {
        let conf = DhcpConfig::from_network_config(&req.config)?;
        ask(req, DaemonOp::Check, &conf).map(drop)
    }

    /// STATUS: the daemon answers (code 50 otherwise).
    fn status(&self, req: &Request) -> Result<()> {
        let conf = DhcpConfig::from_network_config(&req.config)?;
        ask(req, DaemonOp::Status, &conf).map(drop).map_err(|e| {
            crate::Error::Cni(CniError::new(
                ErrorCode::PluginNotAvailable,
                format!("dhcp daemon not available: {e}"),
                "",
            ))
            .into()
        })
    }

    /// GC: release the leases of attachments the runtime no longer has.
    fn gc(&self, req: &Request) -> Result<()> {
        let conf = DhcpConfig::from_network_config(&req.config)?;
        ask(req, DaemonOp::Gc, &conf).map(drop)
    }
}
