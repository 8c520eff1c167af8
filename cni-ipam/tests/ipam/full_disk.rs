//! host-local on a full disk: a tiny tmpfs mounted by the test, filled so
//! that the next write fails with ENOSPC. Every failed ADD must leave the
//! owner index (`.cni-ipam-index/<network>/<bucket>` and `state`) with its
//! old content or without the file, never an empty or torn one, and once
//! space is freed the store must work with an index that agrees with the
//! reservation files.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cni_ipam::host_local::{self, HostLocalConfig};
use serde_json::json;

const PAGE: u64 = 4096;

/// A tmpfs of `size` mounted on a fresh temporary directory, lazily
/// unmounted on drop (also when the test fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={size},mode=0755").as_str()),
        )
        .unwrap();
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A file that takes every free page of the tmpfs; `leave_free(n)` first
/// takes them all again (a tmpfs file's size says nothing about its pages
/// once it was extended), then gives `n` back.
struct Filler {
    path: PathBuf,
}

impl Filler {
    fn fill(dir: &Path) -> Filler {
        let filler = Filler {
            path: dir.join("filler"),
        };
        filler.leave_free(0);
        filler
    }

    fn leave_free(&self, pages: u64) {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .unwrap();
        let chunk = vec![0xa5u8; PAGE as usize];
        loop {
            match f.write(&chunk) {
                Ok(n) if n == chunk.len() => continue,
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("fill: {e}"),
            }
        }
        // Page-aligned, so that only whole pages are given back.
        let full = f.metadata().unwrap().len() / PAGE * PAGE;
        f.set_len(full.saturating_sub(pages * PAGE)).unwrap();
    }

    fn remove(self) {
        fs::remove_file(&self.path).unwrap();
    }
}

fn config(dir: &Path) -> HostLocalConfig {
    let conf = json!({"cniVersion": "1.0.0", "name": "mynet", "type": "bridge",
        "ipam": {"type": "host-local", "dataDir": dir, "subnet": "10.9.0.0/16"}});
    HostLocalConfig::load(conf.to_string().as_bytes(), "").unwrap()
}

/// The store's bucket of an owner (FNV-1a of `<id>\r\n<ifname>`, top byte).
fn bucket_of(id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{id}\r\neth0").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:02x}", h >> 56)
}

/// A container id whose bucket is not in `taken`.
fn id_in_new_bucket(prefix: &str, taken: &BTreeSet<String>) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|id| !taken.contains(&bucket_of(id)))
        .unwrap()
}

fn index_dir(data: &Path) -> PathBuf {
    data.join(".cni-ipam-index/mynet")
}

fn buckets(data: &Path) -> BTreeSet<String> {
    fs::read_dir(index_dir(data))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.len() == 2)
        .collect()
}

/// No empty, torn or temporary file anywhere in the store.
fn assert_store_clean(data: &Path, when: &str) {
    let index = index_dir(data);
    for entry in fs::read_dir(&index).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name == "free" {
            continue;
        }
        assert!(
            !cni_files::atomic::is_temp_name(&name),
            "{when}: temp {name}"
        );
        let text = fs::read_to_string(entry.path()).unwrap();
        assert!(!text.is_empty(), "{when}: empty index file {name}");
        assert!(text.ends_with('\n'), "{when}: torn {name}: {text:?}");
        if name == "state" {
            assert!(
                text.starts_with("cni-ipam index v1\nboot "),
                "{when}: {text:?}"
            );
            continue;
        }
        assert_eq!(name.len(), 2, "{when}: unexpected index file {name}");
        for line in text
            .lines()
            .skip_while(|l| l.starts_with("cni-ipam owner index"))
        {
            let (h, ip) = line.split_once(' ').unwrap_or(("", ""));
            assert!(
                h.len() == 16 && u64::from_str_radix(h, 16).is_ok() && ip.parse::<IpAddr>().is_ok(),
                "{when}: bad line {line:?} in bucket {name}"
            );
        }
    }
    for entry in fs::read_dir(data.join("mynet")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        assert!(
            !cni_files::atomic::is_temp_name(&name),
            "{when}: temp {name}"
        );
        if name.parse::<IpAddr>().is_ok() {
            assert_ne!(entry.metadata().unwrap().size(), 0, "{when}: empty {name}");
        }
    }
}

/// The reservations by owner id, read from the files (the oracle).
fn owners_on_disk(data: &Path) -> BTreeMap<String, BTreeSet<IpAddr>> {
    let mut out: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
    for entry in fs::read_dir(data.join("mynet")).unwrap() {
        let entry = entry.unwrap();
        let Ok(ip) = entry.file_name().into_string().unwrap().parse::<IpAddr>() else {
            continue;
        };
        let content = fs::read_to_string(entry.path()).unwrap();
        let id = content.split("\r\n").next().unwrap().to_string();
        out.entry(id).or_default().insert(ip);
    }
    out
}

/// What the index answers (host-local's lookup) equals the files, for
/// every owner on disk and every id in `also`.
fn assert_index_agrees(c: &HostLocalConfig, data: &Path, also: &[String]) {
    let disk = owners_on_disk(data);
    let ids: BTreeSet<&String> = disk.keys().chain(also).collect();
    for id in ids {
        let found: BTreeSet<IpAddr> = host_local::lookup(c, id, "eth0")
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(
            found,
            disk.get(id).cloned().unwrap_or_default(),
            "owner {id}"
        );
    }
}

fn assert_enospc(e: &cni_ipam::Error, when: &str) {
    let text = e.to_string();
    assert!(
        text.contains("No space left on device"),
        "{when}: not ENOSPC: {text}"
    );
}

#[test]
fn full_disk_leaves_no_empty_or_torn_index_file() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let fs_ = Tmpfs::mount("256k");
    let data = fs_.path().to_path_buf();
    let c = config(&data);
    let mut attempted: Vec<String> = Vec::new();
    for i in 0..4 {
        let id = format!("base-{i}");
        host_local::add(&c, &id, "eth0").unwrap();
        attempted.push(id);
    }
    assert_store_clean(&data, "setup");
    let filler = Filler::fill(&data);

    // A bucket that does not exist yet: the ADD fails and no bucket file
    // appears (an append would have created it empty).
    let id = id_in_new_bucket("newbucket", &buckets(&data));
    let e = host_local::add(&c, &id, "eth0").unwrap_err();
    assert_enospc(&e, "new bucket");
    assert!(!index_dir(&data).join(bucket_of(&id)).exists(), "{id}");
    assert_store_clean(&data, "new bucket");
    attempted.push(id);

    // An append that needs a new page: the bucket is truncated back to its
    // old bytes, and the state removed so that the index is rebuilt.
    let id = id_in_new_bucket("append", &BTreeSet::new());
    let bucket = index_dir(&data).join(bucket_of(&id));
    filler.leave_free(1);
    let mut padded = fs::read(&bucket).unwrap_or_else(|_| b"cni-ipam owner index v1\n".to_vec());
    let pad = PAGE as usize - padded.len() - 1;
    padded.extend(std::iter::repeat_n(b'x', pad));
    padded.push(b'\n');
    fs::write(&bucket, &padded).unwrap();
    // A line the store skips (damaged) but keeps: the file fills its page.
    filler.leave_free(0);
    let e = host_local::add(&c, &id, "eth0").unwrap_err();
    assert_enospc(&e, "append");
    assert_eq!(fs::read(&bucket).unwrap(), padded, "bucket not restored");
    assert!(!index_dir(&data).join("state").exists(), "state kept");
    attempted.push(id);
    // Trim the padding back to a valid bucket for the invariant checks.
    let valid: Vec<u8> = String::from_utf8(padded)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('x'))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .into_bytes();
    fs::write(&bucket, valid).unwrap();
    assert_store_clean(&data, "append");

    // The state written in place on a full disk (after a rebuild): removed,
    // never left empty or torn. DEL still works (it falls back to a scan).
    let _ = fs::remove_file(index_dir(&data).join("state"));
    filler.leave_free(0);
    let e = host_local::add(&c, "state-probe", "eth0").unwrap_err();
    assert_enospc(&e, "state");
    assert_store_clean(&data, "state");
    attempted.push("state-probe".into());
    host_local::del(&c, "base-0", "eth0").unwrap();
    assert_store_clean(&data, "del on full disk");

    // Every amount of free space from 0 to 6 pages: whatever step fails,
    // nothing is left empty or torn, and the index agrees with the files.
    for free in 0..=6 {
        for j in 0..3 {
            filler.leave_free(free);
            let id = id_in_new_bucket(&format!("sweep{free}.{j}"), &buckets(&data));
            let result = host_local::add(&c, &id, "eth0");
            let when = format!("{free} pages free, {id}");
            if let Err(e) = &result {
                assert_enospc(e, &when);
            }
            assert_store_clean(&data, &when);
            attempted.push(id);
        }
    }

    // Space back: the store works and its index is consistent.
    filler.remove();
    assert_index_agrees(&c, &data, &attempted);
    for i in 0..8 {
        let id = format!("after-{i}");
        host_local::add(&c, &id, "eth0").unwrap();
        attempted.push(id);
    }
    // Duplicates are still caught through the index.
    host_local::add(&c, "after-3", "eth0").unwrap_err();
    assert_store_clean(&data, "after");
    assert_index_agrees(&c, &data, &attempted);
    for id in &attempted {
        host_local::del(&c, id, "eth0").unwrap();
    }
    assert!(owners_on_disk(&data).is_empty());
    assert_index_agrees(&c, &data, &attempted);
}
