//! multus as a [`Plugin`]: what the `multus` binary runs, and what an
//! embedding runtime registers in-process.

use cni_exec::{Plugin, Request};
use cni_types::CniResult;

use super::conf::NetConf;
use super::flow::{cmd_add, cmd_check, cmd_del, cmd_gc, cmd_status};
use super::invoke::LibcniDelegates;
use super::k8s::{ClientConfig, HttpKubeClient, KubeClient};
use super::runtime::PodRequest;
use crate::Error;

/// The multus thin plugin.
#[derive(Clone, Copy, Debug, Default)]
pub struct Multus;

/// The API client multus's configuration asks for: the `kubeconfig`, else
/// the in-cluster service account, else none (delegates only).
pub fn kube_client(conf: &NetConf) -> Result<Option<HttpKubeClient>, Error> {
    let cfg = match &conf.kubeconfig {
        Some(p) => Some(ClientConfig::from_kubeconfig(p, conf.api_request_timeout)?),
        None => ClientConfig::in_cluster(conf.api_request_timeout)?,
    };
    cfg.map(|c| HttpKubeClient::new(&c)).transpose()
}

/// [`kube_client`] for a command that may (`need_kube` false: DEL) go on
/// without the API: then an unusable kubeconfig is logged, not an error.
pub(crate) fn kube_client_for(
    conf: &NetConf,
    need_kube: bool,
) -> Result<Option<HttpKubeClient>, Error> {
    match kube_client(conf) {
        Ok(k) => Ok(k),
        Err(e) if !need_kube => {
            tracing::error!("kubernetes client unavailable: {e}");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

struct Ctx {
    conf: NetConf,
    kube: Option<HttpKubeClient>,
    exec: LibcniDelegates,
}

impl Ctx {
    fn new(req: &Request, need_kube: bool) -> Result<Ctx, Error> {
        let conf = NetConf::from_slice(&req.stdin)?;
        // Go's LoadNetConf sets the process's logging up from each config.
        super::logging::configure_global(&conf.log);
        for w in &conf.warnings {
            tracing::warn!("{w}");
        }
        let kube = kube_client_for(&conf, need_kube)?;
        let exec = LibcniDelegates::for_request(&conf, req);
        Ok(Ctx { conf, kube, exec })
    }

    fn kube(&self) -> Option<&dyn KubeClient> {
        self.kube.as_ref().map(|k| k as &dyn KubeClient)
    }
}

impl Plugin for Multus {
    type Error = Error;

    fn name(&self) -> &str {
        "multus"
    }

    fn add(&self, req: &Request) -> Result<CniResult, Error> {
        let ctx = Ctx::new(req, true)?;
        cmd_add(&ctx.conf, &PodRequest::of(req)?, ctx.kube(), &ctx.exec)
    }

    fn del(&self, req: &Request) -> Result<(), Error> {
        let ctx = Ctx::new(req, false)?;
        cmd_del(&ctx.conf, &PodRequest::of(req)?, ctx.kube(), &ctx.exec)
    }

    fn check(&self, req: &Request) -> Result<(), Error> {
        let ctx = Ctx::new(req, true)?;
        cmd_check(&ctx.conf, &PodRequest::of(req)?, ctx.kube(), &ctx.exec)
    }

    fn status(&self, req: &Request) -> Result<(), Error> {
        let ctx = Ctx::new(req, true)?;
        cmd_status(&ctx.conf, ctx.kube(), &ctx.exec)
    }

    fn gc(&self, req: &Request) -> Result<(), Error> {
        let ctx = Ctx::new(req, true)?;
        cmd_gc(&ctx.conf, ctx.kube(), &ctx.exec)
    }

    /// Go's multus GCs the cluster network with the attachments of its own
    /// cache, whatever the runtime's list says.
    fn gc_needs_valid_attachments(&self) -> bool {
        false
    }
}
