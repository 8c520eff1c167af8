//! host-local against the disk store in temporary directories: exact file
//! names and bytes (Go's `host_local_test.go` facts), legacy entries, crash
//! leftovers, path safety, GC, STATUS and concurrent allocation.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cni_ipam::host_local::{self, HostLocalConfig};
use cni_ipam::store::{DiskStore, LockedStore, Owner, Store};
use serde_json::json;

fn config(dir: &Path, ipam: serde_json::Value) -> HostLocalConfig {
    let mut ipam = ipam;
    ipam["type"] = json!("host-local");
    ipam["dataDir"] = json!(dir);
    let conf = json!({"cniVersion": "1.0.0", "name": "mynet", "type": "ipvlan", "ipam": ipam});
    HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap()
}

fn dual_stack(dir: &Path) -> HostLocalConfig {
    config(
        dir,
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "10.2.2.0/24"}], [{"subnet": "2001:db8:1::0/64"}]]}),
    )
}

fn listing(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

fn read(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path).unwrap()
}

#[test]
fn add_writes_go_layout_and_del_removes() {
    let tmp = tempfile::tempdir().unwrap();
    let resolv = tmp.path().join("resolv.conf");
    fs::write(&resolv, "nameserver 192.0.2.3\nsearch example.com\n").unwrap();
    let mut c = dual_stack(tmp.path());
    c.resolv_conf = Some(resolv);
    c.routes = serde_json::from_value(json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "1.1.1.1"}, {"dst": "2001:db8:2::0/64"}])).unwrap();

    let r = host_local::add(&c, "dummy", "eth0").unwrap();
    assert_eq!(
        wire(&r),
        json!({
            "ips": [
                {"address": "10.1.2.2/24", "gateway": "10.1.2.1"},
                {"address": "2001:db8:1::2/64", "gateway": "2001:db8:1::1"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "1.1.1.1"}, {"dst": "2001:db8:2::/64"}],
            "dns": {"nameservers": ["192.0.2.3"], "search": ["example.com"]}
        })
    );
    let net = tmp.path().join("mynet");
    assert_eq!(
        listing(&net),
        [
            "10.1.2.2",
            "2001:db8:1::2",
            "last_reserved_ip.0",
            "last_reserved_ip.1",
            "lock"
        ]
        .into_iter()
        .map(String::from)
        .collect()
    );
    assert_eq!(read(net.join("10.1.2.2")), "dummy\r\neth0");
    assert_eq!(read(net.join("2001:db8:1::2")), "dummy\r\neth0");
    assert_eq!(read(net.join("last_reserved_ip.0")), "10.1.2.2");
    assert_eq!(read(net.join("last_reserved_ip.1")), "2001:db8:1::2");
    let mode = fs::metadata(net.join("10.1.2.2"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    host_local::check(&c, "dummy", "eth0").unwrap();
    assert_eq!(
        host_local::lookup(&c, "dummy", "eth0").unwrap(),
        [
            "10.1.2.2".parse::<std::net::IpAddr>().unwrap(),
            "2001:db8:1::2".parse().unwrap()
        ]
    );
    let e = host_local::add(&c, "dummy", "eth0").unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to allocate for range 0: 10.1.2.2 has been allocated to dummy, duplicate allocation is not allowed"
    );

    host_local::del(&c, "dummy", "eth0").unwrap();
    assert!(!net.join("10.1.2.2").exists());
    assert!(!net.join("2001:db8:1::2").exists());
    assert_eq!(
        host_local::check(&c, "dummy", "eth0")
            .unwrap_err()
            .to_string(),
        "host-local: Failed to find address added by container dummy"
    );
    // Unknown owner: success.
    host_local::del(&c, "unknown", "eth0").unwrap();
    // Round robin continues after the released addresses.
    let r = host_local::add(&c, "dummy", "eth0").unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.2.3/24");
}

#[test]
fn legacy_and_whitespace_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    let net = tmp.path().join("mynet");
    fs::create_dir_all(&net).unwrap();
    fs::write(net.join("10.1.2.2"), "dummy").unwrap();
    fs::write(net.join("10.1.2.3"), "  other\r\neth0 \n").unwrap();

    host_local::check(&c, "dummy", "eth0").unwrap();
    host_local::check(&c, "other", "eth0").unwrap();
    let e = host_local::add(&c, "dummy", "eth0").unwrap_err();
    assert!(
        e.to_string()
            .contains("10.1.2.2 has been allocated to dummy"),
        "{e}"
    );
    host_local::del(&c, "dummy", "eth0").unwrap();
    host_local::del(&c, "other", "eth0").unwrap();
    assert_eq!(listing(&net), ["lock".to_string()].into_iter().collect());
}

#[test]
fn requested_ips_and_rollback() {
    let tmp = tempfile::tempdir().unwrap();
    let mk = |args: &str| {
        let conf = json!({"cniVersion": "1.0.0", "name": "mynet", "ipam": {
            "type": "host-local", "dataDir": tmp.path(),
            "ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/64"}]]}});
        HostLocalConfig::load(conf.to_string().as_bytes(), args).unwrap()
    };
    let r = host_local::add(&mk("IP=10.1.2.88"), "a", "eth0").unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.2.88/24");
    assert_eq!(r.ips[1].address.to_string(), "2001:db8:1::2/64");

    let e = host_local::add(&mk("IP=10.1.2.88"), "b", "eth0").unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to allocate for range 0: requested IP address 10.1.2.88 is not available in range set 10.1.2.1-10.1.2.254"
    );
    assert_eq!(e.code().as_u32(), 11);

    let e = host_local::add(&mk("IP=10.9.9.9"), "b", "eth0").unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to allocate all requested IPs: 10.9.9.9"
    );
    // The two addresses reserved before the failure were rolled back.
    host_local::check(&mk(""), "b", "eth0").unwrap_err();
    let net = tmp.path().join("mynet");
    assert_eq!(
        listing(&net)
            .iter()
            .filter(|n| n.contains("10.1.2.") || n.contains("db8"))
            .count(),
        2
    );
}

#[test]
fn stale_temp_file_is_ignored_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    let net = tmp.path().join("mynet");
    host_local::add(&c, "first", "eth0").unwrap();
    // What writers killed between write and link leave behind (half
    // written, another owner; complete, the owner GC keeps).
    fs::write(net.join(".10.1.2.3.tmp.4242.7"), "dum").unwrap();
    host_local::check(&c, "dum", "eth0").unwrap_err();
    let r = host_local::add(&c, "dummy", "eth0").unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.2.3/24");
    assert_eq!(read(net.join("10.1.2.3")), "dummy\r\neth0");
    assert_eq!(read(net.join("last_reserved_ip.0")), "10.1.2.3");
    fs::write(net.join(".10.1.2.4.tmp.4242.8"), "dummy\r\neth0").unwrap();
    host_local::gc(&c, &[Owner::new("dummy", "eth0")]).unwrap();
    assert!(listing(&net).iter().all(|n| !n.starts_with('.')));
    host_local::check(&c, "dummy", "eth0").unwrap();
}

#[test]
fn network_names_cannot_escape_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    fs::create_dir(&data).unwrap();
    for name in [
        "",
        ".",
        "..",
        "../evil",
        "a/b",
        "/abs",
        "-x",
        "x y",
        "a/../../b",
        "ö",
    ] {
        let conf = json!({"cniVersion": "1.0.0", "name": name, "ipam": {
            "type": "host-local", "dataDir": data, "subnet": "10.1.2.0/24"}});
        let c = HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap();
        let e = host_local::add(&c, "dummy", "eth0").unwrap_err();
        assert_eq!(e.code().as_u32(), 7, "{name:?}: {e}");
        assert!(DiskStore::open(&data, name).is_err());
    }
    assert_eq!(
        listing(tmp.path()),
        ["data".to_string()].into_iter().collect()
    );
    assert!(listing(&data).is_empty());
    DiskStore::open(&data, "ok.name_1-2").unwrap();
}

#[test]
fn gc_releases_everything_not_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    for id in ["a", "b", "c"] {
        host_local::add(&c, id, "eth0").unwrap();
    }
    let net = tmp.path().join("mynet");
    fs::write(net.join("10.1.2.50"), "a").unwrap(); // legacy entry of a valid container
    fs::write(net.join("10.1.2.51"), "zombie").unwrap(); // legacy entry of a gone one
    let released = host_local::gc(&c, &[Owner::new("a", "eth0"), Owner::new("c", "eth1")]).unwrap();
    let released: Vec<String> = released.iter().map(|i| i.to_string()).collect();
    assert_eq!(released, ["10.1.2.3", "10.1.2.4", "10.1.2.51"]);
    assert_eq!(
        listing(&net),
        ["10.1.2.2", "10.1.2.50", "last_reserved_ip.0", "lock"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    // An empty valid list releases everything.
    host_local::gc(&c, &[]).unwrap();
    assert_eq!(
        listing(&net),
        ["last_reserved_ip.0", "lock"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

#[test]
fn status_reports_unusable_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    host_local::status(&c).unwrap();
    assert_eq!(
        listing(&tmp.path().join("mynet")),
        ["lock".to_string()].into_iter().collect()
    );
    let file = tmp.path().join("not-a-dir");
    fs::write(&file, "").unwrap();
    let c = config(&file, json!({"subnet": "10.1.2.0/24"}));
    let e = host_local::status(&c).unwrap_err();
    assert_eq!(e.code().as_u32(), 50, "{e}");
}

#[test]
fn concurrent_threads_never_share_an_address() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.0.0.0/22"}));
    let results: Vec<Vec<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let c = &c;
                s.spawn(move || {
                    (0..250)
                        .map(|i| {
                            let r = host_local::add(c, &format!("c{t}-{i}"), "eth0").unwrap();
                            r.ips[0].address.ip().to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: BTreeSet<String> = results.iter().flatten().cloned().collect();
    assert_eq!(all.len(), 1000);
    assert!(!all.contains("10.0.0.1"));
    let net = tmp.path().join("mynet");
    assert_eq!(listing(&net).len(), 1000 + 2);
    // Contents match the owners reported to each thread.
    for (t, ips) in results.iter().enumerate() {
        for (i, ip) in ips.iter().enumerate() {
            assert_eq!(read(net.join(ip)), format!("c{t}-{i}\r\neth0"));
        }
    }
    // Go's order: a single allocator filling from the start gives .2 to .3.233.
    let store = DiskStore::open(tmp.path(), "mynet").unwrap();
    let mut locked = store.lock().unwrap();
    assert_eq!(locked.reserved_ips().unwrap().len(), 1000);
    assert_eq!(
        locked
            .last_reserved_ip(0)
            .unwrap()
            .map(|i| i.to_string())
            .as_deref(),
        Some("10.0.3.233")
    );
}

#[test]
fn owner_index_survives_foreign_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    let net = tmp.path().join("mynet");
    let index = tmp.path().join(".cni-ipam-index/mynet");
    host_local::add(&c, "a", "eth0").unwrap();
    host_local::add(&c, "b", "eth0").unwrap();
    assert!(index.join("state").exists());

    // Index lost: rebuilt from the reservations, duplicates still caught.
    fs::remove_dir_all(&index).unwrap();
    let e = host_local::add(&c, "a", "eth0").unwrap_err();
    assert!(
        e.to_string().contains("10.1.2.2 has been allocated to a"),
        "{e}"
    );

    // A reservation written behind our back (as Go does: file plus an
    // in-place rewrite of last_reserved_ip) is found.
    fs::write(net.join("10.1.2.9"), "go\r\neth0").unwrap();
    fs::write(net.join("last_reserved_ip.0"), "10.1.2.9").unwrap();
    let e = host_local::add(&c, "go", "eth0").unwrap_err();
    assert!(
        e.to_string().contains("10.1.2.9 has been allocated to go"),
        "{e}"
    );
    assert_eq!(host_local::lookup(&c, "go", "eth0").unwrap().len(), 1);

    // Released behind our back (Go's DEL, or a tmpfiles rule wiping
    // `networks/*/*`): the stale entries neither block a new ADD nor make
    // DEL fail.
    for name in [
        "10.1.2.2",
        "10.1.2.3",
        "10.1.2.9",
        "last_reserved_ip.0",
        "lock",
    ] {
        fs::remove_file(net.join(name)).unwrap();
    }
    host_local::check(&c, "a", "eth0").unwrap_err();
    host_local::del(&c, "b", "eth0").unwrap();
    let r = host_local::add(&c, "a", "eth0").unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.2.2/24");

    // An index entry without its reservation (what a crash between the two
    // writes leaves; the fingerprint still matches) is ignored.
    let state = fs::read_to_string(index.join("state")).unwrap();
    fs::remove_file(net.join("10.1.2.2")).unwrap();
    host_local::check(&c, "a", "eth0").unwrap_err();
    assert_eq!(fs::read_to_string(index.join("state")).unwrap(), state);
    let r = host_local::add(&c, "a", "eth0").unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.2.3/24");
}

#[test]
fn nothing_but_go_files_left_after_the_last_release() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    let net = tmp.path().join("mynet");
    let go_files: BTreeSet<String> = ["last_reserved_ip.0", "lock"]
        .into_iter()
        .map(String::from)
        .collect();
    let only_net: BTreeSet<String> = ["mynet".to_string()].into_iter().collect();
    // Operations on an empty network make no index.
    host_local::del(&c, "nobody", "eth0").unwrap();
    host_local::check(&c, "nobody", "eth0").unwrap_err();
    assert_eq!(listing(tmp.path()), only_net);

    for id in ["a", "b", "c"] {
        host_local::add(&c, id, "eth0").unwrap();
    }
    host_local::del(&c, "a", "eth0").unwrap();
    // Pods left: the index and the pool stay.
    assert!(tmp.path().join(".cni-ipam-index/mynet/free").is_dir());
    host_local::del(&c, "b", "eth0").unwrap();
    host_local::del(&c, "c", "eth0").unwrap();
    assert_eq!(listing(tmp.path()), only_net);
    assert_eq!(listing(&net), go_files);
    // DEL again (a runtime's retry) makes nothing.
    host_local::del(&c, "c", "eth0").unwrap();
    assert_eq!(listing(tmp.path()), only_net);

    // The index comes back with the next reservation and still works.
    host_local::add(&c, "a", "eth0").unwrap();
    let e = host_local::add(&c, "a", "eth0").unwrap_err();
    assert!(e.to_string().contains("has been allocated to a"), "{e}");
    assert_eq!(host_local::lookup(&c, "a", "eth0").unwrap().len(), 1);
    // A GC that releases the last reservation removes it too.
    host_local::gc(&c, &[]).unwrap();
    assert_eq!(listing(tmp.path()), only_net);
    assert_eq!(listing(&net), go_files);
}

#[test]
fn networks_emptied_and_filled_concurrently_share_the_index_root() {
    // One network's last release removes `.cni-ipam-index` when it is
    // empty, while another network's first reservation makes it.
    let tmp = tempfile::tempdir().unwrap();
    let conf = |name: &str, subnet: &str| {
        let v = json!({"cniVersion": "1.0.0", "name": name, "type": "bridge",
            "ipam": {"type": "host-local", "dataDir": tmp.path(), "ranges": [[{"subnet": subnet}]]}});
        HostLocalConfig::load(v.to_string().as_bytes(), "").unwrap()
    };
    let nets = [conf("net1", "10.1.0.0/24"), conf("net2", "10.2.0.0/24")];
    std::thread::scope(|s| {
        for (t, c) in nets.iter().enumerate() {
            s.spawn(move || {
                for i in 0..150 {
                    let id = format!("p{t}-{i}");
                    host_local::add(c, &id, "eth0").unwrap();
                    host_local::del(c, &id, "eth0").unwrap();
                }
            });
        }
    });
    assert_eq!(
        listing(tmp.path()),
        ["net1", "net2"].into_iter().map(String::from).collect()
    );
}

#[test]
fn go_layout_only_in_network_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(tmp.path(), json!({"subnet": "10.1.2.0/24"}));
    host_local::add(&c, "a", "eth0").unwrap();
    host_local::del(&c, "a", "eth0").unwrap();
    host_local::add(&c, "b", "eth0").unwrap();
    assert_eq!(
        listing(&tmp.path().join("mynet")),
        ["10.1.2.3", "last_reserved_ip.0", "lock"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(
        listing(tmp.path()),
        [".cni-ipam-index", "mynet"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

/// The 1.0.0 wire JSON of a result, without `cniVersion`.
fn wire(r: &cni_types::CniResult) -> serde_json::Value {
    let mut v = r.to_value(cni_types::Version::V1_0_0).unwrap();
    if let Some(m) = v.as_object_mut() {
        m.remove("cniVersion");
    }
    v
}
