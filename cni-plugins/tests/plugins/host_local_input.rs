//! host-local on bad input, and its GC, STATUS, CHECK and DEL semantics,
//! through the built binary.

use std::path::Path;

use crate::host_local_support::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn conf(version: &str, dir: &Path, ipam: Value) -> Value {
    host_local_conf(version, "net", dir, ipam)
}

#[test]
fn invalid_configs_get_code_7_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            json!({"subnet": "10.0.0.1/24"}),
            "host bits set",
            "\"subnet\"",
        ),
        (
            json!({"subnet": "banana"}),
            "invalid CIDR address: banana",
            "\"subnet\"",
        ),
        (
            json!({"subnet": "10.0.0.0/31"}),
            "too small to allocate from",
            "\"subnet\"",
        ),
        (
            json!({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.5"}]]}),
            "RangeStart 10.0.1.5 not in network 10.0.0.0/24",
            "\"rangeStart\"",
        ),
        (
            json!({"ranges": [[{"subnet": "10.0.0.0/24", "rangeEnd": "10.0.9.5"}]]}),
            "RangeEnd 10.0.9.5 not in network",
            "\"rangeEnd\"",
        ),
        (
            json!({"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "x"}]]}),
            "invalid IP address: x",
            "\"gateway\"",
        ),
        (
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}, {"subnet": "2001:db8::/64"}]]}),
            "mixed address families",
            "\"ranges\"",
        ),
        (
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.0/16"}]]}),
            "range set 0 overlaps with 1",
            "\"ranges\"",
        ),
        (json!({}), "no IP ranges specified", "\"ranges\""),
    ];
    for (ipam, msg, field) in cases {
        let out = run(
            HOST_LOCAL,
            Call::new("ADD", "c1"),
            &conf("1.0.0", tmp.path(), ipam.clone()),
        );
        assert_eq!(out.err_code(), 7, "{ipam}: {out:?}");
        assert!(out.msg().contains(msg), "{ipam}: {}", out.msg());
        let details = out.json()["details"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(details.contains(field), "{ipam}: details {details:?}");
    }
    let no_ipam = json!({"cniVersion": "1.0.0", "name": "net", "type": "x"});
    let out = run(HOST_LOCAL, Call::new("ADD", "c1"), &no_ipam);
    assert_eq!(
        (out.err_code(), out.msg().as_str()),
        (7, "IPAM config missing 'ipam' key")
    );
    // Requested addresses outside every range are a config error too.
    let out = run(
        HOST_LOCAL,
        Call::new("ADD", "c1").args("IP=10.9.9.9"),
        &conf("1.0.0", tmp.path(), json!({"subnet": "10.0.0.0/24"})),
    );
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(out.msg().contains("10.9.9.9"));
    // A wrong type is a config error naming the key (7, #31.5), malformed
    // JSON a decode error (6), bad CNI_ARGS an environment error (4).
    let out = run(
        HOST_LOCAL,
        Call::new("ADD", "c1"),
        &conf("1.0.0", tmp.path(), json!({"ranges": "x"})),
    );
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(out.msg().contains("ipam.ranges"), "{out:?}");
    let out = Call::new("ADD", "c1").run(Path::new(HOST_LOCAL), b"{\"name\": ");
    assert_eq!(out.err_code(), 6, "{out:?}");
    let out = run(
        HOST_LOCAL,
        Call::new("ADD", "c1").args("FOO=1"),
        &conf("1.0.0", tmp.path(), json!({"subnet": "10.0.0.0/24"})),
    );
    assert_eq!(out.err_code(), 4, "{out:?}");
    assert!(out.msg().contains("FOO=1"));
    // Nothing was reserved by any of these.
    assert!(reservations(&tmp.path().join("net")).is_empty());
}

#[test]
fn path_traversal_names_are_rejected_and_nothing_is_written_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for name in [
        "../x",
        "..",
        ".",
        "a/b",
        "../../etc/cni-test",
        "x/../../y",
        ".hidden",
        "/abs",
    ] {
        for (version, command) in [
            ("1.0.0", "ADD"),
            ("1.0.0", "DEL"),
            ("1.0.0", "CHECK"),
            ("1.1.0", "GC"),
            ("1.1.0", "STATUS"),
        ] {
            let mut c = host_local_conf(version, name, &data, json!({"subnet": "10.0.0.0/24"}));
            c["cni.dev/valid-attachments"] = json!([]);
            let out = run(HOST_LOCAL, Call::new(command, "c1"), &c);
            assert_eq!(out.err_code(), 7, "{command} {name:?}: {out:?}");
            assert!(out.msg().contains("network name"), "{}", out.msg());
        }
    }
    // Container ids and interface names cannot smuggle paths either.
    let c = conf("1.0.0", &data, json!({"subnet": "10.0.0.0/24"}));
    assert_eq!(
        run(HOST_LOCAL, Call::new("ADD", "../../etc"), &c).err_code(),
        4
    );
    assert_eq!(
        run(HOST_LOCAL, Call::new("ADD", "c1").ifname("../eth0"), &c).err_code(),
        4
    );
    let top: Vec<String> = snapshot(tmp.path()).into_keys().collect();
    assert_eq!(top, ["data/"]);
    assert!(snapshot(&data).is_empty(), "{:?}", snapshot(&data).keys());
}

#[test]
fn del_of_unknown_container_succeeds_and_check_follows_reservations() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("1.0.0", tmp.path(), json!({"subnet": "10.0.0.0/24"}));
    assert!(run(HOST_LOCAL, Call::new("DEL", "nobody"), &c).ok());
    assert!(run(HOST_LOCAL, Call::new("ADD", "c1"), &c).ok());
    assert!(run(HOST_LOCAL, Call::new("CHECK", "c1"), &c).ok());
    let other_if = run(HOST_LOCAL, Call::new("CHECK", "c1").ifname("net1"), &c);
    assert!(!other_if.ok());
    assert!(other_if
        .msg()
        .contains("Failed to find address added by container c1"));
    // A second ADD of the same attachment is refused, as in Go.
    let dup = run(HOST_LOCAL, Call::new("ADD", "c1"), &c);
    assert!(
        dup.msg().contains("duplicate allocation is not allowed"),
        "{dup:?}"
    );
    assert!(run(HOST_LOCAL, Call::new("DEL", "c1"), &c).ok());
    assert!(
        run(HOST_LOCAL, Call::new("DEL", "c1"), &c).ok(),
        "DEL is idempotent"
    );
    assert!(!run(HOST_LOCAL, Call::new("CHECK", "c1"), &c).ok());
    // CHECK needs 0.4.0 (skel).
    let old = conf("0.3.1", tmp.path(), json!({"subnet": "10.0.0.0/24"}));
    assert_eq!(
        run(HOST_LOCAL, Call::new("CHECK", "c1"), &old).err_code(),
        1
    );
}

#[test]
fn gc_releases_what_is_not_valid_and_keeps_bookkeeping_files() {
    let tmp = tempfile::tempdir().unwrap();
    let ipam = json!({"ranges": [[{"subnet": "10.5.0.0/24"}], [{"subnet": "2001:db8:5::/64"}]]});
    let c = conf("1.1.0", tmp.path(), ipam.clone());
    let dir = tmp.path().join("net");
    for (id, ifname) in [
        ("c1", "eth0"),
        ("c1", "net1"),
        ("c2", "eth0"),
        ("c3", "eth0"),
    ] {
        assert!(run(HOST_LOCAL, Call::new("ADD", id).ifname(ifname), &c).ok());
    }
    // One reservation by the Go plugin, one legacy id-only file.
    if let Some(go_bin) = go(GO_HOST_LOCAL) {
        let go_conf = conf("1.0.0", tmp.path(), ipam);
        assert!(run(go_bin, Call::new("ADD", "go-1"), &go_conf).ok());
    }
    std::fs::write(dir.join("10.5.0.200"), "legacy-keep").unwrap();
    std::fs::write(dir.join("10.5.0.201"), "legacy-drop").unwrap();

    let gc = |valid: Value| {
        let mut g = c.clone();
        g["cni.dev/valid-attachments"] = valid;
        run(HOST_LOCAL, Call::new("GC", ""), &g)
    };
    let out = gc(json!([
        {"containerID": "c1", "ifname": "eth0"},
        {"containerID": "c3", "ifname": "eth0"},
        {"containerID": "legacy-keep", "ifname": "eth0"},
    ]));
    assert!(out.ok(), "{out:?}");
    let mut owners: Vec<String> = reservations(&dir).into_values().collect();
    owners.sort();
    assert_eq!(
        owners,
        [
            "c1\r\neth0",
            "c1\r\neth0",
            "c3\r\neth0",
            "c3\r\neth0",
            "legacy-keep"
        ]
    );
    // DEL still finds what GC kept (the owner index was rebuilt).
    assert!(run(HOST_LOCAL, Call::new("DEL", "c3"), &c).ok());
    assert_eq!(reservations(&dir).len(), 3);

    // An empty list means nothing is valid.
    assert!(gc(json!([])).ok());
    let left: Vec<String> = snapshot(&dir).into_keys().collect();
    assert_eq!(left, ["last_reserved_ip.0", "last_reserved_ip.1", "lock"]);

    // A GC without the list is refused rather than taken as "none valid".
    let out = run(HOST_LOCAL, Call::new("GC", ""), &c);
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(out.msg().contains("cni.dev/valid-attachments"));
    // GC needs 1.1.0 (skel).
    let mut old = conf("1.0.0", tmp.path(), json!({"subnet": "10.5.0.0/24"}));
    old["cni.dev/valid-attachments"] = json!([]);
    assert_eq!(run(HOST_LOCAL, Call::new("GC", ""), &old).err_code(), 1);
}

#[test]
fn status_reports_code_50_when_the_data_dir_is_unusable() {
    let tmp = tempfile::tempdir().unwrap();
    let ok = conf(
        "1.1.0",
        &tmp.path().join("fresh"),
        json!({"subnet": "10.0.0.0/24"}),
    );
    let out = run(HOST_LOCAL, Call::new("STATUS", ""), &ok);
    assert!(out.ok(), "{out:?}");
    // The probe leaves nothing behind but the lock.
    let left: Vec<String> = snapshot(&tmp.path().join("fresh/net"))
        .into_keys()
        .collect();
    assert_eq!(left, ["lock"]);

    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let bad = conf("1.1.0", &file, json!({"subnet": "10.0.0.0/24"}));
    let out = run(HOST_LOCAL, Call::new("STATUS", ""), &bad);
    assert_eq!(out.err_code(), 50, "{out:?}");
    assert!(out.msg().contains("not-a-dir"), "{}", out.msg());
    assert!(out.msg().contains("Not a directory"), "{}", out.msg());
    // ADD on the same config fails with an I/O error, not a result.
    assert!(!run(
        HOST_LOCAL,
        Call::new("ADD", "c1"),
        &conf("1.0.0", &file, json!({"subnet": "10.0.0.0/24"}))
    )
    .ok());
    // STATUS needs 1.1.0 (skel).
    let old = conf(
        "1.0.0",
        &tmp.path().join("fresh"),
        json!({"subnet": "10.0.0.0/24"}),
    );
    assert_eq!(run(HOST_LOCAL, Call::new("STATUS", ""), &old).err_code(), 1);
    // An invalid config is reported as such, not as unavailability.
    let invalid = conf(
        "1.1.0",
        &tmp.path().join("fresh"),
        json!({"subnet": "10.0.0.1/24"}),
    );
    assert_eq!(
        run(HOST_LOCAL, Call::new("STATUS", ""), &invalid).err_code(),
        7
    );
}

/// FNV-1a of an owner key, as the store's index hashes it.
fn key_hash(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[test]
fn released_files_are_pooled_and_reused() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("1.0.0", tmp.path(), json!({"subnet": "10.6.0.0/24"}));
    let dir = tmp.path().join("net");
    let pool = tmp.path().join(".cni-ipam-index/net/free");
    // A pod that stays: the pool lives while the network has a reservation.
    assert!(run(HOST_LOCAL, Call::new("ADD", "keeper"), &c).ok());
    assert!(run(HOST_LOCAL, Call::new("ADD", "a"), &c).ok());
    let ino = std::fs::metadata(dir.join("10.6.0.3")).unwrap().ino();
    assert!(run(HOST_LOCAL, Call::new("DEL", "a"), &c).ok());
    let pooled: Vec<_> = std::fs::read_dir(&pool).unwrap().flatten().collect();
    assert_eq!(pooled.len(), 1);
    assert_eq!(pooled[0].metadata().unwrap().ino(), ino);
    // The next ADD takes the pooled inode, with exactly its own content.
    assert!(run(
        HOST_LOCAL,
        Call::new("ADD", "b-longer-id").ifname("net1"),
        &c
    )
    .ok());
    let reused = std::fs::metadata(dir.join("10.6.0.4")).unwrap();
    assert_eq!(reused.ino(), ino);
    assert_eq!(
        std::fs::read_to_string(dir.join("10.6.0.4")).unwrap(),
        "b-longer-id\r\nnet1"
    );
    assert!(run(HOST_LOCAL, Call::new("ADD", "c"), &c).ok());
    assert_eq!(
        std::fs::read_to_string(dir.join("10.6.0.5")).unwrap(),
        "c\r\neth0"
    );
    assert_eq!(std::fs::read_dir(&pool).unwrap().count(), 0);
    // The pool is bounded.
    for i in 0..70 {
        assert!(run(HOST_LOCAL, Call::new("ADD", &format!("m{i}")), &c).ok());
    }
    for i in 0..70 {
        assert!(run(HOST_LOCAL, Call::new("DEL", &format!("m{i}")), &c).ok());
    }
    assert_eq!(std::fs::read_dir(&pool).unwrap().count(), 64);
    let mut left: Vec<String> = reservations(&dir).into_values().collect();
    left.sort();
    assert_eq!(left, ["b-longer-id\r\nnet1", "c\r\neth0", "keeper\r\neth0"]);
    // The network's last release takes the pool and the index with it.
    for id in ["keeper", "c"] {
        assert!(run(HOST_LOCAL, Call::new("DEL", id), &c).ok());
    }
    assert!(run(
        HOST_LOCAL,
        Call::new("DEL", "b-longer-id").ifname("net1"),
        &c
    )
    .ok());
    assert!(!tmp.path().join(".cni-ipam-index").exists());
}

#[test]
fn grown_index_bucket_is_compacted_and_still_finds_owners() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("1.0.0", tmp.path(), json!({"subnet": "10.8.0.0/24"}));
    // Create the index, then stuff the bucket of "victim" with dead entries.
    assert!(run(HOST_LOCAL, Call::new("ADD", "first"), &c).ok());
    let hash = key_hash("victim\r\neth0");
    let bucket = tmp
        .path()
        .join(format!(".cni-ipam-index/net/{:02x}", hash >> 56));
    let mut text = std::fs::read_to_string(&bucket).unwrap_or_default();
    for i in 0..600 {
        text.push_str(&format!("{hash:016x} 10.8.1.{}\n", i % 250));
    }
    std::fs::write(&bucket, text).unwrap();
    assert!(run(HOST_LOCAL, Call::new("ADD", "victim"), &c).ok());
    let lines = std::fs::read_to_string(&bucket).unwrap().lines().count();
    assert!(lines < 10, "bucket not compacted: {lines} lines");
    assert!(run(HOST_LOCAL, Call::new("CHECK", "victim"), &c).ok());
    assert!(run(HOST_LOCAL, Call::new("DEL", "victim"), &c).ok());
    let left: Vec<String> = reservations(&tmp.path().join("net"))
        .into_values()
        .collect();
    assert_eq!(left, ["first\r\neth0"]);
}

#[test]
fn durable_store_syncs_and_behaves_the_same() {
    use cni_ipam::store::{DiskStore, LockedStore, Owner, Store};
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path(), "net").unwrap().durable(true);
    let owner = Owner::new("c1", "eth0");
    let ip: std::net::IpAddr = "10.9.0.2".parse().unwrap();
    {
        let mut locked = store.lock().unwrap();
        assert!(locked.reserve(ip, &owner, 0).unwrap());
        assert!(!locked.reserve(ip, &Owner::new("c2", "eth0"), 0).unwrap());
        assert_eq!(locked.held_by(&owner).unwrap().len(), 1);
        assert!(locked.release(ip).unwrap());
        // The released file is pooled, and reused durably.
        assert!(locked.reserve(ip, &Owner::new("c3", "eth0"), 0).unwrap());
    }
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("net/10.9.0.2")).unwrap(),
        "c3\r\neth0"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("net/last_reserved_ip.0")).unwrap(),
        "10.9.0.2"
    );
}
