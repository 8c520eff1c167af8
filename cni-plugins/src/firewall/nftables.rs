//! Our nftables backend (Go has none): for a node whose firewall is a
//! native nftables table with a forward chain of policy drop. Inside that
//! table: a chain of ours ([`OWN_CHAIN`]) holding two accept rules per pod
//! address, each commented with the attachment's tag; one jump into it at
//! the top of the node's forward chain, inserted by the first ADD and
//! removed with our chain when the last attachment goes.

use std::net::IpAddr;

use cni_firewall::{ForeignTable, NftForeignTable, NftListedRule, NodeTables};

use super::error::{Error, Result};

/// Our chain inside the node's table.
pub const OWN_CHAIN: &str = "cni_rs_firewall";
const JUMP_COMMENT: &str = "cni-rs firewall: jump";
const TAG_PREFIX: &str = "cni-rs firewall ";
/// nftables keeps at most 128 bytes of comment.
const COMMENT_MAX: usize = 128;

/// The node's table, its forward chain and the address families it takes.
#[derive(Debug)]
pub(crate) struct NodeTable {
    /// The table's commands.
    cmd: NftForeignTable,
    /// The table itself.
    table: Box<dyn ForeignTable>,
    chain: String,
    family: String,
}

/// The comment tagging one attachment's rules:
/// `cni-rs firewall <containerID> <ifname> <network>`, cut to 128 bytes.
pub fn tag(network: &str, container_id: &str, ifname: &str) -> String {
    let mut s = format!("{TAG_PREFIX}{container_id} {ifname} {network}");
    if s.len() > COMMENT_MAX {
        let mut end = COMMENT_MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// The container id and interface of a tag that belongs to `network`.
fn parse_tag<'a>(comment: &'a str, network: &str) -> Option<(&'a str, &'a str)> {
    let rest = comment.strip_prefix(TAG_PREFIX)?;
    let (cid, rest) = rest.split_once(' ')?;
    let (ifname, _) = rest.split_once(' ')?;
    (tag(network, cid, ifname) == comment).then_some((cid, ifname))
}

impl NodeTable {
    pub(crate) fn new(
        tables: &dyn NodeTables,
        family: &str,
        table: &str,
        chain: &str,
    ) -> NodeTable {
        NodeTable {
            cmd: NftForeignTable::new(family, table),
            table: tables.nft_table(family, table),
            chain: chain.to_owned(),
            family: family.to_owned(),
        }
    }

    /// The addresses this table's family can match.
    fn usable(&self, ips: &[IpAddr]) -> Vec<IpAddr> {
        ips.iter()
            .copied()
            .filter(|ip| match self.family.as_str() {
                "ip" => ip.is_ipv4(),
                "ip6" => ip.is_ipv6(),
                _ => true,
            })
            .collect()
    }

    fn own_rules(&self) -> Result<Vec<NftListedRule>> {
        Ok(self.table.rules(OWN_CHAIN)?.unwrap_or_default())
    }

    /// ADD: our chain and the jump when missing, then the attachment's
    /// rules (replacing any it already had), in one batch.
    pub(crate) fn add(&self, tag: &str, ips: &[IpAddr]) -> Result<()> {
        let node_rules = self
            .table
            .rules(&self.chain)?
            .ok_or_else(|| Error::NftChainMissing {
                chain: self.chain.clone(),
                table: self.cmd.describe().to_string(),
            })?;
        let mut batch = vec![self.cmd.add_chain(OWN_CHAIN)];
        for r in self
            .own_rules()?
            .iter()
            .filter(|r| r.comment.as_deref() == Some(tag))
        {
            batch.push(self.cmd.delete_rule(OWN_CHAIN, r.handle));
        }
        for ip in self.usable(ips) {
            batch.push(
                self.cmd
                    .add_rule(OWN_CHAIN, NftForeignTable::accept_replies_to(ip), tag),
            );
            batch.push(
                self.cmd
                    .add_rule(OWN_CHAIN, NftForeignTable::accept_from(ip), tag),
            );
        }
        if !node_rules
            .iter()
            .any(|r| r.comment.as_deref() == Some(JUMP_COMMENT))
        {
            batch.push(self.cmd.insert_rule(
                &self.chain,
                NftForeignTable::jump(OWN_CHAIN),
                JUMP_COMMENT,
            ));
        }
        self.table
            .apply("open the node's nftables forward chain", &batch)?;
        Ok(())
    }

    /// Removes the rules whose tag `doomed` accepts; when none of ours is
    /// left, the jump and our chain go too. A missing table or chain is
    /// nothing to do.
    fn remove(&self, doomed: impl Fn(&str) -> bool) -> Result<()> {
        let Some(rules) = self.table.rules(OWN_CHAIN)? else {
            return Ok(());
        };
        let (gone, kept): (Vec<_>, Vec<_>) = rules
            .iter()
            .partition(|r| r.comment.as_deref().is_some_and(&doomed));
        let mut batch: Vec<_> = gone
            .iter()
            .map(|r| self.cmd.delete_rule(OWN_CHAIN, r.handle))
            .collect();
        if kept.is_empty() {
            if let Some(node_rules) = self.table.rules(&self.chain)? {
                for r in node_rules
                    .iter()
                    .filter(|r| r.comment.as_deref() == Some(JUMP_COMMENT))
                {
                    batch.push(self.cmd.delete_rule(&self.chain, r.handle));
                }
            }
            batch.push(self.cmd.delete_chain(OWN_CHAIN));
        }
        self.table
            .apply("close the node's nftables forward chain", &batch)?;
        Ok(())
    }

    /// DEL of one attachment.
    pub(crate) fn del(&self, tag: &str) -> Result<()> {
        self.remove(|c| c == tag)
    }

    /// GC: the rules of `network` whose attachment is not in `valid`.
    pub(crate) fn gc(&self, network: &str, valid: &[(String, String)]) -> Result<()> {
        self.remove(|c| {
            parse_tag(c, network)
                .is_some_and(|(cid, ifname)| !valid.iter().any(|(v, i)| v == cid && i == ifname))
        })
    }

    /// CHECK: the jump and both rules of each address.
    pub(crate) fn check(&self, tag: &str, ips: &[IpAddr]) -> Result<()> {
        let node_rules = self.table.rules(&self.chain)?.unwrap_or_default();
        if !node_rules
            .iter()
            .any(|r| r.comment.as_deref() == Some(JUMP_COMMENT))
        {
            return Err(Error::NftJumpMissing {
                target: OWN_CHAIN,
                chain: self.chain.clone(),
                table: self.cmd.describe(),
            });
        }
        let ours: Vec<NftListedRule> = self
            .own_rules()?
            .into_iter()
            .filter(|r| r.comment.as_deref() == Some(tag))
            .collect();
        for ip in self.usable(ips) {
            let want = [
                NftForeignTable::accept_replies_to(ip),
                NftForeignTable::accept_from(ip),
            ];
            for w in want {
                if !ours.iter().any(|r| same_rule(&r.expr, &w)) {
                    return Err(Error::NftRuleMissing {
                        address: ip,
                        chain: OWN_CHAIN,
                        table: self.cmd.describe(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// nft lists `ct state` sets and addresses as it normalises them; compare
/// the address matched and the verdict.
fn same_rule(listed: &serde_json::Value, want: &serde_json::Value) -> bool {
    let key = |v: &serde_json::Value| {
        let m = &v[0]["match"];
        (
            m["left"]["payload"]["field"].clone(),
            m["right"].clone(),
            v.as_array().map(|a| a.len()),
        )
    };
    key(listed) == key(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_fit() {
        let t = tag("net", "abc", "eth0");
        assert_eq!(t, "cni-rs firewall abc eth0 net");
        assert_eq!(parse_tag(&t, "net"), Some(("abc", "eth0")));
        assert_eq!(parse_tag(&t, "other"), None);
        let long = tag(&"n".repeat(200), &"c".repeat(64), "eth0");
        assert_eq!(long.len(), 128);
        assert!(parse_tag(&long, &"n".repeat(200)).is_some());
    }
}
