//! The `host-local` IPAM plugin: maps each CNI command onto
//! [`cni_ipam::host_local`], which holds the allocator and the on-disk
//! store in the Go reference's layout (containernetworking/plugins
//! `plugins/ipam/host-local/main.go`).
//!
//! Beyond Go, GC (spec 1.1) releases every reservation whose attachment is
//! not in `cni.dev/valid-attachments`, and STATUS reports code 50 when the
//! data directory cannot be locked and written.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::host_local::HostLocal;
//!
//! let data_dir = tempfile::tempdir()?;
//! let conf = serde_json::json!({
//!     "cniVersion": "1.1.0", "name": "mynet", "type": "bridge",
//!     "ipam": {"type": "host-local", "dataDir": data_dir.path(),
//!              "ranges": [[{"subnet": "10.1.2.0/24"}]]},
//! });
//! let env = |cmd: &str| Env::new([
//!     ("CNI_COMMAND", cmd), ("CNI_CONTAINERID", "c1"), ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"), ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let out = dispatch(&HostLocal, &env("ADD"), conf.to_string().as_bytes());
//! assert_eq!(out.exit_code, 0);
//! let result: serde_json::Value = serde_json::from_slice(&out.stdout)?;
//! assert_eq!(result["ips"][0]["address"], "10.1.2.2/24");
//!
//! // GC with no valid attachment releases the reservation.
//! let mut gc = conf.clone();
//! gc["cni.dev/valid-attachments"] = serde_json::json!([]);
//! assert_eq!(dispatch(&HostLocal, &env("GC"), gc.to_string().as_bytes()).exit_code, 0);
//! assert!(!data_dir.path().join("mynet/10.1.2.2").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;

use cni_exec::{Plugin, Request};
use cni_ipam::host_local::{self, HostLocalConfig};
use cni_ipam::store::Owner;
use cni_types::CniResult;

pub use error::{Error, Result};

/// The `host-local` plugin. `main` is `cni_exec::run(&HostLocal)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostLocal;

/// The request's host-local configuration (stdin and `CNI_ARGS`). An
/// invalid one keeps the Go reference's message (runtimes match on it) and
/// names the offending field in `details`.
pub fn load(req: &Request) -> Result<HostLocalConfig> {
    HostLocalConfig::from_network_config(&req.config, &req.args_raw).map_err(
        |e| match config_field(&e.to_string()) {
            Some(field) => {
                let mut reply = e.to_cni_error();
                reply.details = format!("check ipam field {field}");
                crate::Error::Cni(reply).into()
            }
            None => e.into(),
        },
    )
}

/// The config field a Go host-local message is about; its texts name the
/// problem but not always the key (`invalid CIDR address: x` is `subnet`).
fn config_field(msg: &str) -> Option<&'static str> {
    let msg = match msg.strip_prefix("invalid range set ") {
        Some(rest) => rest.split_once(": ").map_or(rest, |(_, m)| m),
        None => msg,
    };
    const TABLE: [(&str, &str); 11] = [
        ("invalid CIDR address", "\"subnet\""),
        ("Network ", "\"subnet\""),
        ("IPNet IP and Mask", "\"subnet\""),
        ("RangeStart ", "\"rangeStart\""),
        ("RangeEnd ", "\"rangeEnd\""),
        (
            "invalid IP address",
            "\"gateway\", \"rangeStart\" or \"rangeEnd\"",
        ),
        (
            "mixed address families",
            "\"ranges\" (one family per range set)",
        ),
        ("subnets ", "\"ranges\" (ranges of a set overlap)"),
        ("range set ", "\"ranges\" (range sets overlap)"),
        ("no IP ranges specified", "\"ranges\" or \"subnet\""),
        (
            "CNI version ",
            "\"ranges\" (one range set per family before 0.3.0)",
        ),
    ];
    TABLE
        .iter()
        .find(|(prefix, _)| msg.starts_with(prefix))
        .map(|(_, field)| *field)
}

impl Plugin for HostLocal {
    type Error = Error;

    fn name(&self) -> &str {
        "host-local"
    }

    /// ADD: one address per range set, routes and DNS.
    fn add(&self, req: &Request) -> Result<CniResult> {
        let config = load(req)?;
        Ok(host_local::add(&config, &req.container_id, &req.ifname)?)
    }

    /// DEL: releases what the attachment holds; an unknown one is success.
    fn del(&self, req: &Request) -> Result<()> {
        let config = load(req)?;
        Ok(host_local::del(&config, &req.container_id, &req.ifname)?)
    }

    /// CHECK: the attachment holds at least one reservation.
    fn check(&self, req: &Request) -> Result<()> {
        let config = load(req)?;
        Ok(host_local::check(&config, &req.container_id, &req.ifname)?)
    }

    /// GC: releases every reservation of an attachment missing from
    /// `cni.dev/valid-attachments`. The key is required: without it every
    /// reservation would look stale, so its absence is a config error rather
    /// than a wipe.
    fn gc(&self, req: &Request) -> Result<()> {
        let config = load(req)?;
        let valid = req
            .config
            .valid_attachments()?
            .ok_or(Error::ValidAttachmentsMissing)?;
        let owners: Vec<Owner> = valid.iter().map(Owner::from).collect();
        let released = host_local::gc(&config, &owners)?;
        if !released.is_empty() {
            tracing::info!(network = %config.name, released = ?released, "GC released stale reservations");
        }
        Ok(())
    }

    /// STATUS: the data directory can be locked and written (code 50 if not).
    fn status(&self, req: &Request) -> Result<()> {
        let config = load(req)?;
        Ok(host_local::status(&config)?)
    }
}
