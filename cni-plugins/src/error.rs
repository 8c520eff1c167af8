//! The plugins' error enum, and its mapping to CNI error codes (the one
//! place where plugin failures become error replies). multus has its own
//! (`multus::Error`), which wraps this one for what it shares.

use std::net::IpAddr;
use std::path::PathBuf;

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
    /// A host firewall operation (masquerade, port mappings, MAC spoof
    /// check, conntrack, iptables, foreign nft tables) failed; the error
    /// names the operation and the attachment or table.
    #[error(transparent)]
    Firewall(#[from] cni_firewall::Error),
    // ---- several plugins ----
    /// A chained plugin ran without the `prevResult` it needs (code 999,
    /// as Go's `fmt.Errorf`; the wording is the plugin's Go one).
    #[error("{}", prev_result_missing(.plugin))]
    PrevResultMissing {
        /// The plugin (`"vrf"`, `"vlan"`, `"dummy"`).
        plugin: &'static str,
    },
    /// The plugin needs an IPAM plugin and the config names none.
    #[error("{}", ipam_required(.plugin))]
    IpamRequired {
        /// The plugin (`"vlan"`, `"dummy"`).
        plugin: &'static str,
    },
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

    // ---- bandwidth ----
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
    #[error("{}", tbf_missing(*.index, .found.as_deref()))]
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

    // ---- vrf ----
    /// The config names no VRF.
    #[error("configuration is expected to have a valid vrf name")]
    VrfNameMissing,
    /// ADD inside the pod failed (Go's `cmdAdd failed:` wrapper).
    #[error("cmdAdd failed: {source}")]
    VrfAdd {
        /// The VRF.
        vrf: String,
        /// The interface being put into it.
        ifname: String,
        /// What failed.
        source: Box<Error>,
    },
    /// A link has the VRF's name but is not a VRF.
    #[error("Netlink {name} is not a VRF")]
    NotAVrf {
        /// The link name.
        name: String,
    },
    /// The VRF exists with another table than the configured one.
    #[error("VRF {vrf} already exist with different routing table {table}")]
    VrfTableMismatch {
        /// The VRF.
        vrf: String,
        /// Its table.
        table: u32,
        /// The configured table.
        configured: u32,
    },
    /// Every routing table a new VRF could take is in use.
    #[error("findFreeRoutingTableID: Failed to find an available routing id")]
    VrfTablesExhausted {
        /// The VRF to create.
        vrf: String,
    },
    /// The interface to put into the VRF was not found.
    #[error("could not get link by name {ifname}")]
    VrfMemberLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// The interface already has a master (another VRF or a bridge).
    #[error("interface {ifname} has already a master set: {master}")]
    MasterAlreadySet {
        /// The interface.
        ifname: String,
        /// Its master's name (`#<index>` when unreadable).
        master: String,
    },
    /// CHECK: the VRF does not exist.
    #[error("Link not found: vrf {vrf} does not exist")]
    VrfNotFound {
        /// The VRF.
        vrf: String,
    },
    /// CHECK: the interface is not a member of the VRF.
    #[error("failed to find {ifname} associated to vrf {vrf}")]
    VrfMemberMissing {
        /// The interface.
        ifname: String,
        /// The VRF.
        vrf: String,
    },
    /// A restored IPv6 address's local route never showed up in the
    /// VRF's table.
    #[error(
        "failed getting local/host addresses for {ifname} in table {table} with dst {address}"
    )]
    VrfLocalRouteMissing {
        /// The interface.
        ifname: String,
        /// The VRF's table.
        table: u32,
        /// The restored address.
        address: IpAddr,
    },

    // ---- vlan ----
    /// The config names no master link.
    #[error(
        "\"master\" field is required. It specifies the host interface name to create the VLAN for"
    )]
    VlanMasterMissing,
    /// The VLAN ID is outside 0..=4094 (Go's message says 4095).
    #[error("invalid VLAN ID {id} (must be between 0 and 4095 inclusive)")]
    VlanIdInvalid {
        /// The configured ID.
        id: i64,
    },
    /// CHECK: the link's VLAN ID is not the configured one.
    #[error("Error: link {ifname} configured vlanId is {configured}, current value is {}", .current.map(|c| c.to_string()).unwrap_or_default())]
    VlanIdMismatch {
        /// The VLAN link.
        ifname: String,
        /// The configured ID.
        configured: u16,
        /// The link's ID (`None`: not a VLAN).
        current: Option<u16>,
    },
    /// CHECK: the link's MTU is not the configured one.
    #[error("Error: configured MTU of {ifname} is {configured}, current value is {current}")]
    MtuMismatch {
        /// The link.
        ifname: String,
        /// The configured MTU.
        configured: i64,
        /// The link's MTU.
        current: u32,
    },

    // ---- dummy, loopback ----
    /// CHECK: the container interface is down.
    #[error("Interface {ifname} is down")]
    LinkDown {
        /// The interface.
        ifname: String,
    },
    /// The pod's loopback holds an address outside the loopback ranges.
    #[error("loopback interface found with non-loopback address \"{address}\"")]
    LoopbackForeignAddress {
        /// The address.
        address: IpAddr,
    },
    /// CHECK: the pod's loopback is down.
    #[error("loopback interface is down")]
    LoopbackDown,

    // ---- tuning ----
    /// ADD: the interface to tune was not found.
    #[error("failed to get {ifname:?}: {source}")]
    TuningLinkLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// CHECK: the tuned interface was not found.
    #[error("Cannot find container link {ifname}")]
    TuningLinkMissing {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Reading or writing a sysctl file in the pod failed.
    #[error("open {file}: {source}")]
    SysctlAccess {
        /// `"read"` or `"write"`.
        op: &'static str,
        /// The file under `/proc/sys/net`.
        file: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// CHECK: a tuned value differs from the config.
    #[error("{}", tuning_mismatch(.object, .attribute, .configured, .current))]
    TuningMismatch {
        /// The interface, or the sysctl file.
        object: String,
        /// Go's name of the value (`"value"` for a sysctl, `"MTU"`,
        /// `"Ethernet"`, `"promisc"`, `"all-multicast mode"`, `"Transmit
        /// Queue Length"`).
        attribute: &'static str,
        /// The configured value.
        configured: String,
        /// The value found.
        current: String,
    },

    // ---- host-device ----
    /// The config selects no device.
    #[error(r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#)]
    HostDeviceUnspecified,
    /// The PCI device's driver link could not be read.
    #[error("error with host device: {}: {source}", .path.display())]
    PciDriverLookup {
        /// The `driver` link under the device's sysfs directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The selected device was not found on the node.
    #[error("failed to find host device: {source}")]
    HostDeviceLookup {
        /// Why (a lookup error below).
        source: Box<Error>,
    },
    /// `hwaddr` is not a MAC address.
    #[error("failed to parse MAC address {mac:?}")]
    HostDeviceMacInvalid {
        /// The configured value.
        mac: String,
    },
    /// No node link matches the `hwaddr` or `kernelpath` selector.
    #[error("failed to find physical interface")]
    PhysicalInterfaceNotFound {
        /// The selector (`"hwaddr <mac>"`, `"kernelpath <path>"`).
        selector: String,
    },
    /// `kernelpath` is not under `/sys/devices/`.
    #[error("kernel device path {path:?} must be absolute and begin with /sys/devices/")]
    KernelPathInvalid {
        /// The configured path.
        path: String,
    },
    /// The `net` directory of a `kernelpath` device could not be read.
    #[error("failed to find network devices at {dir:?}")]
    KernelPathNetDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The PCI device has no `net` directory (it has no netdev).
    #[error("no net directory under pci device {pci}")]
    PciNetDirMissing {
        /// The PCI address.
        pci: String,
    },
    /// The PCI device's `net` directory could not be read.
    #[error("failed to read net directory {}: {source}", .dir.display())]
    PciNetDirRead {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The PCI device's `net` directory is empty.
    #[error("failed to find device name for pci address {pci}")]
    PciNetdevMissing {
        /// The PCI address.
        pci: String,
    },
    /// DEL: moving the device back to the node failed (it stays in the
    /// pod, up again, so DEL can be retried).
    #[error("failed to move {ifname:?} to the host as {original:?}: {source}")]
    HostDeviceMoveOut {
        /// Its name in the pod.
        ifname: String,
        /// Its name on the node.
        original: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },

    // ---- sbr ----
    /// The pod interface was not found.
    #[error("Cannot find network interface {ifname}: {source}")]
    SbrLinkLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Adding the source rule of an address failed.
    #[error("{}: {source}", if *.table_configured { "failed to add rule" } else { "Failed to add rule" })]
    SbrRuleAdd {
        /// The address the rule matches.
        src: IpAddr,
        /// The rule's table.
        table: u32,
        /// The table was given by the config (`table`, `vrfname`) rather
        /// than chosen (Go words the two paths differently).
        table_configured: bool,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Deleting a source rule failed (DEL goes on; the last one is
    /// returned).
    #[error("Failed to delete rule {source}")]
    SbrRuleDelete {
        /// The address the rule matches.
        src: IpAddr,
        /// The rule's table.
        table: u32,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Adding the default route of an address's table failed.
    #[error("Failed to add default route to {gateway}: {source}")]
    SbrDefaultRoute {
        /// The gateway.
        gateway: IpAddr,
        /// The table.
        table: u32,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Copying an interface route into an address's table failed.
    #[error("Failed to readd route: {source}")]
    SbrRouteCopy {
        /// The route's destination.
        dst: String,
        /// The table.
        table: u32,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// Taking an interface route out of the main table failed.
    #[error("Failed to delete route: {source}")]
    SbrRouteDelete {
        /// The route's destination.
        dst: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// CHECK: an address has no source rule.
    #[error("sbr: no rule from {src} (interface {ifname})")]
    SbrRuleMissing {
        /// The address.
        src: IpAddr,
        /// The interface.
        ifname: String,
    },
    /// The pod's network namespace is gone.
    #[error("network namespace {path} does not exist")]
    NetnsMissing {
        /// The namespace path.
        path: String,
    },

    // ---- dhcp ----
    /// The daemon answered ADD with neither a result nor an error.
    #[error("dhcp daemon answered ADD without a result")]
    DhcpNoResult,
    /// CHECK: the daemon holds no lease for the attachment.
    #[error("dhcp: no lease held for {key}")]
    DhcpLeaseMissing {
        /// The attachment (`<container>/<network>/<ifname>`).
        key: String,
    },
    /// CHECK: the attachment's lease was lost (NAK, expiry).
    #[error("dhcp: lease for {key} lost: {reason}")]
    DhcpLeaseLost {
        /// The attachment.
        key: String,
        /// Why it was lost.
        reason: String,
    },
    /// CHECK: the leased address is not on the interface.
    #[error("dhcp: leased address {address} is not on {ifname} in {netns}")]
    DhcpAddressMissing {
        /// The leased address.
        address: std::net::Ipv4Addr,
        /// The interface.
        ifname: String,
        /// The pod's namespace.
        netns: String,
    },

    // ---- tap ----
    /// The bridge to put the tap device on was not found.
    #[error("failed to get bridge {bridge}: {source}")]
    TapBridgeLookup {
        /// The bridge.
        bridge: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
    /// CHECK: the tap device was not found.
    #[error("Failed to find interface {ifname}")]
    TapLinkLookup {
        /// The interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },

    // ---- flannel ----
    /// flanneld's `subnet.env` could not be read or parsed.
    #[error("failed to load flannel 'subnet.env' file: {source}. Check the flannel pod log for this node.")]
    FlannelSubnetEnv {
        /// The file.
        path: PathBuf,
        /// Why.
        source: Box<Error>,
    },

    // ---- portmap ----
    /// Setting `route_localnet` on the node's interface towards the
    /// container failed.
    #[error("unable to enable route_localnet: {source}")]
    RouteLocalnet {
        /// The node interface.
        ifname: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },

    // ---- firewall ----
    /// CHECK: an iptables rule of the attachment is missing.
    #[error("{}", iptables_rule_missing(.jump_from.as_deref(), .rule))]
    IptablesRuleMissing {
        /// The chain searched.
        chain: String,
        /// For a jump rule, the chain it is in as Go names it
        /// (`"FORWARD"`, `"CNI-FORWARD"`); `None` for an address rule.
        jump_from: Option<String>,
        /// The rule's arguments.
        rule: Vec<String>,
    },
    /// CHECK: the node chain does not jump to the plugin's nft chain.
    #[error("expected jump to {target} in chain {chain} of table {table} not found")]
    NftJumpMissing {
        /// The plugin's chain.
        target: &'static str,
        /// The node chain.
        chain: String,
        /// The node table.
        table: String,
    },
    /// CHECK: an accept rule of an address is missing from the plugin's
    /// nft chain.
    #[error("expected rule accepting {address} in chain {chain} of table {table} not found")]
    NftRuleMissing {
        /// The address.
        address: IpAddr,
        /// The plugin's chain.
        chain: &'static str,
        /// The node table.
        table: String,
    },
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
    /// An address of the IPAM result is its own gateway (or the node
    /// side's address): the pod and the node would both hold it.
    #[error("IPAM result for {address} has the address as its gateway {gateway}")]
    IpamAddressIsGateway {
        /// The address.
        address: String,
        /// The gateway.
        gateway: String,
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
            Error::Config(_) => ErrorCode::InvalidNetworkConfig,
            Error::Types(e) => e.code(),
            Error::Ipam(e) => e.code(),
            Error::Cni(reply) | Error::Delegate(reply) => reply.code,
            Error::NotAvailable(_) => ErrorCode::PluginNotAvailable,
            // Failures of the plugin's own work, as Go's plain `fmt.Errorf`
            // errors; a new variant must be placed here or above.
            Error::Io { .. }
            | Error::Kernel(_)
            | Error::Firewall(_)
            | Error::PrevResultMissing { .. }
            | Error::IpamRequired { .. }
            | Error::InvalidMtu { .. }
            | Error::Serialize { .. }
            | Error::Exec(_)
            | Error::NetnsOpen { .. }
            | Error::TrafficControl { .. }
            | Error::IfbCreate { .. }
            | Error::IfbLookup { .. }
            | Error::PrevResultNoInterfaces
            | Error::VethPeerLookup { .. }
            | Error::VethPeerNotOnHost { .. }
            | Error::VethPeerNotInResult { .. }
            | Error::TbfMissing { .. }
            | Error::TbfMismatch { .. }
            | Error::RedirectMissing { .. }
            | Error::VrfNameMissing
            | Error::VrfAdd { .. }
            | Error::NotAVrf { .. }
            | Error::VrfTableMismatch { .. }
            | Error::VrfTablesExhausted { .. }
            | Error::VrfMemberLookup { .. }
            | Error::MasterAlreadySet { .. }
            | Error::VrfNotFound { .. }
            | Error::VrfMemberMissing { .. }
            | Error::VrfLocalRouteMissing { .. }
            | Error::VlanMasterMissing
            | Error::VlanIdInvalid { .. }
            | Error::VlanIdMismatch { .. }
            | Error::MtuMismatch { .. }
            | Error::LinkDown { .. }
            | Error::LoopbackForeignAddress { .. }
            | Error::LoopbackDown
            | Error::TuningLinkLookup { .. }
            | Error::TuningLinkMissing { .. }
            | Error::SysctlAccess { .. }
            | Error::TuningMismatch { .. }
            | Error::HostDeviceUnspecified
            | Error::PciDriverLookup { .. }
            | Error::HostDeviceLookup { .. }
            | Error::HostDeviceMacInvalid { .. }
            | Error::PhysicalInterfaceNotFound { .. }
            | Error::KernelPathInvalid { .. }
            | Error::KernelPathNetDir { .. }
            | Error::PciNetDirMissing { .. }
            | Error::PciNetDirRead { .. }
            | Error::PciNetdevMissing { .. }
            | Error::HostDeviceMoveOut { .. }
            | Error::SbrLinkLookup { .. }
            | Error::SbrRuleAdd { .. }
            | Error::SbrRuleDelete { .. }
            | Error::SbrDefaultRoute { .. }
            | Error::SbrRouteCopy { .. }
            | Error::SbrRouteDelete { .. }
            | Error::SbrRuleMissing { .. }
            | Error::NetnsMissing { .. }
            | Error::DhcpNoResult
            | Error::DhcpLeaseMissing { .. }
            | Error::DhcpLeaseLost { .. }
            | Error::DhcpAddressMissing { .. }
            | Error::TapBridgeLookup { .. }
            | Error::TapLinkLookup { .. }
            | Error::FlannelSubnetEnv { .. }
            | Error::RouteLocalnet { .. }
            | Error::IptablesRuleMissing { .. }
            | Error::NftJumpMissing { .. }
            | Error::NftRuleMissing { .. }
            | Error::CheckSandboxMismatch { .. }
            | Error::CheckPodLinkMissing { .. }
            | Error::CheckPodLinkKind { .. }
            | Error::CheckPodLinkMac { .. }
            | Error::CheckAddressMissing { .. }
            | Error::CheckAddressDadFailed { .. }
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
            | Error::ChainedMasterMissing
            | Error::NoDefaultRouteLink
            | Error::MasterNotFound { .. }
            | Error::IpamNoAddresses
            | Error::IpamNoGateway { .. }
            | Error::IpamAddressIsGateway { .. }
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

// Go's wordings, which differ between plugins for the same failure.

fn prev_result_missing(plugin: &str) -> String {
    match plugin {
        "vrf" => "missing prevResult from earlier plugin".into(),
        p => format!("{p}: Required prevResult missing"),
    }
}

fn ipam_required(plugin: &str) -> String {
    match plugin {
        "dummy" => "dummy interface requires an IPAM configuration".into(),
        p => format!("{p} requires an IPAM configuration (\"ipam\")"),
    }
}

fn invalid_mtu(mtu: i64, master_mtu: Option<u32>) -> String {
    match master_mtu {
        Some(max) => format!("invalid MTU {mtu}, must be [0, master MTU({max})]"),
        None => format!("invalid MTU {mtu}, must be >= 0"),
    }
}

fn tbf_missing(index: u32, found: Option<&str>) -> String {
    match found {
        None => "Failed to find qdisc".into(),
        Some(kind) => format!("expected a tbf qdisc on link #{index}, found {kind}"),
    }
}

fn tuning_mismatch(object: &str, attribute: &str, configured: &str, current: &str) -> String {
    match attribute {
        "promisc" => format!(
            "Error: Tuning link {object} configured promisc is {configured}, current value is {current}"
        ),
        a => format!(
            "Error: Tuning configured {a} of {object} is {configured}, current value is {current}"
        ),
    }
}

fn iptables_rule_missing(jump_from: Option<&str>, rule: &[String]) -> String {
    match jump_from {
        Some(chain) => format!("expected {chain} rule {rule:?} not found"),
        None => format!("expected rule {rule:?} not found"),
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

    fn gone(path: &str) -> cni_netns::Error {
        cni_netns::Error::NetnsNotFound { path: path.into() }
    }

    fn not_found() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "No such file")
    }

    /// The plugins' failures keep Go's texts (several vary by plugin) and
    /// code 999, as the `fmt.Errorf` strings they replace.
    #[test]
    fn plugin_failures_keep_go_texts_and_code_999() {
        let rule = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let cases = [
            (
                Error::PrevResultMissing { plugin: "vrf" },
                "missing prevResult from earlier plugin".to_string(),
            ),
            (
                Error::PrevResultMissing { plugin: "vlan" },
                "vlan: Required prevResult missing".into(),
            ),
            (
                Error::IpamRequired { plugin: "dummy" },
                "dummy interface requires an IPAM configuration".into(),
            ),
            (
                Error::IpamRequired { plugin: "vlan" },
                r#"vlan requires an IPAM configuration ("ipam")"#.into(),
            ),
            (
                Error::InvalidMtu {
                    mtu: 1600,
                    master_mtu: Some(1500),
                },
                "invalid MTU 1600, must be [0, master MTU(1500)]".into(),
            ),
            (
                Error::InvalidMtu {
                    mtu: -1,
                    master_mtu: None,
                },
                "invalid MTU -1, must be >= 0".into(),
            ),
            (
                Error::TbfMissing {
                    index: 3,
                    found: None,
                },
                "Failed to find qdisc".into(),
            ),
            (
                Error::TbfMissing {
                    index: 3,
                    found: Some("htb".into()),
                },
                "expected a tbf qdisc on link #3, found htb".into(),
            ),
            (
                Error::TbfMismatch {
                    index: 3,
                    field: "Rate",
                },
                "Rate doesn't match".into(),
            ),
            (
                Error::TuningMismatch {
                    object: "eth0".into(),
                    attribute: "promisc",
                    configured: "true".into(),
                    current: "0".into(),
                },
                "Error: Tuning link eth0 configured promisc is true, current value is 0".into(),
            ),
            (
                Error::TuningMismatch {
                    object: "eth0".into(),
                    attribute: "MTU",
                    configured: "1400".into(),
                    current: "1500".into(),
                },
                "Error: Tuning configured MTU of eth0 is 1400, current value is 1500".into(),
            ),
            (
                Error::VlanIdMismatch {
                    ifname: "eth0".into(),
                    configured: 7,
                    current: None,
                },
                "Error: link eth0 configured vlanId is 7, current value is ".into(),
            ),
            (
                Error::IptablesRuleMissing {
                    chain: "FORWARD".into(),
                    jump_from: Some("FORWARD".into()),
                    rule: rule(&["-j", "CNI-FORWARD"]),
                },
                r#"expected FORWARD rule ["-j", "CNI-FORWARD"] not found"#.into(),
            ),
            (
                Error::IptablesRuleMissing {
                    chain: "CNI-FORWARD".into(),
                    jump_from: None,
                    rule: rule(&["-s", "10.0.0.2"]),
                },
                r#"expected rule ["-s", "10.0.0.2"] not found"#.into(),
            ),
            (
                Error::VrfAdd {
                    vrf: "blue".into(),
                    ifname: "eth0".into(),
                    source: Box::new(Error::NotAVrf {
                        name: "blue".into(),
                    }),
                },
                "cmdAdd failed: Netlink blue is not a VRF".into(),
            ),
            (
                Error::SbrRuleAdd {
                    src: "10.0.0.2".parse().unwrap(),
                    table: 100,
                    table_configured: false,
                    source: gone("/run/netns/p").into(),
                },
                format!("Failed to add rule: {}", gone("/run/netns/p")),
            ),
            (
                Error::SbrRuleAdd {
                    src: "10.0.0.2".parse().unwrap(),
                    table: 100,
                    table_configured: true,
                    source: gone("/run/netns/p").into(),
                },
                format!("failed to add rule: {}", gone("/run/netns/p")),
            ),
            (
                Error::SysctlAccess {
                    op: "read",
                    file: "/proc/sys/net/x".into(),
                    source: not_found(),
                },
                "open /proc/sys/net/x: No such file".into(),
            ),
            (
                Error::FlannelSubnetEnv {
                    path: "/run/flannel/subnet.env".into(),
                    source: Box::new(Error::io("read", "/run/flannel/subnet.env", not_found())),
                },
                "failed to load flannel 'subnet.env' file: read /run/flannel/subnet.env: No such file. Check the flannel pod log for this node.".into(),
            ),
        ];
        for (e, text) in cases {
            assert_eq!(reply(e), (999, text));
        }
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
        let e = Error::IfbCreate {
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
