//! The delegate configuration flannel renders from its own config and
//! `subnet.env` (flannel-io/cni-plugin `flannel_linux.go`, doCmdAdd and
//! getDelegateIPAM).

use cni_types::Route;
use serde_json::{Map, Value};

use super::error::{Error, Result};
use super::subnet_env::SubnetEnv;
use super::FlannelConf;

/// Go marshals `map[string]interface{}` with sorted keys at every level;
/// the saved delegate file and the delegate's stdin are byte-compatible
/// with the reference only if we do the same.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Checks the `delegate` dictionary as the reference does.
pub fn check_delegate(delegate: &Map<String, Value>) -> Result<()> {
    if delegate.get("type").is_some_and(|t| !t.is_string()) {
        return Err(Error::DelegateTypeNotString);
    }
    if delegate.contains_key("name") {
        return Err(Error::DelegateKeyForbidden { key: "name" });
    }
    if delegate.contains_key("ipam") {
        return Err(Error::DelegateKeyForbidden { key: "ipam" });
    }
    Ok(())
}

fn delegate_ipam(conf: &FlannelConf, env: &SubnetEnv) -> Result<Value> {
    let mut ipam = conf.ipam.clone().unwrap_or_default();
    ipam.entry("type")
        .or_insert_with(|| Value::from("host-local"));
    let mut ranges = Vec::new();
    for subnet in [env.subnet, env.ipv6_subnet].into_iter().flatten() {
        ranges.push(serde_json::json!([{ "subnet": subnet.to_string() }]));
    }
    ipam.insert("ranges".into(), Value::Array(ranges));
    let mut routes: Vec<Route> = match ipam.get("routes") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => cni_types::json::from_value_naming_key(v.clone()).map_err(|e| {
            Error::IpamRoutesInvalid {
                reason: e.to_string(),
            }
        })?,
    };
    for n in env.networks.iter().chain(&env.ipv6_networks) {
        routes.push(Route::new(*n, None));
    }
    ipam.remove("routes");
    let mut ipam = sorted(Value::Object(ipam));
    // Routes are Go structs (field order dst, gw, ...), not maps.
    let routes = serde_json::to_value(routes).map_err(|source| crate::Error::Serialize {
        object: "IPAM routes",
        source,
    })?;
    if let Value::Object(m) = &mut ipam {
        insert_sorted(m, "routes", routes);
    }
    Ok(ipam)
}

fn insert_sorted(m: &mut Map<String, Value>, key: &str, value: Value) {
    let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
    entries.push((key.to_string(), value));
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    *m = entries.into_iter().collect();
}

/// Renders the delegate config: the `delegate` dictionary with `name`,
/// `type` (default bridge), `ipMasq` (default: not `FLANNEL_IPMASQ`), `mtu`
/// (default `FLANNEL_MTU`), `isGateway` (bridge only, default true),
/// `cniVersion` (copied), `runtimeConfig` (passed through) and `ipam`
/// (ranges and routes from `subnet.env`).
pub fn render(conf: &FlannelConf, env: &SubnetEnv) -> Result<Value> {
    let mut d = conf.delegate.clone().unwrap_or_default();
    check_delegate(&d)?;
    if let Some(rc) = &conf.runtime_config {
        d.insert("runtimeConfig".into(), Value::Object(rc.clone()));
    }
    d.insert("name".into(), Value::from(conf.name.clone()));
    d.entry("type").or_insert_with(|| Value::from("bridge"));
    if !d.contains_key("ipMasq") {
        d.insert("ipMasq".into(), Value::from(!env.ipmasq.unwrap_or(false)));
    }
    if !d.contains_key("mtu") {
        d.insert("mtu".into(), env.mtu.map_or(Value::Null, Value::from));
    }
    if d.get("type").and_then(Value::as_str) == Some("bridge") {
        d.entry("isGateway").or_insert(Value::Bool(true));
    }
    if !conf.cni_version.is_empty() {
        d.insert("cniVersion".into(), Value::from(conf.cni_version.clone()));
    }
    let ipam = delegate_ipam(conf, env)?;
    let mut d = match sorted(Value::Object(d)) {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    insert_sorted(&mut d, "ipam", ipam);
    Ok(Value::Object(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn conf(json: &str) -> FlannelConf {
        serde_json::from_str(json).unwrap()
    }

    fn env(text: &str) -> SubnetEnv {
        SubnetEnv::parse(text, Path::new("subnet.env")).unwrap()
    }

    const V4: &str = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n";

    #[test]
    fn reference_v4_vector() {
        let c = conf(r#"{"name":"cni-flannel","type":"flannel","subnetFile":"x","dataDir":"y"}"#);
        let out = serde_json::to_string(&render(&c, &env(V4)).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"}],"type":"host-local"},"isGateway":true,"mtu":1472,"name":"cni-flannel","type":"bridge"}"#
        );
    }

    #[test]
    fn dual_stack_version_runtime_config_and_custom_ipam() {
        let c = conf(
            r#"{"cniVersion":"0.3.1","name":"cbr0","type":"flannel",
                "delegate":{"hairpinMode":true,"isDefaultGateway":true},
                "ipam":{"type":"host-local","dataDir":"/tmp/d","routes":[{"dst":"192.168.0.0/16","gw":"10.1.17.254"}]},
                "runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}"#,
        );
        let e = env("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_IPV6_NETWORK=fc00::/48\nFLANNEL_IPV6_SUBNET=fc00::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n");
        let v = render(&c, &e).unwrap();
        assert_eq!(v["cniVersion"], "0.3.1");
        assert_eq!(v["ipMasq"], true);
        assert_eq!(v["mtu"], 1450);
        assert_eq!(v["hairpinMode"], true);
        assert_eq!(v["ipam"]["dataDir"], "/tmp/d");
        assert_eq!(
            v["ipam"]["ranges"],
            serde_json::json!([[{"subnet": "10.1.17.0/24"}], [{"subnet": "fc00::/64"}]])
        );
        assert_eq!(
            v["ipam"]["routes"],
            serde_json::json!([{"dst": "192.168.0.0/16", "gw": "10.1.17.254"}, {"dst": "10.1.0.0/16"}, {"dst": "fc00::/48"}])
        );
        assert_eq!(v["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        let mut sorted_keys = keys.clone();
        sorted_keys.sort();
        assert_eq!(keys, sorted_keys);
    }

    #[test]
    fn delegate_rules() {
        for (d, msg) in [
            (r#"{"type":5}"#, "must have (string) 'type'"),
            (r#"{"name":"x"}"#, "must not have 'name'"),
            (r#"{"ipam":{}}"#, "must not have 'ipam'"),
        ] {
            let c = conf(&format!(
                r#"{{"name":"n","type":"flannel","delegate":{d}}}"#
            ));
            let err = render(&c, &env(V4)).unwrap_err().to_string();
            assert!(err.contains(msg), "{err}");
        }
        // a non-bridge delegate gets no isGateway
        let c =
            conf(r#"{"name":"n","type":"flannel","delegate":{"type":"ipvlan","master":"eth0"}}"#);
        let v = render(&c, &env(V4)).unwrap();
        assert!(v.get("isGateway").is_none());
        assert_eq!(v["type"], "ipvlan");
    }
}
