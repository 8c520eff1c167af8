//! The request multus is serving (`CNI_*` of the pod), and the runtime
//! configuration it builds for each delegate: container id, netns,
//! interface, `CNI_ARGS` and capability arguments (libcni's `RuntimeConf`,
//! multus-cni `CreateCNIRuntimeConf`).

use std::path::Path;

use serde_json::Value;

use super::capabilities::RuntimeConfig;
use super::delegate::Delegate;
use crate::Error;

/// Where device-info files for delegates with a `deviceID` live (NAD
/// client `GetCNIDeviceInfoPath`).
pub const CNI_DEVICE_INFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo/cni";

/// The pod-facing request multus was called with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodRequest {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS`.
    pub netns: String,
    /// `CNI_IFNAME` (the master's interface).
    pub ifname: String,
    /// `CNI_ARGS`, verbatim.
    pub args: String,
    /// `K8S_POD_NAMESPACE`.
    pub pod_namespace: String,
    /// `K8S_POD_NAME`.
    pub pod_name: String,
    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub infra_container_id: String,
    /// `K8S_POD_UID`.
    pub pod_uid: String,
}

impl PodRequest {
    /// The request of a plugin command (its `CNI_*` values).
    pub fn of(req: &cni_exec::Request) -> Result<Self, Error> {
        PodRequest::new(&req.container_id, &req.netns, &req.ifname, &req.args_raw)
    }

    /// A request from the `CNI_*` values; the Kubernetes keys are read from
    /// `args` (`K8S_POD_NAME` and friends, missing ones left empty).
    pub fn new(container_id: &str, netns: &str, ifname: &str, args: &str) -> Result<Self, Error> {
        let parsed = cni_types::CniArgs::parse(args).map_err(|e| Error::CniArgs(e.to_string()))?;
        let get = |v: Option<&str>| v.unwrap_or("").to_string();
        Ok(PodRequest {
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: ifname.into(),
            args: args.into(),
            pod_namespace: get(parsed.k8s_pod_namespace()),
            pod_name: get(parsed.k8s_pod_name()),
            infra_container_id: get(parsed.k8s_pod_infra_container_id()),
            pod_uid: get(parsed.k8s_pod_uid()),
        })
    }

    /// True when the runtime named a pod (multus then asks the API).
    pub fn has_pod(&self) -> bool {
        !self.pod_name.is_empty() && !self.pod_namespace.is_empty()
    }
}

/// What one delegate is run with: libcni's `RuntimeConf`, as the invoker
/// takes it.
pub type DelegateRuntime = cni_exec::RuntimeConf;

/// The `CNIDeviceInfoFile` capability of a delegate's runtime, if set.
pub fn device_info_file(rt: &DelegateRuntime) -> Option<&str> {
    rt.capability_args
        .get("CNIDeviceInfoFile")
        .and_then(Value::as_str)
}

/// Builds the runtime configuration of `delegate` attached as `ifname`.
///
/// Args start with `IgnoreUnknown=true` and the four Kubernetes keys (in
/// that order: Go's verbose logs index them), then the pod's `CNI_ARGS`
/// (`K=V` split at the first `=`; unparsable pairs skipped), then `MAC` and
/// `IP` for a selection's requests. Capability args are multus's
/// runtimeConfig merged with the selection; a `deviceID` gets an
/// auto-generated `CNIDeviceInfoFile`.
pub fn delegate_runtime(
    req: &PodRequest,
    ifname: &str,
    base: &RuntimeConfig,
    delegate: &Delegate,
) -> DelegateRuntime {
    delegate_runtime_in(req, ifname, base, delegate, Path::new(CNI_DEVICE_INFO_DIR))
}

/// [`delegate_runtime`] with the `CNIDeviceInfoFile` directory given (the
/// multus config's `deviceInfoDir` + `/cni`).
pub fn delegate_runtime_in(
    req: &PodRequest,
    ifname: &str,
    base: &RuntimeConfig,
    delegate: &Delegate,
    device_info_dir: &Path,
) -> DelegateRuntime {
    let mut args: Vec<(String, String)> = vec![
        ("IgnoreUnknown".into(), "true".into()),
        ("K8S_POD_NAMESPACE".into(), req.pod_namespace.clone()),
        ("K8S_POD_NAME".into(), req.pod_name.clone()),
        (
            "K8S_POD_INFRA_CONTAINER_ID".into(),
            req.infra_container_id.clone(),
        ),
        ("K8S_POD_UID".into(), req.pod_uid.clone()),
    ];
    for pair in req.args.split(';').filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        match args.iter_mut().find(|(ek, _)| ek == k) {
            Some(e) if e.1.is_empty() && !v.is_empty() => e.1 = v.to_string(),
            // Already there with a value: a duplicate would only shadow it.
            Some(_) => {}
            None => args.push((k.to_string(), v.to_string())),
        }
    }
    if !delegate.mac_request.is_empty() {
        args.push(("MAC".into(), delegate.mac_request.clone()));
    }
    if let Some(ips) = delegate.ip_request.as_ref().filter(|i| !i.is_empty()) {
        args.push(("IP".into(), ips.join(",")));
    }
    let mut rc = delegate.runtime_config(base);
    if !rc.device_id.is_empty() {
        let file = format!("{}-{}_{}", delegate.name, req.container_id, ifname).replace('/', "-");
        rc.cni_device_info_file = device_info_dir.join(file).display().to_string();
    }
    DelegateRuntime {
        container_id: req.container_id.clone(),
        netns: req.netns.clone(),
        ifname: ifname.to_string(),
        args,
        capability_args: rc.capability_args(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::PortMapping;
    use serde_json::json;

    fn req(args: &str) -> PodRequest {
        PodRequest::new("123456789", "/run/netns/x", "eth0", args).unwrap()
    }

    #[test]
    fn args_order_and_merge() {
        let mut r = req("K8S_POD_NAMESPACE=namespacedummy;K8S_POD_NAME=dummy;K8S_POD_INFRA_CONTAINER_ID=123456789;K8S_POD_UID=aaaaa");
        assert_eq!(r.pod_name, "dummy");
        // The K8S_* keys are read with LoadArgs' strict rules, but the
        // runtime conf splits at the first '=' like Go's SplitN.
        r.args.push_str(";BLAHBLAH=foo=bar;junk");
        let rt = delegate_runtime(&r, "net1", &RuntimeConfig::default(), &Delegate::default());
        let keys: Vec<String> = rt.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            keys,
            [
                "IgnoreUnknown=true",
                "K8S_POD_NAMESPACE=namespacedummy",
                "K8S_POD_NAME=dummy",
                "K8S_POD_INFRA_CONTAINER_ID=123456789",
                "K8S_POD_UID=aaaaa",
                "BLAHBLAH=foo=bar"
            ]
        );
        assert_eq!(rt.container_id, "123456789");
        assert_eq!(rt.netns, "/run/netns/x");
        assert_eq!(rt.ifname, "net1");
        assert!(rt.capability_args.is_empty());
    }

    #[test]
    fn capability_args_for_master_and_others() {
        let base = RuntimeConfig {
            port_mappings: vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: String::new(),
            }],
            ..Default::default()
        };
        let master = Delegate {
            master: true,
            mac_request: "c2:11:22:33:44:55".into(),
            ..Default::default()
        };
        let r = req("K8S_POD_NAME=p;K8S_POD_NAMESPACE=ns");
        let rt = delegate_runtime(&r, "eth0", &base, &master);
        assert_eq!(
            json!(rt.capability_args),
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
        );
        let other = Delegate {
            name: "ns/sriov".into(),
            mac_request: "c2:11:22:33:44:55".into(),
            ip_request: Some(vec!["10.1.1.5/24".into(), "fd00::5/64".into()]),
            device_id: "0000:00:00.1".into(),
            ..Default::default()
        };
        let rt = delegate_runtime(&r, "net1", &base, &other);
        assert_eq!(rt.capability_args["mac"], "c2:11:22:33:44:55");
        assert_eq!(
            rt.capability_args["ips"],
            json!(["10.1.1.5/24", "fd00::5/64"])
        );
        assert_eq!(rt.capability_args["deviceID"], "0000:00:00.1");
        assert_eq!(
            device_info_file(&rt),
            Some("/var/run/k8s.cni.cncf.io/devinfo/cni/ns-sriov-123456789_net1")
        );
        assert!(rt
            .args_string()
            .ends_with(";MAC=c2:11:22:33:44:55;IP=10.1.1.5/24,fd00::5/64"));
    }

    #[test]
    fn bad_cni_args() {
        assert!(matches!(
            PodRequest::new("c", "n", "eth0", "K8S_POD_NAME:x"),
            Err(Error::CniArgs(_))
        ));
        assert!(!req("").has_pod());
    }
}
