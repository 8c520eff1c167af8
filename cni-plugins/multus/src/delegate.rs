//! Delegates: the CNI configurations multus runs for a pod (a conf or a
//! conflist, kept verbatim), with what the pod's selection element asked
//! for (multus-cni `pkg/types/conf.go` `LoadDelegateNetConf`,
//! `CheckGatewayConfig`).

use std::net::IpAddr;

use cni_types::{Bandwidth, PortMapping};
use serde_json::{Map, Value};

use super::capabilities::RuntimeConfig;
use super::selection::NetworkSelectionElement;
use crate::Error;

/// One network to attach.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delegate {
    /// The attachment's name: `<namespace>/<nad>` for a selected NAD, else
    /// the config's `name` (this is what network-status shows).
    pub name: String,
    /// The config object, verbatim (a conf, or a conflist when
    /// [`Delegate::is_conflist`]).
    pub config: Map<String, Value>,
    /// True when `config` is a conflist (`plugins`).
    pub is_conflist: bool,
    /// The master (cluster network): its result is multus's result and it
    /// uses `CNI_IFNAME`.
    pub master: bool,
    /// `interface` from the selection element.
    pub ifname_request: String,
    /// `mac` from the selection element.
    pub mac_request: String,
    /// `infiniband-guid` from the selection element.
    pub infiniband_guid_request: String,
    /// `ips` from the selection element.
    pub ip_request: Option<Vec<String>>,
    /// `portMappings` from the selection element.
    pub port_mappings_request: Option<Vec<PortMapping>>,
    /// `bandwidth` from the selection element.
    pub bandwidth_request: Option<Bandwidth>,
    /// `default-route` from the selection element.
    pub gateway_request: Option<Vec<IpAddr>>,
    /// `deviceID` from the selection element, or the device of
    /// [`Delegate::resource_name`] (see [`crate::devices`]).
    pub device_id: String,
    /// The NAD's `k8s.v1.cni.cncf.io/resourceName` annotation.
    pub resource_name: String,
    /// Remove this delegate's IPv4 default route (another one was chosen).
    pub filter_v4_gateway: bool,
    /// Remove this delegate's IPv6 default route.
    pub filter_v6_gateway: bool,
    /// The exact config bytes the delegate was given at ADD, as the
    /// delegate cache stored them (`Bytes`): DEL and CHECK hand these on
    /// unchanged instead of re-encoding `config` (see [`Delegate::config_bytes`]).
    pub cached_bytes: Option<Vec<u8>>,
}

fn delegate_err(reason: impl Into<String>) -> Error {
    Error::DelegateConfig {
        what: "config".into(),
        reason: reason.into(),
    }
}

/// Merges `args` into `conf.args.cni` (the reference's `injectCNIArgs`).
fn inject_cni_args(conf: &mut Map<String, Value>, args: &Map<String, Value>) {
    let outer = conf
        .entry("args")
        .or_insert_with(|| Value::Object(Map::new()));
    if !outer.is_object() {
        *outer = Value::Object(Map::new());
    }
    if let Value::Object(outer) = outer {
        let cni = outer
            .entry("cni")
            .or_insert_with(|| Value::Object(Map::new()));
        if !cni.is_object() {
            *cni = Value::Object(Map::new());
        }
        if let Value::Object(cni) = cni {
            for (k, v) in args {
                cni.insert(k.clone(), v.clone());
            }
        }
    }
}

impl Delegate {
    /// A delegate from a config object (inline delegate, file or NAD) and the
    /// selection element that chose it, if any. A conf needs `type`; a
    /// conflist needs `plugins` whose first entry has `type`. `cni-args` are
    /// merged into `args.cni` of the conf or of every plugin of the list.
    pub fn from_value(
        value: Value,
        element: Option<&NetworkSelectionElement>,
    ) -> Result<Delegate, Error> {
        let Value::Object(mut config) = value else {
            return Err(delegate_err("a delegate must be a JSON object"));
        };
        let has_type = config
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty());
        let is_conflist = if has_type {
            false
        } else {
            match config.get("plugins") {
                Some(Value::Array(p)) if !p.is_empty() => {
                    for (i, plugin) in p.iter().enumerate() {
                        if plugin
                            .get("type")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                        {
                            return Err(delegate_err(format!(
                                "a plugin delegate must have the 'type' field (plugins[{i}])"
                            )));
                        }
                    }
                    true
                }
                _ => {
                    return Err(delegate_err(
                        "delegate must have the 'type' or 'plugins' field",
                    ))
                }
            }
        };
        let name = config
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut d = Delegate {
            name,
            is_conflist,
            ..Default::default()
        };
        if let Some(e) = element {
            if let Some(args) = &e.cni_args {
                if is_conflist {
                    if let Some(Value::Array(plugins)) = config.get_mut("plugins") {
                        for p in plugins.iter_mut().filter_map(Value::as_object_mut) {
                            inject_cni_args(p, args);
                        }
                    }
                } else {
                    inject_cni_args(&mut config, args);
                }
            }
            if !e.name.is_empty() {
                d.name = format!("{}/{}", e.namespace, e.name);
            }
            d.ifname_request = e.interface.clone();
            d.mac_request = e.mac.clone();
            d.infiniband_guid_request = e.infiniband_guid.clone();
            d.ip_request = e.ips.clone();
            d.port_mappings_request = e.port_mappings.clone();
            d.bandwidth_request = e.bandwidth.clone();
            d.gateway_request = e.default_route.clone();
            d.device_id = e.device_id.clone();
        }
        d.config = config;
        Ok(d)
    }

    /// The config's `name` (the network name of libcni's result cache).
    pub fn network_name(&self) -> &str {
        self.config
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The config's `cniVersion`.
    pub fn cni_version(&self) -> &str {
        self.config
            .get("cniVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The plugin type (of the first plugin for a conflist), for messages.
    pub fn plugin_type(&self) -> &str {
        let obj = if self.is_conflist {
            self.config
                .get("plugins")
                .and_then(|p| p.get(0))
                .and_then(Value::as_object)
        } else {
            Some(&self.config)
        };
        obj.and_then(|o| o.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The config as JSON bytes: the cached ADD bytes when the delegate
    /// came from the delegate cache, else `config` encoded (key order kept).
    pub fn config_bytes(&self) -> Vec<u8> {
        match &self.cached_bytes {
            Some(b) => b.clone(),
            None => serde_json::to_vec(&self.config).unwrap_or_default(),
        }
    }

    /// Sets `cniVersion` when the config has none (the reference does this
    /// for conflists on DEL with the multus config's version).
    pub fn default_cni_version(&mut self, version: &str) {
        if self.cni_version().is_empty() && !version.is_empty() {
            self.config
                .insert("cniVersion".into(), Value::String(version.into()));
            // The config changed: its bytes are `config`'s from now on.
            self.cached_bytes = None;
        }
    }

    /// The interface this delegate attaches: the requested one, `CNI_IFNAME`
    /// for the master, else `net<idx>` with `idx` its position in the
    /// delegate list (multus-cni `getIfname`).
    pub fn ifname(&self, cni_ifname: &str, idx: usize) -> String {
        if !self.ifname_request.is_empty() {
            self.ifname_request.clone()
        } else if self.master {
            cni_ifname.to_string()
        } else {
            format!("net{idx}")
        }
    }

    /// multus's runtimeConfig merged with this delegate's requests; the
    /// master gets multus's runtimeConfig unchanged (`mergeCNIRuntimeConfig`).
    pub fn runtime_config(&self, base: &RuntimeConfig) -> RuntimeConfig {
        let mut rc = base.clone();
        if self.master {
            return rc;
        }
        if let Some(p) = &self.port_mappings_request {
            rc.port_mappings = p.clone();
        }
        if let Some(b) = &self.bandwidth_request {
            rc.bandwidth = Some(b.clone());
        }
        if let Some(ips) = &self.ip_request {
            rc.ips = ips.clone();
        }
        if !self.mac_request.is_empty() {
            rc.mac = self.mac_request.clone();
        }
        if !self.infiniband_guid_request.is_empty() {
            rc.infiniband_guid = self.infiniband_guid_request.clone();
        }
        if !self.device_id.is_empty() {
            rc.device_id = self.device_id.clone();
        }
        rc
    }
}

/// Assigns the interface name of every delegate and rejects duplicates
/// (two requests for the same name, or a request colliding with `netN`).
pub fn plan_ifnames(delegates: &[Delegate], cni_ifname: &str) -> Result<Vec<String>, Error> {
    let names: Vec<String> = delegates
        .iter()
        .enumerate()
        .map(|(i, d)| d.ifname(cni_ifname, i))
        .collect();
    for (i, n) in names.iter().enumerate() {
        if let Some(j) = names[..i].iter().position(|m| m == n) {
            return Err(Error::DuplicateInterface {
                ifname: n.clone(),
                first: delegates[j].name.clone(),
                second: delegates[i].name.clone(),
            });
        }
    }
    Ok(names)
}

/// Enforces one IPv4 and one IPv6 `default-route` at most across the
/// delegates and marks the delegates whose own default routes must go
/// (multus-cni `CheckGatewayConfig`). Does nothing when no delegate asked.
pub fn check_gateways(delegates: &mut [Delegate]) -> Result<(), Error> {
    if delegates.iter().all(|d| d.gateway_request.is_none()) {
        return Ok(());
    }
    let all = || {
        delegates
            .iter()
            .flat_map(|d| d.gateway_request.iter().flatten())
    };
    let v4 = all().filter(|g| g.is_ipv4()).count();
    let v6 = all().filter(|g| g.is_ipv6()).count();
    if v4 > 1 || v6 > 1 {
        return Err(Error::DefaultRouteEcmp);
    }
    for d in delegates.iter_mut() {
        let gws = d.gateway_request.clone().unwrap_or_default();
        d.filter_v4_gateway = !gws.iter().any(IpAddr::is_ipv4);
        d.filter_v6_gateway = !gws.iter().any(IpAddr::is_ipv6);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selection::parse_networks;
    use serde_json::json;

    fn element(a: &str) -> NetworkSelectionElement {
        parse_networks("k", a, "ns").unwrap().remove(0)
    }

    #[test]
    fn conf_and_conflist() {
        let d = Delegate::from_value(json!({"name": "weave", "type": "weave-net"}), None).unwrap();
        assert!(!d.is_conflist);
        assert_eq!((d.name.as_str(), d.plugin_type()), ("weave", "weave-net"));
        let d = Delegate::from_value(
            json!({"name": "weave-list", "plugins": [{"type": "weave-net"}, {"type": "portmap"}]}),
            None,
        )
        .unwrap();
        assert!(d.is_conflist);
        assert_eq!(d.name, "weave-list");
        for bad in [
            json!({"name": "x"}),
            json!({"plugins": []}),
            json!({"plugins": [{"name": "no-type"}]}),
            json!("str"),
        ] {
            assert!(Delegate::from_value(bad.clone(), None).is_err(), "{bad}");
        }
    }

    #[test]
    fn selection_goes_into_delegate() {
        let e = element(
            r#"[{"name":"nad1","namespace":"ns1","interface":"data0","mac":"c2:11:22:33:44:66",
                "infiniband-guid":"24:8a:07:03:00:8d:ae:2e","ips":["10.1.1.5/24"],
                "portMappings":[{"hostPort":8080,"containerPort":80}],
                "bandwidth":{"ingressRate":1,"ingressBurst":2,"egressRate":3,"egressBurst":4},
                "deviceID":"0000:00:00.1","default-route":["10.1.1.1"]}]"#,
        );
        let d = Delegate::from_value(json!({"name": "n", "type": "bridge"}), Some(&e)).unwrap();
        assert_eq!(d.name, "ns1/nad1");
        assert_eq!(d.network_name(), "n");
        assert_eq!(d.ifname_request, "data0");
        let rc = d.runtime_config(&RuntimeConfig::default());
        assert_eq!(rc.mac, "c2:11:22:33:44:66");
        assert_eq!(rc.infiniband_guid, "24:8a:07:03:00:8d:ae:2e");
        assert_eq!(rc.ips, vec!["10.1.1.5/24"]);
        assert_eq!(rc.port_mappings[0].host_port, 8080);
        assert_eq!(rc.bandwidth.unwrap().ingress_rate, 1);
        assert_eq!(rc.device_id, "0000:00:00.1");
        // The master keeps multus's runtimeConfig untouched.
        let mut m = d.clone();
        m.master = true;
        let base = RuntimeConfig {
            mac: "aa:bb:cc:dd:ee:ff".into(),
            ..Default::default()
        };
        assert_eq!(m.runtime_config(&base), base);
    }

    #[test]
    fn cni_args_merge() {
        let e = element(r#"[{"name":"n","cni-args":{"args1":"val1a","x":true}}]"#);
        let d = Delegate::from_value(
            json!({"name": "n", "type": "bridge", "args": {"cni": {"args0": "val0", "args1": "val1"}}}),
            Some(&e),
        )
        .unwrap();
        assert_eq!(
            d.config["args"]["cni"],
            json!({"args0": "val0", "args1": "val1a", "x": true})
        );
        let d = Delegate::from_value(
            json!({"name": "l", "plugins": [{"type": "bridge"}, {"type": "tuning", "args": {"other": 1}}]}),
            Some(&e),
        )
        .unwrap();
        assert_eq!(d.config["plugins"][0]["args"]["cni"]["args1"], "val1a");
        assert_eq!(
            d.config["plugins"][1]["args"],
            json!({"other": 1, "cni": {"args1": "val1a", "x": true}})
        );
    }

    #[test]
    fn ifnames() {
        let mk = |master: bool, req: &str| Delegate {
            master,
            ifname_request: req.into(),
            name: req.into(),
            ..Default::default()
        };
        let ds = vec![
            mk(true, ""),
            mk(false, ""),
            mk(false, "data0"),
            mk(false, ""),
        ];
        assert_eq!(
            plan_ifnames(&ds, "eth0").unwrap(),
            ["eth0", "net1", "data0", "net3"]
        );
        let ds = vec![mk(true, ""), mk(false, "net2"), mk(false, "")];
        let e = plan_ifnames(&ds, "eth0").unwrap_err();
        assert!(e.to_string().contains("\"net2\""), "{e}");
        let ds = vec![mk(true, ""), mk(false, "eth0")];
        assert!(plan_ifnames(&ds, "eth0").is_err());
    }

    #[test]
    fn gateways() {
        let mk = |gws: Option<Vec<&str>>| Delegate {
            gateway_request: gws.map(|g| g.iter().map(|s| s.parse().unwrap()).collect()),
            ..Default::default()
        };
        let mut ds = vec![mk(None), mk(Some(vec!["10.0.0.1", "fd00::1"]))];
        check_gateways(&mut ds).unwrap();
        assert!(ds[0].filter_v4_gateway && ds[0].filter_v6_gateway);
        assert!(!ds[1].filter_v4_gateway && !ds[1].filter_v6_gateway);
        let mut ds = vec![mk(Some(vec!["10.0.0.1"])), mk(Some(vec!["10.0.1.1"]))];
        assert_eq!(
            check_gateways(&mut ds).unwrap_err().to_string(),
            "multus does not support ECMP for default-route"
        );
        let mut ds = vec![mk(None), mk(None)];
        check_gateways(&mut ds).unwrap();
        assert!(!ds[0].filter_v4_gateway);
        // An empty list keeps the delegate's own routes but filters the others.
        let mut ds = vec![mk(None), mk(Some(vec![]))];
        check_gateways(&mut ds).unwrap();
        assert!(ds[0].filter_v4_gateway && ds[1].filter_v4_gateway);
    }
}
