//! Results: one internal model (the newest shape) and conversion to and from
//! every wire version, following the Go reference's converters
//! (`pkg/types/{020,040,100}/types.go`) rule for rule.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::{cidr, opt_ip};
use crate::version::{ResultFamily, Version};
use crate::Error;

/// DNS settings (`nameservers`, `domain`, `search`, `options`), as in results
/// and in the `dns` key of configs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    /// Name server addresses, in priority order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// The local domain.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// Search domains, in priority order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    /// Resolver options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// An interface a plugin created or configured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// Interface name.
    pub name: String,
    /// Hardware address, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// MTU (1.1.0; the Go reference also prints it for 1.0.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The network namespace path of the interface; empty for host interfaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// A socket path for non-kernel interfaces (1.1.0).
    #[serde(
        rename = "socketPath",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub socket_path: String,
    /// The PCI ID of a device (1.1.0).
    #[serde(rename = "pciID", default, skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
}

/// An IP address assigned to an interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Index into the result's `interfaces`. `Some(0)` prints as
    /// `"interface": 0`; `None` omits the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<u32>,
    /// The address with its prefix length, host bits kept (`10.1.0.5/16`).
    #[serde(with = "cidr")]
    pub address: IpNetwork,
    /// The default gateway for this subnet, if any.
    #[serde(default, with = "opt_ip", skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

impl IpConfig {
    /// An address without gateway or interface index.
    pub fn new(address: IpNetwork) -> Self {
        IpConfig {
            interface: None,
            address,
            gateway: None,
        }
    }
}

/// A route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Destination.
    #[serde(with = "cidr")]
    pub dst: IpNetwork,
    /// Next hop; when absent the plugin's gateway (or the link) is used.
    #[serde(default, with = "opt_ip", skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    /// Route MTU (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Advertised MSS (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    /// Route priority / metric (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Routing table (1.1.0). `Some(0)` is printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Route scope (1.1.0). `Some(0)` is printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u32>,
}

impl Route {
    /// A route to `dst` with an optional gateway and nothing else.
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Self {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// A CNI result in the internal model: the 1.1.0 shape, from which every
/// older wire version is derived.
///
/// An IPAM plugin's (abbreviated) result is the same type with no
/// `interfaces` and no interface indices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniResult {
    /// Interfaces created or configured.
    pub interfaces: Vec<Interface>,
    /// Addresses assigned.
    pub ips: Vec<IpConfig>,
    /// Routes.
    pub routes: Vec<Route>,
    /// DNS settings.
    pub dns: Dns,
}

// ---- wire shapes -------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct Wire100 {
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    interfaces: Vec<Interface>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    ips: Vec<IpConfig>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<Route>,
    // 1.x omits empty dns (Go's custom MarshalJSON for types100.Result).
    #[serde(
        default,
        skip_serializing_if = "Dns::is_empty",
        deserialize_with = "null_as_default"
    )]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct Interface040 {
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    mac: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    sandbox: String,
}

#[derive(Serialize, Deserialize)]
struct IpConfig040 {
    #[serde(default)]
    version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<u32>,
    #[serde(with = "cidr")]
    address: IpNetwork,
    #[serde(default, with = "opt_ip", skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
}

#[derive(Serialize, Deserialize)]
struct Wire040 {
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    interfaces: Vec<Interface040>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    ips: Vec<IpConfig040>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<Route>,
    // 0.x always prints dns, `{}` when empty.
    #[serde(default, deserialize_with = "null_as_default")]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct Route020 {
    #[serde(with = "cidr")]
    dst: IpNetwork,
    #[serde(default, with = "opt_ip", skip_serializing_if = "Option::is_none")]
    gw: Option<IpAddr>,
}

#[derive(Serialize, Deserialize)]
struct IpConfig020 {
    #[serde(with = "cidr")]
    ip: IpNetwork,
    #[serde(default, with = "opt_ip", skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<Route020>,
}

#[derive(Serialize, Deserialize)]
struct Wire020 {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<IpConfig020>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<IpConfig020>,
    #[serde(default, deserialize_with = "null_as_default")]
    dns: Dns,
}

/// Go decodes `null` into a slice or struct as its zero value; serde would
/// reject it.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn decode_err(e: serde_json::Error) -> Error {
    Error::Decode {
        what: "result".into(),
        reason: e.to_string(),
    }
}

fn family_of(version: Version) -> Result<ResultFamily, Error> {
    version
        .result_family()
        .ok_or_else(|| Error::UnsupportedResultVersion(version.to_string()))
}

impl CniResult {
    /// Parses a result of any supported version. The version is the
    /// result's own `cniVersion`; a result without one is read as
    /// `default_version` (the runtime passes the config's version, as the Go
    /// invoker does since cni#895; Go's `create` would assume 0.1.0).
    ///
    /// Returns the version the result was written in and the result.
    ///
    /// The [`crate::limits`] apply while the JSON is read.
    pub fn from_slice(
        bytes: &[u8],
        default_version: Version,
    ) -> Result<(Version, CniResult), Error> {
        let value = crate::limits::result_value_from_slice(bytes, "result")?;
        CniResult::from_value(&value, default_version)
    }

    /// [`CniResult::from_slice`] on a parsed JSON value.
    pub fn from_value(
        value: &Value,
        default_version: Version,
    ) -> Result<(Version, CniResult), Error> {
        let version = match value.get("cniVersion") {
            Some(Value::String(s)) if !s.is_empty() => Version::parse(s)?,
            Some(Value::String(_)) | Some(Value::Null) | None => default_version,
            Some(other) => {
                return Err(Error::Decode {
                    what: "result".into(),
                    reason: format!("cniVersion must be a string, got {other}"),
                })
            }
        };
        Ok((version, CniResult::from_value_as(value, version)?))
    }

    /// Parses `value` in the shape of `version`, ignoring the result's own
    /// `cniVersion`. This is what Go's `version.ParsePrevResult` does with a
    /// `prevResult`: it always reads it as the config's version.
    ///
    /// A result past the [`crate::limits`] (a value built without
    /// [`crate::limits::result_value_from_slice`]) is refused.
    pub fn from_value_as(value: &Value, version: Version) -> Result<CniResult, Error> {
        let r = CniResult::from_value_unchecked(value, version)?;
        check_counts(&r)?;
        Ok(r)
    }

    fn from_value_unchecked(value: &Value, version: Version) -> Result<CniResult, Error> {
        match family_of(version)? {
            ResultFamily::V100 => {
                let w = Wire100::deserialize(value).map_err(decode_err)?;
                Ok(CniResult {
                    interfaces: w.interfaces,
                    ips: w.ips,
                    routes: w.routes,
                    dns: w.dns,
                })
            }
            ResultFamily::V040 => {
                let w = Wire040::deserialize(value).map_err(decode_err)?;
                Ok(CniResult {
                    interfaces: w
                        .interfaces
                        .into_iter()
                        .map(|i| Interface {
                            name: i.name,
                            mac: i.mac,
                            sandbox: i.sandbox,
                            ..Interface::default()
                        })
                        .collect(),
                    ips: w
                        .ips
                        .into_iter()
                        .map(|ip| IpConfig {
                            interface: ip.interface,
                            address: ip.address,
                            gateway: ip.gateway,
                        })
                        .collect(),
                    routes: w.routes,
                    dns: w.dns,
                })
            }
            ResultFamily::V020 => {
                let w = Wire020::deserialize(value).map_err(decode_err)?;
                let mut r = CniResult {
                    dns: w.dns,
                    ..CniResult::default()
                };
                // ip4 first, then ip6; routes concatenated in the same order.
                for block in [w.ip4, w.ip6].into_iter().flatten() {
                    r.ips.push(IpConfig {
                        interface: None,
                        address: block.ip,
                        gateway: block.gateway,
                    });
                    r.routes
                        .extend(block.routes.into_iter().map(|rt| Route::new(rt.dst, rt.gw)));
                }
                Ok(r)
            }
        }
    }

    /// The result as a JSON value in the wire shape of `version`, with
    /// `cniVersion` set to it.
    ///
    /// Down-conversion to 0.1.0/0.2.0 keeps the first IPv4 and first IPv6
    /// address, drops interfaces, and keeps only routes whose family has an
    /// address; a result with no address at all cannot be converted.
    pub fn to_value(&self, version: Version) -> Result<Value, Error> {
        let v = version.to_string();
        let value = match family_of(version)? {
            ResultFamily::V100 => serde_json::to_value(Wire100 {
                cni_version: v,
                interfaces: self.interfaces.clone(),
                ips: self.ips.clone(),
                routes: self.routes.clone(),
                dns: self.dns.clone(),
            }),
            ResultFamily::V040 => serde_json::to_value(Wire040 {
                cni_version: v,
                interfaces: self
                    .interfaces
                    .iter()
                    .map(|i| Interface040 {
                        name: i.name.clone(),
                        mac: i.mac.clone(),
                        sandbox: i.sandbox.clone(),
                    })
                    .collect(),
                ips: self
                    .ips
                    .iter()
                    .map(|ip| IpConfig040 {
                        version: if ip.address.is_ipv4() { "4" } else { "6" }.into(),
                        interface: ip.interface,
                        address: ip.address,
                        gateway: ip.gateway,
                    })
                    .collect(),
                routes: self.routes.clone(),
                dns: self.dns.clone(),
            }),
            ResultFamily::V020 => serde_json::to_value(self.to_wire020(&v)?),
        };
        value.map_err(|e| Error::Convert {
            version: version.to_string(),
            reason: e.to_string(),
        })
    }

    fn to_wire020(&self, v: &str) -> Result<Wire020, Error> {
        let block = |want_v4: bool| -> Option<IpConfig020> {
            let ip = self.ips.iter().find(|ip| ip.address.is_ipv4() == want_v4)?;
            Some(IpConfig020 {
                ip: ip.address,
                gateway: ip.gateway,
                routes: self
                    .routes
                    .iter()
                    .filter(|r| r.dst.is_ipv4() == want_v4)
                    .map(|r| Route020 {
                        dst: r.dst,
                        gw: r.gw,
                    })
                    .collect(),
            })
        };
        let (ip4, ip6) = (block(true), block(false));
        if ip4.is_none() && ip6.is_none() {
            return Err(Error::Convert {
                version: v.to_string(),
                reason: "no valid IP addresses".into(),
            });
        }
        Ok(Wire020 {
            cni_version: v.to_string(),
            ip4,
            ip6,
            dns: self.dns.clone(),
        })
    }

    /// The result printed as the Go reference prints it (four-space indent)
    /// in the wire shape of `version`.
    pub fn to_json_pretty(&self, version: Version) -> Result<Vec<u8>, Error> {
        let value = self.to_value(version)?;
        crate::json::to_vec_pretty(&value).map_err(|e| Error::Convert {
            version: version.to_string(),
            reason: e.to_string(),
        })
    }

    /// Converts a result JSON value from its own version to `target`
    /// (what Go's `GetAsVersion` does).
    pub fn convert_value(
        value: &Value,
        default_version: Version,
        target: Version,
    ) -> Result<Value, Error> {
        let (_, r) = CniResult::from_value(value, default_version)?;
        r.to_value(target)
    }
}

/// `Serialize` prints the newest wire shape (1.1.0, with `cniVersion`);
/// for another version use [`VersionedResult`] or [`CniResult::to_value`].
impl Serialize for CniResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value(Version::CURRENT)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// `Deserialize` reads any wire version by the result's own `cniVersion`
/// (a result without one is read in the newest shape).
impl<'de> Deserialize<'de> for CniResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        CniResult::from_value(&value, Version::CURRENT)
            .map(|(_, r)| r)
            .map_err(serde::de::Error::custom)
    }
}

/// A result with the wire version it is (or was) written in: what a plugin
/// prints, what the runtime caches. Serializes in that version's shape.
///
/// ```
/// use cni_types::{CniResult, IpConfig, Version, VersionedResult};
///
/// let mut result = CniResult::default();
/// result.ips.push(IpConfig::new("10.1.0.5/24".parse().unwrap()));
/// let old = VersionedResult { version: Version::V0_2_0, result };
/// let json = serde_json::to_value(&old)?;
/// assert_eq!(json["ip4"]["ip"], "10.1.0.5/24");
/// let back: VersionedResult = serde_json::from_value(json)?;
/// assert_eq!(back, old);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionedResult {
    /// The wire version.
    pub version: Version,
    /// The result.
    pub result: CniResult,
}

impl VersionedResult {
    /// The result's JSON in its own version.
    pub fn to_value(&self) -> Result<Value, Error> {
        self.result.to_value(self.version)
    }

    /// The result printed as Go's `Result.Print` (four-space indent).
    pub fn to_json_pretty(&self) -> Result<Vec<u8>, Error> {
        self.result.to_json_pretty(self.version)
    }
}

impl Serialize for VersionedResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value()
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// Reads the result's own `cniVersion`; a result without one is 0.1.0, as
/// Go's `create.CreateFromBytes` reads it.
impl<'de> Deserialize<'de> for VersionedResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        CniResult::from_value(&value, Version::V0_1_0)
            .map(|(version, result)| VersionedResult { version, result })
            .map_err(serde::de::Error::custom)
    }
}

/// Refuses a decoded result past a list limit (for results decoded from a
/// JSON value built some other way).
fn check_counts(r: &CniResult) -> Result<(), Error> {
    let lists = [
        (
            "result.interfaces",
            r.interfaces.len(),
            crate::limits::MAX_INTERFACES,
        ),
        ("result.ips", r.ips.len(), crate::limits::MAX_IPS),
        ("result.routes", r.routes.len(), crate::limits::MAX_ROUTES),
        (
            "result.dns.nameservers",
            r.dns.nameservers.len(),
            crate::limits::MAX_DNS_ENTRIES,
        ),
        (
            "result.dns.search",
            r.dns.search.len(),
            crate::limits::MAX_DNS_ENTRIES,
        ),
        (
            "result.dns.options",
            r.dns.options.len(),
            crate::limits::MAX_DNS_ENTRIES,
        ),
    ];
    match lists.into_iter().find(|(_, n, limit)| n > limit) {
        Some((path, _, limit)) => Err(Error::ResultTooLarge {
            path: path.into(),
            limit,
            what: "entries",
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn full() -> Value {
        // The shape of the Go reference's 1.1.0 test vector
        // (pkg/types/100/types_test.go): every field set.
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "00:11:22:33:44:55", "mtu": 1500,
                            "sandbox": "/proc/3553/ns/net", "socketPath": "/path/to/vhost/fd",
                            "pciID": "0000:00:1f.6"}],
            "ips": [
                {"interface": 0, "address": "1.2.3.4/24", "gateway": "1.2.3.1"},
                {"interface": 0, "address": "abcd:1234:ffff::cdde/64", "gateway": "abcd:1234:ffff::1"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "1.2.3.1", "mtu": 1500, "advmss": 1340, "priority": 100, "table": 50, "scope": 253},
                {"dst": "192.168.0.0/16", "gw": "1.2.3.1"},
                {"dst": "::/0", "gw": "abcd:1234:ffff::1"},
                {"dst": "abcd:1234:ffff::/64", "gw": "abcd:1234:ffff::1"}
            ],
            "dns": {"nameservers": ["1.2.3.4", "1::cafe"], "domain": "acompany.com",
                    "search": ["somedomain.com", "otherdomain.net"], "options": ["foo", "bar"]}
        })
    }

    #[test]
    fn v110_round_trips_exactly() {
        let (v, r) = CniResult::from_value(&full(), Version::V1_0_0).unwrap();
        assert_eq!(v, Version::V1_1_0);
        assert_eq!(r.to_value(Version::V1_1_0).unwrap(), full());
        let mut as100 = full();
        as100["cniVersion"] = json!("1.0.0");
        assert_eq!(r.to_value(Version::V1_0_0).unwrap(), as100);
    }

    #[test]
    fn down_to_040_adds_version_drops_new_interface_fields() {
        let (_, r) = CniResult::from_value(&full(), Version::V1_0_0).unwrap();
        let v = r.to_value(Version::V0_4_0).unwrap();
        assert_eq!(v["cniVersion"], "0.4.0");
        assert_eq!(
            v["interfaces"],
            json!([{"name": "eth0", "mac": "00:11:22:33:44:55", "sandbox": "/proc/3553/ns/net"}])
        );
        assert_eq!(
            v["ips"][0],
            json!({"version": "4", "interface": 0, "address": "1.2.3.4/24", "gateway": "1.2.3.1"})
        );
        assert_eq!(v["ips"][1]["version"], "6");
        // routes keep every field
        assert_eq!(v["routes"][0], full()["routes"][0]);
    }

    #[test]
    fn down_to_020_first_address_per_family() {
        let (_, r) = CniResult::from_value(&full(), Version::V1_0_0).unwrap();
        let v = r.to_value(Version::V0_1_0).unwrap();
        assert_eq!(
            v,
            json!({
                "cniVersion": "0.1.0",
                "ip4": {"ip": "1.2.3.4/24", "gateway": "1.2.3.1",
                        "routes": [{"dst": "0.0.0.0/0", "gw": "1.2.3.1"}, {"dst": "192.168.0.0/16", "gw": "1.2.3.1"}]},
                "ip6": {"ip": "abcd:1234:ffff::cdde/64", "gateway": "abcd:1234:ffff::1",
                        "routes": [{"dst": "::/0", "gw": "abcd:1234:ffff::1"}, {"dst": "abcd:1234:ffff::/64", "gw": "abcd:1234:ffff::1"}]},
                "dns": full()["dns"]
            })
        );
    }

    #[test]
    fn no_ip_cannot_go_to_020() {
        let r = CniResult {
            interfaces: vec![Interface {
                name: "lo".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let err = r.to_value(Version::V0_2_0).unwrap_err();
        assert!(err.to_string().contains("no valid IP addresses"), "{err}");
        assert_eq!(err.code(), crate::ErrorCode::IncompatibleCniVersion);
    }

    #[test]
    fn dns_printing_per_family() {
        let r = CniResult {
            ips: vec![IpConfig::new("10.0.0.2/24".parse().unwrap())],
            ..Default::default()
        };
        assert_eq!(
            r.to_value(Version::V1_0_0).unwrap(),
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]})
        );
        assert_eq!(
            r.to_value(Version::V0_3_1).unwrap(),
            json!({"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.0.0.2/24"}], "dns": {}})
        );
        assert_eq!(
            r.to_value(Version::V0_2_0).unwrap(),
            json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}, "dns": {}})
        );
    }

    #[test]
    fn interface_zero_and_missing() {
        let with0 =
            json!({"cniVersion": "1.0.0", "ips": [{"interface": 0, "address": "10.0.0.2/24"}]});
        let (_, r) = CniResult::from_value(&with0, Version::V1_0_0).unwrap();
        assert_eq!(r.ips[0].interface, Some(0));
        assert_eq!(r.to_value(Version::V1_0_0).unwrap(), with0);
    }

    #[test]
    fn v020_up_to_040_has_no_interface_index() {
        let v = json!({"cniVersion": "0.2.0",
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
            "ip6": {"ip": "2001:db8::5/64"}, "dns": {}});
        let (ver, r) = CniResult::from_value(&v, Version::V1_0_0).unwrap();
        assert_eq!(ver, Version::V0_2_0);
        assert_eq!(
            r.to_value(Version::V0_4_0).unwrap(),
            json!({"cniVersion": "0.4.0",
                   "ips": [{"version": "4", "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                           {"version": "6", "address": "2001:db8::5/64"}],
                   "routes": [{"dst": "0.0.0.0/0"}], "dns": {}})
        );
        // and back to 0.2.0 unchanged
        assert_eq!(r.to_value(Version::V0_2_0).unwrap(), v);
    }

    #[test]
    fn missing_version_uses_default_and_garbage_is_an_error() {
        let (v, _) =
            CniResult::from_slice(br#"{"ips":[{"address":"10.0.0.2/24"}]}"#, Version::V1_0_0)
                .unwrap();
        assert_eq!(v, Version::V1_0_0);
        assert!(CniResult::from_slice(b"not json", Version::V1_0_0).is_err());
        assert!(CniResult::from_slice(br#"{"cniVersion":"9.9.9"}"#, Version::V1_0_0).is_err());
        assert!(CniResult::from_slice(
            br#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2"}]}"#,
            Version::V1_0_0
        )
        .is_err());
        let (_, r) = CniResult::from_slice(
            br#"{"cniVersion":"1.0.0","ips":null,"dns":null}"#,
            Version::V1_0_0,
        )
        .unwrap();
        assert!(r.ips.is_empty());
    }

    #[test]
    fn pretty_output_matches_go_indent() {
        let r = CniResult {
            ips: vec![IpConfig::new("10.0.0.2/24".parse().unwrap())],
            ..Default::default()
        };
        let s = String::from_utf8(r.to_json_pretty(Version::V1_0_0).unwrap()).unwrap();
        assert_eq!(s, "{\n    \"cniVersion\": \"1.0.0\",\n    \"ips\": [\n        {\n            \"address\": \"10.0.0.2/24\"\n        }\n    ]\n}");
    }
}
