//! host-local IPAM: configuration loading (Go's `allocator.LoadIPAMConfig`)
//! and the ADD/DEL/CHECK/GC/STATUS entry points the plugin binary calls
//! (Go's `plugins/ipam/host-local/main.go`).

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;

use cni_types::NetworkConfig;
use serde::Deserialize;
use serde_json::Value;

use crate::allocator::{release_owner, Allocator};
use crate::dns::parse_resolv_conf;
use crate::error::{Error, Result};
use crate::parse::{self, canonical_array, load_args, parse_ip_or_cidr, ROUTE_KEYS};
use crate::range::{RangeConfig, RangeSet};
use crate::result::{CniResult, Route};
use crate::store::{DiskStore, LockedStore, Owner, Store, DEFAULT_DATA_DIR};

/// A validated host-local configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLocalConfig {
    /// Network name (`name`), the store's directory under `data_dir`.
    pub name: String,
    /// `cniVersion` of the configuration.
    pub cni_version: String,
    /// Range sets in allocation order: `runtimeConfig.ipRanges`, then the
    /// legacy top-level range, then `ranges`.
    pub range_sets: Vec<RangeSet>,
    /// `ipam.routes`, returned verbatim.
    pub routes: Vec<Route>,
    /// `ipam.dataDir` (default `/var/lib/cni/networks`).
    pub data_dir: PathBuf,
    /// `ipam.resolvConf`, parsed into the result's `dns`.
    pub resolv_conf: Option<PathBuf>,
    /// Requested addresses: `CNI_ARGS` `IP`, then `args.cni.ips`, then
    /// `runtimeConfig.ips`.
    pub requested_ips: Vec<IpAddr>,
    /// `ipam.durable` (ours; the Go plugin ignores the key): fsync every
    /// reservation, so a power cut cannot leave an empty one behind. Off
    /// by default, as in Go, because each fsync costs milliseconds.
    pub durable: bool,
}

/// host-local's configuration as parsed.
type NetConf = parse::NetConf<IpamConf, RuntimeConf>;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IpamConf {
    // The legacy single range, spelled out rather than a flattened
    // `RangeConfig`: serde tells no field names of a struct with a
    // flattened field, and `config_keys` needs them.
    #[serde(default)]
    subnet: Option<String>,
    #[serde(default)]
    range_start: Option<String>,
    #[serde(default)]
    range_end: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    routes: Option<Vec<Route>>,
    #[serde(default)]
    data_dir: Option<String>,
    #[serde(default)]
    resolv_conf: Option<String>,
    #[serde(default)]
    ranges: Option<Vec<Vec<RangeConfig>>>,
    #[serde(default)]
    durable: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RuntimeConf {
    #[serde(default)]
    ip_ranges: Option<Vec<Vec<RangeConfig>>>,
    #[serde(default)]
    ips: Option<Vec<String>>,
}

/// Every key host-local's configuration accepts, as dotted paths
/// (`ipam.ranges.subnet`), read from the serde structs it is parsed with
/// ([`cni_types::keys`]): what the reference page must document.
#[doc(hidden)]
pub fn config_keys() -> Vec<cni_types::keys::KeyShape> {
    cni_types::keys::accepted_key_shapes_at::<NetConf>("")
}

/// Go's `ip.IP` text unmarshalling: `""` is "no address" (which Go then
/// fails to canonicalise), anything else must be an IP or a CIDR.
fn requested_ip(text: &str) -> Result<IpAddr> {
    if text.is_empty() {
        return Err(Error::InvalidConfig(
            "cannot understand ip: IP <nil> not v4 nor v6".to_string(),
        ));
    }
    parse_ip_or_cidr(text).ok_or_else(|| Error::InvalidConfig(format!("invalid IP address {text}")))
}

impl HostLocalConfig {
    /// Loads the configuration from the plugin's stdin and `CNI_ARGS`, with
    /// the Go reference's checks and messages.
    pub fn load(stdin: &[u8], cni_args: &str) -> Result<HostLocalConfig> {
        let value: Value = serde_json::from_slice(stdin).map_err(Error::DecodeConfig)?;
        Self::load_value(value, cni_args)
    }

    /// [`HostLocalConfig::load`] from a config `cni-types` already decoded.
    pub fn from_network_config(config: &NetworkConfig, cni_args: &str) -> Result<HostLocalConfig> {
        Self::load_value(Value::Object(config.to_map()), cni_args)
    }

    fn load_value(value: Value, cni_args: &str) -> Result<HostLocalConfig> {
        const RANGE_KEYS: &[&str] = &["subnet", "rangeStart", "rangeEnd", "gateway"];
        let canonical_sets = |sets: Option<&mut Value>| {
            if let Some(sets) = sets.and_then(Value::as_array_mut) {
                for set in sets {
                    canonical_array(Some(set), RANGE_KEYS);
                }
            }
        };
        let net = NetConf::decode(
            value,
            &[
                "type",
                "subnet",
                "rangeStart",
                "rangeEnd",
                "gateway",
                "routes",
                "dataDir",
                "resolvConf",
                "ranges",
            ],
            &["ipRanges", "ips"],
            |ipam, rc| {
                if let Some(ipam) = ipam {
                    canonical_sets(ipam.get_mut("ranges"));
                    canonical_array(ipam.get_mut("routes"), ROUTE_KEYS);
                }
                if let Some(rc) = rc {
                    canonical_sets(rc.get_mut("ipRanges"));
                }
            },
        )?;
        let runtime = net.runtime_config.unwrap_or_default();
        let arg_ips = net.args.and_then(|a| a.cni).and_then(|c| c.ips);
        // Go decodes these with the JSON, before anything else is checked.
        let arg_ips: Vec<IpAddr> = arg_ips
            .iter()
            .flatten()
            .map(|s| requested_ip(s))
            .collect::<Result<_>>()?;
        let runtime_ips: Vec<IpAddr> = runtime
            .ips
            .iter()
            .flatten()
            .map(|s| requested_ip(s))
            .collect::<Result<_>>()?;

        let ipam = net
            .ipam
            .ok_or_else(|| Error::InvalidConfig("IPAM config missing 'ipam' key".to_string()))?;

        let mut requested_ips = Vec::new();
        for (_, value) in load_args(cni_args, &["IP"])? {
            if value.is_empty() {
                continue;
            }
            let ip = parse_ip_or_cidr(&value).ok_or_else(|| {
                Error::InvalidArgs(format!(
                    "ARGS: error parsing value of pair \"IP={value}\": invalid IP address {value})"
                ))
            })?;
            // Go assigns (not appends): the last IP= wins.
            requested_ips = vec![ip];
        }
        requested_ips.extend(arg_ips);
        requested_ips.extend(runtime_ips);

        let mut configs: Vec<Vec<RangeConfig>> = runtime.ip_ranges.unwrap_or_default();
        if ipam.subnet.as_deref().is_some_and(|s| !s.is_empty()) {
            configs.push(vec![RangeConfig {
                subnet: ipam.subnet.clone(),
                range_start: ipam.range_start.clone(),
                range_end: ipam.range_end.clone(),
                gateway: ipam.gateway.clone(),
            }]);
        }
        configs.extend(ipam.ranges.unwrap_or_default());
        if configs.is_empty() {
            return Err(Error::InvalidConfig("no IP ranges specified".to_string()));
        }

        let mut range_sets = Vec::with_capacity(configs.len());
        for (i, set) in configs.iter().enumerate() {
            let set = RangeSet::canonicalize(set)
                .map_err(|e| Error::InvalidConfig(format!("invalid range set {i}: {e}")))?;
            range_sets.push(set);
        }
        parse::check_one_per_family(&net.cni_version, range_sets.iter().map(RangeSet::is_ipv4))?;
        for (i, a) in range_sets.iter().enumerate() {
            for (j, b) in range_sets.iter().enumerate().skip(i + 1) {
                if a.overlaps(b) {
                    return Err(Error::InvalidConfig(format!(
                        "range set {i} overlaps with {j}"
                    )));
                }
            }
        }

        Ok(HostLocalConfig {
            name: net.name,
            cni_version: net.cni_version,
            range_sets,
            routes: ipam.routes.unwrap_or_default(),
            data_dir: ipam
                .data_dir
                .filter(|d| !d.is_empty())
                .map_or_else(|| PathBuf::from(DEFAULT_DATA_DIR), PathBuf::from),
            resolv_conf: ipam
                .resolv_conf
                .filter(|r| !r.is_empty())
                .map(PathBuf::from),
            requested_ips,
            durable: ipam.durable,
        })
    }

    /// Opens the disk store of this network.
    pub fn open_store(&self) -> Result<DiskStore> {
        Ok(DiskStore::open(&self.data_dir, &self.name)?.durable(self.durable))
    }
}

/// ADD: one address per range set for (`container_id`, `ifname`), plus the
/// configured routes and the DNS of `resolvConf`. On any failure, what was
/// already reserved is released.
pub fn add(config: &HostLocalConfig, container_id: &str, ifname: &str) -> Result<CniResult> {
    let store = config.open_store()?;
    add_with_store(config, &store, &Owner::new(container_id, ifname))
}

/// ADD against any [`Store`] (the disk one is what [`add`] uses).
pub fn add_with_store<S: Store>(
    config: &HostLocalConfig,
    store: &S,
    owner: &Owner,
) -> Result<CniResult> {
    let dns = match &config.resolv_conf {
        Some(path) => parse_resolv_conf(path)?,
        None => Default::default(),
    };

    // One lock for the whole ADD (Go locks once per range set): the sets are
    // then reserved atomically.
    let mut locked = store.lock()?;
    let mut pending: Vec<IpAddr> = Vec::new();
    for ip in &config.requested_ips {
        if !pending.contains(ip) {
            pending.push(*ip);
        }
    }

    let mut ips = Vec::with_capacity(config.range_sets.len());
    for (index, set) in config.range_sets.iter().enumerate() {
        // Go picks any matching request (map order); we take the first.
        let requested = pending
            .iter()
            .position(|ip| set.contains(*ip))
            .map(|pos| pending.remove(pos));
        match Allocator::new(set, index).allocate(&mut locked, owner, requested) {
            Ok(ip) => ips.push(ip),
            Err(e) => {
                rollback(&mut locked, owner, &ips);
                return Err(Error::AllocateRange {
                    index,
                    source: Box::new(e),
                });
            }
        }
    }
    if !pending.is_empty() {
        rollback(&mut locked, owner, &ips);
        return Err(Error::UnfulfilledRequests(pending));
    }
    Ok(CniResult {
        interfaces: Vec::new(),
        ips,
        routes: config.routes.clone(),
        dns,
    })
}

/// Releases the addresses this ADD reserved. Go releases everything the
/// owner holds; only this ADD's own reservations can exist here because a
/// previous one makes the allocation fail as a duplicate before reserving.
fn rollback(store: &mut impl LockedStore, owner: &Owner, reserved: &[crate::result::IpConfig]) {
    if reserved.is_empty() {
        return;
    }
    if let Err(e) = release_owner(store, owner, 1) {
        tracing::warn!(error = %e, container = %owner.container_id, "roll back reservations");
    }
}

/// DEL: releases every address (`container_id`, `ifname`) holds; an unknown
/// owner is success.
pub fn del(config: &HostLocalConfig, container_id: &str, ifname: &str) -> Result<()> {
    let store = config.open_store()?;
    del_with_store(config, &store, &Owner::new(container_id, ifname)).map(|_| ())
}

/// DEL against any [`Store`]; returns the released addresses.
pub fn del_with_store<S: Store>(
    config: &HostLocalConfig,
    store: &S,
    owner: &Owner,
) -> Result<Vec<IpAddr>> {
    let mut locked = store.lock()?;
    release_owner(&mut locked, owner, config.range_sets.len())
}

/// CHECK: succeeds when some reservation belongs to (`container_id`,
/// `ifname`) or, for legacy entries, to `container_id`.
pub fn check(config: &HostLocalConfig, container_id: &str, ifname: &str) -> Result<()> {
    let store = config.open_store()?;
    check_with_store(&store, &Owner::new(container_id, ifname))
}

/// CHECK against any [`Store`].
pub fn check_with_store<S: Store>(store: &S, owner: &Owner) -> Result<()> {
    if !store.lock()?.held_by(owner)?.is_empty() {
        Ok(())
    } else {
        Err(Error::NotFound(owner.container_id.clone()))
    }
}

/// The addresses a CHECK can compare with the container's: the
/// reservations of (`container_id`, `ifname`), legacy ones included.
pub fn lookup(config: &HostLocalConfig, container_id: &str, ifname: &str) -> Result<Vec<IpAddr>> {
    let store = config.open_store()?;
    let owner = Owner::new(container_id, ifname);
    let mut ips: Vec<IpAddr> = store
        .lock()?
        .held_by(&owner)?
        .into_iter()
        .map(|r| r.ip)
        .collect();
    ips.sort();
    Ok(ips)
}

/// GC (spec 1.1, not implemented by the Go plugin): releases every
/// reservation not held by one of `valid` attachments. A legacy id-only
/// entry is kept when any valid attachment has its container id. `lock` and
/// `last_reserved_ip.*` are left alone. Returns the released addresses.
pub fn gc(config: &HostLocalConfig, valid: &[Owner]) -> Result<Vec<IpAddr>> {
    let store = config.open_store()?;
    gc_with_store(&store, valid)
}

/// GC against any [`Store`].
pub fn gc_with_store<S: Store>(store: &S, valid: &[Owner]) -> Result<Vec<IpAddr>> {
    let exact: HashSet<(&str, &str)> = valid
        .iter()
        .map(|o| (o.container_id.trim(), o.ifname.as_str()))
        .collect();
    let ids: HashSet<&str> = valid.iter().map(|o| o.container_id.trim()).collect();
    let mut locked = store.lock()?;
    let mut released = Vec::new();
    for r in locked.reservations()? {
        let keep = match &r.ifname {
            Some(ifname) => exact.contains(&(r.container_id.as_str(), ifname.as_str())),
            None => ids.contains(r.container_id.as_str()),
        };
        if !keep && locked.release(r.ip)? {
            released.push(r.ip);
        }
    }
    locked.reindex()?;
    released.sort();
    Ok(released)
}

/// STATUS: the network's data directory can be created, locked and written.
/// Failure carries code 50 (plugin not available).
pub fn status(config: &HostLocalConfig) -> Result<()> {
    config
        .open_store()
        .and_then(|store| store.check_usable())
        .map_err(|e| Error::Unavailable(Box::new(e)))
}
