//! Two tiny plugins used by the tests, both in-process and as the
//! `fx_plugins` example binary: `fx-ipam` (a file-backed address allocator
//! that also works as a chained plugin) and `fx-main` (delegates to its
//! `ipam.type`, reports an interface). Small on purpose: they exercise the
//! protocol, not networking.

use std::path::PathBuf;

use cni_exec::{delegate_add, delegate_check, delegate_del, delegate_gc, Plugin, Request};
use cni_types::{CniError, CniResult, Interface, IpConfig, Route};

fn data_dir(req: &Request) -> Result<PathBuf, CniError> {
    req.config
        .ipam
        .as_ref()
        .and_then(|i| i.get("dataDir"))
        .or_else(|| req.config.specific().get("dataDir"))
        .and_then(|v| v.as_str())
        .map(|s| PathBuf::from(s).join(&req.config.name))
        .ok_or_else(|| CniError::invalid_config("fx-ipam: dataDir is required"))
}

fn address(container_id: &str) -> String {
    let n = container_id
        .bytes()
        .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(b.into()));
    format!("10.77.{}.{}/16", n % 250, 2 + n % 200)
}

/// File-backed "IPAM": one file per attachment holding its address.
pub(crate) struct FxIpam;

impl Plugin for FxIpam {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "fx-ipam"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let dir = data_dir(req)?;
        std::fs::create_dir_all(&dir).map_err(|e| CniError::internal(e.to_string()))?;
        let addr = address(&req.container_id);
        std::fs::write(
            dir.join(format!("{}-{}", req.container_id, req.ifname)),
            &addr,
        )
        .map_err(|e| CniError::internal(e.to_string()))?;
        let mut r = req
            .config
            .prev_result()
            .map_err(CniError::from)?
            .unwrap_or_default();
        let mut ip = IpConfig::new(
            addr.parse()
                .map_err(|_| CniError::internal("bad address"))?,
        );
        ip.gateway = Some(
            "10.77.0.1"
                .parse()
                .map_err(|_| CniError::internal("bad gateway"))?,
        );
        r.ips.push(ip);
        r.routes.push(Route::new(
            "0.0.0.0/0"
                .parse()
                .map_err(|_| CniError::internal("bad route"))?,
            None,
        ));
        Ok(r)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let file = data_dir(req)?.join(format!("{}-{}", req.container_id, req.ifname));
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(CniError::internal(e.to_string()))
            }
            _ => Ok(()),
        }
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let file = data_dir(req)?.join(format!("{}-{}", req.container_id, req.ifname));
        match std::fs::read_to_string(&file) {
            Ok(a) if a == address(&req.container_id) => Ok(()),
            _ => Err(CniError::internal(format!(
                "fx-ipam: no reservation for {}",
                req.container_id
            ))),
        }
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let valid = req
            .config
            .valid_attachments()
            .map_err(CniError::from)?
            .unwrap_or_default();
        let dir = data_dir(req)?;
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !valid
                .iter()
                .any(|a| name == format!("{}-{}", a.container_id, a.ifname))
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    fn about(&self) -> String {
        "CNI plugin fx-ipam (test fixture)".into()
    }
}

/// Main plugin: delegates addressing to `ipam.type`, reports the interface.
pub(crate) struct FxMain;

fn ipam_type(req: &Request) -> Result<String, CniError> {
    match req.config.ipam_type() {
        "" => Err(CniError::invalid_config("fx-main: ipam.type is required")),
        t => Ok(t.to_string()),
    }
}

impl Plugin for FxMain {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "fx-main"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let mut r = delegate_add(&ipam_type(req)?, &req.stdin, req)?;
        r.interfaces.push(Interface {
            name: req.ifname.clone(),
            mac: "0a:58:0a:4d:00:02".into(),
            sandbox: req.netns.clone(),
            ..Interface::default()
        });
        for ip in &mut r.ips {
            ip.interface = Some(0);
        }
        r.dns.nameservers.push("10.77.0.10".into());
        Ok(r)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        Ok(delegate_del(&ipam_type(req)?, &req.stdin, req)?)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let prev = req.config.prev_result().map_err(CniError::from)?;
        if prev.is_none_or(|p| p.interfaces.first().is_none_or(|i| i.name != req.ifname)) {
            return Err(CniError::internal("fx-main: prevResult does not match"));
        }
        Ok(delegate_check(&ipam_type(req)?, &req.stdin, req)?)
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        Ok(delegate_gc(&ipam_type(req)?, &req.stdin, req)?)
    }

    fn about(&self) -> String {
        "CNI plugin fx-main (test fixture)".into()
    }
}
