//! Delegation through cni-exec's libcni (`CniConfig`): a conf delegate runs
//! as `AddNetwork`, a conflist as `AddNetworkList`, through the same
//! [`Exec`] multus itself was called with (fork/exec, or the in-process
//! registry of an embedding runtime), with results cached under `cniDir`
//! (multus-cni `confAdd`/`conflistAdd`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use cni_exec::{CniConfig, Exec, RuntimeConf};
use cni_types::{CniResult, GcAttachment, NetworkConfig, NetworkConfigList};

use super::conf::NetConf;
use super::delegate::Delegate;
use super::flow::DelegateExec;
use super::podnet;
use super::runtime::DelegateRuntime;
use crate::Error;

/// A [`DelegateExec`] on top of cni-exec's [`CniConfig`].
#[derive(Clone, Debug)]
pub struct LibcniDelegates {
    cni: CniConfig,
    cni_dir: PathBuf,
}

impl LibcniDelegates {
    /// The delegates of a plugin command under `conf`: its `binDir`, the
    /// request's `CNI_PATH` and executor, results cached under `cniDir`.
    pub fn for_request(conf: &NetConf, req: &cni_exec::Request) -> Self {
        LibcniDelegates::new(
            conf.bin_dir.clone(),
            &req.path,
            conf.cni_dir.clone(),
            req.exec().clone(),
        )
    }

    /// Plugins are searched in `bin_dir` first, then `cni_path` (as Go
    /// multus prepends `binDir` to `CNI_PATH`); results are cached under
    /// `cni_dir`.
    pub fn new(
        bin_dir: PathBuf,
        cni_path: &[PathBuf],
        cni_dir: PathBuf,
        exec: Arc<dyn Exec>,
    ) -> Self {
        let mut path = vec![bin_dir];
        for p in cni_path {
            if !path.contains(p) {
                path.push(p.clone());
            }
        }
        LibcniDelegates {
            cni: CniConfig::new(path, exec).with_cache_dir(&cni_dir),
            cni_dir,
        }
    }
}

fn rt(r: &DelegateRuntime) -> RuntimeConf {
    r.clone()
}

fn failed(d: &Delegate, ifname: &str, e: cni_exec::Error) -> Error {
    Error::DelegateFailed {
        network: d.name.clone(),
        ifname: ifname.to_string(),
        error: Box::new(e.to_cni_error()),
    }
}

/// Runs one delegate call inside a `multus.delegate` span (the network,
/// the interface, the plugin type, the command), marked failed when the
/// call fails.
fn traced<T>(
    d: &Delegate,
    command: &'static str,
    ifname: &str,
    call: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let span = cni_types::step_span!(
        "multus.delegate",
        cni.network.name = %d.network_name(),
        cni.ifname = %ifname,
        cni.plugin = %d.plugin_type(),
        cni.command = command
    );
    cni_types::trace::in_step(span, call)
}

fn conf(d: &Delegate) -> Result<NetworkConfig, Error> {
    Ok(NetworkConfig::from_slice(&d.config_bytes())?)
}

fn list(d: &Delegate) -> Result<NetworkConfigList, Error> {
    let bytes = d.config_bytes();
    Ok(if d.is_conflist {
        NetworkConfigList::from_slice(&bytes)?
    } else {
        NetworkConfigList::from_single_conf(&bytes)?
    })
}

impl DelegateExec for LibcniDelegates {
    fn add(&self, d: &Delegate, r: &DelegateRuntime) -> Result<CniResult, Error> {
        traced(d, "ADD", &r.ifname, || {
            podnet::check_ifname_free(&r.netns, &r.ifname)?;
            let out = if d.is_conflist {
                self.cni.add_network_list(&list(d)?, &rt(r))
            } else {
                self.cni.add_network(&conf(d)?, &rt(r))
            };
            out.map(|v| v.result).map_err(|e| failed(d, &r.ifname, e))
        })
    }

    fn del(&self, d: &Delegate, r: &DelegateRuntime) -> Result<(), Error> {
        traced(d, "DEL", &r.ifname, || {
            let out = if d.is_conflist {
                self.cni.del_network_list(&list(d)?, &rt(r))
            } else {
                self.cni.del_network(&conf(d)?, &rt(r))
            };
            out.map_err(|e| failed(d, &r.ifname, e))
        })
    }

    fn check(&self, d: &Delegate, r: &DelegateRuntime) -> Result<(), Error> {
        traced(d, "CHECK", &r.ifname, || {
            let out = if d.is_conflist {
                self.cni.check_network_list(&list(d)?, &rt(r))
            } else {
                self.cni.check_network(&conf(d)?, &rt(r))
            };
            out.map_err(|e| failed(d, &r.ifname, e))
        })
    }

    fn status(&self, d: &Delegate) -> Result<(), Error> {
        traced(d, "STATUS", "", || {
            self.cni
                .status_network_list(&list(d)?)
                .map_err(|e| failed(d, "", e))
        })
    }

    fn gc(&self, d: &Delegate, valid: &[GcAttachment]) -> Result<(), Error> {
        traced(d, "GC", "", || {
            self.cni
                .gc_network_list(&list(d)?, Some(valid))
                .map_err(|e| failed(d, "", e))
        })
    }

    fn set_default_routes(
        &self,
        d: &Delegate,
        r: &DelegateRuntime,
        remove_v4: bool,
        remove_v6: bool,
        gateways: &[IpAddr],
    ) -> Result<(), Error> {
        podnet::set_default_routes(&r.netns, &r.ifname, remove_v4, remove_v6, gateways)?;
        // Keep libcni's cached result in step, so CHECK and GC see the
        // routes the pod really has.
        podnet::rewrite_cache_file(
            &self.cni_dir,
            d.network_name(),
            &r.container_id,
            &r.ifname,
            remove_v4,
            remove_v6,
            gateways,
        )
    }
}
