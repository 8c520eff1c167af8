//! A complete chained CNI plugin on this workspace's crates: it adds the
//! routes listed in its config to the pod's interface and reports them in
//! the result; DEL removes them (and succeeds when they or the pod are gone).
use cni_exec::{Plugin, Request};
use cni_netns::{Handle, KernelRoute, Netns};
use cni_types::{CniError, CniResult, Route};

#[derive(serde::Deserialize)]
struct Conf {
    #[serde(default)]
    routes: Vec<Route>,
}

type Op = fn(&Handle, &KernelRoute) -> cni_netns::Result<()>;

fn fail(e: impl std::fmt::Display) -> CniError {
    CniError::internal(e.to_string())
}

/// Applies `op` to each configured route on CNI_IFNAME inside the pod; with
/// `missing_ok`, a pod or interface that no longer exists is not an error.
fn each_route(req: &Request, op: Op, missing_ok: bool) -> Result<Vec<Route>, CniError> {
    let routes = req.config.parse_as::<Conf>()?.routes;
    let pod = Netns::open(&req.netns).and_then(|ns| Handle::in_netns(&ns));
    let link = pod.and_then(|h| Ok((h.link_by_name(&req.ifname)?, h)));
    let (link, pod) = match link {
        Err(e) if missing_ok && e.is_not_found() => return Ok(routes),
        other => other.map_err(fail)?,
    };
    for r in &routes {
        let mut kr = KernelRoute::new(r.dst);
        (kr.gateway, kr.oif, kr.priority) = (r.gw, Some(link.index), r.priority);
        op(&pod, &kr)
            .or_else(|e| (missing_ok && e.is_not_found()).then_some(()).ok_or(e))
            .map_err(fail)?;
    }
    Ok(routes)
}

struct ExtraRoutes;

impl Plugin for ExtraRoutes {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "extra-routes"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let mut result = req.config.prev_result()?.ok_or_else(|| {
            CniError::invalid_config("extra-routes must be chained: no prevResult")
        })?;
        result
            .routes
            .extend(each_route(req, |h, r| h.add_route(r), false)?);
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        each_route(req, |h, r| h.del_route(r), true).map(drop)
    }
}

fn main() {
    cni_exec::run(&ExtraRoutes)
}

/// A plugin author's unit tests: a [`Request`] built in code, the plugin
/// called directly. No root, no processes, no environment variables.
#[cfg(test)]
mod tests {
    use super::*;
    use cni_exec::Command;
    use cni_types::{ErrorCode, IpConfig, NetworkConfig};
    use serde_json::json;

    fn request(command: Command, conf: NetworkConfig) -> Request {
        Request::builder(command, conf)
            .container_id("c1")
            .netns("/run/netns/no-such-pod-here")
            .ifname("eth0")
            .build()
            .unwrap()
    }

    fn conf(prev: Option<&CniResult>) -> NetworkConfig {
        let mut b = NetworkConfig::builder("net", "extra-routes")
            .cni_version("1.0.0")
            .specific("routes", json!([{"dst": "192.0.2.0/24"}]));
        if let Some(p) = prev {
            b = b.prev_result(p);
        }
        b.build().unwrap()
    }

    #[test]
    fn add_must_be_chained() {
        let e = ExtraRoutes
            .add(&request(Command::Add, conf(None)))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidNetworkConfig);
    }

    #[test]
    fn add_fails_cleanly_when_the_pod_is_missing() {
        let mut prev = CniResult::default();
        prev.ips.push(IpConfig::new("10.0.0.2/24".parse().unwrap()));
        let e = ExtraRoutes
            .add(&request(Command::Add, conf(Some(&prev))))
            .unwrap_err();
        assert!(e.msg.contains("no-such-pod-here"), "{}", e.msg);
    }

    #[test]
    fn del_of_a_vanished_pod_succeeds() {
        ExtraRoutes.del(&request(Command::Del, conf(None))).unwrap();
    }
}
