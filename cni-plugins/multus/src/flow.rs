//! ADD, DEL, CHECK, STATUS and GC: multus's algorithm on top of a
//! [`DelegateExec`] (how a delegate conf or conflist is run) and an optional
//! [`KubeClient`] (multus-cni `pkg/multus/multus.go`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use cni_types::{CniResult, GcAttachment, Interface, IpConfig};
use ipnetwork::IpNetwork;
use serde_json::{json, Value};

use super::cache;
use super::conf::NetConf;
use super::delegate::{plan_ifnames, Delegate};
use super::devices;
use super::events::{EventRecorder, POST_BUDGET};
use super::k8s::{KubeClient, Pod};
use super::lookup::{add_pod_delegates, cluster_delegates, conf_files};
use super::runtime::{delegate_runtime_in, device_info_file, DelegateRuntime, PodRequest};
use super::selection::NETWORK_STATUS_ANNOTATION;
use super::status::{annotation_value, network_statuses, NetworkStatus};
use crate::Error;

/// How delegates run: libcni's `AddNetwork`/`AddNetworkList` and friends
/// with the result cache under `cniDir` (the cni-exec invoker), or a fake in
/// tests. Errors should be [`Error::DelegateFailed`] carrying the plugin's
/// reply.
pub trait DelegateExec {
    /// ADD one delegate (conf or conflist).
    fn add(&self, delegate: &Delegate, rt: &DelegateRuntime) -> Result<CniResult, Error>;
    /// DEL one delegate; idempotent.
    fn del(&self, delegate: &Delegate, rt: &DelegateRuntime) -> Result<(), Error>;
    /// CHECK one delegate.
    fn check(&self, delegate: &Delegate, rt: &DelegateRuntime) -> Result<(), Error>;
    /// STATUS of a delegate (the cluster network).
    fn status(&self, delegate: &Delegate) -> Result<(), Error>;
    /// GC of a delegate with the attachments still in use.
    fn gc(&self, delegate: &Delegate, valid: &[GcAttachment]) -> Result<(), Error>;
    /// Makes `gateways` the default routes of `ifname` after removing the
    /// delegate's own default routes of the families marked (the
    /// `default-route` selection key). The default does nothing: it needs
    /// the pod's network namespace.
    fn set_default_routes(
        &self,
        _delegate: &Delegate,
        _rt: &DelegateRuntime,
        _remove_v4: bool,
        _remove_v6: bool,
        _gateways: &[IpAddr],
    ) -> Result<(), Error> {
        Ok(())
    }
}

const POLL: Duration = Duration::from_millis(250);
const READINESS_TIMEOUT: Duration = Duration::from_secs(45);

/// Waits for the readiness indicator file (Go: 1 s polls up to 45 s).
pub fn wait_ready(path: &Path, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        if path.exists() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::DefaultNetworkNotReady(path.to_path_buf()));
        }
        std::thread::sleep(POLL);
    }
}

/// The pod, within the API wait budget: transient failures are retried
/// until `timeout` is spent; `Ok(None)` when the API says the pod is gone.
/// A UID mismatch is an error on ADD and "no pod" on DEL (as Go).
pub fn get_pod(
    kube: &dyn KubeClient,
    req: &PodRequest,
    timeout: Duration,
    is_del: bool,
) -> Result<Option<Pod>, Error> {
    let deadline = Instant::now() + timeout;
    let pod = loop {
        match kube.get_pod(&req.pod_namespace, &req.pod_name) {
            Ok(p) => break p,
            Err(e) if e.is_not_found() => {
                tracing::info!(pod = %req.pod_name, namespace = %req.pod_namespace, "pod not found");
                return Ok(None);
            }
            Err(e) if e.is_retriable() && Instant::now() + POLL < deadline => {
                tracing::debug!("get pod: {e}; retrying");
                std::thread::sleep(POLL);
            }
            Err(e) => return Err(e),
        }
    };
    if !req.pod_uid.is_empty() && pod.uid != req.pod_uid && !pod.is_static() {
        let e = Error::PodUidMismatch {
            namespace: req.pod_namespace.clone(),
            name: req.pod_name.clone(),
            expected: req.pod_uid.clone(),
            actual: pod.uid.clone(),
        };
        if is_del {
            tracing::warn!("{e}; using the cache");
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(pod))
}

/// The `AddedInterface` event of one attachment made outside an ADD of
/// the pod's networks (the thick daemon's `/delegate`, Go's
/// `cmdDelegateAdd` → `DelegateAdd`): reads the pod (a failure is logged
/// and no event is posted) and posts the event within [`POST_BUDGET`].
pub fn announce_attachment(
    client: &dyn KubeClient,
    req: &PodRequest,
    api_timeout: Duration,
    network: &str,
    result: &CniResult,
) {
    if !req.has_pod() {
        return;
    }
    let recorder = EventRecorder::new(client);
    match get_pod(&recorder, req, api_timeout, false) {
        Ok(Some(pod)) => recorder.set_pod(&pod),
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("no AddedInterface event for {}: {e}", req.ifname);
            return;
        }
    }
    recorder.added_interface(&req.ifname, network, result);
    recorder.post(POST_BUDGET);
}

/// The delegates of a pod: cluster network (or inline delegates), default
/// networks, then the pod's annotations, then the auxiliary chain.
pub fn pod_delegates(
    conf: &NetConf,
    kube: Option<&dyn KubeClient>,
    pod: Option<&Pod>,
    pod_namespace: &str,
) -> Result<Vec<Delegate>, Error> {
    let mut delegates = cluster_delegates(kube, conf, Some(pod_namespace))?;
    if let (Some(k), Some(p)) = (kube, pod) {
        add_pod_delegates(k, p, conf, &mut delegates)?;
    }
    devices::assign_device_ids(&conf.devices, kube, pod, &mut delegates)?;
    if let (Some(aux), Some(cluster)) = (&conf.auxiliary_cni_chain_name, &conf.cluster_network) {
        // As multus-cni's LoadChainedDelegatesFromBytes: a chain that does
        // not load is logged and skipped, never a failed ADD.
        match auxiliary_chain(conf, aux, cluster) {
            Ok(Some(d)) => delegates.push(d),
            Ok(None) => {}
            Err(e) => tracing::error!("auxiliary chain {aux:?} skipped: {e}"),
        }
    }
    if let Some(first) = delegates.first_mut() {
        first.master = true;
    }
    Ok(delegates)
}

/// The auxiliary chain's delegate: passthru, then every `.conf` of
/// `<dirname(clusterNetwork)>/<aux>/` in file order; `None` when the folder
/// adds nothing to passthru.
fn auxiliary_chain(conf: &NetConf, aux: &str, cluster: &str) -> Result<Option<Delegate>, Error> {
    let dir = Path::new(cluster)
        .parent()
        .unwrap_or(Path::new("/"))
        .join(aux);
    let mut plugins = vec![json!({"type": "passthru", "name": "passthru-cni"})];
    for f in conf_files(&dir, &[".conf"])? {
        let bytes = cni_files::capped::read_file(&f, cni_files::capped::MAX_ADMIN_FILE).map_err(
            |source| Error::Io {
                op: "read auxiliary chain plugin",
                path: f.clone(),
                source,
            },
        )?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| Error::DelegateConfig {
            what: f.display().to_string(),
            reason: e.to_string(),
        })?;
        plugins.push(v);
    }
    // Only a chain with plugins beyond passthru is worth running.
    if plugins.len() < 2 {
        return Ok(None);
    }
    let list = json!({"cniVersion": conf.cni_version, "name": aux, "plugins": plugins});
    Delegate::from_value(list, None).map(Some)
}

/// The result Go returns when the pod vanished before ADD (a quirk kept
/// for compatibility: the runtime is tearing the sandbox down anyway).
pub fn pod_gone_result(req: &PodRequest) -> CniResult {
    let mut ip = IpConfig::new(IpNetwork::V4(
        ipnetwork::Ipv4Network::new(std::net::Ipv4Addr::UNSPECIFIED, 0).unwrap_or_else(|_| {
            // 0.0.0.0/0 is always a valid network.
            ipnetwork::Ipv4Network::from(std::net::Ipv4Addr::UNSPECIFIED)
        }),
    ));
    ip.gateway = Some(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    CniResult {
        interfaces: vec![Interface {
            name: req.ifname.clone(),
            sandbox: req.netns.clone(),
            ..Default::default()
        }],
        ips: vec![ip],
        ..Default::default()
    }
}

fn delete_all(
    exec: &dyn DelegateExec,
    req: &PodRequest,
    conf: &NetConf,
    delegates: &[Delegate],
    ifnames: &[String],
) -> Result<(), Error> {
    let mut errors = Vec::new();
    let devinfo = conf.devices.cni_info_dir();
    for (d, ifname) in delegates.iter().zip(ifnames).rev() {
        let rt = delegate_runtime_in(req, ifname, &conf.runtime_config, d, &devinfo);
        if let Err(e) = exec.del(d, &rt) {
            tracing::error!("DEL {} ({ifname}): {e}", d.name);
            errors.push(e);
        }
        devices::remove_device_info_of(&rt);
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(Error::Multiple(errors)),
    }
}

/// Multus ADD. The result is the master's. The pod's Kubernetes events
/// (see [`super::events`]) are posted once the outcome is decided, success
/// or failure, within [`super::events::POST_BUDGET`]; posting never fails
/// the ADD.
pub fn cmd_add(
    conf: &NetConf,
    req: &PodRequest,
    kube: Option<&dyn KubeClient>,
    exec: &dyn DelegateExec,
) -> Result<CniResult, Error> {
    let recorder = kube.map(EventRecorder::new);
    let out = add(conf, req, recorder.as_ref(), exec);
    if let Some(r) = &recorder {
        r.post(POST_BUDGET);
    }
    out
}

fn add(
    conf: &NetConf,
    req: &PodRequest,
    events: Option<&EventRecorder<'_>>,
    exec: &dyn DelegateExec,
) -> Result<CniResult, Error> {
    let kube = events.map(|e| e as &dyn KubeClient);
    if let Some(f) = &conf.readiness_indicator_file {
        wait_ready(f, READINESS_TIMEOUT)?;
    }
    let pod = match kube.filter(|_| req.has_pod()) {
        Some(k) => match get_pod(k, req, conf.api_timeout, false)? {
            Some(p) => Some(p),
            None => return Ok(pod_gone_result(req)),
        },
        None => None,
    };
    if let (Some(e), Some(p)) = (events, &pod) {
        e.set_pod(p);
    }
    let delegates = pod_delegates(conf, kube, pod.as_ref(), &req.pod_namespace)?;
    let ifnames = plan_ifnames(&delegates, &req.ifname)?;
    cache::save(&conf.cni_dir, &req.container_id, &req.ifname, &delegates)?;

    let mut result = None;
    let mut statuses: Vec<NetworkStatus> = Vec::new();
    let devinfo = conf.devices.cni_info_dir();
    for (idx, d) in delegates.iter().enumerate() {
        let rt = delegate_runtime_in(req, &ifnames[idx], &conf.runtime_config, d, &devinfo);
        devices::copy_device_info_for(&conf.devices, d, &rt);
        let added = exec.add(d, &rt).and_then(|r| {
            if let Some(e) = events {
                e.added_interface(&rt.ifname, &d.name, &r);
            }
            if d.filter_v4_gateway
                || d.filter_v6_gateway
                || d.gateway_request.as_ref().is_some_and(|g| !g.is_empty())
            {
                let gws = d.gateway_request.clone().unwrap_or_default();
                let remove_v4 = d.filter_v4_gateway || gws.iter().any(IpAddr::is_ipv4);
                let remove_v6 = d.filter_v6_gateway || gws.iter().any(IpAddr::is_ipv6);
                exec.set_default_routes(d, &rt, remove_v4, remove_v6, &gws)?;
            }
            Ok(r)
        });
        let added = added.map_err(|e| devices::explain_failure(d, e));
        let r = match added {
            Ok(r) => r,
            Err(e) => {
                // Undo what was added, newest first, including the failed one
                // (DEL is idempotent and may free a half-made attachment) —
                // unless it never ran because its interface name was taken:
                // a DEL would then remove the pod's existing interface.
                let upto = if matches!(e, Error::InterfaceExists { .. }) {
                    idx
                } else {
                    idx + 1
                };
                // The cache goes with the failed ADD, whatever the undo
                // did (a failed undo is logged): kept, it would be
                // replayed by a later DEL long after this ADD, and the
                // runtime's DEL re-derives the networks from the pod.
                if let Err(u) = delete_all(exec, req, conf, &delegates[..upto], &ifnames[..upto]) {
                    tracing::error!("undo of the failed ADD of {}: {u}", req.container_id);
                }
                cache::remove(&conf.cni_dir, &req.container_id, &req.ifname);
                return Err(e);
            }
        };
        if pod.is_some() {
            let info = device_info_file(&rt)
                .and_then(|f| std::fs::read(f).ok())
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            statuses.extend(network_statuses(&r, &d.name, d.master, info.as_ref()));
        }
        if d.master || result.is_none() {
            result = Some(r);
        }
    }
    // Go compares the pod *name* with systemNamespaces here (a bug); we
    // compare the namespace, which is what the option means.
    if let (Some(k), Some(p)) = (kube, &pod) {
        if !conf.is_system_namespace(&p.namespace) {
            let mut ann = BTreeMap::new();
            ann.insert(
                NETWORK_STATUS_ANNOTATION.to_string(),
                Some(annotation_value(&statuses)),
            );
            match k.patch_pod_annotations(&p.namespace, &p.name, &ann) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => tracing::info!("network-status not set: {e}"),
                Err(e) => {
                    let _ = delete_all(exec, req, conf, &delegates, &ifnames);
                    cache::remove(&conf.cni_dir, &req.container_id, &req.ifname);
                    return Err(e);
                }
            }
        }
    }
    Ok(result.unwrap_or_default())
}

/// Multus DEL: from the delegate cache, without the API server; re-derived
/// from the pod only when the cache is missing and the API answers;
/// success (logged) when neither is possible.
pub fn cmd_del(
    conf: &NetConf,
    req: &PodRequest,
    kube: Option<&dyn KubeClient>,
    exec: &dyn DelegateExec,
) -> Result<(), Error> {
    if let Some(f) = &conf.readiness_indicator_file {
        if !f.exists() {
            tracing::warn!(
                "readinessindicatorfile @ {} does not exist on CNI DEL",
                f.display()
            );
        }
    }
    // A multus killed inside `cache::save` leaves its temp file behind; it
    // is never read, so it can go first.
    cni_files::atomic::remove_stale_temps(&cache::cache_path(
        &conf.cni_dir,
        &req.container_id,
        &req.ifname,
    ));
    let cached = match cache::load(&conf.cni_dir, &req.container_id, &req.ifname) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("delegate cache unusable: {e}");
            None
        }
    };
    let (cache_file, mut delegates) = match cached {
        Some((path, d)) => (Some(path), d),
        None => {
            let pod = match kube.filter(|_| req.has_pod()) {
                Some(k) => get_pod(k, req, conf.api_timeout, true).unwrap_or_else(|e| {
                    tracing::error!("get pod failed on DEL: {e}; continuing");
                    None
                }),
                None => None,
            };
            match pod {
                // As Go: when the pod's networks cannot be had (a NAD, or
                // the device-ID source — kubelet, its checkpoint — down),
                // the cluster network is still deleted.
                Some(p) => match pod_delegates(conf, kube, Some(&p), &req.pod_namespace) {
                    Ok(d) => (None, d),
                    Err(e) => {
                        tracing::error!(
                            "failed to get delegates: {e}, but continue to delete the cluster network"
                        );
                        (
                            None,
                            cluster_delegates(kube, conf, Some(&req.pod_namespace))?,
                        )
                    }
                },
                None => {
                    tracing::error!(
                        "no delegate cache for {}/{} and no pod to derive delegates from: nothing to delete",
                        req.container_id,
                        req.ifname
                    );
                    return Ok(());
                }
            }
        }
    };
    // As Go: only a conflist without `cniVersion` gets multus's; every
    // other delegate gets the cached bytes of its ADD unchanged.
    for d in delegates.iter_mut().filter(|d| d.is_conflist) {
        d.default_cni_version(&conf.cni_version);
    }
    let ifnames: Vec<String> = delegates
        .iter()
        .enumerate()
        .map(|(i, d)| d.ifname(&req.ifname, i))
        .collect();
    let result = delete_all(exec, req, conf, &delegates, &ifnames);
    if cache_file.is_some() {
        let remove = !conf.retry_delete_on_error
            || result
                .as_ref()
                .err()
                .is_none_or(|e| e.to_string().contains("no such file or directory"));
        if remove {
            cache::remove(&conf.cni_dir, &req.container_id, &req.ifname);
        }
    }
    result
}

/// Multus CHECK: every delegate of the attachment (from the cache, else the
/// configuration's).
pub fn cmd_check(
    conf: &NetConf,
    req: &PodRequest,
    kube: Option<&dyn KubeClient>,
    exec: &dyn DelegateExec,
) -> Result<(), Error> {
    let delegates = match cache::load(&conf.cni_dir, &req.container_id, &req.ifname)? {
        Some((_, d)) => d,
        None => cluster_delegates(kube, conf, Some(&req.pod_namespace))?,
    };
    for (i, d) in delegates.iter().enumerate() {
        let rt = delegate_runtime_in(
            req,
            &d.ifname(&req.ifname, i),
            &conf.runtime_config,
            d,
            &conf.devices.cni_info_dir(),
        );
        exec.check(d, &rt)?;
    }
    Ok(())
}

fn master(conf: &NetConf, kube: Option<&dyn KubeClient>) -> Result<Delegate, Error> {
    if let Some(f) = &conf.readiness_indicator_file {
        wait_ready(f, READINESS_TIMEOUT)?;
    }
    let mut ds = cluster_delegates(kube, conf, None)?;
    if ds.is_empty() {
        return Err(Error::Config("no cluster network".into()));
    }
    let mut m = ds.remove(0);
    m.default_cni_version(&conf.cni_version);
    Ok(m)
}

/// Multus STATUS: the cluster network's.
pub fn cmd_status(
    conf: &NetConf,
    kube: Option<&dyn KubeClient>,
    exec: &dyn DelegateExec,
) -> Result<(), Error> {
    exec.status(&master(conf, kube)?)
}

/// The attachments recorded in libcni's result cache under `cniDir`
/// (`results/*`, each with `containerId` and `ifName`); unreadable entries
/// are skipped.
pub fn cached_attachments(cni_dir: &Path) -> Vec<GcAttachment> {
    let Ok(entries) = std::fs::read_dir(cni_dir.join("results")) else {
        return Vec::new();
    };
    let mut out: Vec<GcAttachment> = entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| {
            let cid = v.get("containerId")?.as_str()?.to_string();
            let ifname = v.get("ifName")?.as_str()?.to_string();
            (!cid.is_empty() && !ifname.is_empty()).then_some(GcAttachment {
                container_id: cid,
                ifname,
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Multus GC: the cluster network's, with the attachments of the result
/// cache as the valid ones.
pub fn cmd_gc(
    conf: &NetConf,
    kube: Option<&dyn KubeClient>,
    exec: &dyn DelegateExec,
) -> Result<(), Error> {
    let m = master(conf, kube)?;
    exec.gc(&m, &cached_attachments(&conf.cni_dir))
}
