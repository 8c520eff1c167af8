//! The bandwidth plugin's errors.

use cni_types::ErrorCode;

/// Why a bandwidth plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// Several teardown steps failed (DEL, GC, an undo): all of them.
    #[error("{0}")]
    Teardown(#[from] crate::Failures<Error>),
    /// Opening the pod's network namespace failed.
    #[error("failed to open netns {path:?}: {source}")]
    NetnsOpen {
        /// The namespace path (`CNI_NETNS`).
        path: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// A traffic-control step on a host link failed.
    #[error("{op}: {source}")]
    TrafficControl {
        /// Go's name of the step (`"create qdisc"`, `"create ingress
        /// qdisc"`, `"add filter"`, `"create ifb qdisc: create qdisc"`).
        op: &'static str,
        /// The link the qdisc or filter goes on.
        link: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Creating the IFB device of the egress limit failed.
    #[error("adding link: {source}")]
    IfbCreate {
        /// The IFB device name.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// The IFB device of the egress limit was not found (CHECK).
    #[error("get ifb device: {source}")]
    IfbLookup {
        /// The IFB device name.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// `prevResult` lists no interface, so the host veth cannot be found.
    #[error("no interfaces provided")]
    PrevResultNoInterfaces,
    /// The container interface's veth peer could not be read.
    #[error("container interface {ifname} has no veth peer: {source}")]
    VethPeerLookup {
        /// The container interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// The container interface's veth peer is not in the host namespace.
    #[error("veth peer with index {index} is not in host ns")]
    VethPeerNotOnHost {
        /// The container interface.
        ifname: String,
        /// The peer's interface index.
        index: u32,
        /// The lookup's error.
        source: Box<cni_netns::Error>,
    },
    /// The veth peer is not a host interface listed in `prevResult`.
    #[error("no veth peer of container interface found in host ns")]
    VethPeerNotInResult {
        /// The container interface.
        ifname: String,
        /// The host link that is its peer.
        peer: String,
    },
    /// CHECK: the link's first qdisc is not a TBF (or it has none).
    #[error("{}", tbf_missing_text(*.index, .found.as_deref()))]
    TbfMissing {
        /// The link's index.
        index: u32,
        /// The kind of the qdisc found first, `None` when there is none.
        found: Option<String>,
    },
    /// CHECK: a parameter of the link's TBF differs from the config.
    #[error("{field} doesn't match")]
    TbfMismatch {
        /// The link's index.
        index: u32,
        /// Go's name of the parameter (`"Rate"`, `"Limit"`, `"Buffer"`).
        field: &'static str,
    },
    /// CHECK: no filter on the host veth redirects to the IFB device.
    #[error("no filter redirects {veth} to {ifb}")]
    RedirectMissing {
        /// The host veth.
        veth: String,
        /// The IFB device.
        ifb: String,
    },
    /// A rate is set without its burst or the other way round, or a burst
    /// is too large (code 7, Go's `validateRateAndBurst` messages).
    #[error("{reason}")]
    RateBurstInvalid {
        /// What is wrong, in Go's words.
        reason: &'static str,
    },
    /// A limit of the config is not a non-negative integer (code 7).
    #[error(
        "failed to parse network configuration: {key} must be a non-negative integer, got {found}"
    )]
    LimitNotInteger {
        /// The key.
        key: String,
        /// The JSON value given.
        found: String,
    },
    /// `prevResult` does not parse (code 7).
    #[error("could not parse prevResult: {source}")]
    PrevResultParse {
        /// The parser's error.
        source: cni_types::Error,
    },
    /// ADD or DEL without `prevResult` (code 7).
    #[error("must be called as chained plugin")]
    PrevResultMissing,
    /// CHECK without `prevResult` (code 7; Go's CHECK words it so).
    #[error("must be called as a chained plugin")]
    CheckPrevResultMissing,
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::Teardown(all) => all.code(),
            Error::RateBurstInvalid { .. }
            | Error::LimitNotInteger { .. }
            | Error::PrevResultParse { .. }
            | Error::PrevResultMissing
            | Error::CheckPrevResultMissing => ErrorCode::InvalidNetworkConfig,
            _ => ErrorCode::Internal,
        }
    }

    fn shared(&self) -> Option<&crate::Error> {
        match self {
            Error::Shared(e) => Some(e),
            _ => None,
        }
    }
}

crate::plugin_error_glue!(Error);

/// `Result` with the bandwidth plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Go's wordings of a missing TBF: none at all, or another qdisc first.
fn tbf_missing_text(index: u32, found: Option<&str>) -> String {
    match found {
        None => "Failed to find qdisc".into(),
        Some(kind) => format!("expected a tbf qdisc on link #{index}, found {kind}"),
    }
}
