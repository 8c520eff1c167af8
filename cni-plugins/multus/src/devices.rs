//! Device IDs for networks whose NetworkAttachmentDefinition names a
//! `k8s.v1.cni.cncf.io/resourceName` (SR-IOV and other device-plugin or
//! DRA networks), as multus-cni `getKubernetesDelegate` does:
//!
//! 1. The first such NAD of a pod builds the pod's resource map: kubelet's
//!    pod-resources API (`List`, matched by pod name and namespace) when its
//!    socket exists, else the device-plugin checkpoint file (matched by pod
//!    UID); then the devices DRA allocated through the pod's
//!    ResourceClaims. Device IDs of each resource are sorted.
//! 2. Each NAD takes the next unused ID of its resource: it goes into the
//!    delegate's config as `deviceID` and `pciBusID` (every plugin of a
//!    conflist) and into its runtimeConfig `deviceID` capability (which
//!    libcni passes only to plugins declaring it). A resource without
//!    devices for the pod leaves the delegate without one (as Go: a NAD
//!    may name a scheduling-only resource); if that delegate then fails,
//!    its error says which resource had no device.
//! 3. ADD copies the device plugin's device-info file
//!    (`<deviceInfoDir>/dp/<resource>-<deviceID>-device.json`) to the
//!    delegate's `CNIDeviceInfoFile` (`<deviceInfoDir>/cni/...`); DEL
//!    removes it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::conf::DeviceSources;
use super::delegate::Delegate;
use super::k8s::resource::{AllocationResult, SliceDevice};
use super::k8s::{KubeClient, Pod};
use super::podresources::{self, ListPodResourcesResponse};
use super::runtime::{device_info_file, DelegateRuntime};
use crate::Error;

/// The NAD annotation naming the resource a network's device comes from.
pub const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";
/// The largest checkpoint file read.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;
/// The largest device-info file copied.
const MAX_DEVICE_INFO_BYTES: u64 = 1024 * 1024;

/// A pod's device IDs by resource name, each list sorted, with the next
/// ID to hand out (multus-cni `types.ResourceInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceMap {
    entries: BTreeMap<String, (Vec<String>, usize)>,
}

impl ResourceMap {
    /// Appends device IDs to a resource.
    pub fn add<I: IntoIterator<Item = String>>(&mut self, resource: &str, ids: I) {
        self.entries
            .entry(resource.to_string())
            .or_default()
            .0
            .extend(ids);
    }

    /// Sorts every resource's IDs (Go `SortDeviceIDs`).
    pub fn sort(&mut self) {
        for (ids, _) in self.entries.values_mut() {
            ids.sort();
        }
    }

    /// The IDs of a resource.
    pub fn ids(&self, resource: &str) -> &[String] {
        self.entries.get(resource).map_or(&[], |(ids, _)| ids)
    }

    /// Hands out the next unused ID of a resource.
    pub fn take(&mut self, resource: &str) -> Option<String> {
        let (ids, next) = self.entries.get_mut(resource)?;
        let id = ids.get(*next).cloned()?;
        *next += 1;
        Some(id)
    }

    /// The resource names, sorted.
    pub fn resources(&self) -> Vec<&str> {
        self.entries.keys().map(String::as_str).collect()
    }
}

/// The device-plugin devices of a pod (every container) in a pod-resources
/// answer.
pub fn map_from_pod_resources(
    answer: &ListPodResourcesResponse,
    namespace: &str,
    name: &str,
) -> ResourceMap {
    let mut map = ResourceMap::default();
    for pr in answer
        .pod_resources
        .iter()
        .filter(|p| p.name == name && p.namespace == namespace)
    {
        for c in &pr.containers {
            for d in &c.devices {
                map.add(&d.resource_name, d.device_ids.iter().cloned());
            }
        }
    }
    map.sort();
    map
}

/// `DeviceIDs` of a checkpoint entry: NUMA node to IDs (kubelet 1.20+), or
/// a plain list (older kubelets).
#[derive(Deserialize)]
#[serde(untagged)]
enum CheckpointIds {
    ByNuma(BTreeMap<String, Option<Vec<String>>>),
    List(Vec<String>),
}

#[derive(Deserialize)]
struct CheckpointEntry {
    #[serde(rename = "PodUID", default)]
    pod_uid: String,
    #[serde(rename = "ResourceName", default)]
    resource_name: String,
    #[serde(rename = "DeviceIDs", default)]
    device_ids: Option<CheckpointIds>,
}

#[derive(Deserialize, Default)]
struct CheckpointData {
    #[serde(rename = "PodDeviceEntries", default)]
    entries: Option<Vec<CheckpointEntry>>,
}

#[derive(Deserialize)]
struct CheckpointFile {
    #[serde(rename = "Data", default)]
    data: CheckpointData,
}

/// The devices of the pod with `pod_uid` in a device-manager checkpoint
/// (multus-cni `pkg/checkpoint`; the checksum is not verified, as Go).
pub fn map_from_checkpoint(bytes: &[u8], pod_uid: &str) -> Result<ResourceMap, String> {
    let file: CheckpointFile =
        serde_json::from_slice(bytes).map_err(|e| format!("malformed checkpoint: {e}"))?;
    let mut map = ResourceMap::default();
    for e in file
        .data
        .entries
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.pod_uid == pod_uid)
    {
        let ids: Vec<String> = match e.device_ids {
            None => Vec::new(),
            Some(CheckpointIds::List(l)) => l,
            Some(CheckpointIds::ByNuma(m)) => m.into_values().flatten().flatten().collect(),
        };
        map.add(&e.resource_name, ids);
    }
    map.sort();
    Ok(map)
}

/// The pod's device-plugin devices from kubelet: the pod-resources API when
/// its socket exists, else the checkpoint file (multus-cni
/// `GetResourceClient`).
pub fn kubelet_resource_map(sources: &DeviceSources, pod: &Pod) -> Result<ResourceMap, Error> {
    let socket = &sources.pod_resources_socket;
    if std::fs::metadata(socket).is_ok() {
        tracing::debug!(
            "device IDs from kubelet's pod-resources API at {}",
            socket.display()
        );
        let answer = podresources::list(socket, sources.timeout, podresources::MAX_ANSWER)?;
        return Ok(map_from_pod_resources(&answer, &pod.namespace, &pod.name));
    }
    let path = &sources.checkpoint_file;
    tracing::debug!(
        "device IDs from the device-plugin checkpoint {}",
        path.display()
    );
    let err = |reason: String| Error::DeviceLookup {
        resource: String::new(),
        source_name: path.display().to_string(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| {
        err(format!(
            "no pod-resources socket at {} and the device-plugin checkpoint cannot be read: {e}",
            socket.display()
        ))
    })?;
    let bytes = cni_files::capped::read_to_end(file, MAX_CHECKPOINT_BYTES).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            err(format!("checkpoint {e}"))
        } else {
            err(format!("read: {e}"))
        }
    })?;
    if pod.uid.is_empty() {
        return Err(err("the pod has no UID to match checkpoint entries".into()));
    }
    map_from_checkpoint(&bytes, &pod.uid).map_err(err)
}

/// Adds the devices DRA allocated to the pod (multus-cni
/// `draclient.GetPodResourceMap`): for each claim of
/// `status.resourceClaimStatuses`, its allocation results, resolved through
/// the node's ResourceSlices of the driver to the `k8s.cni.cncf.io/deviceID`
/// and `k8s.cni.cncf.io/resourceName` attributes. Devices without them (a
/// GPU in the same claim) are skipped; a claim without allocation is an
/// error. The extended-resource claim maps its requests strictly.
pub fn add_dra_devices(
    kube: &dyn KubeClient,
    pod: &Pod,
    map: &mut ResourceMap,
) -> Result<(), Error> {
    let mut slices: BTreeMap<String, Vec<SliceDevice>> = BTreeMap::new();
    // The device of an allocation result in the node's slices of its
    // driver (listed once per driver).
    let mut lookup = |r: &AllocationResult| -> Result<Option<SliceDevice>, Error> {
        if !slices.contains_key(&r.driver) {
            let devs = kube.list_resource_slice_devices(&pod.node_name, &r.driver)?;
            slices.insert(r.driver.clone(), devs);
        }
        Ok(slices.get(&r.driver).and_then(|devs| {
            devs.iter()
                .find(|d| d.pool == r.pool && d.name == r.device)
                .cloned()
        }))
    };
    let dra_err = |claim: &str, reason: String| Error::DeviceLookup {
        resource: String::new(),
        source_name: format!("resourceclaim {}/{claim}", pod.namespace),
        reason,
    };
    for status in &pod.resource_claims {
        let Some(claim_name) = status.resource_claim_name.as_deref() else {
            tracing::error!(
                "resource claim status {:?} has no resourceClaimName",
                status.name
            );
            continue;
        };
        let claim = kube.get_resource_claim(&pod.namespace, claim_name)?;
        let Some(results) = claim.results else {
            return Err(dra_err(
                claim_name,
                "the claim has no device allocation".into(),
            ));
        };
        for r in &results {
            match lookup(r)? {
                Some(SliceDevice {
                    device_id: Some(id),
                    resource_name: Some(res),
                    ..
                }) if !id.is_empty() && !res.is_empty() => {
                    map.add(&res, [id]);
                }
                _ => tracing::warn!(
                    "claim {claim_name}: device {}/{}/{} has no {} and {} attributes; skipped",
                    r.driver,
                    r.pool,
                    r.device,
                    super::k8s::resource::DEVICE_ID_ATTRIBUTE,
                    super::k8s::resource::RESOURCE_NAME_ATTRIBUTE
                ),
            }
        }
    }
    if let Some(ext) = &pod.extended_resource_claim {
        let claim_name = ext.resource_claim_name.as_str();
        let claim = kube.get_resource_claim(&pod.namespace, claim_name)?;
        let Some(results) = claim.results else {
            return Err(dra_err(
                claim_name,
                "the claim has no device allocation".into(),
            ));
        };
        for m in &ext.request_mappings {
            let mine: Vec<_> = results
                .iter()
                .filter(|r| r.request == m.request_name)
                .collect();
            if mine.is_empty() {
                return Err(dra_err(
                    claim_name,
                    format!("request {} not found in the claim", m.request_name),
                ));
            }
            for r in mine {
                let (id, res) = match lookup(r)? {
                    Some(SliceDevice {
                        device_id: Some(id),
                        resource_name,
                        ..
                    }) if !id.is_empty() => (id, resource_name.unwrap_or_default()),
                    _ => {
                        return Err(dra_err(
                            claim_name,
                            format!(
                                "device {} is in no resource slice with a device ID",
                                r.device
                            ),
                        ))
                    }
                };
                if res != m.resource_name {
                    return Err(dra_err(
                        claim_name,
                        format!(
                            "device {}: {} is {res:?} but the extended resource mapping of request {:?} is {:?}",
                            r.device,
                            super::k8s::resource::RESOURCE_NAME_ATTRIBUTE,
                            m.request_name,
                            m.resource_name
                        ),
                    ));
                }
                map.add(&m.resource_name, [id]);
            }
        }
    }
    map.sort();
    Ok(())
}

/// Gives the delegate its device: `deviceID` and `pciBusID` in its config
/// (every plugin of a conflist; multus-cni `delegateAddDeviceID`), and the
/// `deviceID` capability (which wins over a selection element's).
pub fn set_device_id(delegate: &mut Delegate, device_id: &str) {
    let put = |o: &mut Map<String, Value>| {
        o.insert("deviceID".into(), Value::String(device_id.into()));
        o.insert("pciBusID".into(), Value::String(device_id.into()));
    };
    if delegate.is_conflist {
        if let Some(Value::Array(plugins)) = delegate.config.get_mut("plugins") {
            for p in plugins.iter_mut().filter_map(Value::as_object_mut) {
                put(p);
            }
        }
    } else {
        put(&mut delegate.config);
    }
    delegate.device_id = device_id.to_string();
}

/// Resolves the device of every delegate that names a resource, in order,
/// building the pod's resource map on first need (kubelet, then DRA when a
/// client is there). Nothing happens without a pod.
pub fn assign_device_ids(
    sources: &DeviceSources,
    kube: Option<&dyn KubeClient>,
    pod: Option<&Pod>,
    delegates: &mut [Delegate],
) -> Result<(), Error> {
    let Some(pod) = pod.filter(|p| !p.name.is_empty() && !p.namespace.is_empty()) else {
        return Ok(());
    };
    let mut map: Option<ResourceMap> = None;
    for d in delegates.iter_mut().filter(|d| !d.resource_name.is_empty()) {
        let resource = d.resource_name.clone();
        let named = |e: Error| match e {
            Error::DeviceLookup {
                source_name,
                reason,
                ..
            } => Error::DeviceLookup {
                resource: resource.clone(),
                source_name,
                reason,
            },
            other => other,
        };
        if map.is_none() {
            let mut m = kubelet_resource_map(sources, pod).map_err(named)?;
            if let Some(k) = kube {
                add_dra_devices(k, pod, &mut m).map_err(named)?;
            }
            tracing::debug!("pod {}/{} resource map: {m:?}", pod.namespace, pod.name);
            map = Some(m);
        }
        match map.as_mut().and_then(|m| m.take(&resource)) {
            Some(id) => {
                if !d.device_id.is_empty() {
                    tracing::debug!(
                        "{}: the resource map's device ID wins over the selection's",
                        d.name
                    );
                }
                set_device_id(d, &id);
            }
            None => tracing::warn!(
                "{}: no unused device of resource {resource:?} is allocated to pod {}/{}; the delegate gets no deviceID from it",
                d.name,
                pod.namespace,
                pod.name
            ),
        }
    }
    Ok(())
}

/// A delegate's failure, with a note when it named a resource but got no
/// device from it (the likely cause).
pub fn explain_failure(delegate: &Delegate, e: Error) -> Error {
    if delegate.resource_name.is_empty() || !delegate.device_id.is_empty() {
        return e;
    }
    let note = format!(
        "(no device of resource {:?} was allocated to the pod)",
        delegate.resource_name
    );
    match e {
        Error::DelegateFailed {
            network,
            ifname,
            mut error,
        } => {
            error.msg = format!("{} {note}", error.msg);
            Error::DelegateFailed {
                network,
                ifname,
                error,
            }
        }
        other => other,
    }
}

/// The device-info spec's document (k8snetworkplumbingwg device-info-spec
/// 1.1.0), as the NAD client's `DeviceInfo` reads and writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// `pci`, `vhost-user`, `memif` or `vdpa`.
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The spec version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// PCI details (`pci-address`, `vhost-net`, `rdma-device`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<Map<String, Value>>,
    /// vDPA details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vdpa: Option<Map<String, Value>>,
    /// vhost-user details.
    #[serde(
        rename = "vhost-user",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub vhost_user: Option<Map<String, Value>>,
    /// memif details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memif: Option<Map<String, Value>>,
}

/// Copies the device plugin's device-info file of (`resource`,
/// `device_id`) to `cni_path` (NAD client `CopyDeviceInfoForCNIFromDP`:
/// parsed, rewritten, mode 0444, never over an existing file). Returns why
/// not, for the log: as in Go, a missing file is no error for ADD.
pub fn copy_device_info(
    sources: &DeviceSources,
    resource: &str,
    device_id: &str,
    cni_path: &Path,
) -> Result<(), String> {
    let from = sources.dp_info_path(resource, device_id);
    let bytes = cni_files::capped::read_file(&from, MAX_DEVICE_INFO_BYTES).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            format!("{} is {e}", from.display())
        } else {
            format!("read {}: {e}", from.display())
        }
    })?;
    let info: DeviceInfo =
        serde_json::from_slice(&bytes).map_err(|e| format!("parse {}: {e}", from.display()))?;
    if cni_path.exists() {
        return Err(format!(
            "device information file already exists: {}",
            cni_path.display()
        ));
    }
    if let Some(dir) = cni_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    let out = serde_json::to_vec(&info).map_err(|e| e.to_string())?;
    cni_files::atomic::AtomicWrite::new()
        .mode(0o444)
        .write(cni_path, &out)
        .map_err(|e| format!("write {}: {e}", cni_path.display()))
}

/// ADD: for a delegate whose device came from its resource, copies the
/// device plugin's device information to the delegate's
/// `CNIDeviceInfoFile` (multus-cni `CmdAdd`); a failure is only logged, as Go.
pub fn copy_device_info_for(sources: &DeviceSources, delegate: &Delegate, rt: &DelegateRuntime) {
    let Some(f) = device_info_file(rt) else {
        return;
    };
    if delegate.resource_name.is_empty() || delegate.device_id.is_empty() {
        return;
    }
    if let Err(e) = copy_device_info(
        sources,
        &delegate.resource_name,
        &delegate.device_id,
        Path::new(f),
    ) {
        tracing::debug!("{}: no device information copied: {e}", delegate.name);
    }
}

/// DEL: removes the delegate's `CNIDeviceInfoFile`, if it has one.
pub fn remove_device_info_of(rt: &DelegateRuntime) {
    if let Some(f) = device_info_file(rt) {
        remove_device_info(Path::new(f));
    }
}

/// Removes a `CNIDeviceInfoFile` (a missing file is fine).
pub fn remove_device_info(cni_path: &Path) {
    match std::fs::remove_file(cni_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::debug!("remove {}: {e}", cni_path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podresources::{ContainerDevices, ContainerResources, PodResources};

    #[test]
    fn checkpoint_formats() {
        let new = br#"{"Data":{"PodDeviceEntries":[
            {"PodUID":"u1","ContainerName":"c","ResourceName":"intel.com/sriov","DeviceIDs":{"1":["0000:03:02.3"],"0":["0000:03:02.1","0000:03:02.0"]},"AllocResp":"CiIKHU"},
            {"PodUID":"u2","ContainerName":"c","ResourceName":"intel.com/sriov","DeviceIDs":{"0":["0000:03:02.7"]}},
            {"PodUID":"u1","ContainerName":"d","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":null}}],
            "RegisteredDevices":{"intel.com/sriov":["0000:03:02.0"]}},"Checksum":1234}"#;
        let m = map_from_checkpoint(new, "u1").unwrap();
        assert_eq!(
            m.ids("intel.com/sriov"),
            ["0000:03:02.0", "0000:03:02.1", "0000:03:02.3"]
        );
        assert!(m.ids("nvidia.com/gpu").is_empty());
        let old = br#"{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ResourceName":"r","DeviceIDs":["b","a"]}]}}"#;
        let mut m = map_from_checkpoint(old, "u1").unwrap();
        assert_eq!(
            (m.take("r"), m.take("r"), m.take("r")),
            (Some("a".into()), Some("b".into()), None)
        );
        assert!(map_from_checkpoint(b"{}", "u1")
            .unwrap()
            .resources()
            .is_empty());
        assert!(map_from_checkpoint(b"{\"Data\":", "u1").is_err());
        assert!(map_from_checkpoint(br#"{"Data":{"PodDeviceEntries":{}}}"#, "u1").is_err());
    }

    #[test]
    fn pod_resources_answer() {
        let dev = |r: &str, ids: &[&str]| ContainerDevices {
            resource_name: r.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: None,
        };
        let answer = ListPodResourcesResponse {
            pod_resources: vec![
                PodResources {
                    name: "web".into(),
                    namespace: "ns".into(),
                    containers: vec![
                        ContainerResources {
                            name: "a".into(),
                            devices: vec![dev("r", &["2", "1"])],
                        },
                        ContainerResources {
                            name: "b".into(),
                            devices: vec![dev("r", &["0"]), dev("s", &["x"])],
                        },
                    ],
                },
                PodResources {
                    name: "web".into(),
                    namespace: "other".into(),
                    containers: vec![ContainerResources {
                        name: "a".into(),
                        devices: vec![dev("r", &["9"])],
                    }],
                },
            ],
        };
        let m = map_from_pod_resources(&answer, "ns", "web");
        assert_eq!(m.ids("r"), ["0", "1", "2"]);
        assert_eq!(m.resources(), ["r", "s"]);
    }

    #[test]
    fn device_id_goes_into_config_and_runtime() {
        let mut d = Delegate::from_value(
            serde_json::json!({"name": "l", "plugins": [{"type": "sriov"}, {"type": "tuning"}]}),
            None,
        )
        .unwrap();
        set_device_id(&mut d, "0000:03:02.1");
        assert_eq!(d.config["plugins"][0]["deviceID"], "0000:03:02.1");
        assert_eq!(d.config["plugins"][1]["pciBusID"], "0000:03:02.1");
        assert_eq!(d.device_id, "0000:03:02.1");
    }
}
