//! Config reading the plugins share beyond `NetworkConfig`: Go's
//! case-insensitive keys, and the pod MAC requested three ways.

use cni_types::NetworkConfig;

use super::fail;
use crate::Result;

/// The plugin's own section of the config, its keys matched to `keys`
/// case-insensitively as Go's `encoding/json` does (the tap docs spell
/// `selinuxcontext` what the Go struct tags `selinuxContext`).
pub(crate) fn go_conf<T: serde::de::DeserializeOwned>(
    config: &NetworkConfig,
    keys: &[&str],
) -> Result<T> {
    let mut raw = config.specific().clone();
    cni_types::json::canonicalize_keys(&mut raw, keys);
    T::deserialize(serde_json::Value::Object(raw))
        .map_err(|e| cni_types::Error::InvalidConfig(format!("failed to load netconf: {e}")).into())
}

/// The pod link's MAC as macvlan and tap pick it: the config's `mac`,
/// overridden by `CNI_ARGS` `MAC`, overridden by `runtimeConfig.mac`.
pub(crate) fn requested_mac(
    config: &NetworkConfig,
    cni_args: &str,
    conf_mac: String,
) -> Result<Option<cni_netns::MacAddr>> {
    let mut mac = conf_mac;
    let args = cni_types::CniArgs::parse(cni_args)?;
    args.check_known(&["MAC"])?;
    if let Some(m) = args.get("MAC").filter(|m| !m.is_empty()) {
        mac = m.to_owned();
    }
    if let Some(m) = config.runtime_config.as_ref().and_then(|r| r.mac.as_ref()) {
        if !m.is_empty() {
            mac.clone_from(m);
        }
    }
    match mac.as_str() {
        "" => Ok(None),
        m => Ok(Some(m.parse().map_err(|_| {
            fail(format!(
                "invalid args {m} for MAC addr: invalid MAC address"
            ))
        })?)),
    }
}
