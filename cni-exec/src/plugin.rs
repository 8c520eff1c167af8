//! The plugin side's vocabulary: the request a plugin receives (and its
//! builder, for unit tests), and the [`Plugin`] trait.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use cni_types::{CniArgs, CniError, CniResult, NetworkConfig, Version};

use crate::exec::{split_path, Command, Exec, NoExec, PluginEnv};

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
    /// Starts a request for a plugin's unit test or an embedding runtime:
    /// no environment variables, no root, no process. The config's
    /// `cniVersion` sets [`Request::version`]; stdin is the config's bytes.
    ///
    /// ```
    /// use cni_exec::{Command, Request};
    /// use cni_types::NetworkConfig;
    ///
    /// let conf = NetworkConfig::builder("pods", "my-plugin").cni_version("1.0.0").build()?;
    /// let req = Request::builder(Command::Add, conf)
    ///     .container_id("c1")
    ///     .netns("/run/netns/c1")
    ///     .ifname("eth0")
    ///     .build()?;
    /// assert_eq!(req.version, cni_types::Version::V1_0_0);
    /// # Ok::<(), cni_types::Error>(())
    /// ```
    pub fn builder(command: Command, config: NetworkConfig) -> RequestBuilder {
        RequestBuilder {
            command,
            vars: RequestVars::default(),
            config,
            exec: None,
        }
    }

    /// `CNI_ARGS` parsed (`K=V;K=V`). Parsed on demand, as the Go plugins
    /// call `types.LoadArgs` themselves: a plugin that ignores `CNI_ARGS`
    /// is not failed by a malformed one.
    pub fn args(&self) -> Result<CniArgs, cni_types::Error> {
        CniArgs::parse(&self.args_raw)
    }

    /// The [`Exec`] delegation goes through: the process executor when the
    /// plugin runs as its own process, the in-process registry when a
    /// runtime embeds it, [`NoExec`] when nobody gave one.
    pub fn exec(&self) -> &Arc<dyn Exec> {
        &self.exec
    }

    /// The environment a plugin's delegate gets: this request's own `CNI_*`
    /// with the command replaced (Go's `DelegateArgs`).
    pub fn delegate_env(&self, command: Command) -> PluginEnv {
        let mut extra = Vec::new();
        if !self.netns_override.is_empty() {
            extra.push(("CNI_NETNS_OVERRIDE".into(), self.netns_override.clone()));
        }
        PluginEnv {
            command,
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            args: self.args_raw.clone(),
            ifname: self.ifname.clone(),
            path: self.path_raw.clone(),
            extra,
        }
    }
}

/// Builds a [`Request`] (see [`Request::builder`]).
#[must_use]
pub struct RequestBuilder {
    command: Command,
    vars: RequestVars,
    config: NetworkConfig,
    exec: Option<Arc<dyn Exec>>,
}

/// The `CNI_*` values of a request as given: what [`RequestBuilder`] and the
/// protocol's environment parsing ([`dispatch`](crate::dispatch)) both fill.
#[derive(Debug, Default)]
pub(crate) struct RequestVars {
    pub(crate) container_id: String,
    pub(crate) netns: String,
    pub(crate) ifname: String,
    pub(crate) args: String,
    pub(crate) path: String,
    pub(crate) netns_override: String,
}

impl RequestVars {
    /// The request for `command` with these values.
    pub(crate) fn into_request(
        self,
        command: Command,
        config: NetworkConfig,
        version: Version,
        stdin: Vec<u8>,
        exec: Arc<dyn Exec>,
    ) -> Request {
        Request {
            command,
            container_id: self.container_id,
            netns: self.netns,
            ifname: self.ifname,
            args_raw: self.args,
            path: split_path(&self.path),
            path_raw: self.path,
            netns_override: self.netns_override,
            config,
            version,
            stdin,
            exec,
        }
    }
}

impl RequestBuilder {
    /// `CNI_CONTAINERID`.
    pub fn container_id(mut self, id: impl Into<String>) -> Self {
        self.vars.container_id = id.into();
        self
    }

    /// `CNI_NETNS`.
    pub fn netns(mut self, netns: impl Into<String>) -> Self {
        self.vars.netns = netns.into();
        self
    }

    /// `CNI_IFNAME`.
    pub fn ifname(mut self, ifname: impl Into<String>) -> Self {
        self.vars.ifname = ifname.into();
        self
    }

    /// `CNI_ARGS` (`K=V;K=V`).
    pub fn args(mut self, args: impl Into<String>) -> Self {
        self.vars.args = args.into();
        self
    }

    /// `CNI_PATH` (`:`-separated).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.vars.path = path.into();
        self
    }

    /// `CNI_NETNS_OVERRIDE`.
    pub fn netns_override(mut self, value: impl Into<String>) -> Self {
        self.vars.netns_override = value.into();
        self
    }

    /// The executor delegation goes through (default [`NoExec`]: a
    /// delegating plugin fails to delegate); e.g. an
    /// [`InProcessExec`](crate::InProcessExec) holding a fake IPAM plugin.
    pub fn exec(mut self, exec: Arc<dyn Exec>) -> Self {
        self.exec = Some(exec);
        self
    }

    /// The request; fails when the config's `cniVersion` does not parse.
    pub fn build(self) -> Result<Request, cni_types::Error> {
        let version = self.config.version()?;
        let stdin = self.config.to_bytes();
        let exec = self.exec.unwrap_or_else(|| Arc::new(NoExec));
        Ok(self
            .vars
            .into_request(self.command, self.config, version, stdin, exec))
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
/// A command returns the plugin's own error type: anything that converts
/// into a [`CniError`] reply (code, message, details). [`CniError`] itself
/// will do; a plugin with its own `thiserror` enum implements
/// `From<MyError> for CniError` once, where it picks the codes.
///
/// ```
/// use cni_exec::{Plugin, Request};
/// use cni_types::{CniError, CniResult};
///
/// struct Noop;
/// impl Plugin for Noop {
///     type Error = CniError;
///     fn name(&self) -> &str {
///         "noop"
///     }
///     fn add(&self, _req: &Request) -> Result<CniResult, CniError> {
///         Ok(CniResult::default())
///     }
///     fn del(&self, _req: &Request) -> Result<(), CniError> {
///         Ok(())
///     }
/// }
/// assert_eq!(Noop.about(), "CNI noop plugin");
/// ```
pub trait Plugin: Send + Sync {
    /// The error the commands return.
    type Error: Into<CniError>;

    /// The plugin's name (its binary's name, the config's `type`).
    fn name(&self) -> &str;

    /// ADD: returns the result, printed in the config's `cniVersion`.
    fn add(&self, req: &Request) -> Result<CniResult, Self::Error>;

    /// DEL.
    fn del(&self, req: &Request) -> Result<(), Self::Error>;

    /// CHECK. The default succeeds, as the Go skel does for a plugin
    /// without a CHECK function.
    fn check(&self, _req: &Request) -> Result<(), Self::Error> {
        Ok(())
    }

    /// STATUS (1.1.0). The default succeeds (the plugin is ready).
    fn status(&self, _req: &Request) -> Result<(), Self::Error> {
        Ok(())
    }

    /// GC (1.1.0). The default succeeds (nothing to collect).
    fn gc(&self, _req: &Request) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Whether GC takes the live attachments from the runtime's
    /// `cni.dev/valid-attachments` (the default). A GC request without
    /// that list is then refused (code 7) before [`Plugin::gc`] runs: with
    /// no list every attachment would look stale, and a GC that released
    /// them all would take every pod's address. A plugin that finds the
    /// live attachments elsewhere (multus: its own cache, as Go's) returns
    /// false and gets every GC request.
    fn gc_needs_valid_attachments(&self) -> bool {
        true
    }

    /// The spec versions this plugin speaks (default: all, 0.1.0 to 1.1.0).
    fn supported_versions(&self) -> Vec<Version> {
        Version::ALL.to_vec()
    }

    /// The text printed on stderr when the binary is run without
    /// `CNI_COMMAND` (default `CNI <name> plugin`, as Go's about string
    /// without the build version). Empty means none: the run then fails
    /// like any missing variable.
    fn about(&self) -> String {
        format!("CNI {} plugin", self.name())
    }
}

/// A [`Plugin`] with its error converted: the object-safe form that
/// [`dispatch`](crate::dispatch), [`run`](crate::run) and
/// [`InProcessExec`](crate::InProcessExec) take. Every [`Plugin`] is one;
/// implement [`Plugin`], not this.
pub trait DynPlugin: Send + Sync {
    /// [`Plugin::name`].
    fn name(&self) -> &str;
    /// [`Plugin::add`], error converted.
    fn add(&self, req: &Request) -> Result<CniResult, CniError>;
    /// [`Plugin::del`], error converted.
    fn del(&self, req: &Request) -> Result<(), CniError>;
    /// [`Plugin::check`], error converted.
    fn check(&self, req: &Request) -> Result<(), CniError>;
    /// [`Plugin::status`], error converted.
    fn status(&self, req: &Request) -> Result<(), CniError>;
    /// [`Plugin::gc`], error converted.
    fn gc(&self, req: &Request) -> Result<(), CniError>;
    /// [`Plugin::gc_needs_valid_attachments`].
    fn gc_needs_valid_attachments(&self) -> bool;
    /// [`Plugin::supported_versions`].
    fn supported_versions(&self) -> Vec<Version>;
    /// [`Plugin::about`].
    fn about(&self) -> String;
}

impl<P: Plugin> DynPlugin for P {
    fn name(&self) -> &str {
        Plugin::name(self)
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        Plugin::add(self, req).map_err(Into::into)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        Plugin::del(self, req).map_err(Into::into)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        Plugin::check(self, req).map_err(Into::into)
    }
    fn status(&self, req: &Request) -> Result<(), CniError> {
        Plugin::status(self, req).map_err(Into::into)
    }
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        Plugin::gc(self, req).map_err(Into::into)
    }
    fn gc_needs_valid_attachments(&self) -> bool {
        Plugin::gc_needs_valid_attachments(self)
    }
    fn supported_versions(&self) -> Vec<Version> {
        Plugin::supported_versions(self)
    }
    fn about(&self) -> String {
        Plugin::about(self)
    }
}
