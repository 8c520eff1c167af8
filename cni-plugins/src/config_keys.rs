//! The configuration keys each plugin accepts, as dotted paths, read from
//! the serde structs its config is parsed with ([`cni_types::keys`]), never
//! listed by hand: the drift test (`tests/operator`) checks that each one
//! appears on the plugin's reference page `docs/plugins/<page>.md` as
//! `` `key` ``.
//!
//! Adding a plugin: one line in [`PLUGINS`] naming its page and a function
//! that returns `accepted_keys::<ItsConfigStruct>()` (make the struct
//! `pub(crate)` if it is private). The spec's own keys (`cniVersion`,
//! `name`, `type`), read from `cni_types::NetworkConfig`, are checked on
//! every page by the test.
//!
//! Each key comes with the JSON kinds its type takes
//! ([`cni_types::keys::KeyKind`]), which the wrong-type test
//! (`tests/operator`) feeds the opposite of; keys of a configuration
//! parsed by hand (firewall, multus) have none.
//!
//! ```
//! use cni_types::keys::KeyKind;
//!
//! let (_, keys) = cni_plugins::config_keys::PLUGINS
//!     .iter()
//!     .find(|(page, _)| *page == "bridge")
//!     .unwrap();
//! let keys = keys();
//! let trunk = keys.iter().find(|(k, _)| k == "vlanTrunk.minID").unwrap();
//! assert_eq!(trunk.1, [KeyKind::Integer]);
//! ```

use cni_types::keys::{accepted_key_shapes_at, KeyShape};

/// A page name (`docs/plugins/<page>.md`) and the keys that page must
/// document, with their kinds.
pub type Entry = (&'static str, fn() -> Vec<KeyShape>);

fn accepted_keys<T: serde::de::DeserializeOwned>() -> Vec<KeyShape> {
    accepted_key_shapes_at::<T>("")
}

fn accepted_keys_at<T: serde::de::DeserializeOwned>(prefix: &str) -> Vec<KeyShape> {
    accepted_key_shapes_at::<T>(prefix)
}

/// Keys read by hand, their kinds unknown here.
fn untyped<'a>(keys: impl IntoIterator<Item = &'a &'a str>) -> Vec<KeyShape> {
    keys.into_iter()
        .map(|k| (k.to_string(), Vec::new()))
        .collect()
}

/// Every plugin page this crate knows, with its keys.
pub const PLUGINS: &[Entry] = &[
    ("bridge", || accepted_keys::<crate::bridge::BridgeConf>()),
    ("loopback", Vec::new),
    ("host-local", cni_ipam::host_local::config_keys),
    ("static", cni_ipam::static_ipam::config_keys),
    ("portmap", || {
        accepted_keys::<crate::portmap::config::RawConf>()
    }),
    ("flannel", || accepted_keys::<crate::flannel::FlannelConf>()),
    #[cfg(feature = "multus")]
    ("multus", cni_multus::config_keys),
    ("tuning", || accepted_keys::<crate::tuning::config::Raw>()),
    ("bandwidth", || accepted_keys::<cni_types::Bandwidth>()),
    ("ptp", || accepted_keys::<crate::ptp::Raw>()),
    ("macvlan", || accepted_keys::<crate::macvlan::Raw>()),
    ("ipvlan", || accepted_keys::<crate::ipvlan::Raw>()),
    ("host-device", || accepted_keys::<crate::host_device::Raw>()),
    ("vlan", || accepted_keys::<crate::vlan::Raw>()),
    ("vrf", || accepted_keys::<crate::vrf::Raw>()),
    ("tap", || accepted_keys::<crate::tap::Raw>()),
    ("dummy", Vec::new),
    ("passthru", Vec::new),
    ("sbr", || accepted_keys::<crate::sbr::config::SbrConf>()),
    ("firewall", || untyped(crate::firewall::config::KEYS)),
    ("dhcp", || {
        accepted_keys_at::<crate::dhcp::config::DhcpConfig>("ipam")
    }),
];
