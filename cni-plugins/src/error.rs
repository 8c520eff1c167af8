//! The plugins' error enum, and its mapping to CNI error codes (the one
//! place where plugin failures become error replies). multus has its own
//! (`multus::Error`), which wraps this one for what it shares.

use cni_types::{CniError, ErrorCode};

/// Why a plugin command failed.
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
    /// Any other failure (code 999).
    #[error("{0}")]
    Internal(String),
    // steps, bridge, ptp, macvlan, ipvlan
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
    /// CHECK: a route of the previous result is not in the pod.
    #[error("Expected Route {{Dst: {dst} GW: {gateway}}} not found in routing table")]
    CheckRouteMissing {
        /// The route's destination.
        dst: String,
        /// Its gateway (empty without).
        gateway: String,
    },
    /// CHECK (bridge): an interface of the previous result is missing.
    #[error("Interface name {name} not found")]
    CheckLinkMissing {
        /// The interface name.
        name: String,
    },
    /// CHECK (bridge): the previous result names no bridge interface.
    #[error("Interface name missing ")]
    CheckBridgeMissing,
    /// CHECK (bridge): a node interface of the previous result has a sandbox.
    #[error("Interface {name} should not be in sandbox")]
    CheckLinkInSandbox {
        /// The interface name.
        name: String,
    },
    /// CHECK (bridge): the bridge interface is not a bridge.
    #[error("Interface {name} does not have link type of bridge")]
    CheckNotABridge {
        /// The interface name.
        name: String,
    },
    /// CHECK (bridge): the bridge's MAC is not the previous result's.
    #[error("Bridge interface {name} Mac doesn't match: {mac}")]
    CheckBridgeMac {
        /// The bridge.
        name: String,
        /// The previous result's MAC.
        mac: String,
    },
    /// CHECK (bridge): the bridge's promiscuous mode is not the config's.
    #[error(
        "Bridge interface {name} configured Promisc Mode {configured} doesn't match current state: {current} "
    )]
    CheckBridgePromisc {
        /// The bridge.
        name: String,
        /// `promiscMode` of the config.
        configured: bool,
        /// The bridge's state.
        current: bool,
    },
    /// CHECK (bridge): the host veth's MAC is not the previous result's.
    #[error("Interface {name} Mac doesn't match: {mac} not found")]
    CheckHostVethMac {
        /// The host veth.
        name: String,
        /// The previous result's MAC.
        mac: String,
    },
    /// CHECK (bridge): no interface of the previous result is the pod's
    /// host veth on the bridge.
    #[error("CNI veth created for bridge {bridge} was not found")]
    CheckHostVethMissing {
        /// The bridge.
        bridge: String,
    },
    /// CHECK (macvlan, ipvlan): the pod link's mode is not the config's.
    #[error("{prefix} mode {found} does not match expected value: {expected}")]
    CheckLinkMode {
        /// Go's words for the link (`container macvlan`, `Container IPVlan`).
        prefix: &'static str,
        /// The link's mode.
        found: String,
        /// The config's mode.
        expected: String,
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
    /// The config's MTU is negative.
    #[error("invalid MTU {mtu}, must be >= 0")]
    NegativeMtu {
        /// The MTU given.
        mtu: i64,
    },
    /// The config's MTU is above the master's (macvlan).
    #[error("invalid MTU {mtu}, must be [0, master MTU({master})]")]
    MtuAboveMaster {
        /// The MTU given.
        mtu: u32,
        /// The master's MTU.
        master: u32,
    },
    /// A chained ipvlan without `master` and without a single named
    /// interface in the previous result.
    #[error("chained master failure. PrevResult lacks a single named interface")]
    ChainedMasterMissing,
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
    /// An address of the IPAM result has no gateway (ptp needs one).
    #[error("IPAM result for {address} has no gateway")]
    IpamNoGateway {
        /// The address.
        address: String,
    },
    /// A step run on a thread of its own panicked.
    #[error("background step panicked")]
    StepPanicked,
    /// The bridge has another address than the gateway and
    /// `forceAddress` is off.
    #[error(
        "failed to set bridge addr: {bridge:?} already has an IP address different from {gateway}"
    )]
    BridgeAddressTaken {
        /// The bridge (or VLAN gateway link).
        bridge: String,
        /// The gateway address.
        gateway: String,
    },
    /// The bridge port did not come up.
    #[error("bridge port in error state: {state}")]
    BridgePortNotUp {
        /// Its operational state, lower case.
        state: String,
    },
    /// A prefix derived from an IPAM address is invalid (ptp's gateway
    /// and host routes).
    #[error("{object}: {reason}")]
    InvalidPrefix {
        /// What was being derived (`subnet of 10.1.0.2/24`).
        object: String,
        /// Why it is invalid.
        reason: String,
    },
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

    /// A failed file operation of `cni-exec`'s file mechanics (the atomic
    /// writer [`cni_exec::atomic`], [`cni_exec::FileLock`]): its I/O errors
    /// stay [`Error::Io`] (operation and file named).
    pub fn atomic_write(e: cni_exec::Error) -> Self {
        match e {
            cni_exec::Error::Io { op, path, source } => Error::io(op, path, source),
            e => Error::Internal(e.to_string()),
        }
    }

    /// The CNI error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Config(_) => ErrorCode::InvalidNetworkConfig,
            Error::Types(e) => e.code(),
            Error::Ipam(e) => e.code(),
            Error::Cni(reply) | Error::Delegate(reply) => reply.code,
            Error::NotAvailable(_) => ErrorCode::PluginNotAvailable,
            Error::Io { .. } | Error::Kernel(_) | Error::Internal(_) => ErrorCode::Internal,
            // steps, bridge, ptp, macvlan, ipvlan
            Error::CheckSandboxMismatch { .. }
            | Error::CheckPodLinkMissing { .. }
            | Error::CheckPodLinkKind { .. }
            | Error::CheckPodLinkMac { .. }
            | Error::CheckAddressMissing { .. }
            | Error::CheckRouteMissing { .. }
            | Error::CheckLinkMissing { .. }
            | Error::CheckBridgeMissing
            | Error::CheckLinkInSandbox { .. }
            | Error::CheckNotABridge { .. }
            | Error::CheckBridgeMac { .. }
            | Error::CheckBridgePromisc { .. }
            | Error::CheckHostVethMac { .. }
            | Error::CheckHostVethMissing { .. }
            | Error::CheckLinkMode { .. }
            | Error::InvalidMacArg { .. }
            | Error::UnknownLinkMode { .. }
            | Error::NegativeMtu { .. }
            | Error::MtuAboveMaster { .. }
            | Error::ChainedMasterMissing
            | Error::NoDefaultRouteLink
            | Error::MasterNotFound { .. }
            | Error::IpamNoAddresses
            | Error::IpamNoGateway { .. }
            | Error::StepPanicked
            | Error::BridgeAddressTaken { .. }
            | Error::BridgePortNotUp { .. }
            | Error::InvalidPrefix { .. } => ErrorCode::Internal,
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

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(e: Error) -> (u32, String) {
        let c = CniError::from(e);
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

    #[test]
    fn replies_pass_unchanged() {
        let plugin = CniError::new(ErrorCode::Other(100), "boom", "detail");
        assert_eq!(CniError::from(Error::Delegate(plugin.clone())), plugin);
        assert_eq!(Error::Cni(plugin.clone()).to_cni_error(), plugin);
    }
}
