//! Config reading the plugins share beyond `NetworkConfig`: the pod MAC
//! requested three ways, the `mtu` key, a link's `mode` (Go's
//! case-insensitive keys are `NetworkConfig::parse_specific_as_go`).

use cni_types::NetworkConfig;

use crate::{Error, Result};

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
        m => Ok(Some(m.parse().map_err(|_| Error::InvalidMacArg {
            value: m.to_owned(),
        })?)),
    }
}

/// The config's `mtu` (0: the kernel's default); a negative one is Go's
/// "invalid MTU" (macvlan, ipvlan, tap).
pub(crate) fn link_mtu(mtu: i64) -> Result<u32> {
    u32::try_from(mtu).map_err(|_| Error::InvalidMtu {
        mtu,
        master_mtu: None,
    })
}

/// The config's `mode` of a `kind` link (macvlan, ipvlan).
pub(crate) fn link_mode<M: std::str::FromStr>(kind: &'static str, mode: &str) -> Result<M> {
    mode.parse().map_err(|_| Error::UnknownLinkMode {
        kind,
        mode: mode.to_owned(),
    })
}

/// The pod interface's IPv6 DAD on a shared L2 segment (macvlan, ipvlan,
/// host-device): optimistic unless the config's `optimisticDad` is false,
/// which gives Go's (DAD as the namespace has it, the ADD waiting for it).
pub(crate) fn shared_segment_dad(optimistic: bool) -> cni_netns::Dad {
    if optimistic {
        cni_netns::Dad::Optimistic
    } else {
        cni_netns::Dad::Kernel
    }
}

/// serde's default of `optimisticDad`.
pub(crate) fn yes() -> bool {
    true
}
