//! A complete chained CNI plugin on this workspace's crates: it adds the
//! routes listed in its config to the pod's interface and reports them in
//! the result; DEL removes them (and succeeds when they or the pod are gone).
//!
//! Its kernel work goes through [`NetKernel`], so that its unit tests run
//! it on a `cni_netns::kernel::FakeKernel` without root; the
//! binary uses the real kernel ([`LinuxKernel`]).
use cni_exec::{Plugin, Request};
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::KernelRoute;
use cni_types::{CniError, CniResult, Route};

#[derive(serde::Deserialize)]
struct Conf {
    #[serde(default)]
    routes: Vec<Route>,
}

type Op<H> = fn(&H, &KernelRoute) -> cni_netns::Result<()>;

fn fail(e: impl std::fmt::Display) -> CniError {
    CniError::internal(e.to_string())
}

/// Applies `op` to each configured route on CNI_IFNAME inside the pod; with
/// `missing_ok`, a pod or interface that no longer exists is not an error.
fn each_route<K: NetKernel>(
    kernel: &K,
    req: &Request,
    op: Op<K::Handle>,
    missing_ok: bool,
) -> Result<Vec<Route>, CniError> {
    let routes = req.config.parse_as::<Conf>()?.routes;
    let pod = kernel.open(&req.netns);
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

/// The plugin, on the real kernel unless given another.
#[derive(Default)]
struct ExtraRoutes<K = LinuxKernel> {
    kernel: K,
}

impl<K: NetKernel> Plugin for ExtraRoutes<K> {
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
            .extend(each_route(&self.kernel, req, |h, r| h.add_route(r), false)?);
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        each_route(&self.kernel, req, |h, r| h.del_route(r), true).map(drop)
    }
}

fn main() {
    cni_exec::run(&ExtraRoutes::<LinuxKernel>::default())
}

/// A plugin author's unit tests: a [`Request`] built in code, the plugin
/// called directly, its kernel steps run on a [`FakeKernel`]. No root, no
/// processes, no environment variables.
#[cfg(test)]
mod tests {
    use super::*;
    use cni_exec::Command;
    use cni_netns::kernel::{FakeKernel, KernelOp};
    use cni_types::{ErrorCode, IpConfig, NetworkConfig};
    use serde_json::json;

    const POD: &str = "/run/netns/pod";

    fn request_in(command: Command, conf: NetworkConfig, netns: &str) -> Request {
        Request::builder(command, conf)
            .container_id("c1")
            .netns(netns)
            .ifname("eth0")
            .build()
            .unwrap()
    }

    fn request(command: Command, conf: NetworkConfig) -> Request {
        request_in(command, conf, "/run/netns/no-such-pod-here")
    }

    fn conf_with(prev: Option<&CniResult>, routes: serde_json::Value) -> NetworkConfig {
        let mut b = NetworkConfig::builder("net", "extra-routes")
            .cni_version("1.0.0")
            .specific("routes", routes);
        if let Some(p) = prev {
            b = b.prev_result(p);
        }
        b.build().unwrap()
    }

    fn conf(prev: Option<&CniResult>) -> NetworkConfig {
        conf_with(prev, json!([{"dst": "192.0.2.0/24"}]))
    }

    /// A fake node whose pod has eth0 with 10.0.0.2/24 (what the plugin
    /// before this one in the chain made).
    fn fake_pod() -> (FakeKernel, CniResult) {
        let kernel = FakeKernel::new();
        kernel.add_netns(POD);
        let eth0 = kernel.add_device(POD, "eth0");
        let pod = kernel.open(POD).unwrap();
        let addr = "10.0.0.2/24".parse().unwrap();
        pod.add_address(eth0, addr, Default::default()).unwrap();
        let mut prev = CniResult::default();
        prev.ips.push(IpConfig::new(addr));
        (kernel, prev)
    }

    #[test]
    fn add_must_be_chained() {
        let e = ExtraRoutes::<LinuxKernel>::default()
            .add(&request(Command::Add, conf(None)))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidNetworkConfig);
    }

    #[test]
    fn add_fails_cleanly_when_the_pod_is_missing() {
        let mut prev = CniResult::default();
        prev.ips.push(IpConfig::new("10.0.0.2/24".parse().unwrap()));
        let e = ExtraRoutes::<LinuxKernel>::default()
            .add(&request(Command::Add, conf(Some(&prev))))
            .unwrap_err();
        assert!(e.msg.contains("no-such-pod-here"), "{}", e.msg);
    }

    #[test]
    fn del_of_a_vanished_pod_succeeds() {
        ExtraRoutes::<LinuxKernel>::default()
            .del(&request(Command::Del, conf(None)))
            .unwrap();
    }

    #[test]
    fn add_and_del_put_and_take_the_routes_on_the_fake_kernel() {
        let (kernel, prev) = fake_pod();
        let routes = json!([{"dst": "192.0.2.0/24"}, {"dst": "198.51.100.0/24", "gw": "10.0.0.1"}]);
        let plugin = ExtraRoutes {
            kernel: kernel.clone(),
        };
        let added = plugin
            .add(&request_in(
                Command::Add,
                conf_with(Some(&prev), routes.clone()),
                POD,
            ))
            .unwrap();
        assert_eq!(added.routes.len(), 2);
        assert_eq!(
            kernel.route_list(POD),
            [
                "10.0.0.0/24 dev eth0 src 10.0.0.2",
                "192.0.2.0/24 dev eth0",
                "198.51.100.0/24 via 10.0.0.1 dev eth0"
            ]
        );
        plugin
            .del(&request_in(
                Command::Del,
                conf_with(None, routes.clone()),
                POD,
            ))
            .unwrap();
        assert_eq!(
            kernel.route_list(POD),
            ["10.0.0.0/24 dev eth0 src 10.0.0.2"]
        );
        // Gone already, or the pod gone: DEL still succeeds.
        plugin
            .del(&request_in(
                Command::Del,
                conf_with(None, routes.clone()),
                POD,
            ))
            .unwrap();
        kernel.remove_netns(POD);
        plugin
            .del(&request_in(Command::Del, conf_with(None, routes), POD))
            .unwrap();
        let ops: Vec<KernelOp> = kernel.calls().iter().map(|c| c.op).collect();
        assert_eq!(
            ops,
            [
                KernelOp::AddAddress,
                KernelOp::AddRoute,
                KernelOp::AddRoute,
                KernelOp::DelRoute,
                KernelOp::DelRoute
            ]
        );
    }

    #[test]
    fn add_reports_the_kernel_refusing_a_route() {
        let (kernel, prev) = fake_pod();
        // Off-link gateway: the kernel answers "Network is unreachable".
        let routes = json!([{"dst": "198.51.100.0/24", "gw": "192.0.2.1"}]);
        let e = ExtraRoutes {
            kernel: kernel.clone(),
        }
        .add(&request_in(
            Command::Add,
            conf_with(Some(&prev), routes),
            POD,
        ))
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(e.msg.contains("Network is unreachable"), "{}", e.msg);
        // An injected failure is reported the same way.
        kernel.fail_next(KernelOp::AddRoute, POD, cni_netns::kernel::Errno::EPERM);
        let e = ExtraRoutes { kernel }
            .add(&request_in(Command::Add, conf(Some(&prev)), POD))
            .unwrap_err();
        assert!(e.msg.contains("not permitted"), "{}", e.msg);
    }
}
