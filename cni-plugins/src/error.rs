//! What the plugins' errors share: the crate-level [`Error`] for failures
//! every plugin can meet (config, spec data, IPAM, kernel, delegate, file
//! I/O, the shared steps' checks), the [`PluginError`] trait that gives an
//! error its CNI code and reply (the one place where plugin failures
//! become error replies), and [`Failures`], every failure of teardown
//! steps that all ran. Each plugin module has its own error type
//! (`<plugin>::Error`) for its own failures, which wraps this one; multus
//! has its own too (`multus::Error`).

use cni_types::{CniError, ErrorCode};

/// A failure any plugin can meet: the config, spec data, IPAM, the kernel,
/// a delegated plugin, a file; and the shared steps' findings (CHECK's
/// comparisons of a previous result with the kernel, the master link, the
/// pod MAC and link mode). Each plugin's own error wraps it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin's configuration is invalid (code 7).
    #[error("{0}")]
    Config(String),
    /// Spec data (config, result, args) did not parse or convert.
    #[error(transparent)]
    Types(#[from] cni_types::Error),
    /// A file operation failed (code 999).
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("read", "write", "remove"...).
        op: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An IPAM operation failed; its code comes from [`cni_ipam::Error::code`].
    #[error(transparent)]
    Ipam(#[from] cni_ipam::Error),
    /// A finished error reply, passed on unchanged.
    #[error("{0}")]
    Cni(CniError),
    /// A delegated plugin failed; its error reply is passed on unchanged.
    #[error("{0}")]
    Delegate(CniError),
    /// The plugin cannot serve requests now (STATUS, code 50).
    #[error("{0}")]
    NotAvailable(String),
    /// A kernel operation (namespace, link, address, route, sysctl,
    /// firewall) failed; the error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] cni_netns::Error),
    /// A host firewall operation (masquerade, port mappings, MAC spoof
    /// check, conntrack, iptables, foreign nft tables) failed; the error
    /// names the operation and the attachment or table.
    #[error(transparent)]
    Firewall(#[from] cni_firewall::Error),
    // ---- several plugins ----
    /// The configured MTU is out of the link's range.
    #[error("{}", invalid_mtu(*.mtu, *.master_mtu))]
    InvalidMtu {
        /// The configured MTU.
        mtu: i64,
        /// The upper bound (the master link's MTU), when there is one.
        master_mtu: Option<u32>,
    },
    /// Data the plugin built itself did not encode as JSON.
    #[error("error serializing {object}: {source}")]
    Serialize {
        /// What was being encoded (`"delegate netconf"`, `"backup"`...).
        object: &'static str,
        /// The encoder's error.
        source: serde_json::Error,
    },
    /// A mechanism of `cni-exec` (file writer, file lock, daemon loop)
    /// failed other than on a file; its error names the operation.
    #[error(transparent)]
    Exec(cni_exec::Error),
    /// Several teardown steps failed (each one ran): all of them, the
    /// first one's code.
    #[error("{0}")]
    Teardown(#[from] Failures<Error>),

    // ---- the steps the interface plugins share (`steps`) ----
    /// CHECK without the `prevResult` it compares (code 7).
    #[error("Required prevResult missing")]
    PrevResultMissing,
    /// CHECK: the previous result has no interface for this attachment
    /// (Go's message, its double space included).
    #[error("Sandbox in prevResult  doesn't match configured netns: {netns}")]
    CheckSandboxMismatch {
        /// `CNI_NETNS`.
        netns: String,
    },
    /// CHECK: the previous result's pod interface is not in the pod.
    #[error("Container Interface name in prevResult: {name} not found")]
    CheckPodLinkMissing {
        /// The interface name.
        name: String,
    },
    /// CHECK: the pod interface is of another kind.
    #[error("Error: Container interface {name} not of type {kind}")]
    CheckPodLinkKind {
        /// The interface name.
        name: String,
        /// The kind expected.
        kind: String,
    },
    /// CHECK: the pod interface's MAC is not the previous result's.
    #[error("Interface {name} Mac {expected} doesn't match container Mac: {found}")]
    CheckPodLinkMac {
        /// The interface name.
        name: String,
        /// The previous result's MAC.
        expected: String,
        /// The link's MAC.
        found: String,
    },
    /// CHECK: an address of the previous result is not on the interface.
    #[error("Failed to match addr {address} on interface {ifname}")]
    CheckAddressMissing {
        /// The address.
        address: String,
        /// The interface.
        ifname: String,
    },
    /// CHECK: an address on the pod interface failed IPv6 duplicate
    /// address detection (another host on its segment has it; the kernel
    /// no longer uses it).
    #[error("address {address} on interface {ifname} failed duplicate address detection")]
    CheckAddressDadFailed {
        /// The address.
        address: String,
        /// The interface.
        ifname: String,
    },
    /// CHECK: a route of the previous result is not in the pod.
    #[error("Expected Route {{Dst: {dst} GW: {gateway}}} not found in routing table")]
    CheckRouteMissing {
        /// The route's destination.
        dst: String,
        /// Its gateway (empty without).
        gateway: String,
    },
    /// A MAC requested in `CNI_ARGS`, the config or `runtimeConfig` does
    /// not parse.
    #[error("invalid args {value} for MAC addr: invalid MAC address")]
    InvalidMacArg {
        /// The value given.
        value: String,
    },
    /// The config's link mode is unknown (macvlan, ipvlan).
    #[error("unknown {kind} mode: {mode:?}")]
    UnknownLinkMode {
        /// The link kind.
        kind: &'static str,
        /// The mode given.
        mode: String,
    },
    /// No master configured and no default route with a device.
    #[error("no default route interface found")]
    NoDefaultRouteLink,
    /// The configured master link does not exist.
    #[error("failed to lookup master {master:?}: Link not found")]
    MasterNotFound {
        /// The master's name.
        master: String,
    },
    /// The IPAM plugin's ADD result has no address.
    #[error("IPAM plugin returned missing IP config")]
    IpamNoAddresses,
    /// A step run on a thread of its own panicked.
    #[error("background step panicked")]
    StepPanicked,
}

impl Error {
    /// An I/O error on `path` (code 999).
    pub fn io(op: &'static str, path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// A failed file operation of `cni-files`' file mechanics (the atomic
    /// writer [`cni_files::atomic`], [`cni_files::FileLock`]): its I/O errors
    /// stay [`Error::Io`] (operation and file named).
    pub fn atomic_write(e: impl Into<cni_exec::Error>) -> Self {
        Error::exec(e.into())
    }

    /// A failed `cni-exec` mechanism (file writer, file lock, daemon loop):
    /// its I/O errors become [`Error::Io`], the others [`Error::Exec`].
    pub fn exec(e: impl Into<cni_exec::Error>) -> Self {
        match e.into() {
            cni_exec::Error::Io { op, path, source } => Error::io(op, path, source),
            e => Error::Exec(e),
        }
    }

    /// The CNI error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Config(_) | Error::PrevResultMissing => ErrorCode::InvalidNetworkConfig,
            Error::Teardown(f) => f.code(),
            Error::Types(e) => e.code(),
            Error::Ipam(e) => e.code(),
            Error::Cni(reply) | Error::Delegate(reply) => reply.code,
            Error::NotAvailable(_) => ErrorCode::PluginNotAvailable,
            // Failures of the plugins' own work, as Go's plain `fmt.Errorf`.
            _ => ErrorCode::Internal,
        }
    }

    /// The error reply for this error.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Error::Types(e) => e.to_cni_error(),
            Error::Ipam(e) => e.to_cni_error(),
            Error::Cni(reply) | Error::Delegate(reply) => reply.clone(),
            _ => CniError::new(self.code(), self.to_string(), ""),
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> Self {
        match e {
            Error::Delegate(reply) | Error::Cni(reply) => reply,
            e => e.to_cni_error(),
        }
    }
}

impl PluginError for Error {
    fn code(&self) -> ErrorCode {
        Error::code(self)
    }

    fn to_cni_error(&self) -> CniError {
        Error::to_cni_error(self)
    }
}

/// A plugin's error: its CNI code and its error reply. Each plugin's
/// error type implements [`PluginError::code`] (999, Go's `fmt.Errorf`,
/// unless a variant says otherwise) and names the shared [`Error`] it
/// wraps, whose reply passes on unchanged (a delegate's reply, a spec
/// error's details); `From<plugin::Error> for CniError` (what
/// [`cni_exec::Plugin`] needs) is [`PluginError::to_cni_error`].
pub trait PluginError: std::error::Error {
    /// The CNI error code.
    fn code(&self) -> ErrorCode;

    /// The shared error this one is, when it is one.
    fn shared(&self) -> Option<&Error> {
        None
    }

    /// The error reply: the shared error's when this is one, else this
    /// error's code and text.
    fn to_cni_error(&self) -> CniError {
        match self.shared() {
            Some(shared) => shared.to_cni_error(),
            None => CniError::new(self.code(), self.to_string(), ""),
        }
    }
}

/// Every failure of teardown steps that all ran (DEL, GC, an undo), in
/// the order of the steps; at least two (one failure is returned as
/// itself). Its code is the first one's; its text lists them all, `; `
/// between them.
#[derive(Debug)]
pub struct Failures<E> {
    errors: Vec<E>,
}

impl<E> Failures<E> {
    /// The failures of `results`: `Ok` when there is none, the error
    /// itself when there is one, `wrap(Failures)` for several.
    pub fn collect<I>(results: I, wrap: impl FnOnce(Failures<E>) -> E) -> std::result::Result<(), E>
    where
        I: IntoIterator<Item = std::result::Result<(), E>>,
    {
        let mut errors: Vec<E> = results.into_iter().filter_map(|r| r.err()).collect();
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(wrap(Failures { errors })),
        }
    }

    /// The failures, in the order of their steps.
    pub fn errors(&self) -> &[E] {
        &self.errors
    }

    /// The first failure.
    pub fn first(&self) -> Option<&E> {
        self.errors.first()
    }
}

impl<E: PluginError> Failures<E> {
    /// The first failure's code.
    pub fn code(&self) -> ErrorCode {
        self.first().map_or(ErrorCode::Internal, |e| e.code())
    }
}

impl<E: std::fmt::Display> std::fmt::Display for Failures<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for Failures<E> {}

/// The glue of a plugin's error type `$error` (an enum with a
/// `Shared(crate::Error)` variant and a [`PluginError`] impl): `?` on the
/// kernel's, the firewall's, the spec's and IPAM's errors, and its error
/// reply.
macro_rules! plugin_error_glue {
    ($error:ty) => {
        impl From<cni_netns::Error> for $error {
            fn from(e: cni_netns::Error) -> Self {
                Self::Shared(e.into())
            }
        }

        impl From<cni_types::Error> for $error {
            fn from(e: cni_types::Error) -> Self {
                Self::Shared(e.into())
            }
        }

        impl From<cni_firewall::Error> for $error {
            fn from(e: cni_firewall::Error) -> Self {
                Self::Shared(e.into())
            }
        }

        impl From<cni_ipam::Error> for $error {
            fn from(e: cni_ipam::Error) -> Self {
                Self::Shared(e.into())
            }
        }

        impl From<$error> for cni_types::CniError {
            fn from(e: $error) -> Self {
                $crate::PluginError::to_cni_error(&e)
            }
        }
    };
}
pub(crate) use plugin_error_glue;

/// The text of [`Error::InvalidMtu`]: the bound is the master's MTU when
/// there is one.
fn invalid_mtu(mtu: i64, master_mtu: Option<u32>) -> String {
    match master_mtu {
        Some(max) => format!("invalid MTU {mtu}, must be [0, master MTU({max})]"),
        None => format!("invalid MTU {mtu}, must be >= 0"),
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(e: impl Into<CniError>) -> (u32, String) {
        let c = e.into();
        (c.code.as_u32(), c.msg)
    }

    #[test]
    fn texts_and_codes() {
        assert_eq!(reply(Error::Config("x".into())), (7, "x".into()));
        let not_found = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        assert_eq!(
            reply(Error::io("read", "/etc/x", not_found)),
            (999, "read /etc/x: No such file".into())
        );
        assert_eq!(reply(Error::NotAvailable("x".into())).0, 50);
    }

    fn gone(path: &str) -> cni_netns::Error {
        cni_netns::Error::NetnsNotFound { path: path.into() }
    }

    fn not_found() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "No such file")
    }

    /// The plugins' failures keep Go's texts (each plugin's own wording
    /// where Go's plugins word the same failure differently) and code 999,
    /// as the `fmt.Errorf` strings they replace.
    #[test]
    fn plugin_failures_keep_go_texts_and_code_999() {
        let rule = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let cases = [
            (
                reply(crate::vrf::Error::PrevResultMissing),
                "missing prevResult from earlier plugin".to_string(),
            ),
            (
                reply(crate::vlan::Error::PrevResultMissing),
                "vlan: Required prevResult missing".into(),
            ),
            (
                reply(crate::dummy::Error::IpamRequired),
                "dummy interface requires an IPAM configuration".into(),
            ),
            (
                reply(crate::vlan::Error::IpamRequired),
                r#"vlan requires an IPAM configuration ("ipam")"#.into(),
            ),
            (
                reply(Error::InvalidMtu {
                    mtu: 1600,
                    master_mtu: Some(1500),
                }),
                "invalid MTU 1600, must be [0, master MTU(1500)]".into(),
            ),
            (
                reply(Error::InvalidMtu {
                    mtu: -1,
                    master_mtu: None,
                }),
                "invalid MTU -1, must be >= 0".into(),
            ),
            (
                reply(crate::bandwidth::Error::TbfMissing {
                    index: 3,
                    found: None,
                }),
                "Failed to find qdisc".into(),
            ),
            (
                reply(crate::bandwidth::Error::TbfMissing {
                    index: 3,
                    found: Some("htb".into()),
                }),
                "expected a tbf qdisc on link #3, found htb".into(),
            ),
            (
                reply(crate::bandwidth::Error::TbfMismatch {
                    index: 3,
                    field: "Rate",
                }),
                "Rate doesn't match".into(),
            ),
            (
                reply(crate::tuning::Error::Mismatch {
                    object: "eth0".into(),
                    attribute: "promisc",
                    configured: "true".into(),
                    current: "0".into(),
                }),
                "Error: Tuning link eth0 configured promisc is true, current value is 0".into(),
            ),
            (
                reply(crate::tuning::Error::Mismatch {
                    object: "eth0".into(),
                    attribute: "MTU",
                    configured: "1400".into(),
                    current: "1500".into(),
                }),
                "Error: Tuning configured MTU of eth0 is 1400, current value is 1500".into(),
            ),
            (
                reply(crate::vlan::Error::IdMismatch {
                    ifname: "eth0".into(),
                    configured: 7,
                    current: None,
                }),
                "Error: link eth0 configured vlanId is 7, current value is ".into(),
            ),
            (
                reply(crate::firewall::Error::IptablesRuleMissing {
                    chain: "FORWARD".into(),
                    jump_from: Some("FORWARD".into()),
                    rule: rule(&["-j", "CNI-FORWARD"]),
                }),
                r#"expected FORWARD rule ["-j", "CNI-FORWARD"] not found"#.into(),
            ),
            (
                reply(crate::firewall::Error::IptablesRuleMissing {
                    chain: "CNI-FORWARD".into(),
                    jump_from: None,
                    rule: rule(&["-s", "10.0.0.2"]),
                }),
                r#"expected rule ["-s", "10.0.0.2"] not found"#.into(),
            ),
            (
                reply(crate::vrf::Error::Add {
                    vrf: "blue".into(),
                    ifname: "eth0".into(),
                    source: Box::new(crate::vrf::Error::NotAVrf {
                        name: "blue".into(),
                    }),
                }),
                "cmdAdd failed: Netlink blue is not a VRF".into(),
            ),
            (
                reply(crate::sbr::Error::RuleAdd {
                    src: "10.0.0.2".parse().unwrap(),
                    table: 100,
                    table_configured: false,
                    source: gone("/run/netns/p").into(),
                }),
                format!("Failed to add rule: {}", gone("/run/netns/p")),
            ),
            (
                reply(crate::sbr::Error::RuleAdd {
                    src: "10.0.0.2".parse().unwrap(),
                    table: 100,
                    table_configured: true,
                    source: gone("/run/netns/p").into(),
                }),
                format!("failed to add rule: {}", gone("/run/netns/p")),
            ),
            (
                reply(crate::tuning::Error::SysctlAccess {
                    op: "read",
                    file: "/proc/sys/net/x".into(),
                    source: not_found(),
                }),
                "open /proc/sys/net/x: No such file".into(),
            ),
            (
                reply(crate::flannel::Error::SubnetEnv {
                    path: "/run/flannel/subnet.env".into(),
                    source: Box::new(Error::io("read", "/run/flannel/subnet.env", not_found()).into()),
                }),
                "failed to load flannel 'subnet.env' file: read /run/flannel/subnet.env: No such file. Check the flannel pod log for this node.".into(),
            ),
        ];
        for (got, text) in cases {
            assert_eq!(got, (999, text));
        }
    }

    /// A plugin's own config errors are code 7; its shared errors keep
    /// their code and reply (a delegate's reply passes unchanged).
    #[test]
    fn plugin_errors_name_their_codes_and_pass_shared_replies_on() {
        assert_eq!(
            reply(crate::bridge::Error::VlanInvalid { vlan: 4095 }),
            (
                7,
                "invalid VLAN ID 4095 (must be between 0 and 4094)".into()
            )
        );
        assert_eq!(
            reply(crate::bridge::Error::CheckBridgeMissing).0,
            999,
            "CHECK findings are Go's fmt.Errorf"
        );
        let plugin = CniError::new(ErrorCode::Other(100), "boom", "detail");
        let shared = crate::bridge::Error::from(Error::Delegate(plugin.clone()));
        assert_eq!(CniError::from(shared), plugin);
        assert_eq!(
            reply(crate::bridge::Error::from(Error::Config("x".into()))),
            (7, "x".into())
        );
    }

    /// Several teardown failures are all reported, with the first one's
    /// code; one failure is itself.
    #[test]
    fn teardown_reports_every_failure_with_the_first_code() {
        let all = crate::steps::all_errors([
            Err(crate::bridge::Error::from(Error::Config("first".into()))),
            Ok(()),
            Err(crate::bridge::Error::from(gone("/run/netns/p"))),
        ])
        .unwrap_err();
        let crate::bridge::Error::Teardown(failures) = &all else {
            panic!("{all:?}");
        };
        assert_eq!(failures.errors().len(), 2);
        assert_eq!(reply(all), (7, format!("first; {}", gone("/run/netns/p"))));
        let one = crate::steps::all_errors([Ok(()), Err(Error::Config("only".into()))]);
        assert!(matches!(one, Err(Error::Config(_))), "{one:?}");
        assert!(crate::steps::all_errors::<Error>([Ok(()), Ok(())]).is_ok());
    }

    /// Kernel errors pass through with their own text (they name the
    /// operation and the object) and code 999; a wrapping variant keeps
    /// the kernel error as its source.
    #[test]
    fn kernel_errors_keep_their_text_and_stay_sources() {
        let text = gone("/run/netns/p").to_string();
        assert_eq!(
            reply(Error::from(gone("/run/netns/p"))),
            (999, text.clone())
        );
        let e = crate::bandwidth::Error::IfbCreate {
            ifname: "bwp0".into(),
            source: gone("/run/netns/p").into(),
        };
        assert_eq!(e.to_string(), format!("adding link: {text}"));
        let source = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(source, Some(text));
    }

    #[test]
    fn exec_file_errors_stay_io() {
        let e = Error::exec(cni_exec::Error::Io {
            op: "lock",
            path: "/x".into(),
            source: not_found(),
        });
        assert!(matches!(e, Error::Io { op: "lock", .. }), "{e:?}");
        let e = Error::exec(cni_exec::Error::NotRegistered("k".into()));
        assert!(matches!(e, Error::Exec(_)), "{e:?}");
        assert_eq!(reply(e).0, 999);
    }

    #[test]
    fn replies_pass_unchanged() {
        let plugin = CniError::new(ErrorCode::Other(100), "boom", "detail");
        assert_eq!(CniError::from(Error::Delegate(plugin.clone())), plugin);
        assert_eq!(Error::Cni(plugin.clone()).to_cni_error(), plugin);
    }
}
