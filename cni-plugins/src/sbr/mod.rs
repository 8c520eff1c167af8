//! The sbr (source-based routing) meta-plugin, chained only: traffic from
//! each of the interface's addresses is routed by a table of its own, so a
//! pod with several interfaces answers through the interface a packet came
//! from.
//!
//! Behaviour follows containernetworking/plugins `plugins/meta/sbr`
//! (current version): for each address of the interface in `prevResult`,
//! the first free table from 100 on, a rule `from <ip>/32|128 lookup <table>`
//! with the priority the kernel picks, a default route via the gateway and
//! a copy of the interface's main-table routes that belong to the address;
//! then the interface's routes leave the main table (or, with
//! `addSourceHints`, only its non-link routes do). With `table`, only the
//! rules are added (the routes are expected in that table already);
//! `vrfname` (ours) does the same with the table of a VRF device. DEL
//! removes the rules from the interface's addresses, and (ours) the routes
//! of the tables it created. The result is `prevResult`, unchanged.
//!
//! ```
//! use cni_exec::{dispatch, Env};
//! use cni_plugins::sbr::Sbr;
//!
//! let env = Env::new([
//!     ("CNI_COMMAND", "ADD"),
//!     ("CNI_CONTAINERID", "c1"),
//!     ("CNI_NETNS", "/run/netns/c1"),
//!     ("CNI_IFNAME", "eth0"),
//!     ("CNI_PATH", "/opt/cni/bin"),
//! ]);
//! let out = dispatch(&Sbr::new(), &env, br#"{"cniVersion":"1.0.0","name":"n","type":"sbr"}"#);
//! assert_eq!(out.exit_code, 1);
//! assert!(String::from_utf8(out.stdout).unwrap().contains("prevResult"));
//! ```

pub(crate) mod config;
mod error;

use std::net::IpAddr;

use cni_exec::{Plugin, Request};
use cni_files::FileLock;
use cni_netns::kernel::{LinuxKernel, NetKernel, NetnsHandle};
use cni_netns::{AddressFamilyFilter, KernelRoute, Link, RoutingRule, TABLE_MAIN};
use cni_types::{CniResult, IpConfig};

pub use config::{SbrConf, FIRST_TABLE};

use crate::steps::{self, Undo};
pub use error::{Error, Result};

/// The sbr plugin, on the real kernel by default; on another one (a
/// `cni_netns::kernel::FakeKernel` in tests without root) with
/// [`Sbr::with_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Sbr<K = LinuxKernel> {
    kernel: K,
}

/// Runs `f` with a handle on the pod namespace under Go's lock (the
/// namespace file itself); `Ok(None)` when the namespace is gone.
fn in_pod<K: NetKernel, T>(
    kernel: &K,
    path: &str,
    f: impl FnOnce(&K::Handle) -> Result<T>,
) -> Result<Option<T>> {
    let lock = match FileLock::acquire(path) {
        Ok(l) => l,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(crate::Error::atomic_write(e).into()),
    };
    let h = match kernel.open(path) {
        Ok(h) => h,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let out = f(&h)?;
    drop(lock);
    Ok(Some(out))
}

/// The addresses of `prevResult` that belong to `ifname` (Go's `getIPCfgs`:
/// an address without an interface index, or with one out of range, is
/// kept).
fn addresses_of(prev: &CniResult, ifname: &str) -> Result<Vec<IpConfig>> {
    if prev.ips.is_empty() {
        return Err(Error::NoAddresses {
            ifname: ifname.to_owned(),
        });
    }
    Ok(prev
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(i) => prev
                .interfaces
                .get(i as usize)
                .is_none_or(|iface| iface.name == ifname),
        })
        .cloned()
        .collect())
}

/// Deletes the routes via `link` in each of `tables`.
fn flush_tables<H: NetnsHandle>(h: &H, link: u32, tables: &[u32]) {
    if tables.is_empty() {
        return;
    }
    if let Ok(routes) = h.routes(AddressFamilyFilter::All) {
        for r in routes {
            if r.table.is_some_and(|t| tables.contains(&t)) && r.oif == Some(link) {
                let _ = h.del_route(&r);
            }
        }
    }
}

/// Go's choice: a main-table route of the interface goes to the table of
/// `ip` when its source or gateway is in the address's subnet, or when it
/// has neither (a device route, e.g. `fe80::/64`).
fn belongs_to(r: &KernelRoute, ip: &IpConfig) -> bool {
    match (r.src, r.gateway) {
        (None, None) => true,
        (src, gw) => {
            src.is_some_and(|s| ip.address.contains(s))
                || gw.is_some_and(|g| ip.address.contains(g))
        }
    }
}

impl Sbr {
    /// The plugin on the real kernel (it has no state).
    pub fn new() -> Sbr {
        Sbr::default()
    }
}

impl<K: NetKernel> Sbr<K> {
    /// The plugin on another kernel.
    pub fn with_kernel(kernel: K) -> Sbr<K> {
        Sbr { kernel }
    }
}

/// Table-ID mode (`table`, `vrfname`): one rule per address into `table`,
/// nothing else. A table whose rules or routes belong to another interface
/// is refused (Go does not look).
fn add_rules_only<H: NetnsHandle>(h: &H, link: &Link, ips: &[IpConfig], table: u32) -> Result<()> {
    let ours: Vec<IpAddr> = ips.iter().map(|ip| ip.address.ip()).collect();
    if let Some(r) = h
        .rules(AddressFamilyFilter::All)?
        .into_iter()
        .find(|r| r.table == table && !r.src.is_some_and(|s| ours.contains(&s.ip())))
    {
        return Err(Error::TableUsedByRule {
            table,
            rule: r.to_string(),
        });
    }
    if let Some(r) = h
        .routes(AddressFamilyFilter::All)?
        .into_iter()
        .find(|r| r.table == Some(table) && r.oif.is_some_and(|o| o != link.index))
    {
        return Err(Error::TableUsedByRoute {
            table,
            dst: r.dst.to_string(),
            via: h
                .link_by_index(r.oif.unwrap_or(0))
                .map(|l| l.name)
                .unwrap_or_else(|_| "another interface".into()),
        });
    }
    let mut undo = Undo::<Error>::new();
    for ip in ips {
        let rule = RoutingRule::from_source(ip.address.ip(), table);
        h.add_rule(&rule).map_err(|source| Error::RuleAdd {
            src: ip.address.ip(),
            table,
            table_configured: true,
            source: source.into(),
        })?;
        undo.push(move || h.del_rule(&rule));
    }
    undo.commit();
    Ok(())
}

/// Go's default mode: a table per address, with the default route and the
/// interface's routes, then the interface's routes leave the main table.
fn add_with_tables<H: NetnsHandle>(
    h: &H,
    conf: &SbrConf,
    link: &Link,
    ips: &[IpConfig],
) -> Result<()> {
    let rules = h.rules(AddressFamilyFilter::All)?;
    let routes = h.routes(AddressFamilyFilter::All)?;
    let used =
        |t: u32| rules.iter().any(|r| r.table == t) || routes.iter().any(|r| r.table == Some(t));
    let main: Vec<KernelRoute> = routes
        .iter()
        .filter(|r| r.table == Some(TABLE_MAIN) && r.oif == Some(link.index))
        .cloned()
        .collect();
    let mut undo = Undo::<Error>::new();
    let mut table = FIRST_TABLE;
    for ip in ips {
        while used(table) {
            table += 1;
        }
        let rule = RoutingRule::from_source(ip.address.ip(), table);
        h.add_rule(&rule).map_err(|source| Error::RuleAdd {
            src: ip.address.ip(),
            table,
            table_configured: false,
            source: source.into(),
        })?;
        undo.push(move || h.del_rule(&rule));
        let created = table;
        undo.push(move || -> Result<()> {
            flush_tables(h, link.index, &[created]);
            Ok(())
        });
        if let Some(gw) = conf.gateway_for(ip) {
            let default = KernelRoute {
                oif: Some(link.index),
                table: Some(table),
                ..KernelRoute::default_via(gw)
            };
            h.add_route(&default)
                .map_err(|source| Error::DefaultRoute {
                    gateway: gw,
                    table,
                    source: source.into(),
                })?;
        }
        for r in main.iter().filter(|r| belongs_to(r, ip)) {
            h.copy_route_to_table(r, table)
                .map_err(|source| Error::RouteCopy {
                    dst: r.dst.to_string(),
                    table,
                    source: source.into(),
                })?;
        }
        table += 1;
    }
    if conf.add_source_hints {
        // Go only warns about failures here.
        add_source_hints(h, link, ips);
        for r in main
            .iter()
            .filter(|r| r.scope != Some(cni_netns::SCOPE_LINK))
        {
            match h.del_route(r) {
                Ok(()) => undo.push(|| h.copy_route_to_table(r, TABLE_MAIN)),
                Err(e) => tracing::warn!("sbr: delete route {}: {e}", r.dst),
            }
        }
    } else {
        for r in &main {
            h.del_route(r).map_err(|source| Error::RouteDelete {
                dst: r.dst.to_string(),
                source: source.into(),
            })?;
            undo.push(|| h.copy_route_to_table(r, TABLE_MAIN));
        }
    }
    undo.commit();
    Ok(())
}

/// `addSourceHints`: `<subnet> dev <if> src <ip> scope link` in the main
/// table for each address, so local traffic picks the right source (Go
/// only warns when this fails).
fn add_source_hints<H: NetnsHandle>(h: &H, link: &Link, ips: &[IpConfig]) {
    for ip in ips {
        let subnet = match ipnetwork::IpNetwork::new(ip.address.network(), ip.address.prefix()) {
            Ok(s) => s,
            Err(_) => continue,
        };
        let hint = KernelRoute {
            oif: Some(link.index),
            src: Some(ip.address.ip()),
            scope: Some(cni_netns::SCOPE_LINK),
            ..KernelRoute::new(subnet)
        };
        if let Err(e) = h.replace_route(&hint) {
            tracing::warn!("sbr: add source hint route {subnet}: {e}");
        }
    }
}

/// Go's `tidyRules`: every rule whose source is an address of the
/// interface (or of `prevResult`) goes, whatever its table (only those of
/// `fixed` when set); errors do not stop the loop and all are returned
/// (Go returns the last).
/// Ours: the routes of the tables those rules pointed at go too, unless
/// the table was given by the configuration or still has other rules.
fn del_rules<H: NetnsHandle>(
    h: &H,
    link: &Link,
    extra: &[IpAddr],
    fixed: Option<u32>,
) -> Result<()> {
    let mut addrs: Vec<IpAddr> = h
        .addresses(Some(link.index), AddressFamilyFilter::All)?
        .iter()
        .map(|a| a.address.ip())
        .collect();
    addrs.extend(extra);
    let rules = h.rules(AddressFamilyFilter::All)?;
    let mut failed = Vec::new();
    let mut tables = Vec::new();
    for r in &rules {
        let Some(src) = r.src else { continue };
        if fixed.is_some_and(|t| r.table != t) || !addrs.contains(&src.ip()) {
            continue;
        }
        match h.del_rule(r) {
            Ok(()) => tables.push(r.table),
            Err(e) if e.is_not_found() => {}
            Err(source) => failed.push(Err(Error::RuleDelete {
                src: src.ip(),
                table: r.table,
                source: source.into(),
            })),
        }
    }
    if fixed.is_none() {
        let left = h.rules(AddressFamilyFilter::All)?;
        tables.retain(|t| *t >= FIRST_TABLE && !left.iter().any(|r| r.table == *t));
        flush_tables(h, link.index, &tables);
    }
    steps::all_errors(failed)
}

impl<K: NetKernel> Plugin for Sbr<K> {
    type Error = Error;

    fn name(&self) -> &str {
        "sbr"
    }

    fn add(&self, req: &Request) -> Result<CniResult> {
        let conf = SbrConf::parse(req)?;
        let prev = conf.prev_result(req)?;
        let ips = addresses_of(&prev, &req.ifname)?;
        let done = in_pod(&self.kernel, &req.netns, |h| {
            let link = h
                .link_by_name(&req.ifname)
                .map_err(|source| Error::LinkLookup {
                    ifname: req.ifname.clone(),
                    source: source.into(),
                })?;
            let table = match &conf.vrfname {
                Some(vrf) => Some(conf.vrf_table(h, vrf)?),
                None => conf.table,
            };
            match table {
                Some(t) => add_rules_only(h, &link, &ips, t),
                None => add_with_tables(h, &conf, &link, &ips),
            }
        })?;
        match done {
            Some(()) => Ok(prev),
            None => Err(Error::NetnsMissing {
                path: req.netns.clone(),
            }),
        }
    }

    fn del(&self, req: &Request) -> Result<()> {
        let conf = SbrConf::parse(req)?;
        let prev = conf.prev_result_opt(req)?;
        let extra: Vec<IpAddr> = prev
            .as_ref()
            .and_then(|p| addresses_of(p, &req.ifname).ok())
            .unwrap_or_default()
            .iter()
            .map(|ip| ip.address.ip())
            .collect();
        if req.netns.is_empty() {
            return Ok(());
        }
        in_pod(&self.kernel, &req.netns, |h| {
            let link = match h.link_by_name(&req.ifname) {
                Ok(l) => l,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let fixed = match &conf.vrfname {
                Some(vrf) => conf.vrf_table(h, vrf).ok(),
                None => conf.table,
            };
            del_rules(h, &link, &extra, fixed)
        })
        .map(drop)
    }

    fn check(&self, req: &Request) -> Result<()> {
        let conf = SbrConf::parse(req)?;
        let prev = conf.prev_result(req)?;
        let ips = addresses_of(&prev, &req.ifname)?;
        let found = in_pod(&self.kernel, &req.netns, |h| {
            let rules = h.rules(AddressFamilyFilter::All)?;
            for ip in &ips {
                let want = RoutingRule::from_source(ip.address.ip(), 0).src;
                let table = conf.table;
                if !rules
                    .iter()
                    .any(|r| r.src == want && table.is_none_or(|t| r.table == t))
                {
                    return Err(Error::RuleMissing {
                        src: ip.address.ip(),
                        ifname: req.ifname.clone(),
                    });
                }
            }
            Ok(())
        })?;
        found.ok_or_else(|| Error::NetnsMissing {
            path: req.netns.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(json: &str) -> CniResult {
        CniResult::from_value_as(
            &serde_json::from_str(json).unwrap(),
            "1.0.0".parse().unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn addresses_are_selected_like_go() {
        let prev = result(
            r#"{"cniVersion":"1.0.0","interfaces":[{"name":"net1"},{"name":"eth0"}],
            "ips":[{"address":"10.0.0.2/24","interface":1},
                   {"address":"192.168.1.209/24","interface":0},
                   {"address":"192.168.101.209/24","interface":7},
                   {"address":"fd00::5/64"}]}"#,
        );
        let got: Vec<String> = addresses_of(&prev, "net1")
            .unwrap()
            .iter()
            .map(|ip| ip.address.to_string())
            .collect();
        assert_eq!(
            got,
            ["192.168.1.209/24", "192.168.101.209/24", "fd00::5/64"]
        );
        let empty = result(r#"{"cniVersion":"1.0.0"}"#);
        assert_eq!(
            addresses_of(&empty, "net1").unwrap_err().to_string(),
            "No IP addresses supplied on interface: net1"
        );
    }

    #[test]
    fn routes_follow_source_or_gateway() {
        let ip = IpConfig::new("192.168.1.209/24".parse().unwrap());
        let mut r = KernelRoute::new("192.168.2.0/24".parse().unwrap());
        assert!(belongs_to(&r, &ip), "device route");
        r.gateway = Some("192.168.1.2".parse().unwrap());
        assert!(belongs_to(&r, &ip));
        r.gateway = Some("10.0.0.1".parse().unwrap());
        assert!(!belongs_to(&r, &ip));
        r.src = Some("192.168.1.209".parse().unwrap());
        assert!(belongs_to(&r, &ip));
    }
}
