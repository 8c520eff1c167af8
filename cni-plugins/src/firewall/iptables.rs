//! Go's iptables backend (`plugins/meta/firewall/iptables.go`) and its
//! ingress policy chains (`ingresspolicy.go`), rule for rule, so that
//! `iptables -S` reads the same after our ADD as after Go's.

use std::net::IpAddr;

use cni_firewall::{IptablesTable, NodeTables};

use super::config::IngressPolicy;
use super::error::{Error, Result};

/// Go's private chain, jumped to from `FORWARD`.
pub const FORWARD_CHAIN: &str = "CNI-FORWARD";
const STAGE1: &str = "CNI-ISOLATION-STAGE-1";
const STAGE2: &str = "CNI-ISOLATION-STAGE-2";
const FILTER_COMMENT: &str = "CNI firewall plugin rules";
const ADMIN_COMMENT: &str = "CNI firewall plugin admin overrides";
/// The comment of the shared isolation rules (Go v1.1.1's text, which the
/// `isolated` policy shares so both policies keep one set of them).
const ISOLATION_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge)";
const ISOLATED_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: isolated)";

/// `<ip>/32` or `<ip>/128`.
fn host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(_) => format!("{ip}/32"),
        IpAddr::V6(_) => format!("{ip}/128"),
    }
}

/// The two rules of one address in `CNI-FORWARD` (Go's `getPrivChainRules`).
fn pod_rules(ip: IpAddr) -> [Vec<String>; 2] {
    let h = host(ip);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    [
        s(&[
            "-d",
            &h,
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ]),
        s(&["-s", &h, "-j", "ACCEPT"]),
    ]
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn jump_rule<'a>(comment: &'a str, target: &'a str) -> [&'a str; 6] {
    ["-m", "comment", "--comment", comment, "-j", target]
}

/// The families present in `ips`, IPv4 first.
pub(crate) fn families(ips: &[IpAddr]) -> Vec<bool> {
    let mut f = Vec::new();
    for v6 in [false, true] {
        if ips.iter().any(|ip| ip.is_ipv6() == v6) {
            f.push(v6);
        }
    }
    f
}

/// Go's `setupChains`: the chains, the `FORWARD` jump and the admin jump,
/// each inserted first when missing.
fn setup_chains(t: &dyn IptablesTable, admin: &str) -> Result<()> {
    t.ensure_chain(FORWARD_CHAIN)?;
    t.ensure_chain(admin)?;
    t.insert_unique("FORWARD", 1, &jump_rule(FILTER_COMMENT, FORWARD_CHAIN))?;
    t.insert_unique(FORWARD_CHAIN, 1, &jump_rule(ADMIN_COMMENT, admin))?;
    Ok(())
}

/// ADD: opens `FORWARD` for `ips`; on failure the address rules already
/// appended go again (the chains and jumps stay, as in Go).
pub(crate) fn add(tables: &dyn NodeTables, ips: &[IpAddr], admin: &str) -> Result<()> {
    for v6 in families(ips) {
        let t = tables.iptables(v6);
        setup_chains(t.as_ref(), admin)?;
        let rules: Vec<Vec<String>> = ips
            .iter()
            .filter(|ip| ip.is_ipv6() == v6)
            .flat_map(|ip| pod_rules(*ip))
            .collect();
        for (i, rule) in rules.iter().enumerate() {
            if let Err(e) = t.append_unique(FORWARD_CHAIN, &refs(rule)) {
                for r in &rules[..i] {
                    let _ = t.delete(FORWARD_CHAIN, &refs(r));
                }
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// DEL: the address rules go; chains and jumps stay (Go). A rule already
/// gone is no error; a failing `iptables` is, after every rule was tried
/// (the first failure is returned), so the caller keeps its record for a
/// retry or GC instead of forgetting rules still in force.
pub(crate) fn del(tables: &dyn NodeTables, ips: &[IpAddr]) -> Result<()> {
    let mut first = None;
    for ip in ips {
        let t = tables.iptables(ip.is_ipv6());
        for rule in pod_rules(*ip) {
            if let Err(e) = t.delete(FORWARD_CHAIN, &refs(&rule)) {
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(()), |e| Err(e.into()))
}

/// CHECK as Go: the chains are ensured, then the jumps and each address
/// rule must be present.
pub(crate) fn check(tables: &dyn NodeTables, ips: &[IpAddr], admin: &str) -> Result<()> {
    for v6 in families(ips) {
        let t = tables.iptables(v6);
        t.ensure_chain(FORWARD_CHAIN)?;
        t.ensure_chain(admin)?;
        let missing = |chain: &str, jump: bool, rule: &[&str]| Error::IptablesRuleMissing {
            chain: chain.to_owned(),
            jump_from: jump.then(|| chain.to_owned()),
            rule: rule.iter().map(|a| a.to_string()).collect(),
        };
        let fwd = jump_rule(FILTER_COMMENT, FORWARD_CHAIN);
        if !t.exists("FORWARD", &fwd)? {
            return Err(missing("FORWARD", true, &fwd));
        }
        let adm = jump_rule(ADMIN_COMMENT, admin);
        if !t.exists(FORWARD_CHAIN, &adm)? {
            return Err(missing(FORWARD_CHAIN, true, &adm));
        }
        for ip in ips.iter().filter(|ip| ip.is_ipv6() == v6) {
            for rule in pod_rules(*ip) {
                if !t.exists(FORWARD_CHAIN, &refs(&rule))? {
                    return Err(missing(FORWARD_CHAIN, false, &refs(&rule)));
                }
            }
        }
    }
    Ok(())
}

/// Go's `setupIsolationChains` for `bridge` (and, for `isolated`, the
/// intra-bridge drop of v1.7.0), in every family of `ips`. Per bridge, never
/// removed (other pods may use the bridge).
pub(crate) fn setup_isolation(
    tables: &dyn NodeTables,
    ips: &[IpAddr],
    bridge: &str,
    policy: IngressPolicy,
) -> Result<()> {
    if policy == IngressPolicy::Open {
        return Ok(());
    }
    for v6 in families(ips) {
        let t = tables.iptables(v6);
        t.ensure_chain(STAGE1)?;
        t.ensure_chain(STAGE2)?;
        let c = ISOLATION_COMMENT;
        t.insert_unique(
            "FORWARD",
            1,
            &["-j", STAGE1, "-m", "comment", "--comment", c],
        )?;
        let stage1_comment = if policy == IngressPolicy::Isolated {
            ISOLATED_COMMENT
        } else {
            c
        };
        let to_stage2 = [
            "-i",
            bridge,
            "!",
            "-o",
            bridge,
            "-j",
            STAGE2,
            "-m",
            "comment",
            "--comment",
            stage1_comment,
        ];
        t.insert_unique(STAGE1, 1, &to_stage2)?;
        if policy == IngressPolicy::Isolated {
            let drop = [
                "-i",
                bridge,
                "-o",
                bridge,
                "-j",
                "DROP",
                "-m",
                "comment",
                "--comment",
                ISOLATED_COMMENT,
            ];
            t.insert_unique(STAGE1, 1, &drop)?;
        }
        t.append_unique(STAGE1, &["-j", "RETURN", "-m", "comment", "--comment", c])?;
        t.insert_unique(
            STAGE2,
            1,
            &["-o", bridge, "-j", "DROP", "-m", "comment", "--comment", c],
        )?;
        t.append_unique(STAGE2, &["-j", "RETURN", "-m", "comment", "--comment", c])?;
    }
    Ok(())
}
