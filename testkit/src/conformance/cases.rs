//! The cases, each a small protocol exchange with the plugin binary.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cni_netns::{IpNetwork, OwnedNetns};
use cni_types::{CniResult, Version};
use serde_json::{json, Value};

use super::kind::{PluginKind, Role};
use super::sandbox::{Reply, Sandbox};
use super::shape::{self, Expect};
use super::{CaseResult, Options, Outcome, Report};
use crate::error::Error;

/// A case's verdict: `Ok(note)` passed (with an optional remark), `Err`
/// failed with the reason.
type Verdict = Result<Option<String>, String>;

struct Ctx<'a> {
    sb: &'a Sandbox,
    plugin: PathBuf,
    kind: PluginKind,
    role: Role,
    template: Value,
    ifname: String,
    cni_path: String,
    timeout: std::time::Duration,
}

/// One attachment the kit set up for a case: a container namespace (with
/// the previous plugin's veth for IPAM and meta plugins) and the config ADD
/// gets.
struct Attachment {
    cid: String,
    netns: Option<OwnedNetns>,
    netns_path: PathBuf,
    version: Version,
    config: Value,
}

impl Attachment {
    /// The config for CHECK and DEL: ADD's result as `prevResult`.
    fn with_prev(&self, result: Option<&Value>) -> Value {
        let mut conf = self.config.clone();
        if let Some(obj) = conf.as_object_mut() {
            obj.remove("prevResult");
            if let Some(r) = result {
                obj.insert("prevResult".into(), r.clone());
            }
        }
        conf
    }
}

pub(super) fn run(options: &Options) -> Result<Report, Error> {
    let plugin = std::path::absolute(&options.plugin).map_err(crate::error::io_err(format!(
        "resolve {}",
        options.plugin.display()
    )))?;
    if !plugin.is_file() {
        return Err(Error::PluginNotFound { path: plugin });
    }
    let sb = Sandbox::new(options.cancel.clone())?;
    let binary_kind = PluginKind::from_binary(&plugin);
    let (kind, mut template) = match &options.config {
        Some(conf) => {
            let kind = conf
                .get("type")
                .and_then(Value::as_str)
                .map(PluginKind::from_type)
                .unwrap_or(binary_kind);
            (kind, conf.clone())
        }
        None => {
            if binary_kind == PluginKind::Flannel {
                let path = sb.names.flannel_subnet_file();
                std::fs::write(&path, sb.names.flannel_subnet_env())
                    .map_err(crate::error::io_err(format!("write {}", path.display())))?;
            }
            let conf = binary_kind
                .config(&Version::CURRENT.to_string(), &sb.names)
                .ok_or_else(|| Error::UnknownPluginType {
                    plugin_type: binary_kind.type_name().to_owned(),
                })?;
            (binary_kind, conf)
        }
    };
    // Never let a user's config reach the node's state directories (the
    // IPAM store, tuning's backups, flannel's delegate configs, firewall's
    // attachment addresses).
    if let Some(ipam) = template.get_mut("ipam").and_then(Value::as_object_mut) {
        if ipam.get("type").and_then(Value::as_str) == Some("host-local") {
            ipam.insert("dataDir".into(), json!(sb.names.ipam_dir()));
        }
    }
    if matches!(
        kind,
        PluginKind::Tuning | PluginKind::Flannel | PluginKind::Firewall
    ) {
        if let Some(obj) = template.as_object_mut() {
            let dir = sb.names.data_dir.join(kind.type_name());
            obj.insert("dataDir".into(), json!(dir));
        }
    }
    let mut dirs = vec![plugin
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))];
    dirs.extend(options.cni_path.iter().cloned());
    let cni_path = std::env::join_paths(&dirs)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ctx = Ctx {
        sb: &sb,
        role: options.role.unwrap_or_else(|| kind.role()),
        ifname: options
            .ifname
            .clone()
            .unwrap_or_else(|| kind.default_ifname().to_owned()),
        kind,
        plugin,
        template,
        cni_path,
        timeout: options.timeout,
    };
    ctx.run_all(options.config.is_some())
}

fn case(report: &mut Report, name: impl Into<String>, verdict: Verdict) {
    let outcome = match verdict {
        Ok(None) => Outcome::Passed,
        Ok(Some(note)) => Outcome::PassedWithNote(note),
        Err(reason) => Outcome::Failed(reason),
    };
    report.cases.push(CaseResult {
        name: name.into(),
        outcome,
    });
}

fn parse_version(s: &str) -> Option<Version> {
    Version::parse(s).ok().filter(|v| v.is_supported())
}

impl Ctx<'_> {
    fn run_all(&self, user_config: bool) -> Result<Report, Error> {
        let mut report = Report::default();
        let (verdict, claimed) = self.version_case()?;
        case(&mut report, "version", verdict);
        let known: Vec<Version> = claimed.iter().filter_map(|s| parse_version(s)).collect();
        let config_version = self
            .template
            .get("cniVersion")
            .and_then(Value::as_str)
            .and_then(parse_version);
        let main = match (user_config, config_version, known.iter().max()) {
            (true, Some(v), _) => v,
            (_, _, Some(v)) => *v,
            (_, Some(v), None) => v,
            (_, None, None) => Version::V1_0_0,
        };
        case(
            &mut report,
            "add-check-del-del",
            self.add_check_del_del(main)?,
        );
        case(&mut report, "del-without-add", self.del_without_add(main)?);
        case(
            &mut report,
            "del-without-netns",
            self.del_without_netns(main)?,
        );
        case(
            &mut report,
            "del-after-netns-deleted",
            self.del_after_netns_deleted(main)?,
        );
        for v in &known {
            case(&mut report, format!("add-result-{v}"), self.add_result(*v)?);
        }
        case(
            &mut report,
            "error-unsupported-version",
            self.error_unsupported_version(main)?,
        );
        case(
            &mut report,
            "error-missing-ifname",
            self.error_missing_ifname(main)?,
        );
        case(&mut report, "unknown-command", self.unknown_command(main)?);
        case(
            &mut report,
            "add-ifname-exists",
            self.add_ifname_exists(main)?,
        );
        case(
            &mut report,
            "host-netns-refused",
            self.host_netns_refused(main)?,
        );
        if known.contains(&Version::V1_1_0) {
            case(&mut report, "status", self.status()?);
            case(&mut report, "gc-empty-valid-attachments", self.gc()?);
        }
        Ok(report)
    }

    // ---- plumbing -------------------------------------------------------

    fn call(
        &self,
        command: &str,
        cid: Option<&str>,
        netns: Option<&Path>,
        ifname: Option<&str>,
        config: &Value,
    ) -> Result<Reply, Error> {
        let mut env = vec![
            ("CNI_COMMAND", command.to_owned()),
            ("CNI_PATH", self.cni_path.clone()),
        ];
        if let Some(cid) = cid {
            env.push(("CNI_CONTAINERID", cid.to_owned()));
        }
        if let Some(netns) = netns {
            env.push(("CNI_NETNS", netns.to_string_lossy().into_owned()));
        }
        if let Some(ifname) = ifname {
            env.push(("CNI_IFNAME", ifname.to_owned()));
        }
        let stdin = serde_json::to_vec(config).unwrap_or_default();
        self.sb.exec(&self.plugin, &[], &env, &stdin, self.timeout)
    }

    fn config_for(&self, version: Version) -> Value {
        let mut conf = self.template.clone();
        if let Some(obj) = conf.as_object_mut() {
            obj.insert("cniVersion".into(), json!(version.to_string()));
        }
        conf
    }

    /// Links the config names on the host side (`master`, `device`) exist.
    fn prerequisites(&self) -> Result<(), Error> {
        for key in ["master", "device"] {
            if let Some(name) = self.template.get(key).and_then(Value::as_str) {
                self.sb.ensure_host_link(name)?;
            }
        }
        Ok(())
    }

    fn attach(&self, version: Version) -> Result<Attachment, Error> {
        self.prerequisites()?;
        let n = self.sb.next();
        let netns = self.sb.new_container()?;
        let cid = format!("cnik-{}-{n}", self.sb.names.suffix);
        let mut config = self.config_for(version);
        match self.role {
            Role::Interface => {}
            Role::Ipam => {
                self.sb.add_container_veth(&netns, &self.ifname, n, false)?;
            }
            Role::Meta => {
                let prev = self.sb.add_container_veth(&netns, &self.ifname, n, true)?;
                let prev = CniResult::from_value_as(&prev, Version::V1_0_0)
                    .and_then(|r| r.to_value(version))
                    .map_err(|e| Error::Setup {
                        op: format!("build a {version} prevResult"),
                        reason: e.to_string(),
                    })?;
                if let Some(obj) = config.as_object_mut() {
                    obj.insert("prevResult".into(), prev);
                }
            }
        }
        Ok(Attachment {
            cid,
            netns_path: netns.path().to_owned(),
            netns: Some(netns),
            version,
            config,
        })
    }

    fn add(&self, a: &Attachment) -> Result<Reply, Error> {
        self.call(
            "ADD",
            Some(&a.cid),
            Some(&a.netns_path),
            Some(&self.ifname),
            &a.config,
        )
    }

    fn del(&self, a: &Attachment, result: Option<&Value>) -> Result<Reply, Error> {
        let prev = result.filter(|_| a.version.supports_prev_result_on_del());
        self.call(
            "DEL",
            Some(&a.cid),
            Some(&a.netns_path),
            Some(&self.ifname),
            &a.with_prev(prev),
        )
    }

    /// ADD, requiring success and a well-formed result.
    fn add_ok(&self, a: &Attachment) -> Result<Result<Value, String>, Error> {
        let reply = self.add(a)?;
        if !reply.success() {
            return Ok(Err(format!("ADD failed: {}", reply.describe())));
        }
        let expect = Expect {
            version: a.version,
            role: self.role,
            ifname: &self.ifname,
        };
        let result = match shape::add_result(&reply.stdout, &expect) {
            Ok(r) => r,
            Err(e) => return Ok(Err(format!("ADD result: {e}"))),
        };
        if self.role == Role::Meta {
            // The spec: a plugin given a prevResult "MUST handle prevResult
            // by either passing it through, or modifying it appropriately";
            // a meta plugin has no reason to drop the pod's address.
            let prev = a.config.get("prevResult").cloned().unwrap_or(Value::Null);
            for addr in addresses(&prev, a.version) {
                if !result.ips.iter().any(|ip| ip.address == addr) {
                    return Ok(Err(format!(
                        "ADD result dropped the prevResult address {addr}"
                    )));
                }
            }
        }
        Ok(Ok(
            serde_json::from_slice(&reply.stdout).unwrap_or(Value::Null)
        ))
    }

    /// Best-effort DEL after a case, whatever happened (not judged).
    fn cleanup(&self, a: &Attachment, result: Option<&Value>) {
        let _ = self.del(a, result);
    }

    /// A non-zero exit with a well-formed error object, optionally with a
    /// given code.
    fn expect_error(reply: &Reply, what: &str, code: Option<u64>) -> Verdict {
        if reply.success() {
            return Err(format!("{what} succeeded, expected an error"));
        }
        if reply.timed_out {
            return Err(format!("{what}: {}", reply.describe()));
        }
        let got = shape::error_reply(&reply.stdout)
            .map_err(|e| format!("{what}: {e} ({})", reply.describe()))?;
        match code {
            Some(want) if want != got => Err(format!(
                "{what}: error code {got}, expected {want} ({})",
                reply.describe()
            )),
            _ => Ok(None),
        }
    }

    fn leftover_files(&self, cid: &str) -> Result<(), String> {
        list_leftovers(
            "state left naming the container",
            &self.sb.files_naming(cid),
        )
    }

    fn leftover_reservations(&self, cid: &str) -> Result<(), String> {
        list_leftovers("IPAM reservations left", &self.sb.reservations_of(cid))
    }

    // ---- cases ----------------------------------------------------------

    fn version_case(&self) -> Result<(Verdict, Vec<String>), Error> {
        let stdin = json!({"cniVersion": Version::CURRENT.to_string()});
        let reply = self.call("VERSION", None, None, None, &stdin)?;
        if !reply.success() {
            return Ok((
                Err(format!("VERSION failed: {}", reply.describe())),
                Vec::new(),
            ));
        }
        Ok(match shape::version_reply(&reply.stdout) {
            Ok(list) => {
                let mut notes = Vec::new();
                let unknown: Vec<&String> =
                    list.iter().filter(|v| parse_version(v).is_none()).collect();
                if !unknown.is_empty() {
                    notes.push(format!(
                        "versions the kit does not know are not tested: {unknown:?}"
                    ));
                }
                // SPEC.md says the reply's cniVersion is "the value of
                // cniVersion specified on input"; every Go plugin prints its
                // library's version instead, so this is shown, not judged.
                let echoed = shape::object(&reply.stdout)
                    .ok()
                    .and_then(|m| {
                        m.get("cniVersion")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .unwrap_or_default();
                let asked = Version::CURRENT.to_string();
                if echoed != asked {
                    notes.push(format!(
                        "reply cniVersion {echoed:?} is not the input's {asked:?} (SPEC.md asks for an echo; Go prints its own)"
                    ));
                }
                let note = (!notes.is_empty()).then(|| notes.join("; "));
                (Ok(note), list)
            }
            Err(e) => (Err(e), Vec::new()),
        })
    }

    fn add_check_del_del(&self, version: Version) -> Result<Verdict, Error> {
        let a = self.attach(version)?;
        let mut result = None;
        let verdict = self.add_check_del_del_steps(&a, &mut result);
        self.cleanup(&a, result.as_ref());
        verdict
    }

    fn add_check_del_del_steps(
        &self,
        a: &Attachment,
        result: &mut Option<Value>,
    ) -> Result<Verdict, Error> {
        let mut notes = Vec::new();
        let value = match self.add_ok(a)? {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        *result = Some(value.clone());
        let netns = a.netns.as_ref().map(|n| n.netns());
        if let (Role::Interface, Some(ns)) = (self.role, netns) {
            if !self.sb.container_has_link(ns, &self.ifname)? {
                return Ok(Err(format!(
                    "ADD succeeded but {} does not exist in the container",
                    self.ifname
                )));
            }
        }
        if a.version.supports_check() {
            if let (Role::Ipam, Some(ns)) = (self.role, netns) {
                // Playing the interface plugin: put the addresses on the
                // interface, as a main plugin does before CHECK.
                let addrs = addresses(&value, a.version);
                if let Err(e) = self.sb.configure_addresses(ns, &self.ifname, &addrs) {
                    return Ok(Err(format!(
                        "the kit cannot configure ADD's addresses: {e}"
                    )));
                }
            }
            let conf = a.with_prev(Some(&value));
            let reply = self.call(
                "CHECK",
                Some(&a.cid),
                Some(&a.netns_path),
                Some(&self.ifname),
                &conf,
            )?;
            if !reply.success() {
                return Ok(Err(format!("CHECK after ADD failed: {}", reply.describe())));
            }
            if !reply.stdout.iter().all(u8::is_ascii_whitespace) {
                return Ok(Err(format!(
                    "CHECK printed something; the spec says it returns nothing or an error: {}",
                    reply.describe()
                )));
            }
        } else {
            notes.push(format!(
                "CHECK not run: config version {} < 0.4.0",
                a.version
            ));
        }
        let reply = self.del(a, Some(&value))?;
        if !reply.success() {
            return Ok(Err(format!("DEL after ADD failed: {}", reply.describe())));
        }
        if let (Role::Interface, Some(ns)) = (self.role, netns) {
            if self.kind != PluginKind::Loopback && self.sb.container_has_link(ns, &self.ifname)? {
                return Ok(Err(format!(
                    "{} still exists in the container after DEL",
                    self.ifname
                )));
            }
        }
        if let Err(e) = self.leftover_files(&a.cid) {
            return Ok(Err(format!("after DEL: {e}")));
        }
        let reply = self.del(a, Some(&value))?;
        if !reply.success() {
            return Ok(Err(format!("second DEL failed: {}", reply.describe())));
        }
        Ok(Ok((!notes.is_empty()).then(|| notes.join("; "))))
    }

    fn del_without_add(&self, version: Version) -> Result<Verdict, Error> {
        self.prerequisites()?;
        let netns = self.sb.new_container()?;
        let cid = format!("cnik-{}-{}", self.sb.names.suffix, self.sb.next());
        let conf = self.config_for(version);
        let conf = Attachment {
            cid: cid.clone(),
            netns: None,
            netns_path: netns.path().to_owned(),
            version,
            config: conf,
        }
        .with_prev(None);
        let reply = self.call(
            "DEL",
            Some(&cid),
            Some(netns.path()),
            Some(&self.ifname),
            &conf,
        )?;
        Ok(if reply.success() {
            Ok(None)
        } else {
            Err(format!(
                "DEL of an attachment never added failed: {}",
                reply.describe()
            ))
        })
    }

    fn del_without_netns(&self, version: Version) -> Result<Verdict, Error> {
        let a = self.attach(version)?;
        let value = match self.add_ok(&a)? {
            Ok(v) => v,
            Err(e) => {
                self.cleanup(&a, None);
                return Ok(Err(e));
            }
        };
        let prev = Some(&value).filter(|_| version.supports_prev_result_on_del());
        // CNI_NETNS is optional for DEL; the plugin releases what it can.
        let reply = self.call(
            "DEL",
            Some(&a.cid),
            None,
            Some(&self.ifname),
            &a.with_prev(prev),
        )?;
        let verdict = if !reply.success() {
            Err(format!(
                "DEL without CNI_NETNS failed: {}",
                reply.describe()
            ))
        } else {
            self.leftover_files(&a.cid).map(|()| None)
        };
        self.cleanup(&a, Some(&value));
        Ok(verdict)
    }

    fn add_ifname_exists(&self, version: Version) -> Result<Verdict, Error> {
        let not_applicable = match (self.role, &self.kind) {
            (Role::Ipam, _) => Some("an IPAM plugin creates no interface"),
            (Role::Meta, _) => Some("a chained plugin adjusts the existing CNI_IFNAME"),
            (_, PluginKind::Loopback) => Some("loopback configures the existing lo"),
            _ => None,
        };
        if let Some(why) = not_applicable {
            return Ok(Ok(Some(format!("not applicable: {why}"))));
        }
        let a = self.attach(version)?;
        let ns = a.netns.as_ref().map(|n| n.netns());
        if let Some(ns) = ns {
            self.sb
                .add_container_veth(ns, &self.ifname, self.sb.next(), false)?;
        }
        let reply = self.add(&a)?;
        let mut verdict = Self::expect_error(
            &reply,
            "ADD with CNI_IFNAME already present in the container",
            None,
        );
        if reply.success() {
            self.cleanup(&a, None);
        } else if let Some(ns) = ns {
            if verdict.is_ok() && !self.sb.container_has_link(ns, &self.ifname)? {
                verdict = Err(format!(
                    "ADD refused, but the existing {} is gone from the container",
                    self.ifname
                ));
            }
        }
        Ok(verdict)
    }

    fn del_after_netns_deleted(&self, version: Version) -> Result<Verdict, Error> {
        let mut a = self.attach(version)?;
        let value = match self.add_ok(&a)? {
            Ok(v) => v,
            Err(e) => {
                self.cleanup(&a, None);
                return Ok(Err(e));
            }
        };
        // Dropping the namespace unmounts and removes its path; its links
        // go with it.
        drop(a.netns.take());
        if a.netns_path.exists() {
            return Err(Error::Setup {
                op: format!("delete {}", a.netns_path.display()),
                reason: "the path still exists".into(),
            });
        }
        let reply = self.del(&a, Some(&value))?;
        if a.netns_path.exists() {
            // Removed again when the sandbox goes.
            return Ok(Err(format!(
                "DEL created {} (the deleted CNI_NETNS path); {}",
                a.netns_path.display(),
                reply.describe()
            )));
        }
        if !reply.success() {
            return Ok(Err(format!(
                "DEL with CNI_NETNS naming a deleted namespace failed: {}",
                reply.describe()
            )));
        }
        Ok(self.leftover_files(&a.cid).map(|()| None))
    }

    fn add_result(&self, version: Version) -> Result<Verdict, Error> {
        let a = self.attach(version)?;
        let verdict = match self.add_ok(&a)? {
            Ok(value) => {
                let reply = self.del(&a, Some(&value))?;
                if reply.success() {
                    Ok(None)
                } else {
                    Err(format!("DEL after ADD failed: {}", reply.describe()))
                }
            }
            Err(e) => Err(e),
        };
        self.cleanup(&a, None);
        Ok(verdict)
    }

    fn error_unsupported_version(&self, version: Version) -> Result<Verdict, Error> {
        let mut a = self.attach(version)?;
        if let Some(obj) = a.config.as_object_mut() {
            obj.insert("cniVersion".into(), json!("99.99.99"));
        }
        let reply = self.add(&a)?;
        let verdict = Self::expect_error(&reply, "ADD with cniVersion 99.99.99", Some(1));
        if reply.success() {
            a.config = self.config_for(version);
            self.cleanup(&a, None);
        }
        Ok(verdict)
    }

    fn error_missing_ifname(&self, version: Version) -> Result<Verdict, Error> {
        let a = self.attach(version)?;
        let reply = self.call("ADD", Some(&a.cid), Some(&a.netns_path), None, &a.config)?;
        let verdict = Self::expect_error(&reply, "ADD without CNI_IFNAME", Some(4));
        if reply.success() {
            self.cleanup(&a, None);
        }
        Ok(verdict)
    }

    fn unknown_command(&self, version: Version) -> Result<Verdict, Error> {
        let a = self.attach(version)?;
        let reply = self.call(
            "FROBNICATE",
            Some(&a.cid),
            Some(&a.netns_path),
            Some(&self.ifname),
            &a.config,
        )?;
        Ok(Self::expect_error(
            &reply,
            "CNI_COMMAND=FROBNICATE",
            Some(4),
        ))
    }

    fn host_netns_refused(&self, version: Version) -> Result<Verdict, Error> {
        let a = self.attach(version)?;
        let before = self.sb.host_links()?;
        let host = self.sb.host().path().to_owned();
        let reply = self.call(
            "ADD",
            Some(&a.cid),
            Some(&host),
            Some(&self.ifname),
            &a.config,
        )?;
        let after = self.sb.host_links()?;
        let changed = link_diff(&before, &after);
        if reply.success() {
            let _ = self.call(
                "DEL",
                Some(&a.cid),
                Some(&host),
                Some(&self.ifname),
                &a.config,
            );
        }
        if !self.kind.enters_netns() {
            return Ok(match changed {
                None => Ok(Some(format!(
                    "not required to refuse: {} does not configure CNI_NETNS; host links unchanged",
                    self.kind.type_name()
                ))),
                Some(diff) => Err(format!(
                    "ADD with CNI_NETNS = the host namespace changed its links: {diff}"
                )),
            });
        }
        let verdict = Self::expect_error(
            &reply,
            "ADD with CNI_NETNS naming the plugin's own namespace",
            None,
        );
        Ok(match (verdict, changed) {
            (Ok(_), None) => Ok(None),
            (Ok(_), Some(diff)) => Err(format!(
                "ADD was refused but the host namespace's links changed: {diff}"
            )),
            (Err(e), None) => Err(e),
            (Err(e), Some(diff)) => Err(format!("{e}; host links changed: {diff}")),
        })
    }

    fn status(&self) -> Result<Verdict, Error> {
        let conf = self.config_for(Version::V1_1_0);
        let reply = self.call("STATUS", None, None, None, &conf)?;
        if reply.success() {
            return Ok(Ok(None));
        }
        Ok(Self::expect_error(&reply, "STATUS", None).map(|_| {
            Some(format!(
                "plugin reports not ready: {}",
                String::from_utf8_lossy(&reply.stdout).trim()
            ))
        }))
    }

    fn gc(&self) -> Result<Verdict, Error> {
        // A first attachment added and deleted brings up whatever the
        // network itself needs (tables, chains): the baseline.
        let warm = self.attach(Version::V1_1_0)?;
        let warm_result = self.add_ok(&warm)?.ok();
        self.cleanup(&warm, warm_result.as_ref());
        let baseline = FirewallState::read(self.sb);

        let a = self.attach(Version::V1_1_0)?;
        let value = match self.add_ok(&a)? {
            Ok(v) => v,
            Err(e) => {
                self.cleanup(&a, None);
                return Ok(Err(e));
            }
        };
        let mut conf = self.config_for(Version::V1_1_0);
        if let Some(obj) = conf.as_object_mut() {
            obj.insert("cni.dev/valid-attachments".into(), json!([]));
            // libcni also sends the key spec-v1.1.0 mistakenly named.
            obj.insert("cni.dev/attachments".into(), json!([]));
        }
        let reply = self.call("GC", None, None, None, &conf)?;
        let verdict = if !reply.success() {
            Err(format!("GC failed: {}", reply.describe()))
        } else {
            let after = FirewallState::read(self.sb);
            self.leftover_reservations(&a.cid)
                .and_then(|()| after.leftovers(&baseline, &a.cid))
                .map(|()| None)
                .map_err(|e| format!("after GC: {e}"))
        };
        self.cleanup(&a, Some(&value));
        Ok(verdict)
    }
}

/// The addresses of a result.
fn addresses(result: &Value, version: Version) -> Vec<IpNetwork> {
    CniResult::from_value_as(result, version)
        .map(|r| r.ips.iter().map(|ip| ip.address).collect())
        .unwrap_or_default()
}

type LinkList = [(u32, String, Option<String>)];

fn link_diff(before: &LinkList, after: &LinkList) -> Option<String> {
    let show = |l: &(u32, String, Option<String>)| {
        format!("{} ({})", l.1, l.2.as_deref().unwrap_or("device"))
    };
    let added: Vec<String> = after
        .iter()
        .filter(|l| !before.contains(l))
        .map(show)
        .collect();
    // The host ends of veths of earlier cases (`cnikv*`, and the peers
    // `cnikp*` of devices moved into a container) vanish on their own while
    // the kernel tears those container namespaces down.
    let removed: Vec<String> = before
        .iter()
        .filter(|l| !after.contains(l) && !l.1.starts_with("cnikv") && !l.1.starts_with("cnikp"))
        .map(show)
        .collect();
    if added.is_empty() && removed.is_empty() {
        return None;
    }
    Some(format!(
        "added [{}], removed [{}]",
        added.join(", "),
        removed.join(", ")
    ))
}

/// Firewall state of the host namespace, reduced to what can be compared
/// between two points in time: nftables set/map elements and rules
/// (without handles), iptables rules (without counters). A missing tool is
/// an empty state.
struct FirewallState {
    items: BTreeSet<String>,
    raw: String,
}

impl FirewallState {
    fn read(sb: &Sandbox) -> FirewallState {
        let mut items = BTreeSet::new();
        let mut raw = String::new();
        if let Some(text) = sb.tool_output("nft", &["-j", "list", "ruleset"]) {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                for obj in v["nftables"].as_array().into_iter().flatten() {
                    nft_items(obj, &mut items);
                }
            }
            raw.push_str(&text);
        }
        for tool in ["iptables-save", "ip6tables-save"] {
            if let Some(text) = sb.tool_output(tool, &[]) {
                for line in text.lines() {
                    if line.starts_with("-A") {
                        items.insert(format!("{tool}: {line}"));
                    } else if let Some(chain) = line.strip_prefix(':') {
                        let name = chain.split_whitespace().next().unwrap_or(chain);
                        items.insert(format!("{tool}: chain {name}"));
                    }
                }
                raw.push_str(&text);
            }
        }
        FirewallState { items, raw }
    }

    fn leftovers(&self, baseline: &FirewallState, cid: &str) -> Result<(), String> {
        let new: Vec<&String> = self.items.difference(&baseline.items).collect();
        if !new.is_empty() {
            let shown: Vec<String> = new.iter().take(5).map(|s| s.to_string()).collect();
            return Err(format!(
                "{} firewall item(s) added for the attachment remain: {}",
                new.len(),
                shown.join("; ")
            ));
        }
        if self.raw.contains(cid) {
            return Err(format!("the firewall state still names container {cid}"));
        }
        Ok(())
    }
}

fn nft_items(obj: &Value, items: &mut BTreeSet<String>) {
    for kind in ["set", "map"] {
        if let Some(set) = obj.get(kind) {
            let name = format!(
                "{} {} {} {}",
                kind,
                set["family"].as_str().unwrap_or(""),
                set["table"].as_str().unwrap_or(""),
                set["name"].as_str().unwrap_or("")
            );
            for elem in set["elem"].as_array().into_iter().flatten() {
                items.insert(format!("nft {name} element {elem}"));
            }
        }
    }
    if let Some(rule) = obj.get("rule") {
        let mut rule = rule.clone();
        if let Some(r) = rule.as_object_mut() {
            r.remove("handle");
        }
        zero_counters(&mut rule);
        items.insert(format!("nft rule {rule}"));
    }
    if let Some(chain) = obj.get("chain") {
        items.insert(format!(
            "nft chain {} {} {}",
            chain["family"].as_str().unwrap_or(""),
            chain["table"].as_str().unwrap_or(""),
            chain["name"].as_str().unwrap_or("")
        ));
    }
}

/// Packet counters change between two reads; they are not state.
fn zero_counters(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if k == "counter" {
                    *child = Value::Null;
                } else {
                    zero_counters(child);
                }
            }
        }
        Value::Array(list) => list.iter_mut().for_each(zero_counters),
        _ => {}
    }
}

fn list_leftovers(what: &str, files: &[PathBuf]) -> Result<(), String> {
    if files.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}",
            files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}
