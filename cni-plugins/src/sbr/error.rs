//! The sbr plugin's errors.

use cni_types::ErrorCode;

/// Why a sbr plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// Several teardown steps failed (DEL, GC, an undo): all of them.
    #[error("{0}")]
    Teardown(#[from] crate::Failures<Error>),
    /// The pod interface was not found.
    #[error("Cannot find network interface {ifname}: {source}")]
    LinkLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Adding the source rule of an address failed.
    #[error("{}: {source}", if *.table_configured { "failed to add rule" } else { "Failed to add rule" })]
    RuleAdd {
        /// The address the rule matches.
        src: std::net::IpAddr,
        /// The rule's table.
        table: u32,
        /// The table was given by the config (`table`, `vrfname`) rather
        /// than chosen (Go words the two paths differently).
        table_configured: bool,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Deleting a source rule failed (DEL goes on; every failure is
    /// returned).
    #[error("Failed to delete rule {source}")]
    RuleDelete {
        /// The address the rule matches.
        src: std::net::IpAddr,
        /// The rule's table.
        table: u32,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Adding the default route of an address's table failed.
    #[error("Failed to add default route to {gateway}: {source}")]
    DefaultRoute {
        /// The gateway.
        gateway: std::net::IpAddr,
        /// The table.
        table: u32,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Copying an interface route into an address's table failed.
    #[error("Failed to readd route: {source}")]
    RouteCopy {
        /// The route's destination.
        dst: String,
        /// The table.
        table: u32,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Taking an interface route out of the main table failed.
    #[error("Failed to delete route: {source}")]
    RouteDelete {
        /// The route's destination.
        dst: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// CHECK: an address has no source rule.
    #[error("sbr: no rule from {src} (interface {ifname})")]
    RuleMissing {
        /// The address.
        src: std::net::IpAddr,
        /// The interface.
        ifname: String,
    },
    /// The pod's network namespace is gone.
    #[error("network namespace {path} does not exist")]
    NetnsMissing {
        /// The namespace path.
        path: String,
    },
    /// The config is not a JSON object (code 7).
    #[error("failed to parse network configuration: {reason}")]
    ConfigParse {
        /// The decoder's error.
        reason: String,
    },
    /// A key of the config has the wrong JSON type (code 7).
    #[error("{key}: expected {expected}, got {found}")]
    KeyType {
        /// The key.
        key: &'static str,
        /// The type it takes (`a string`, `a list`, `a boolean`).
        expected: &'static str,
        /// The JSON value given.
        found: String,
    },
    /// `table` is not a table ID (code 7).
    #[error("table: invalid table ID {value}")]
    TableInvalid {
        /// The JSON value given.
        value: String,
    },
    /// `table` names a table the kernel reserves (code 7).
    #[error("table: {table} is a reserved table ID (unspec, default, main or local)")]
    TableReserved {
        /// The table ID.
        table: u32,
    },
    /// Both `vrfname` and `table` are set (code 7).
    #[error("vrfname and table cannot both be set: the VRF's table is used")]
    VrfWithTable,
    /// `gateways` has more than two entries (code 7).
    #[error("gateways list cannot contain more than 2 entries (one IPv4, one IPv6)")]
    GatewaysTooMany,
    /// An entry of `gateways` is not an IP address (code 7).
    #[error("invalid static gateway IP address: {value}")]
    GatewayInvalid {
        /// The JSON value given.
        value: String,
    },
    /// `gateways` has two addresses of one family (code 7).
    #[error("gateways list contains multiple {family} addresses: {first} and {second}")]
    GatewaysSameFamily {
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// The first address.
        first: std::net::IpAddr,
        /// The second.
        second: std::net::IpAddr,
    },
    /// The config has no `prevResult` (code 7).
    #[error("This plugin must be called as chained plugin: prevResult is missing")]
    PrevResultMissing,
    /// The table of the VRF `vrfname` could not be read (code 7).
    #[error("vrfname: {source}")]
    VrfTable {
        /// The VRF.
        vrf: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// `prevResult` has no address (code 7).
    #[error("No IP addresses supplied on interface: {ifname}")]
    NoAddresses {
        /// The interface.
        ifname: String,
    },
    /// `table` is used by a rule of another interface (code 7).
    #[error("table: routing table {table} is already used by rule \"{rule}\"")]
    TableUsedByRule {
        /// The table ID.
        table: u32,
        /// The rule, as `ip rule` prints it.
        rule: String,
    },
    /// `table` routes through another interface (code 7).
    #[error("table: routing table {table} already routes {dst} via {via}")]
    TableUsedByRoute {
        /// The table ID.
        table: u32,
        /// The route's destination.
        dst: String,
        /// Its interface.
        via: String,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            Error::Teardown(all) => all.code(),
            Error::ConfigParse { .. }
            | Error::KeyType { .. }
            | Error::TableInvalid { .. }
            | Error::TableReserved { .. }
            | Error::VrfWithTable
            | Error::GatewaysTooMany
            | Error::GatewayInvalid { .. }
            | Error::GatewaysSameFamily { .. }
            | Error::PrevResultMissing
            | Error::VrfTable { .. }
            | Error::NoAddresses { .. }
            | Error::TableUsedByRule { .. }
            | Error::TableUsedByRoute { .. } => ErrorCode::InvalidNetworkConfig,
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

/// `Result` with the sbr plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
