//! [`Iptables`]: the system `iptables` / `ip6tables` programs, run in the
//! calling process's network namespace.
//!
//! Exec'ing the system binaries (as Go's `coreos/go-iptables` does) means
//! the host's own variant is used: `iptables-nft` or `iptables-legacy`,
//! whichever the node's alternatives (or `PATH`) select, so the rules land
//! where the node's other firewall users look. Every call passes `-w` so
//! that concurrent callers queue on the xtables lock instead of failing.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// One of the two iptables programs, for one table.
///
/// ```no_run
/// use cni_firewall::Iptables;
///
/// let ipt = Iptables::v4();
/// ipt.ensure_chain("CNI-FORWARD")?;
/// let rule = ["-s", "10.1.0.5/32", "-j", "ACCEPT"];
/// ipt.append_unique("CNI-FORWARD", &rule)?;
/// assert!(ipt.exists("CNI-FORWARD", &rule)?);
/// # Ok::<(), cni_firewall::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Iptables {
    program: PathBuf,
    table: String,
}

/// How an iptables run ended.
enum Outcome {
    Ok(String),
    /// Exit status 1: iptables' "the rule or chain does not exist" (and
    /// a few other refusals); the message is kept for errors.
    Refused(String),
}

impl Iptables {
    /// `iptables` from `PATH`, filter table.
    pub fn v4() -> Iptables {
        Iptables {
            program: "iptables".into(),
            table: "filter".into(),
        }
    }

    /// `ip6tables` from `PATH`, filter table.
    pub fn v6() -> Iptables {
        Iptables {
            program: "ip6tables".into(),
            table: "filter".into(),
        }
    }

    /// `v4()` or `v6()`.
    pub fn for_family(v6: bool) -> Iptables {
        if v6 {
            Iptables::v6()
        } else {
            Iptables::v4()
        }
    }

    /// Uses this program (e.g. `/usr/sbin/iptables-legacy`).
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Iptables {
        self.program = program.into();
        self
    }

    /// Works on this table instead of `filter`.
    pub fn with_table(mut self, table: &str) -> Iptables {
        self.table = table.to_owned();
        self
    }

    /// The program run.
    pub fn program(&self) -> &std::path::Path {
        &self.program
    }

    fn run(&self, op: &str, args: &[&str]) -> Result<Outcome> {
        let mut full = vec!["-w", "-t", self.table.as_str()];
        full.extend_from_slice(args);
        let out = cni_netns::tool::run(&self.program, &full, None).map_err(|source| {
            Error::ToolSpawn {
                op: op.to_owned(),
                program: self.program.clone(),
                source,
            }
        })?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        match out.status.code() {
            Some(0) => Ok(Outcome::Ok(
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )),
            Some(1) => Ok(Outcome::Refused(stderr)),
            _ => Err(self.failed(op, args, stderr, out.status.to_string())),
        }
    }

    fn failed(&self, op: &str, args: &[&str], stderr: String, status: String) -> Error {
        Error::FirewallTool {
            op: op.to_owned(),
            command: format!(
                "{} -t {} {}",
                self.program.display(),
                self.table,
                args.join(" ")
            ),
            message: if stderr.is_empty() { status } else { stderr },
        }
    }

    fn must(&self, op: &str, args: &[&str]) -> Result<String> {
        match self.run(op, args)? {
            Outcome::Ok(s) => Ok(s),
            Outcome::Refused(msg) => Err(self.failed(op, args, msg, "exit status 1".into())),
        }
    }

    /// Creates `chain` unless it exists (Go's `utils.EnsureChain`).
    pub fn ensure_chain(&self, chain: &str) -> Result<()> {
        let op = format!("create chain {chain}");
        match self.run(&op, &["-N", chain])? {
            Outcome::Ok(_) => Ok(()),
            Outcome::Refused(msg) if msg.contains("already exists") => Ok(()),
            Outcome::Refused(msg) => Err(self.failed(&op, &["-N", chain], msg, String::new())),
        }
    }

    /// Whether `chain` exists.
    pub fn chain_exists(&self, chain: &str) -> Result<bool> {
        Ok(matches!(
            self.run(&format!("list chain {chain}"), &["-S", chain])?,
            Outcome::Ok(_)
        ))
    }

    /// Whether `rule` is in `chain` (`-C`; a missing chain counts as no).
    pub fn exists(&self, chain: &str, rule: &[&str]) -> Result<bool> {
        let mut args = vec!["-C", chain];
        args.extend_from_slice(rule);
        Ok(matches!(
            self.run(&format!("check rule in {chain}"), &args)?,
            Outcome::Ok(_)
        ))
    }

    /// Inserts `rule` at `pos` (1-based) of `chain` unless it is there.
    pub fn insert_unique(&self, chain: &str, pos: u32, rule: &[&str]) -> Result<()> {
        if self.exists(chain, rule)? {
            return Ok(());
        }
        let pos = pos.to_string();
        let mut args = vec!["-I", chain, pos.as_str()];
        args.extend_from_slice(rule);
        self.must(&format!("insert rule into {chain}"), &args)
            .map(drop)
    }

    /// Appends `rule` to `chain` unless it is there.
    pub fn append_unique(&self, chain: &str, rule: &[&str]) -> Result<()> {
        if self.exists(chain, rule)? {
            return Ok(());
        }
        let mut args = vec!["-A", chain];
        args.extend_from_slice(rule);
        self.must(&format!("append rule to {chain}"), &args)
            .map(drop)
    }

    /// Deletes one copy of `rule` from `chain`; `false` when it was not
    /// there (or the chain is missing).
    pub fn delete(&self, chain: &str, rule: &[&str]) -> Result<bool> {
        let mut args = vec!["-D", chain];
        args.extend_from_slice(rule);
        Ok(matches!(
            self.run(&format!("delete rule from {chain}"), &args)?,
            Outcome::Ok(_)
        ))
    }

    /// `-S chain`: the chain's rules as iptables prints them.
    pub fn list(&self, chain: &str) -> Result<Vec<String>> {
        let out = self.must(&format!("list chain {chain}"), &["-S", chain])?;
        Ok(out.lines().map(str::to_owned).collect())
    }
}
