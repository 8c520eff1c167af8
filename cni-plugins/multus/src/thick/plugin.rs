//! What the daemon runs for each request: the thin plugin's ADD, DEL,
//! CHECK, STATUS and GC ([`crate::flow`]) with the daemon's
//! configuration keys laid over the shim's, one long-lived API client, and
//! delegates run through cni-exec's libcni ([`LibcniDelegates`]).

use std::sync::Arc;

use cni_exec::{Plugin, Request};
use cni_types::CniResult;
use serde_json::{Map, Value};

use crate::delegate::Delegate;
use crate::flow::announce_attachment;
use crate::k8s::KubeClient;
use crate::plugin::{kube_client, kube_client_for};
use crate::runtime::{delegate_runtime, PodRequest};
use crate::{
    cmd_add, cmd_check, cmd_del, cmd_gc, cmd_status, DelegateExec, LibcniDelegates, NetConf,
};

use super::api::InterfaceAttributes;
use super::metrics::{MeteredDelegates, MeteredKube, Metrics};
use crate::Error;

/// A shareable API client.
pub type SharedKube = Arc<dyn KubeClient + Send + Sync>;

/// The thin multus plugin as the daemon serves it.
pub struct DaemonPlugin {
    overrides: Map<String, Value>,
    kube: Option<SharedKube>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for DaemonPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonPlugin")
            .field("overrides", &self.overrides)
            .field("kube", &self.kube.is_some())
            .field("metrics", &self.metrics)
            .finish()
    }
}

/// A placeholder cluster network for configurations that name none: DEL
/// from the cache and `/delegate` never look it up.
const NO_CLUSTER_NETWORK: &str = "multus-daemon-no-cluster-network";

/// The shim's (or a client's) configuration with `overrides` laid over it,
/// as multus-cni's `overrideCNIConfigWithServerConfig` does.
pub fn merged_conf(stdin: &[u8], overrides: &Map<String, Value>) -> Result<NetConf, Error> {
    NetConf::from_map(overlaid(stdin, overrides)?)
}

/// The configuration object of `stdin` with `overrides` laid over it.
fn overlaid(stdin: &[u8], overrides: &Map<String, Value>) -> Result<Map<String, Value>, Error> {
    let mut raw: Map<String, Value> = serde_json::from_slice(stdin).map_err(|e| Error::Decode {
        what: "CNI configuration".into(),
        reason: e.to_string(),
    })?;
    for (k, v) in overrides {
        raw.insert(k.clone(), v.clone());
    }
    Ok(raw)
}

/// A configuration good enough for DEL from the delegate cache: the given
/// one, with a placeholder cluster network when it names none (the shim's
/// own minimal configuration).
pub fn conf_for_cached_del(stdin: &[u8], overrides: &Map<String, Value>) -> Result<NetConf, Error> {
    let mut raw = overlaid(stdin, overrides)?;
    if raw.get("clusterNetwork").is_none_or(Value::is_null)
        && raw.get("delegates").is_none_or(Value::is_null)
    {
        raw.insert(
            "clusterNetwork".into(),
            Value::String(NO_CLUSTER_NETWORK.into()),
        );
    }
    NetConf::from_map(raw)
}

impl DaemonPlugin {
    /// Serves with `overrides` (the daemon file's NetConf keys) and one API
    /// client for every request (`None`: each request's own `kubeconfig`,
    /// as the thin plugin).
    pub fn new(overrides: Map<String, Value>, kube: Option<SharedKube>) -> Self {
        DaemonPlugin {
            overrides,
            kube,
            metrics: Arc::default(),
        }
    }

    /// Counts its delegate calls and API server requests in `metrics`
    /// (by default, metrics of its own).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The API client of a request (the daemon's, or one from the
    /// request's configuration), counted.
    fn metered(&self, kube: Option<SharedKube>) -> Option<SharedKube> {
        kube.map(|k| Arc::new(MeteredKube::new(k, self.metrics.clone())) as SharedKube)
    }

    /// `exec`, counted.
    fn delegates<'a>(&'a self, exec: &'a LibcniDelegates) -> MeteredDelegates<'a> {
        MeteredDelegates {
            inner: exec,
            metrics: &self.metrics,
        }
    }

    /// The NetConf keys laid over every request.
    pub fn overrides(&self) -> &Map<String, Value> {
        &self.overrides
    }

    fn ctx(
        &self,
        req: &Request,
        need_kube: bool,
    ) -> Result<(NetConf, Option<SharedKube>, LibcniDelegates), Error> {
        let conf = if req.command == cni_exec::Command::Del {
            conf_for_cached_del(&req.stdin, &self.overrides)?
        } else {
            merged_conf(&req.stdin, &self.overrides)?
        };
        for w in &conf.warnings {
            tracing::warn!("{w}");
        }
        let kube = match &self.kube {
            Some(k) => Some(k.clone()),
            None => kube_client_for(&conf, need_kube)?.map(|k| Arc::new(k) as SharedKube),
        };
        let kube = self.metered(kube);
        let exec = LibcniDelegates::for_request(&conf, req);
        Ok((conf, kube, exec))
    }

    /// `/delegate`: ADD or DEL of one extra attachment (stdin's `delegate`
    /// key: a conf or conflist) for a running pod, with the requested addresses and MAC.
    pub fn delegate(
        &self,
        req: &Request,
        attrs: Option<&InterfaceAttributes>,
    ) -> Result<Option<CniResult>, Error> {
        let conf = conf_for_cached_del(b"{}", &self.overrides)?;
        let mut envelope: Map<String, Value> =
            serde_json::from_slice(&req.stdin).map_err(|e| Error::Decode {
                what: "delegate configuration".into(),
                reason: e.to_string(),
            })?;
        let value = envelope
            .remove("delegate")
            .unwrap_or(Value::Object(envelope));
        let mut d = Delegate::from_value(value, None)?;
        d.default_cni_version(&conf.cni_version);
        if let Some(a) = attrs {
            d.mac_request = a.mac_request.clone();
            if !a.ip_request.is_empty() {
                d.ip_request = Some(a.ip_request.clone());
            }
        }
        let pod = PodRequest::of(req)?;
        let rt = delegate_runtime(&pod, &req.ifname, &conf.runtime_config, &d);
        let libcni = LibcniDelegates::for_request(&conf, req);
        let exec = self.delegates(&libcni);
        match req.command {
            cni_exec::Command::Add => {
                let result = exec.add(&d, &rt)?;
                let kube = match &self.kube {
                    Some(k) => Some(k.clone()),
                    None => kube_client(&conf)
                        .ok()
                        .flatten()
                        .map(|k| Arc::new(k) as SharedKube),
                };
                if let Some(k) = &self.metered(kube) {
                    announce_attachment(k.as_ref(), &pod, conf.api_timeout, &d.name, &result);
                }
                Ok(Some(result))
            }
            cni_exec::Command::Del => exec.del(&d, &rt).map(|()| None),
            other => Err(Error::DaemonProtocol {
                op: "serve /delegate",
                reason: format!("command {other} is not ADD or DEL"),
            }),
        }
    }
}

fn kube_ref(k: &Option<SharedKube>) -> Option<&dyn KubeClient> {
    k.as_deref().map(|k| k as &dyn KubeClient)
}

impl Plugin for DaemonPlugin {
    type Error = Error;

    fn name(&self) -> &str {
        "multus-daemon"
    }

    fn add(&self, req: &Request) -> Result<CniResult, Error> {
        let (conf, kube, exec) = self.ctx(req, true)?;
        cmd_add(
            &conf,
            &PodRequest::of(req)?,
            kube_ref(&kube),
            &self.delegates(&exec),
        )
    }

    fn del(&self, req: &Request) -> Result<(), Error> {
        let (conf, kube, exec) = self.ctx(req, false)?;
        cmd_del(
            &conf,
            &PodRequest::of(req)?,
            kube_ref(&kube),
            &self.delegates(&exec),
        )
    }

    fn check(&self, req: &Request) -> Result<(), Error> {
        let (conf, kube, exec) = self.ctx(req, true)?;
        cmd_check(
            &conf,
            &PodRequest::of(req)?,
            kube_ref(&kube),
            &self.delegates(&exec),
        )
    }

    fn status(&self, req: &Request) -> Result<(), Error> {
        let (conf, kube, exec) = self.ctx(req, true)?;
        cmd_status(&conf, kube_ref(&kube), &self.delegates(&exec))
    }

    fn gc(&self, req: &Request) -> Result<(), Error> {
        let (conf, kube, exec) = self.ctx(req, true)?;
        cmd_gc(&conf, kube_ref(&kube), &self.delegates(&exec))
    }

    /// The cluster network's GC with the attachments of multus's own cache
    /// (as the thin plugin and Go).
    fn gc_needs_valid_attachments(&self) -> bool {
        false
    }

    /// None: the daemon serves requests over its socket and is never run
    /// by hand, so a request without `CNI_COMMAND` fails instead of
    /// printing one.
    fn about(&self) -> String {
        String::new()
    }
}
