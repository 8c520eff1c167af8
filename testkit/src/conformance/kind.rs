//! The plugin types the kit knows, and the config it builds for each.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// How a plugin takes part in a network attachment, which decides what the
/// kit must provide and what it can check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// Creates (or moves) the container's interface (`bridge`, `ptp`, ...).
    Interface,
    /// An IPAM plugin: allocates addresses, knows no interface
    /// (`host-local`, `static`). The kit plays the interface plugin: it
    /// creates `CNI_IFNAME` in the container and configures the addresses
    /// ADD returned before CHECK.
    Ipam,
    /// A chained plugin working on a `prevResult` (`tuning`, `portmap`,
    /// ...). The kit plays the previous plugin: it creates a veth whose
    /// container end is `CNI_IFNAME` with an address, and passes the result
    /// describing it as `prevResult`.
    Meta,
}

/// A plugin type the kit can build a config for, detected from the
/// binary's file name ([`PluginKind::from_binary`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginKind {
    /// `bridge`: a veth into a bridge in the host namespace.
    Bridge,
    /// `ptp`: a veth with a host-side route.
    Ptp,
    /// `macvlan` on a master link the kit creates.
    Macvlan,
    /// `ipvlan` on a master link the kit creates.
    Ipvlan,
    /// `vlan` on a master link the kit creates.
    Vlan,
    /// `host-device`: moves a link the kit creates into the container.
    HostDevice,
    /// `loopback`: brings `lo` up.
    Loopback,
    /// `dummy`: a dummy link in the container.
    Dummy,
    /// `tap`: a tap device in the container.
    Tap,
    /// `flannel`: delegates to `bridge` with the subnet from a
    /// `subnet.env` the kit writes.
    Flannel,
    /// `host-local` IPAM.
    HostLocal,
    /// `static` IPAM.
    Static,
    /// `tuning` (meta): sysctls and link attributes.
    Tuning,
    /// `bandwidth` (meta): traffic shaping on the host veth.
    Bandwidth,
    /// `portmap` (meta): host port forwarding.
    Portmap,
    /// `firewall` (meta): opens the host firewall for the pod.
    Firewall,
    /// `sbr` (meta): source-based routing in the container.
    Sbr,
    /// `vrf` (meta): puts the interface into a VRF.
    Vrf,
    /// `passthru` (meta): passes the previous result on.
    Passthru,
    /// Any other type: usable only with a config file.
    Other(String),
}

impl PluginKind {
    /// The type named by a plugin binary's file name (`/usr/lib/cni/bridge`
    /// is [`PluginKind::Bridge`]).
    pub fn from_binary(path: &Path) -> PluginKind {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        PluginKind::from_type(&name)
    }

    /// The kind for a config's `type`.
    pub fn from_type(name: &str) -> PluginKind {
        match name {
            "bridge" => PluginKind::Bridge,
            "ptp" => PluginKind::Ptp,
            "macvlan" => PluginKind::Macvlan,
            "ipvlan" => PluginKind::Ipvlan,
            "vlan" => PluginKind::Vlan,
            "host-device" => PluginKind::HostDevice,
            "loopback" => PluginKind::Loopback,
            "dummy" => PluginKind::Dummy,
            "tap" => PluginKind::Tap,
            "flannel" => PluginKind::Flannel,
            "host-local" => PluginKind::HostLocal,
            "static" => PluginKind::Static,
            "tuning" => PluginKind::Tuning,
            "bandwidth" => PluginKind::Bandwidth,
            "portmap" => PluginKind::Portmap,
            "firewall" => PluginKind::Firewall,
            "sbr" => PluginKind::Sbr,
            "vrf" => PluginKind::Vrf,
            "passthru" => PluginKind::Passthru,
            other => PluginKind::Other(other.to_owned()),
        }
    }

    /// The plugin's `type` string.
    pub fn type_name(&self) -> &str {
        match self {
            PluginKind::Bridge => "bridge",
            PluginKind::Ptp => "ptp",
            PluginKind::Macvlan => "macvlan",
            PluginKind::Ipvlan => "ipvlan",
            PluginKind::Vlan => "vlan",
            PluginKind::HostDevice => "host-device",
            PluginKind::Loopback => "loopback",
            PluginKind::Dummy => "dummy",
            PluginKind::Tap => "tap",
            PluginKind::Flannel => "flannel",
            PluginKind::HostLocal => "host-local",
            PluginKind::Static => "static",
            PluginKind::Tuning => "tuning",
            PluginKind::Bandwidth => "bandwidth",
            PluginKind::Portmap => "portmap",
            PluginKind::Firewall => "firewall",
            PluginKind::Sbr => "sbr",
            PluginKind::Vrf => "vrf",
            PluginKind::Passthru => "passthru",
            PluginKind::Other(name) => name,
        }
    }

    /// The plugin's role (an unknown type is taken as an interface plugin).
    pub fn role(&self) -> Role {
        match self {
            PluginKind::HostLocal | PluginKind::Static => Role::Ipam,
            PluginKind::Tuning
            | PluginKind::Bandwidth
            | PluginKind::Portmap
            | PluginKind::Firewall
            | PluginKind::Sbr
            | PluginKind::Vrf
            | PluginKind::Passthru => Role::Meta,
            _ => Role::Interface,
        }
    }

    /// False for plugins that never enter `CNI_NETNS` (IPAM, and meta
    /// plugins that only program the host: `portmap`, `firewall`,
    /// `passthru`): for them, a `CNI_NETNS` naming the host namespace is
    /// harmless and need not be refused.
    pub fn enters_netns(&self) -> bool {
        !matches!(
            self,
            PluginKind::HostLocal
                | PluginKind::Static
                | PluginKind::Portmap
                | PluginKind::Firewall
                | PluginKind::Passthru
        )
    }

    /// The interface name the kit uses by default (`lo` for loopback,
    /// `eth0` otherwise).
    pub fn default_ifname(&self) -> &'static str {
        match self {
            PluginKind::Loopback => "lo",
            _ => "eth0",
        }
    }

    /// The config the kit builds for this type, with `cniVersion` set to
    /// `cni_version`, or `None` for [`PluginKind::Other`]. Every host-side
    /// name and directory comes from `names`.
    pub fn config(&self, cni_version: &str, names: &SandboxNames) -> Option<Value> {
        let name = names.network.as_str();
        let ipam = names.host_local_ipam();
        let mut conf = json!({"cniVersion": cni_version, "name": name, "type": self.type_name()});
        let extra = match self {
            PluginKind::Bridge => json!({
                "bridge": names.bridge,
                "isGateway": true,
                "ipMasq": true,
                "ipam": ipam,
            }),
            PluginKind::Ptp => json!({"ipMasq": true, "ipam": ipam}),
            PluginKind::Macvlan => json!({"master": names.master, "mode": "bridge", "ipam": ipam}),
            PluginKind::Ipvlan => json!({"master": names.master, "mode": "l2", "ipam": ipam}),
            PluginKind::Vlan => json!({"master": names.master, "vlanId": 100, "ipam": ipam}),
            PluginKind::HostDevice => json!({"device": names.device, "ipam": ipam}),
            PluginKind::Loopback | PluginKind::Passthru => json!({}),
            PluginKind::Dummy | PluginKind::Tap => json!({"ipam": ipam}),
            PluginKind::HostLocal => json!({"ipam": ipam}),
            PluginKind::Static => json!({"ipam": {
                "type": "static",
                "addresses": [{"address": "10.233.7.2/24", "gateway": "10.233.7.1"}],
                "routes": [{"dst": "10.99.0.0/16"}],
                "dns": {"nameservers": ["10.233.7.53"]},
            }}),
            PluginKind::Tuning => json!({
                "promisc": true,
                "mtu": 1400,
                "dataDir": names.data_dir.join("tuning"),
            }),
            PluginKind::Bandwidth => json!({
                "ingressRate": 8_000_000,
                "ingressBurst": 80_000,
                "egressRate": 8_000_000,
                "egressBurst": 80_000,
            }),
            PluginKind::Portmap => json!({
                "capabilities": {"portMappings": true},
                "runtimeConfig": {"portMappings": [
                    {"hostPort": 18080, "containerPort": 80, "protocol": "tcp"},
                    {"hostPort": 18053, "containerPort": 53, "protocol": "udp"},
                ]},
            }),
            PluginKind::Firewall => json!({"dataDir": names.data_dir.join("firewall")}),
            PluginKind::Sbr => json!({}),
            PluginKind::Vrf => json!({"vrfname": names.vrf}),
            PluginKind::Flannel => json!({
                "subnetFile": names.flannel_subnet_file(),
                "dataDir": names.data_dir.join("flannel"),
                "ipam": {"type": "host-local", "dataDir": names.ipam_dir()},
                "delegate": {"bridge": names.bridge, "isDefaultGateway": true},
            }),
            PluginKind::Other(_) => return None,
        };
        if let (Value::Object(c), Value::Object(e)) = (&mut conf, extra) {
            c.extend(e);
        }
        Some(conf)
    }
}

/// The host-side names and paths of one kit run, each with the run's random
/// suffix so that concurrent runs never meet.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SandboxNames {
    /// The random suffix (8 hex digits).
    pub suffix: String,
    /// Network name.
    pub network: String,
    /// Bridge name (`cnikbr` + suffix).
    pub bridge: String,
    /// Master link for macvlan/ipvlan/vlan (`cnikm` + suffix), a veth the
    /// kit creates in its host namespace.
    pub master: String,
    /// Link for host-device (`cnikd` + suffix), a veth the kit creates.
    pub device: String,
    /// VRF name for the vrf plugin.
    pub vrf: String,
    /// Root of every directory a plugin may write (IPAM `dataDir`, tuning's
    /// backups); removed at the end of the run.
    pub data_dir: PathBuf,
}

impl SandboxNames {
    /// Names for `suffix`, with plugin state under `data_dir`.
    pub fn new(suffix: &str, data_dir: &Path) -> SandboxNames {
        SandboxNames {
            suffix: suffix.to_owned(),
            network: format!("cnik-{suffix}"),
            bridge: format!("cnikbr{suffix}"),
            master: format!("cnikm{suffix}"),
            device: format!("cnikd{suffix}"),
            vrf: format!("cnikvrf{suffix}"),
            data_dir: data_dir.to_owned(),
        }
    }

    /// The host-local IPAM section every interface plugin config uses.
    pub fn host_local_ipam(&self) -> Value {
        json!({
            "type": "host-local",
            "ranges": [[{"subnet": "10.233.0.0/24", "gateway": "10.233.0.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": self.ipam_dir(),
        })
    }

    /// host-local's `dataDir`.
    pub fn ipam_dir(&self) -> PathBuf {
        self.data_dir.join("ipam")
    }

    /// The `subnet.env` the kit writes for flannel.
    pub fn flannel_subnet_file(&self) -> PathBuf {
        self.data_dir.join("flannel-subnet.env")
    }

    /// The content of [`SandboxNames::flannel_subnet_file`].
    pub fn flannel_subnet_env(&self) -> &'static str {
        "FLANNEL_NETWORK=10.235.0.0/16\nFLANNEL_SUBNET=10.235.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    }
}

/// The container-side address the kit gives attachment number `n` when it
/// plays the previous plugin for a meta plugin.
pub(crate) fn prev_address(n: u32) -> (Ipv4Addr, Ipv4Addr) {
    let host = 2 + (n % 250) as u8;
    (
        Ipv4Addr::new(10, 234, 0, host),
        Ipv4Addr::new(10, 234, 0, 1),
    )
}
