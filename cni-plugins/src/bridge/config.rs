//! The bridge plugin's configuration, loaded and validated as Go's
//! `loadNetConf` (plugins/main/bridge/bridge.go) does.

use cni_netns::MacAddr;
use cni_types::NetworkConfig;
use serde::Deserialize;

use super::error::{Error, Result};

/// The bridge used when the config names none.
pub const DEFAULT_BRIDGE: &str = "cni0";

/// One `vlanTrunk` entry: a single `id` or a `minID`..=`maxID` range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct VlanTrunk {
    /// First VLAN of a range.
    #[serde(rename = "minID", default)]
    pub min_id: Option<i64>,
    /// Last VLAN of a range.
    #[serde(rename = "maxID", default)]
    pub max_id: Option<i64>,
    /// A single VLAN.
    #[serde(default)]
    pub id: Option<i64>,
}

/// The bridge plugin's own keys (the spec keys are read from
/// [`NetworkConfig`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct BridgeConf {
    /// `bridge`: the bridge device (default `cni0`).
    #[serde(rename = "bridge", default = "default_bridge")]
    pub bridge: String,
    /// `isGateway`: the bridge gets the gateway address of each IP family.
    #[serde(default)]
    pub is_gateway: bool,
    /// `isDefaultGateway`: implies `isGateway` and adds default routes.
    #[serde(default)]
    pub is_default_gateway: bool,
    /// `forceAddress`: replace a different address already on the bridge.
    #[serde(default)]
    pub force_address: bool,
    /// `ipMasq`: masquerade traffic from the pod leaving its subnet.
    #[serde(default)]
    pub ip_masq: bool,
    /// `ipMasqBackend`: accepted for compatibility; only nftables exists.
    #[serde(default)]
    pub ip_masq_backend: Option<String>,
    /// `mtu` of a new bridge and of the veth pair (0: kernel default).
    #[serde(default)]
    pub mtu: u32,
    /// `hairpinMode` on the host port.
    #[serde(default)]
    pub hairpin_mode: bool,
    /// `promiscMode` on the bridge.
    #[serde(default)]
    pub promisc_mode: bool,
    /// `vlan`: the port's native (PVID, untagged) VLAN; 0 for none.
    #[serde(default)]
    pub vlan: i64,
    /// `vlanTrunk`: tagged VLANs on the port.
    #[serde(default)]
    pub vlan_trunk: Option<Vec<VlanTrunk>>,
    /// `preserveDefaultVlan`: keep VLAN 1 on the port when VLANs are set
    /// (default true, as Go).
    #[serde(default = "yes")]
    pub preserve_default_vlan: bool,
    /// `macspoofchk`: drop frames from the pod with another source MAC.
    #[serde(rename = "macspoofchk", default)]
    pub mac_spoof_chk: bool,
    /// `enabledad`: IPv6 DAD (and enhanced DAD) in the pod.
    #[serde(rename = "enabledad", default)]
    pub enable_dad: bool,
    /// `disableContainerInterface`: leave the pod's interface down.
    #[serde(default)]
    pub disable_container_interface: bool,
    /// `portIsolation`: isolate the host port from other isolated ports.
    #[serde(default)]
    pub port_isolation: bool,
    /// The container MAC requested by `CNI_ARGS` `MAC`, `args.cni.mac` or
    /// `runtimeConfig.mac` (later ones win, as Go).
    #[serde(skip)]
    pub mac: Option<MacAddr>,
    /// The trunk VLANs, expanded, sorted and deduplicated.
    #[serde(skip)]
    pub trunk_vlans: Vec<u16>,
}

fn default_bridge() -> String {
    DEFAULT_BRIDGE.into()
}

fn yes() -> bool {
    true
}

impl BridgeConf {
    /// The pod end's IPv6 DAD: off (nothing to wait for on a veth's pod
    /// end) unless `enabledad` asks for it (on, enhanced, waited for).
    pub fn dad(&self) -> cni_netns::Dad {
        if self.enable_dad {
            cni_netns::Dad::On
        } else {
            cni_netns::Dad::Off
        }
    }

    /// Loads and validates the config of a request: VLAN ranges, the MAC
    /// request from `CNI_ARGS` (`args_raw`), `args.cni.mac` and
    /// `runtimeConfig.mac`.
    pub fn load(config: &NetworkConfig, args_raw: &str) -> Result<BridgeConf> {
        let mut conf: BridgeConf = config.parse_as()?;
        if conf.is_default_gateway {
            conf.is_gateway = true;
        }
        if !(0..=4094).contains(&conf.vlan) {
            return Err(Error::VlanInvalid { vlan: conf.vlan });
        }
        conf.trunk_vlans = collect_vlan_trunk(conf.vlan_trunk.as_deref().unwrap_or_default())?;
        if conf.vlan > 0 && !conf.trunk_vlans.is_empty() {
            return Err(Error::VlanWithTrunk);
        }
        let args = cni_types::CniArgs::parse(args_raw)?;
        args.check_known(&["MAC"])?;
        let requested = [
            args.get("MAC").map(str::to_owned),
            config
                .args_cni()
                .and_then(|a| a.get("mac"))
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            config.runtime_config.as_ref().and_then(|r| r.mac.clone()),
        ];
        if let Some(mac) = requested.into_iter().flatten().rfind(|m| !m.is_empty()) {
            conf.mac = Some(
                mac.parse()
                    .map_err(|_| Error::MacInvalid { mac: mac.clone() })?,
            );
        }
        Ok(conf)
    }

    /// Checks the option combinations Go refuses at ADD.
    pub fn validate_for_add(&self, has_ipam: bool) -> Result<()> {
        if self.hairpin_mode && self.promisc_mode {
            return Err(Error::HairpinWithPromisc);
        }
        if self.disable_container_interface && has_ipam {
            return Err(Error::IpamWithoutContainerInterface);
        }
        Ok(())
    }

    /// The bridge needs VLAN filtering (`vlan` or `vlanTrunk` given).
    pub fn vlan_filtering(&self) -> bool {
        self.vlan != 0 || self.vlan_trunk.is_some()
    }

    /// The native VLAN, when set.
    pub fn native_vlan(&self) -> Option<u16> {
        u16::try_from(self.vlan).ok().filter(|v| *v != 0)
    }

    /// The MTU to apply, `None` for the kernel default.
    pub fn mtu(&self) -> Option<u32> {
        Some(self.mtu).filter(|m| *m != 0)
    }
}

/// Go's `collectVlanTrunk` (same messages): every VLAN of the trunk, sorted
/// and without duplicates.
fn collect_vlan_trunk(trunk: &[VlanTrunk]) -> Result<Vec<u16>> {
    let bad = |reason| Error::VlanTrunkInvalid { reason };
    let valid = |v: i64| (1..=4094).contains(&v);
    let mut vlans = Vec::new();
    for item in trunk {
        match (item.min_id, item.max_id) {
            (Some(min), Some(max)) => {
                if !valid(min) {
                    return Err(bad("incorrect trunk minID parameter"));
                }
                if !valid(max) {
                    return Err(bad("incorrect trunk maxID parameter"));
                }
                if max < min {
                    return Err(bad("minID is greater than maxID in trunk parameter"));
                }
                vlans.extend(min..=max);
            }
            (None, Some(_)) => {
                return Err(bad(
                    "minID and maxID should be configured simultaneously, minID is missing",
                ))
            }
            (Some(_), None) => {
                return Err(bad(
                    "minID and maxID should be configured simultaneously, maxID is missing",
                ))
            }
            (None, None) => {}
        }
        if let Some(id) = item.id {
            if !valid(id) {
                return Err(bad("incorrect trunk id parameter"));
            }
            vlans.push(id);
        }
    }
    vlans.sort_unstable();
    vlans.dedup();
    // Every value was checked to be in 1..=4094 above.
    Ok(vlans
        .into_iter()
        .filter_map(|v| u16::try_from(v).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(json: &str, args: &str) -> Result<BridgeConf> {
        BridgeConf::load(&NetworkConfig::from_slice(json.as_bytes()).unwrap(), args)
    }

    #[test]
    fn defaults_match_go() {
        let c = load(r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#, "").unwrap();
        assert_eq!(c.bridge, "cni0");
        assert!(c.preserve_default_vlan);
        assert!(!c.is_gateway && !c.vlan_filtering());
        assert_eq!(c.mtu(), None);
        assert_eq!(c.mac, None);
    }

    #[test]
    fn default_gateway_implies_gateway() {
        let c = load(r#"{"name":"n","isDefaultGateway":true}"#, "").unwrap();
        assert!(c.is_gateway);
    }

    #[test]
    fn vlan_range_and_trunk_validation() {
        let e = load(r#"{"name":"n","vlan":4095}"#, "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid VLAN ID 4095 (must be between 0 and 4094)"
        );
        let c = load(
            r#"{"name":"n","vlanTrunk":[{"id":101},{"minID":200,"maxID":203},{"id":201}]}"#,
            "",
        )
        .unwrap();
        assert_eq!(c.trunk_vlans, [101, 200, 201, 202, 203]);
        assert!(c.vlan_filtering());
        for (trunk, msg) in [
            (
                r#"[{"minID":0,"maxID":3}]"#,
                "incorrect trunk minID parameter",
            ),
            (
                r#"[{"minID":3,"maxID":5000}]"#,
                "incorrect trunk maxID parameter",
            ),
            (
                r#"[{"minID":5,"maxID":3}]"#,
                "minID is greater than maxID in trunk parameter",
            ),
            (
                r#"[{"maxID":3}]"#,
                "minID and maxID should be configured simultaneously, minID is missing",
            ),
            (
                r#"[{"minID":3}]"#,
                "minID and maxID should be configured simultaneously, maxID is missing",
            ),
            (r#"[{"id":0}]"#, "incorrect trunk id parameter"),
        ] {
            let e = load(&format!(r#"{{"name":"n","vlanTrunk":{trunk}}}"#), "").unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
        let e = load(r#"{"name":"n","vlan":5,"vlanTrunk":[{"id":6}]}"#, "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot set vlan and vlanTrunk at the same time"
        );
    }

    #[test]
    fn mac_priority_runtime_config_then_args_then_cni_args() {
        let env = "IgnoreUnknown=1;MAC=02:00:00:00:00:01;K8S_POD_NAME=x";
        let c = load(r#"{"name":"n"}"#, env).unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:01");
        let c = load(
            r#"{"name":"n","args":{"cni":{"mac":"02:00:00:00:00:02"}}}"#,
            env,
        )
        .unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:02");
        let c = load(
            r#"{"name":"n","args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:03"}}"#,
            env,
        )
        .unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:03");
        assert!(load(r#"{"name":"n"}"#, "FOO=1").is_err());
        assert!(load(r#"{"name":"n","runtimeConfig":{"mac":"nope"}}"#, "").is_err());
    }

    #[test]
    fn mode_conflicts() {
        let c = load(r#"{"name":"n","hairpinMode":true,"promiscMode":true}"#, "").unwrap();
        assert_eq!(
            c.validate_for_add(false).unwrap_err().to_string(),
            "cannot set hairpin mode and promiscuous mode at the same time"
        );
        let c = load(r#"{"name":"n","disableContainerInterface":true}"#, "").unwrap();
        assert!(c.validate_for_add(false).is_ok());
        assert_eq!(
            c.validate_for_add(true).unwrap_err().to_string(),
            "cannot use IPAM when DisableContainerInterface flag is set"
        );
    }
}
