//! The plugin side's vocabulary: commands, the request a plugin receives,
//! and the [`Plugin`] trait.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use cni_types::{CniArgs, CniError, CniResult, NetworkConfig, Version};

use crate::invoke::Exec;

/// A CNI command (`CNI_COMMAND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// `ADD`: attach the container to the network.
    Add,
    /// `CHECK`: verify an attachment (spec 0.4.0 on).
    Check,
    /// `DEL`: detach; must succeed when already detached.
    Del,
    /// `GC`: release resources of attachments not in the valid list (1.1.0).
    Gc,
    /// `STATUS`: can the plugin service ADD requests (1.1.0).
    Status,
    /// `VERSION`: report the supported spec versions.
    Version,
}

impl Command {
    /// The wire name (`ADD`, `DEL`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Check => "CHECK",
            Command::Del => "DEL",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// Parses a wire name (exact, upper case, as the Go skel matches).
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "CHECK" => Command::Check,
            "DEL" => Command::Del,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a plugin receives for one command: the `CNI_*` environment,
/// the parsed network config and the raw stdin.
pub struct Request {
    /// The command.
    pub command: Command,
    /// `CNI_CONTAINERID` (validated for ADD, CHECK, DEL; may be empty for GC
    /// and STATUS).
    pub container_id: String,
    /// `CNI_NETNS` (may be empty on DEL: the namespace is already gone).
    pub netns: String,
    /// `CNI_IFNAME` (validated for ADD, CHECK, DEL).
    pub ifname: String,
    /// `CNI_ARGS` as given; parse with [`Request::args`].
    pub args_raw: String,
    /// `CNI_PATH` as given.
    pub path_raw: String,
    /// `CNI_PATH` split on `:` (empty entries dropped).
    pub path: Vec<PathBuf>,
    /// `CNI_NETNS_OVERRIDE` as given.
    pub netns_override: String,
    /// The network config from stdin.
    pub config: NetworkConfig,
    /// The config's version ("" read as 0.1.0).
    pub version: Version,
    /// Stdin, verbatim (what delegation passes on).
    pub stdin: Vec<u8>,
    pub(crate) exec: Arc<dyn Exec>,
}

impl Request {
    /// `CNI_ARGS` parsed (`K=V;K=V`). Parsed on demand, as the Go plugins
    /// call `types.LoadArgs` themselves: a plugin that ignores `CNI_ARGS`
    /// is not failed by a malformed one.
    pub fn args(&self) -> Result<CniArgs, cni_types::Error> {
        CniArgs::parse(&self.args_raw)
    }

    /// The [`Exec`] delegation goes through: the process executor when the
    /// plugin runs as its own process, the in-process registry when a
    /// runtime embeds it.
    pub fn exec(&self) -> &Arc<dyn Exec> {
        &self.exec
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("command", &self.command)
            .field("container_id", &self.container_id)
            .field("netns", &self.netns)
            .field("ifname", &self.ifname)
            .field("args_raw", &self.args_raw)
            .field("path_raw", &self.path_raw)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A CNI plugin: one method per command. VERSION is answered from
/// [`Plugin::supported_versions`].
///
/// Errors are [`CniError`] replies: return one with the right code, or
/// convert your own error into one (`CniError::internal(e.to_string())`
/// gives code 999, what the Go skel does with a non-CNI error).
pub trait Plugin: Send + Sync {
    /// ADD: returns the result, printed in the config's `cniVersion`.
    fn add(&self, req: &Request) -> Result<CniResult, CniError>;

    /// DEL.
    fn del(&self, req: &Request) -> Result<(), CniError>;

    /// CHECK. The default succeeds, as the Go skel does for a plugin
    /// without a CHECK function.
    fn check(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    /// STATUS (1.1.0). The default succeeds (the plugin is ready).
    fn status(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    /// GC (1.1.0). The default succeeds (nothing to collect).
    fn gc(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    /// The spec versions this plugin speaks (default: all, 0.1.0 to 1.1.0).
    fn supported_versions(&self) -> Vec<Version> {
        Version::ALL.to_vec()
    }

    /// The text printed on stderr when the binary is run without
    /// `CNI_COMMAND` (recommended: `CNI plugin <name> v<version>`). Empty
    /// means none: the run then fails like any missing variable.
    fn about(&self) -> String {
        String::new()
    }
}

impl<P: Plugin + ?Sized> Plugin for Arc<P> {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        (**self).add(req)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        (**self).del(req)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        (**self).check(req)
    }
    fn status(&self, req: &Request) -> Result<(), CniError> {
        (**self).status(req)
    }
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        (**self).gc(req)
    }
    fn supported_versions(&self) -> Vec<Version> {
        (**self).supported_versions()
    }
    fn about(&self) -> String {
        (**self).about()
    }
}
