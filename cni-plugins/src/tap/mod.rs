//! The tap plugin: gives the pod a persistent tap device (for a VM or a
//! user-space network stack in the pod), optionally a port of a bridge of
//! the pod and addressed by the IPAM plugin — Go's
//! `plugins/main/tap/tap.go` (v1.4.0+, with `bridge`), plus GC delegated
//! to IPAM.
//!
//! The device gets the flags Go's two creation paths give it: with both
//! `owner` and `group` (Go's netlink path) `vnet_hdr`, and a packet
//! information header unless multi-queue; otherwise (Go's `ip tuntap`
//! path) neither. With `selinuxContext`, `ip tuntap add` runs under that
//! SELinux context, as in Go, so that the device carries it.
//!
//! ```
//! use cni_plugins::tap::TapConf;
//! use cni_types::NetworkConfig;
//!
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"tap","multiQueue":true,"owner":1000,"group":1000}"#,
//! )?;
//! // Owner and group: Go's netlink path (vnet_hdr; multi-queue means no pi).
//! let spec = TapConf::load(&conf, "")?.spec("tap0");
//! assert!(spec.multi_queue && spec.vnet_hdr && !spec.packet_info);
//! // An SELinux context (the docs' spelling works too): Go's `ip` path.
//! let conf = NetworkConfig::from_slice(
//!     br#"{"cniVersion":"1.0.0","name":"n","type":"tap","owner":1000,"group":1000,
//!          "selinuxcontext":"system_u:system_r:svirt_t:s0"}"#,
//! )?;
//! let tap = TapConf::load(&conf, "")?;
//! assert_eq!(tap.selinux_context.as_deref(), Some("system_u:system_r:svirt_t:s0"));
//! assert!(!tap.spec("tap0").vnet_hdr);
//! let bad = NetworkConfig::from_slice(br#"{"cniVersion":"1.0.0","name":"n","type":"tap","owner":-1}"#)?;
//! assert!(TapConf::load(&bad, "").unwrap_err().to_string().contains("NetConf.owner"));
//! # Ok::<(), cni_plugins::tap::Error>(())
//! ```

mod error;

use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{Ipv4Conf, MacAddr, TapSpec};
use cni_types::{CniResult, Dns, NetworkConfig};
use serde::Deserialize;
use serde_json::Value;

use crate::steps::iface::{self, interface};
use crate::steps::{check, conf, ipam, Undo};
pub use error::{Error, Result};

/// The tap plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TapConf {
    /// `multiQueue`.
    pub multi_queue: bool,
    /// `mtu` (0: the kernel's).
    pub mtu: u32,
    /// `mac`, overridden by `CNI_ARGS` `MAC`, then by `runtimeConfig.mac`.
    pub mac: Option<MacAddr>,
    /// `owner`: the uid allowed to attach.
    pub owner: Option<u32>,
    /// `group`: the gid allowed to attach.
    pub group: Option<u32>,
    /// `selinuxContext` (also spelled `selinuxcontext`): the SELinux
    /// context the device is created under.
    pub selinux_context: Option<String>,
    /// `bridge`: a bridge in the pod's namespace the tap becomes a port of.
    pub bridge: Option<String>,
    /// `dns`, copied into the result.
    pub dns: Dns,
}

const KEYS: &[&str] = &[
    "multiQueue",
    "mtu",
    "mac",
    "owner",
    "group",
    "selinuxContext",
    "bridge",
];

#[derive(Deserialize)]
pub(crate) struct Raw {
    #[serde(rename = "multiQueue", default)]
    multi_queue: bool,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    owner: Option<Value>,
    #[serde(default)]
    group: Option<Value>,
    #[serde(rename = "selinuxContext", default)]
    selinux_context: String,
    #[serde(default)]
    bridge: String,
}

/// A `*uint32` field as Go decodes it: null is unset, anything but an
/// integer in 0..=u32::MAX is refused with Go's message naming the field.
fn go_u32(field: &str, v: Option<&Value>) -> Result<Option<u32>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                // Go's text; code 7 (a wrong type is a config error here).
                Error::FieldNotU32 {
                    field: field.to_owned(),
                    found: match v {
                        Value::Number(n) => format!("number {n}"),
                        Value::String(_) => "string".into(),
                        Value::Bool(_) => "bool".into(),
                        Value::Array(_) => "array".into(),
                        _ => "object".into(),
                    },
                }
            }),
    }
}

impl TapConf {
    /// Go's `loadConf`: the config, with the MAC from `CNI_ARGS` and
    /// `runtimeConfig`.
    pub fn load(config: &NetworkConfig, cni_args: &str) -> Result<TapConf> {
        let raw: Raw = config.parse_specific_as_go(KEYS)?;
        let mtu = conf::link_mtu(raw.mtu)?;
        Ok(TapConf {
            multi_queue: raw.multi_queue,
            mtu,
            mac: conf::requested_mac(config, cni_args, raw.mac)?,
            owner: go_u32("owner", raw.owner.as_ref())?,
            group: go_u32("group", raw.group.as_ref())?,
            selinux_context: Some(raw.selinux_context).filter(|s| !s.is_empty()),
            bridge: Some(raw.bridge).filter(|s| !s.is_empty()),
            dns: config.dns.clone().unwrap_or_default(),
        })
    }

    /// The device to create as `name`, with the flags of the Go path the
    /// config takes (netlink when both owner and group are set and no
    /// SELinux context is, `ip tuntap` otherwise).
    pub fn spec(&self, name: &str) -> TapSpec {
        let netlink_path =
            self.selinux_context.is_none() && self.owner.is_some() && self.group.is_some();
        TapSpec {
            name: name.to_owned(),
            multi_queue: self.multi_queue,
            vnet_hdr: netlink_path,
            // Go's netlink path asks for IFF_NO_PI only with multi-queue.
            packet_info: netlink_path && !self.multi_queue,
            owner: self.owner,
            group: self.group,
            mtu: (self.mtu > 0).then_some(self.mtu),
            mac: self.mac,
        }
    }
}

/// The tap plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root)
/// with [`Tap::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Tap<K = LinuxKernel> {
    kernel: K,
}

impl Tap {
    /// The plugin on the real kernel.
    pub fn new() -> Tap {
        Tap::default()
    }
}

impl<K: NetKernel> Tap<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> Tap<K> {
        Tap { kernel }
    }
}

impl<K: NetKernel> Plugin for Tap<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "tap"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = TapConf::load(&req.config, &req.args_raw)?;
        let pod = self.kernel.open(&req.netns)?;
        // Made inside the pod under a temporary name, then renamed.
        let link = iface::create_stacked_link(
            true,
            &pod,
            pod.netns(),
            &pod,
            &req.ifname,
            |pod, name, _| {
                pod.add_tap(&conf.spec(&name), conf.selinux_context.as_deref())
                    .map(drop)
            },
        )?;
        let mut undo = Undo::<Error>::new();
        undo.push(|| pod.delete_link(link.index));
        if let Some(bridge) = &conf.bridge {
            let br = pod
                .link_by_name(bridge)
                .map_err(|source| Error::BridgeLookup {
                    bridge: bridge.clone(),
                    source: source.into(),
                })?;
            pod.set_master(link.index, br.index)?;
        }
        pod.set_up(link.index)?;
        let link = pod.link_by_index(link.index)?;
        let mut result = if req.config.ipam_type().is_empty() {
            CniResult {
                interfaces: vec![interface(&link, &req.netns)],
                ..Default::default()
            }
        } else {
            let ipam = ipam::add(req, &mut undo)?;
            let result = iface::single_interface_result(ipam, &link, &req.netns);
            // As Go: announce the address; a failure is ignored.
            let _ = pod.set_ipv4_conf(link.index, &[(Ipv4Conf::ArpNotify, 1)]);
            iface::configure(&pod, &req.ifname, &result)?;
            result
        };
        result.dns = conf.dns.clone();
        undo.commit();
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<()> {
        TapConf::load(&req.config, &req.args_raw)?;
        Ok(iface::del_link_and_lease_in(&self.kernel, req)?)
    }

    fn check(&self, req: &Request) -> Result<()> {
        TapConf::load(&req.config, &req.args_raw)?;
        let pod = self.kernel.open(&req.netns)?;
        ipam::check(req)?;
        let prev = check::prev_result(req)?;
        check::prev_container(req, &prev)?;
        // As Go: the device's own attributes are not compared.
        let link = pod
            .link_by_name(&req.ifname)
            .map_err(|source| Error::LinkLookup {
                ifname: req.ifname.clone(),
                source: source.into(),
            })?;
        Ok(check::addresses_and_routes(&pod, &link, &prev)?)
    }
    fn status(&self, req: &Request) -> Result<()> {
        Ok(ipam::status(req)?)
    }

    fn gc(&self, req: &Request) -> Result<()> {
        Ok(ipam::gc(req)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_and_group_decode_as_go_uint32_pointers() {
        assert_eq!(go_u32("owner", None).unwrap(), None);
        assert_eq!(go_u32("owner", Some(&Value::Null)).unwrap(), None);
        assert_eq!(go_u32("owner", Some(&json(0))).unwrap(), Some(0));
        assert_eq!(
            go_u32("owner", Some(&json(u64::from(u32::MAX)))).unwrap(),
            Some(u32::MAX)
        );
        for (v, shown) in [
            (json(-1), "number -1"),
            (json(4_294_967_296u64), "number 4294967296"),
            (Value::String("0".into()), "string"),
            (json(1.5), "number 1.5"),
        ] {
            let e = go_u32("group", Some(&v)).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("failed to load netconf: json: cannot unmarshal {shown} into Go struct field NetConf.group of type uint32")
            );
        }
    }

    fn json<T: serde::Serialize>(v: T) -> Value {
        serde_json::to_value(v).unwrap()
    }
}
