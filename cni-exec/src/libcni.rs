//! The runtime object: ADD/CHECK/DEL of a network list, STATUS, GC,
//! validation and the result cache, as Go's `libcni.CNIConfig`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cni_types::{
    GcAttachment, NetworkConfig, NetworkConfigList, VersionedResult, LEGACY_ATTACHMENTS_KEY,
    VALID_ATTACHMENTS_KEY,
};
use serde_json::{Map, Value};

use crate::cache::{CachedAttachment, ResultCache, RuntimeConf};
use crate::exec::Command;
use crate::invoke::{exec_plugin_with_result, get_version_info, Exec, PluginEnv};
use crate::Error;

/// libcni's default cache directory.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";

/// Runs network lists (libcni's `CNIConfig`): plugin search path, an
/// [`Exec`], and the result cache.
#[derive(Clone)]
pub struct CniConfig {
    path: Vec<PathBuf>,
    exec: Arc<dyn Exec>,
    cache: ResultCache,
    trace: Option<cni_trace::TraceContext>,
}

impl std::fmt::Debug for CniConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CniConfig")
            .field("path", &self.path)
            .field("cache", &self.cache)
            .field("trace", &self.trace)
            .finish_non_exhaustive()
    }
}

/// `type="x" name="n"`, as libcni names a plugin in errors.
fn describe(plugin: &Map<String, Value>) -> String {
    let ty = plugin.get("type").and_then(Value::as_str).unwrap_or("");
    let mut out = format!("type={ty:?}");
    if let Some(name) = plugin
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        out.push_str(&format!(" name={name:?}"));
    }
    out
}

fn plugin_type(plugin: &Map<String, Value>) -> &str {
    plugin.get("type").and_then(Value::as_str).unwrap_or("")
}

fn to_bytes(map: &Map<String, Value>) -> Vec<u8> {
    // A map of JSON values always serializes.
    serde_json::to_vec(map).unwrap_or_default()
}

/// The config one plugin of a list receives (libcni's `buildOneConfig`):
/// the plugin object with the list's `name` and `cniVersion`, the
/// `prevResult`, and `runtimeConfig` holding exactly the capabilities the
/// plugin declares `true` and the runtime supplies (sorted by name, as Go's
/// map encoding sorts them). Keys keep the plugin object's order; Go sorts
/// them all (its round trip through a map), which no plugin can observe.
pub fn build_one_config(
    name: &str,
    cni_version: &str,
    plugin: &Map<String, Value>,
    prev_result: Option<&Value>,
    rt: Option<&RuntimeConf>,
) -> Vec<u8> {
    let mut conf = plugin.clone();
    conf.insert("name".into(), Value::String(name.into()));
    conf.insert("cniVersion".into(), Value::String(cni_version.into()));
    if let Some(prev) = prev_result {
        conf.insert("prevResult".into(), prev.clone());
    }
    if let Some(rt) = rt {
        let declared: BTreeSet<&str> = plugin
            .get("capabilities")
            .and_then(Value::as_object)
            .map(|caps| {
                caps.iter()
                    .filter(|(_, on)| on.as_bool() == Some(true))
                    .map(|(k, _)| k.as_str())
                    .collect()
            })
            .unwrap_or_default();
        let rc: Map<String, Value> = declared
            .into_iter()
            .filter_map(|cap| Some((cap.to_string(), rt.capability_args.get(cap)?.clone())))
            .collect();
        if !rc.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(rc));
        }
    }
    to_bytes(&conf)
}

impl CniConfig {
    /// Plugins searched in `path`, run by `exec`, results cached under
    /// [`DEFAULT_CACHE_DIR`].
    pub fn new(path: Vec<PathBuf>, exec: Arc<dyn Exec>) -> Self {
        CniConfig {
            path,
            exec,
            cache: ResultCache::new(DEFAULT_CACHE_DIR),
            trace: None,
        }
    }

    /// Hands every plugin this runs the caller's trace context (libcni's
    /// `TRACEPARENT`, `TRACESTATE`, `BAGGAGE`): the remote parent of the
    /// `cni.exec <type>` span of each plugin call when this process
    /// records spans, passed on unchanged otherwise. Without it, the
    /// current span's context, or this process's own `TRACEPARENT`, is
    /// passed (see [`traced_exec`](crate::exec::traced_exec)).
    pub fn with_trace_context(mut self, ctx: cni_trace::TraceContext) -> Self {
        self.trace = Some(ctx);
        self
    }

    /// Caches results under `dir` instead.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache = ResultCache::new(dir);
        self
    }

    /// The result cache.
    pub fn cache(&self) -> &ResultCache {
        &self.cache
    }

    /// The plugin search path.
    pub fn path(&self) -> &[PathBuf] {
        &self.path
    }

    fn path_string(&self) -> String {
        self.path
            .iter()
            .map(|p| p.to_string_lossy())
            .collect::<Vec<_>>()
            .join(":")
    }

    fn env(&self, command: Command, rt: &RuntimeConf) -> PluginEnv {
        PluginEnv {
            command,
            container_id: rt.container_id.clone(),
            netns: rt.netns.clone(),
            args: rt.args_string(),
            ifname: rt.ifname.clone(),
            path: self.path_string(),
            extra: self.trace_vars(),
        }
    }

    fn trace_vars(&self) -> Vec<(String, String)> {
        self.trace
            .iter()
            .flat_map(|t| t.env_vars())
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    fn find(&self, plugin: &Map<String, Value>) -> Result<PathBuf, Error> {
        self.exec.find_plugin(plugin_type(plugin), &self.path)
    }

    fn add_one(
        &self,
        name: &str,
        cni_version: &str,
        plugin: &Map<String, Value>,
        prev: Option<&Value>,
        rt: &RuntimeConf,
    ) -> Result<VersionedResult, Error> {
        let path = self.find(plugin)?;
        cni_types::validate::container_id(&rt.container_id)?;
        cni_types::validate::network_name(name)?;
        cni_types::validate::interface_name(&rt.ifname)?;
        let conf = build_one_config(name, cni_version, plugin, prev, Some(rt));
        let (version, result) = exec_plugin_with_result(
            self.exec.as_ref(),
            &path,
            &conf,
            &self.env(Command::Add, rt),
        )?;
        Ok(VersionedResult { version, result })
    }

    fn run_one(
        &self,
        command: Command,
        name: &str,
        cni_version: &str,
        plugin: &Map<String, Value>,
        prev: Option<&Value>,
        rt: &RuntimeConf,
    ) -> Result<(), Error> {
        let path = self.find(plugin)?;
        let conf = build_one_config(name, cni_version, plugin, prev, Some(rt));
        self.exec
            .exec_plugin(&path, &conf, &self.env(command, rt))
            .map(|_| ())
    }

    /// Runs `command` (CHECK, DEL) on `plugins` in turn, each with the same
    /// `prevResult`; the first failure stops the chain, naming its plugin
    /// and `op`.
    fn run_each<'a>(
        &self,
        command: Command,
        op: &'static str,
        list: &NetworkConfigList,
        plugins: impl Iterator<Item = &'a Map<String, Value>>,
        prev: Option<&Value>,
        rt: &RuntimeConf,
    ) -> Result<(), Error> {
        for plugin in plugins {
            self.run_one(command, &list.name, &list.cni_version, plugin, prev, rt)
                .map_err(|e| Error::Chain {
                    plugin: describe(plugin),
                    op,
                    source: Box::new(e),
                })?;
        }
        Ok(())
    }

    /// ADD: runs the plugins in order, each getting the previous one's
    /// result as `prevResult`; caches the final result. No rollback on
    /// failure (as libcni: the runtime issues DEL).
    pub fn add_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<VersionedResult, Error> {
        let mut last: Option<VersionedResult> = None;
        for plugin in &list.plugins {
            let prev = last.as_ref().map(VersionedResult::to_value).transpose()?;
            let r = self
                .add_one(&list.name, &list.cni_version, plugin, prev.as_ref(), rt)
                .map_err(|e| Error::Chain {
                    plugin: describe(plugin),
                    op: "add",
                    source: Box::new(e),
                })?;
            last = Some(r);
        }
        let result = last.ok_or(Error::NoPluginConfigs)?;
        self.cache
            .write(&list.name, rt, &list.to_bytes(), &result.to_value()?)
            .map_err(|e| Error::Cache {
                network: list.name.clone(),
                reason: format!("failed to set network {:?} cached result: {e}", list.name),
            })?;
        Ok(result)
    }

    /// CHECK: needs a 0.4.0+ list; a no-op with `disableCheck`; runs every
    /// plugin in order with the cached result as `prevResult`, stopping at
    /// the first error (which, unlike libcni, names the plugin).
    pub fn check_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), Error> {
        if !list.version()?.supports_check() {
            return Err(Error::CheckNotSupported(list.cni_version.clone()));
        }
        if list.disable_check {
            return Ok(());
        }
        let cached = self.cache.result(&list.name, &list.cni_version, rt)?;
        self.run_each(
            Command::Check,
            "check",
            list,
            list.plugins.iter(),
            cached.as_ref(),
            rt,
        )
    }

    /// DEL: plugins in reverse order, with the cached result as
    /// `prevResult` from 0.4.0 on. An unreadable or unconvertible cache is
    /// removed and DEL goes on without it. The cache is removed after
    /// success and kept on failure (the runtime retries).
    pub fn del_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), Error> {
        let mut cached = None;
        if list.version()?.supports_prev_result_on_del() {
            match self.cache.result(&list.name, &list.cni_version, rt) {
                Ok(c) => cached = c,
                Err(e) => {
                    tracing::warn!(network = %list.name, error = %e, "ignoring unreadable cached result on DEL");
                    let _ = self.cache.remove(&list.name, rt);
                }
            }
        }
        self.run_each(
            Command::Del,
            "delete",
            list,
            list.plugins.iter().rev(),
            cached.as_ref(),
            rt,
        )?;
        let _ = self.cache.remove(&list.name, rt);
        Ok(())
    }

    /// STATUS (1.1.0 lists; older ones succeed without running anything):
    /// each plugin in order; the first error is returned as is, so its code
    /// (50, 51) reaches the caller.
    pub fn status_network_list(&self, list: &NetworkConfigList) -> Result<(), Error> {
        if !list.version().is_ok_and(|v| v.supports_status_and_gc()) {
            return Ok(());
        }
        let mut env = PluginEnv::new(Command::Status, self.path_string());
        env.extra = self.trace_vars();
        for plugin in &list.plugins {
            let conf = build_one_config(&list.name, &list.cni_version, plugin, None, None);
            let path = self.find(plugin)?;
            self.exec.exec_plugin(&path, &conf, &env)?;
        }
        Ok(())
    }

    /// GC: a no-op with `disableGC`. DELs every cached attachment of this
    /// network that is not in `valid` (all of them when `valid` is `None`),
    /// then, for 1.1.0 lists, runs GC on every plugin with the valid list
    /// ([`CniConfig::gc_plugins`]). Errors are collected.
    pub fn gc_network_list(
        &self,
        list: &NetworkConfigList,
        valid: Option<&[GcAttachment]>,
    ) -> Result<(), Error> {
        if list.disable_gc {
            return Ok(());
        }
        // libcni returns success when the cache cannot be listed.
        let cached = self.cache.attachments("").unwrap_or_default();
        let keep: BTreeSet<(&str, &str)> = valid
            .unwrap_or_default()
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        let mut errs = Vec::new();
        for att in cached.iter().filter(|a| a.network == list.name) {
            if keep.contains(&(att.container_id.as_str(), att.ifname.as_str())) {
                continue;
            }
            if let Err(e) = self.del_network_list(list, &att.runtime_conf()) {
                errs.push(e);
            }
        }
        if let Err(e) = self.gc_plugins(list, valid) {
            errs.push(e);
        }
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.remove(0)),
            _ => Err(Error::Multiple(errs)),
        }
    }

    /// The second phase of GC alone: for 1.1.0 lists (older ones cannot
    /// receive it: nothing runs), every plugin's GC with `valid` under both
    /// `cni.dev/valid-attachments` and the legacy `cni.dev/attachments`.
    /// Every plugin runs; errors are collected.
    pub fn gc_plugins(
        &self,
        list: &NetworkConfigList,
        valid: Option<&[GcAttachment]>,
    ) -> Result<(), Error> {
        if !list.version().is_ok_and(|v| v.supports_status_and_gc()) {
            return Ok(());
        }
        let mut errs = Vec::new();
        let mut env = PluginEnv::new(Command::Gc, self.path_string());
        env.extra = self.trace_vars();
        for plugin in &list.plugins {
            let mut conf = plugin.clone();
            conf.insert("name".into(), Value::String(list.name.clone()));
            conf.insert("cniVersion".into(), Value::String(list.cni_version.clone()));
            if let Some(valid) = valid {
                let v = serde_json::to_value(valid).unwrap_or(Value::Array(Vec::new()));
                conf.insert(VALID_ATTACHMENTS_KEY.into(), v.clone());
                // cni#1101: the spec-v1.1.0 tag used this name.
                conf.insert(LEGACY_ATTACHMENTS_KEY.into(), v);
            }
            let run = self
                .find(plugin)
                .and_then(|path| self.exec.exec_plugin(&path, &to_bytes(&conf), &env));
            if let Err(e) = run {
                errs.push(Error::Chain {
                    plugin: describe(plugin),
                    op: "gc",
                    source: Box::new(e),
                });
            }
        }
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.remove(0)),
            _ => Err(Error::Multiple(errs)),
        }
    }

    /// Checks that every plugin exists and its VERSION lists the list's
    /// version ("" meaning 0.1.0); returns the union of the capabilities
    /// the plugins enable, sorted.
    pub fn validate_network_list(&self, list: &NetworkConfigList) -> Result<Vec<String>, Error> {
        let mut caps = BTreeSet::new();
        let mut errs = Vec::new();
        for plugin in &list.plugins {
            if let Err(e) = self.validate_plugin(plugin_type(plugin), &list.cni_version) {
                errs.push(e);
            }
            if let Some(c) = plugin.get("capabilities").and_then(Value::as_object) {
                caps.extend(
                    c.iter()
                        .filter(|(_, on)| on.as_bool() == Some(true))
                        .map(|(k, _)| k.clone()),
                );
            }
        }
        match errs.len() {
            0 => Ok(caps.into_iter().collect()),
            1 => Err(errs.remove(0)),
            _ => Err(Error::Multiple(errs)),
        }
    }

    /// [`CniConfig::validate_network_list`] for a single-plugin config.
    pub fn validate_network(&self, conf: &NetworkConfig) -> Result<Vec<String>, Error> {
        self.validate_plugin(&conf.plugin_type, &conf.cni_version)?;
        let caps = conf
            .specific()
            .get("capabilities")
            .and_then(Value::as_object)
            .map(|c| {
                c.iter()
                    .filter(|(_, on)| on.as_bool() == Some(true))
                    .map(|(k, _)| k.clone())
                    .collect::<BTreeSet<_>>()
            })
            .unwrap_or_default();
        Ok(caps.into_iter().collect())
    }

    fn validate_plugin(&self, plugin_type: &str, version: &str) -> Result<(), Error> {
        let path = self.exec.find_plugin(plugin_type, &self.path)?;
        let want = if version.is_empty() { "0.1.0" } else { version };
        let info = get_version_info(self.exec.as_ref(), &path)?;
        if info.supports(want) {
            Ok(())
        } else {
            Err(Error::UnsupportedVersion {
                plugin: plugin_type.to_string(),
                version: want.to_string(),
            })
        }
    }

    /// A plugin's VERSION reply.
    pub fn version_info(&self, plugin_type: &str) -> Result<cni_types::VersionReply, Error> {
        let path = self.exec.find_plugin(plugin_type, &self.path)?;
        get_version_info(self.exec.as_ref(), &path)
    }

    /// The cached attachments, optionally of one container.
    pub fn cached_attachments(&self, container_id: &str) -> Result<Vec<CachedAttachment>, Error> {
        self.cache.attachments(container_id)
    }

    /// The cached result of an attachment in the list's version.
    pub fn network_list_cached_result(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<Value>, Error> {
        self.cache.result(&list.name, &list.cni_version, rt)
    }

    /// The cached config bytes and runtime config of an attachment.
    pub fn network_list_cached_config(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, Error> {
        self.cache.config(&list.name, rt)
    }

    /// ADD of a single-plugin config (legacy `.conf`), cached like a list.
    pub fn add_network(
        &self,
        conf: &NetworkConfig,
        rt: &RuntimeConf,
    ) -> Result<VersionedResult, Error> {
        let r = self.add_one(&conf.name, &conf.cni_version, &conf.to_map(), None, rt)?;
        self.cache
            .write(&conf.name, rt, &conf.to_bytes(), &r.to_value()?)?;
        Ok(r)
    }

    /// CHECK of a single-plugin config.
    pub fn check_network(&self, conf: &NetworkConfig, rt: &RuntimeConf) -> Result<(), Error> {
        if !conf.version()?.supports_check() {
            return Err(Error::CheckNotSupported(conf.cni_version.clone()));
        }
        let cached = self.cache.result(&conf.name, &conf.cni_version, rt)?;
        self.run_one(
            Command::Check,
            &conf.name,
            &conf.cni_version,
            &conf.to_map(),
            cached.as_ref(),
            rt,
        )
    }

    /// DEL of a single-plugin config.
    pub fn del_network(&self, conf: &NetworkConfig, rt: &RuntimeConf) -> Result<(), Error> {
        let mut cached = None;
        if conf.version()?.supports_prev_result_on_del() {
            match self.cache.result(&conf.name, &conf.cni_version, rt) {
                Ok(c) => cached = c,
                Err(_) => {
                    let _ = self.cache.remove(&conf.name, rt);
                }
            }
        }
        self.run_one(
            Command::Del,
            &conf.name,
            &conf.cni_version,
            &conf.to_map(),
            cached.as_ref(),
            rt,
        )?;
        let _ = self.cache.remove(&conf.name, rt);
        Ok(())
    }
}

/// Loads `name` from `dir` (see [`crate::conf::load_network_conf`]).
pub fn load(dir: &Path, name: &str) -> Result<NetworkConfigList, Error> {
    crate::conf::load_network_conf(dir, name)
}
