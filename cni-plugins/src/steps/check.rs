//! CHECK: the previous result against the kernel, with the Go plugins'
//! messages (`validateCniContainerInterface`,
//! `ip.ValidateExpectedInterfaceIPs`, `ip.ValidateExpectedRoute`).

use cni_exec::Request;
use cni_netns::kernel::NetnsHandle;
use cni_netns::{AddressFamilyFilter, Link};
use cni_types::{CniResult, Interface};

use crate::{Error, Result};

/// The previous result CHECK compares against; Go's message when missing.
pub(crate) fn prev_result(req: &Request) -> Result<CniResult> {
    req.config.prev_result()?.ok_or(Error::PrevResultMissing)
}

/// The previous result's interface for this attachment (`CNI_IFNAME` in
/// `CNI_NETNS`), with Go's message when there is none.
pub(crate) fn prev_container<'a>(req: &Request, prev: &'a CniResult) -> Result<&'a Interface> {
    prev.interfaces
        .iter()
        .find(|i| i.name == req.ifname && i.sandbox == req.netns)
        .ok_or_else(|| Error::CheckSandboxMismatch {
            netns: req.netns.clone(),
        })
}

/// Go's `validateCniContainerInterface`: the link exists in the pod, has
/// the expected kind, and the MAC the result names.
pub(crate) fn container_link(
    pod: &impl NetnsHandle,
    intf: &Interface,
    kind: Option<&str>,
) -> Result<Link> {
    let link = pod
        .link_by_name(&intf.name)
        .map_err(|_| Error::CheckPodLinkMissing {
            name: intf.name.clone(),
        })?;
    container_matches(&link, intf, kind)?;
    Ok(link)
}

/// The kind and MAC part of [`container_link`], for a link already found.
pub(crate) fn container_matches(link: &Link, intf: &Interface, kind: Option<&str>) -> Result<()> {
    if let Some(kind) = kind {
        if link.kind.as_deref() != Some(kind) {
            return Err(Error::CheckPodLinkKind {
                name: link.name.clone(),
                kind: kind.to_owned(),
            });
        }
    }
    let mac = link.mac.map(|m| m.to_string()).unwrap_or_default();
    if !intf.mac.is_empty() && intf.mac != mac {
        return Err(Error::CheckPodLinkMac {
            name: intf.name.clone(),
            expected: intf.mac.clone(),
            found: mac,
        });
    }
    Ok(())
}

/// Go's `ip.ValidateExpectedInterfaceIPs` and `ip.ValidateExpectedRoute`
/// for the pod interface `link`; and, ours, that no address on it (the
/// result's or the IPv6 link-local one) failed duplicate address
/// detection: with optimistic DAD the ADD returns before the kernel can
/// find a duplicate, and CHECK is where it is reported.
pub(crate) fn addresses_and_routes(
    pod: &impl NetnsHandle,
    link: &Link,
    prev: &CniResult,
) -> Result<()> {
    let present = pod.addresses(Some(link.index), AddressFamilyFilter::All)?;
    for ip in &prev.ips {
        if !present.iter().any(|a| a.address == ip.address) {
            return Err(Error::CheckAddressMissing {
                address: ip.address.to_string(),
                ifname: link.name.clone(),
            });
        }
    }
    if let Some(failed) = present.iter().find(|a| a.is_dad_failed()) {
        return Err(Error::CheckAddressDadFailed {
            address: failed.address.to_string(),
            ifname: link.name.clone(),
        });
    }
    if prev.routes.is_empty() {
        return Ok(());
    }
    let routes = pod.routes(AddressFamilyFilter::All)?;
    for r in &prev.routes {
        let found = routes
            .iter()
            .any(|k| k.dst == r.dst && (r.gw.is_none() || k.gateway == r.gw));
        if !found {
            return Err(Error::CheckRouteMissing {
                dst: r.dst.to_string(),
                gateway: r.gw.map(|g| g.to_string()).unwrap_or_default(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_go_s() {
        let e = Error::CheckRouteMissing {
            dst: "10.0.0.0/8".into(),
            gateway: String::new(),
        };
        assert_eq!(
            e.to_string(),
            "Expected Route {Dst: 10.0.0.0/8 GW: } not found in routing table"
        );
        let e = Error::CheckSandboxMismatch {
            netns: "/run/netns/x".into(),
        };
        assert_eq!(
            e.to_string(),
            "Sandbox in prevResult  doesn't match configured netns: /run/netns/x"
        );
        assert_eq!(e.code(), cni_types::ErrorCode::Internal);
    }
}
