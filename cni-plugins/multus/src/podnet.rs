//! What multus does in the pod's namespace itself: refuse an interface name
//! that already exists (multus-cni `validateIfName`) and apply
//! `default-route` requests to the kernel and to libcni's cached result
//! (`pkg/netutils/netutils.go`).

use std::net::IpAddr;
use std::path::Path;

use cni_netns::{AddressFamilyFilter, Handle, KernelRoute, Netns};
use serde_json::Value;

use super::cache::write_atomic;
use crate::Error;

fn netns_err(op: &str, netns: &str, e: cni_netns::Error) -> Error {
    Error::PodNetwork {
        op: op.to_string(),
        netns: netns.to_string(),
        reason: e.to_string(),
    }
}

/// Fails when `ifname` already exists in the pod's namespace (Go:
/// "cannot set ... interface name ... already exists").
pub fn check_ifname_free(netns: &str, ifname: &str) -> Result<(), Error> {
    let ns = Netns::open(netns).map_err(|e| netns_err("open", netns, e))?;
    let h = Handle::in_netns(&ns).map_err(|e| netns_err("open netlink in", netns, e))?;
    match h.link_by_name(ifname) {
        Ok(_) => Err(Error::InterfaceExists {
            ifname: ifname.to_string(),
            netns: netns.to_string(),
        }),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(netns_err("look up interface in", netns, e)),
    }
}

/// Removes the default routes of the families asked for via `ifname`, then
/// adds one default route via each of `gateways` on `ifname` (an existing
/// identical route is fine).
pub fn set_default_routes(
    netns: &str,
    ifname: &str,
    remove_v4: bool,
    remove_v6: bool,
    gateways: &[IpAddr],
) -> Result<(), Error> {
    let ns = Netns::open(netns).map_err(|e| netns_err("open", netns, e))?;
    let h = Handle::in_netns(&ns).map_err(|e| netns_err("open netlink in", netns, e))?;
    let link = h
        .link_by_name(ifname)
        .map_err(|e| netns_err("look up interface in", netns, e))?;
    for (family, on) in [
        (AddressFamilyFilter::V4, remove_v4),
        (AddressFamilyFilter::V6, remove_v6),
    ] {
        if !on {
            continue;
        }
        let routes = h
            .routes(family)
            .map_err(|e| netns_err("list routes in", netns, e))?;
        for r in routes
            .iter()
            .filter(|r| r.is_default() && r.oif == Some(link.index))
        {
            h.del_route(r)
                .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
                .map_err(|e| netns_err("delete default route in", netns, e))?;
        }
    }
    for gw in gateways {
        let mut r = KernelRoute::default_via(*gw);
        r.oif = Some(link.index);
        h.add_route(&r)
            .or_else(|e| if e.is_exists() { Ok(()) } else { Err(e) })
            .map_err(|e| {
                netns_err(
                    &format!("add default route via {gw} to {ifname} in"),
                    netns,
                    e,
                )
            })?;
    }
    Ok(())
}

fn is_default_dst(dst: Option<&str>, v6: bool) -> bool {
    match dst {
        Some("0.0.0.0/0") => !v6,
        Some("::/0") => v6,
        _ => false,
    }
}

/// Rewrites a cached libcni result (`{"kind": "cniCacheV1", ..., "result":
/// {...}}`) the way the kernel was changed: default routes of the removed
/// families dropped, one per requested gateway added. Handles the 0.2.0
/// shape (`ip4.routes`/`ip6.routes`) and the newer one (`routes`).
pub fn rewrite_cached_result(
    cache: &mut Value,
    remove_v4: bool,
    remove_v6: bool,
    gateways: &[IpAddr],
) -> Result<(), String> {
    let result = cache
        .get_mut("result")
        .and_then(Value::as_object_mut)
        .ok_or("cannot get result from cache")?;
    let keep = |r: &Value| {
        let dst = r.get("dst").and_then(Value::as_str);
        !((remove_v4 && is_default_dst(dst, false)) || (remove_v6 && is_default_dst(dst, true)))
    };
    let route = |gw: &IpAddr| {
        let dst = if gw.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
        serde_json::json!({"dst": dst, "gw": gw.to_string()})
    };
    if result.contains_key("ip4") || result.contains_key("ip6") {
        for (key, v6) in [("ip4", false), ("ip6", true)] {
            if let Some(block) = result.get_mut(key).and_then(Value::as_object_mut) {
                let mut routes: Vec<Value> = block
                    .get("routes")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter(|r| keep(r)).cloned().collect())
                    .unwrap_or_default();
                routes.extend(gateways.iter().filter(|g| g.is_ipv6() == v6).map(route));
                block.insert("routes".into(), Value::Array(routes));
            }
        }
    } else {
        let mut routes: Vec<Value> = result
            .get("routes")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter(|r| keep(r)).cloned().collect())
            .unwrap_or_default();
        routes.extend(gateways.iter().map(route));
        result.insert("routes".into(), Value::Array(routes));
    }
    Ok(())
}

/// Applies [`rewrite_cached_result`] to libcni's cache file of the
/// attachment (`<cniDir>/results/<network>-<containerID>-<ifname>`),
/// atomically. A missing file is left alone.
pub fn rewrite_cache_file(
    cni_dir: &Path,
    network: &str,
    container_id: &str,
    ifname: &str,
    remove_v4: bool,
    remove_v6: bool,
    gateways: &[IpAddr],
) -> Result<(), Error> {
    let path = cni_dir
        .join("results")
        .join(format!("{network}-{container_id}-{ifname}"));
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                op: "read cached result",
                path,
                source,
            })
        }
    };
    let mut v: Value = serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
        what: path.display().to_string(),
        reason: e.to_string(),
    })?;
    rewrite_cached_result(&mut v, remove_v4, remove_v6, gateways).map_err(|reason| {
        Error::Decode {
            what: path.display().to_string(),
            reason,
        }
    })?;
    write_atomic(&path, &serde_json::to_vec(&v).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cache_rewrite_new_shape() {
        let mut c = json!({"kind": "cniCacheV1", "result": {"cniVersion": "1.0.0",
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": "::/0", "gw": "fd00::1"}, {"dst": "10.9.0.0/16"}]}});
        rewrite_cached_result(&mut c, true, false, &["10.1.0.1".parse().unwrap()]).unwrap();
        assert_eq!(
            c["result"]["routes"],
            json!([{"dst": "::/0", "gw": "fd00::1"}, {"dst": "10.9.0.0/16"}, {"dst": "0.0.0.0/0", "gw": "10.1.0.1"}])
        );
        rewrite_cached_result(&mut c, true, true, &[]).unwrap();
        assert_eq!(c["result"]["routes"], json!([{"dst": "10.9.0.0/16"}]));
        assert!(rewrite_cached_result(&mut json!({}), true, true, &[]).is_err());
    }

    #[test]
    fn cache_rewrite_020_shape() {
        let mut c = json!({"result": {"cniVersion": "0.2.0",
            "ip4": {"ip": "10.0.0.2/24", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]},
            "ip6": {"ip": "fd00::2/64", "routes": [{"dst": "::/0"}]}}});
        rewrite_cached_result(&mut c, true, true, &["fd00::9".parse().unwrap()]).unwrap();
        assert_eq!(c["result"]["ip4"]["routes"], json!([]));
        assert_eq!(
            c["result"]["ip6"]["routes"],
            json!([{"dst": "::/0", "gw": "fd00::9"}])
        );
    }

    #[test]
    fn cache_file_missing_is_fine() {
        let d = tempfile::tempdir().unwrap();
        rewrite_cache_file(d.path(), "n", "c", "eth0", true, true, &[]).unwrap();
        std::fs::create_dir(d.path().join("results")).unwrap();
        let p = d.path().join("results/n-c-eth0");
        std::fs::write(&p, br#"{"result":{"routes":[{"dst":"0.0.0.0/0"}]}}"#).unwrap();
        rewrite_cache_file(d.path(), "n", "c", "eth0", true, false, &[]).unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(v["result"]["routes"], json!([]));
    }

    #[test]
    fn missing_netns_is_a_clear_error() {
        let e = check_ifname_free("/nonexistent/netns", "eth0").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/netns"), "{e}");
    }
}
