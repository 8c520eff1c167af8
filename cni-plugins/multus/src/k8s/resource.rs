//! The slices of the `resource.k8s.io/v1` objects multus reads for
//! Dynamic Resource Allocation (multus-cni `pkg/draclient`): the pod's
//! claim statuses, a ResourceClaim's allocation results, and the two
//! device attributes a DRA network driver publishes in its ResourceSlices.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::Error;

/// The device attribute holding the device id handed to CNI.
pub const DEVICE_ID_ATTRIBUTE: &str = "k8s.cni.cncf.io/deviceID";
/// The device attribute matched against a NAD's `resourceName`.
pub const RESOURCE_NAME_ATTRIBUTE: &str = "k8s.cni.cncf.io/resourceName";

/// One of `pod.status.resourceClaimStatuses`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct PodResourceClaimStatus {
    /// The pod-local reference (`spec.resourceClaims[].name`).
    #[serde(default)]
    pub name: String,
    /// The ResourceClaim object (absent when none was needed).
    #[serde(rename = "resourceClaimName", default)]
    pub resource_claim_name: Option<String>,
}

/// One of `pod.status.extendedResourceClaimStatus.requestMappings`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct RequestMapping {
    /// The container asking.
    #[serde(rename = "containerName", default)]
    pub container_name: String,
    /// The extended resource name (matched with the NAD's `resourceName`).
    #[serde(rename = "resourceName", default)]
    pub resource_name: String,
    /// The claim's request serving it.
    #[serde(rename = "requestName", default)]
    pub request_name: String,
}

/// `pod.status.extendedResourceClaimStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ExtendedResourceClaimStatus {
    /// Request mappings.
    #[serde(rename = "requestMappings", default)]
    pub request_mappings: Vec<RequestMapping>,
    /// The claim.
    #[serde(rename = "resourceClaimName", default)]
    pub resource_claim_name: String,
}

/// One of a claim's `status.allocation.devices.results`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct AllocationResult {
    /// The claim's request.
    #[serde(default)]
    pub request: String,
    /// The DRA driver.
    #[serde(default)]
    pub driver: String,
    /// The pool.
    #[serde(default)]
    pub pool: String,
    /// The device's name in the pool.
    #[serde(default)]
    pub device: String,
}

/// A ResourceClaim, as far as multus reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceClaim {
    /// `metadata.name`.
    pub name: String,
    /// `status.allocation.devices.results`; `None` when not allocated.
    pub results: Option<Vec<AllocationResult>>,
}

impl ResourceClaim {
    /// Decodes a ResourceClaim from API JSON.
    pub fn from_json(body: &[u8]) -> Result<ResourceClaim, Error> {
        let v: Value = serde_json::from_slice(body).map_err(|e| Error::Decode {
            what: "resourceclaim".into(),
            reason: e.to_string(),
        })?;
        let results = match v.pointer("/status/allocation/devices/results") {
            None | Some(Value::Null) => None,
            Some(r) => {
                Some(
                    Vec::<AllocationResult>::deserialize(r).map_err(|e| Error::Decode {
                        what: "resourceclaim status.allocation.devices.results".into(),
                        reason: e.to_string(),
                    })?,
                )
            }
        };
        Ok(ResourceClaim {
            name: v
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            results,
        })
    }
}

/// A device of a ResourceSlice, with the two attributes multus reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceDevice {
    /// `spec.driver`.
    pub driver: String,
    /// `spec.pool.name`.
    pub pool: String,
    /// `spec.devices[].name`.
    pub name: String,
    /// The `k8s.cni.cncf.io/deviceID` string attribute.
    pub device_id: Option<String>,
    /// The `k8s.cni.cncf.io/resourceName` string attribute.
    pub resource_name: Option<String>,
}

#[derive(Deserialize, Default)]
struct Attribute {
    #[serde(default)]
    string: Option<String>,
}

#[derive(Deserialize)]
struct Device {
    #[serde(default)]
    name: String,
    #[serde(default)]
    attributes: BTreeMap<String, Attribute>,
}

#[derive(Deserialize, Default)]
struct Pool {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct SliceSpec {
    #[serde(default)]
    driver: String,
    #[serde(default)]
    pool: Pool,
    #[serde(default)]
    devices: Vec<Device>,
}

#[derive(Deserialize)]
struct Slice {
    spec: SliceSpec,
}

#[derive(Deserialize)]
struct SliceList {
    #[serde(default)]
    items: Vec<Slice>,
}

/// Decodes a ResourceSliceList into its devices.
pub fn slice_devices_from_json(body: &[u8]) -> Result<Vec<SliceDevice>, Error> {
    let list: SliceList = serde_json::from_slice(body).map_err(|e| Error::Decode {
        what: "resourceslice list".into(),
        reason: e.to_string(),
    })?;
    let mut out = Vec::new();
    for s in list.items {
        for d in s.spec.devices {
            let attr = |k: &str| d.attributes.get(k).and_then(|a| a.string.clone());
            out.push(SliceDevice {
                driver: s.spec.driver.clone(),
                pool: s.spec.pool.name.clone(),
                device_id: attr(DEVICE_ID_ATTRIBUTE),
                resource_name: attr(RESOURCE_NAME_ATTRIBUTE),
                name: d.name,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode() {
        let c = ResourceClaim::from_json(
            br#"{"metadata":{"name":"c1"},"status":{"allocation":{"devices":{"results":[
              {"request":"vf","driver":"sriov.k8s.io","pool":"node1","device":"dev-3"}]}}}}"#,
        )
        .unwrap();
        assert_eq!(c.results.unwrap()[0].device, "dev-3");
        assert_eq!(
            ResourceClaim::from_json(br#"{"metadata":{"name":"c1"},"status":{}}"#)
                .unwrap()
                .results,
            None
        );
        let d = slice_devices_from_json(
            br#"{"items":[{"spec":{"driver":"d","pool":{"name":"p"},"nodeName":"n","devices":[
              {"name":"dev-3","attributes":{"k8s.cni.cncf.io/deviceID":{"string":"0000:03:00.3"},
               "k8s.cni.cncf.io/resourceName":{"string":"intel.com/sriov"},"numa":{"int":1}}},
              {"name":"gpu"}]}}]}"#,
        )
        .unwrap();
        assert_eq!(d[0].device_id.as_deref(), Some("0000:03:00.3"));
        assert_eq!(d[0].resource_name.as_deref(), Some("intel.com/sriov"));
        assert_eq!((d[1].pool.as_str(), d[1].device_id.as_ref()), ("p", None));
        assert!(slice_devices_from_json(b"[").is_err());
    }
}
