//! The result model, from `cni-types`: an IPAM plugin's (abbreviated) result
//! is a [`CniResult`] with no `interfaces` and no `ips[].interface`; the
//! plugin encodes it in the config's `cniVersion` with
//! [`CniResult::to_value`] or [`CniResult::to_json_pretty`].

pub use cni_types::{CniResult, Dns, IpConfig, Route};
