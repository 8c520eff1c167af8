//! The bridge plugin's errors.

use cni_types::ErrorCode;

/// Why a bridge command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// Several teardown steps of DEL or GC failed: all of them.
    #[error("{0}")]
    Teardown(#[from] crate::Failures<Error>),
    /// `vlan` is outside 0..=4094 (code 7).
    #[error("invalid VLAN ID {vlan} (must be between 0 and 4094)")]
    VlanInvalid {
        /// The configured ID.
        vlan: i64,
    },
    /// An entry of `vlanTrunk` is invalid (code 7; Go's `collectVlanTrunk`
    /// messages).
    #[error("{reason}")]
    VlanTrunkInvalid {
        /// What is wrong with it, in Go's words.
        reason: &'static str,
    },
    /// Both `vlan` and `vlanTrunk` are set (code 7).
    #[error("cannot set vlan and vlanTrunk at the same time")]
    VlanWithTrunk,
    /// A requested MAC (`CNI_ARGS`, `args.cni.mac`, `runtimeConfig.mac`)
    /// does not parse (code 7).
    #[error("invalid MAC address {mac:?}")]
    MacInvalid {
        /// The value given.
        mac: String,
    },
    /// `hairpinMode` and `promiscMode` are both set (code 7).
    #[error("cannot set hairpin mode and promiscuous mode at the same time")]
    HairpinWithPromisc,
    /// An IPAM section with `disableContainerInterface` (code 7).
    #[error("cannot use IPAM when DisableContainerInterface flag is set")]
    IpamWithoutContainerInterface,
    /// The bridge has another address than the gateway and
    /// `forceAddress` is off.
    #[error(
        "failed to set bridge addr: {bridge:?} already has an IP address different from {gateway}"
    )]
    AddressTaken {
        /// The bridge (or VLAN gateway link).
        bridge: String,
        /// The gateway address.
        gateway: String,
    },
    /// The bridge port did not come up.
    #[error("bridge port in error state: {state}")]
    PortNotUp {
        /// Its operational state, lower case.
        state: String,
    },
    /// CHECK: an interface of the previous result is missing.
    #[error("Interface name {name} not found")]
    CheckLinkMissing {
        /// The interface name.
        name: String,
    },
    /// CHECK: the previous result names no bridge interface.
    #[error("Interface name missing ")]
    CheckBridgeMissing,
    /// CHECK: a node interface of the previous result has a sandbox.
    #[error("Interface {name} should not be in sandbox")]
    CheckLinkInSandbox {
        /// The interface name.
        name: String,
    },
    /// CHECK: the bridge interface is not a bridge.
    #[error("Interface {name} does not have link type of bridge")]
    CheckNotABridge {
        /// The interface name.
        name: String,
    },
    /// CHECK: the bridge's MAC is not the previous result's.
    #[error("Bridge interface {name} Mac doesn't match: {mac}")]
    CheckBridgeMac {
        /// The bridge.
        name: String,
        /// The previous result's MAC.
        mac: String,
    },
    /// CHECK: the bridge's promiscuous mode is not the config's.
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
    /// CHECK: the host veth's MAC is not the previous result's.
    #[error("Interface {name} Mac doesn't match: {mac} not found")]
    CheckHostVethMac {
        /// The host veth.
        name: String,
        /// The previous result's MAC.
        mac: String,
    },
    /// CHECK: no interface of the previous result is the pod's host veth
    /// on the bridge.
    #[error("CNI veth created for bridge {bridge} was not found")]
    CheckHostVethMissing {
        /// The bridge.
        bridge: String,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::Teardown(all) => all.code(),
            Error::VlanInvalid { .. }
            | Error::VlanTrunkInvalid { .. }
            | Error::VlanWithTrunk
            | Error::MacInvalid { .. }
            | Error::HairpinWithPromisc
            | Error::IpamWithoutContainerInterface => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the bridge plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
