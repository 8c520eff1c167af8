//! A complete chained CNI plugin on this workspace's crates: it adds the
//! routes listed in its config to the pod's interface and reports them in
//! the result; DEL removes them (and succeeds when they or the pod are gone).
use cni_exec::{Plugin, Request};
use cni_netns::{Handle, Netns, Route as KernelRoute};
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
