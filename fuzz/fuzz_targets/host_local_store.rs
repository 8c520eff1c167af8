//! host-local's data directory with arbitrary files in it (reservations,
//! `last_reserved_ip.<n>`, the owner index and its state, the inode pool,
//! leftovers), then a sequence of ADD, DEL, CHECK and GC. Besides "no
//! panic", one invariant: an address handed out by ADD is never handed out
//! again while its holder has not been released.
#![no_main]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use arbitrary::Arbitrary;
use cni_ipam::host_local::{self, HostLocalConfig};
use cni_ipam::store::Owner;
use libfuzzer_sys::fuzz_target;

const NETWORK: &str = "fuzznet";

#[derive(Arbitrary, Debug)]
enum Addr {
    /// One of the configured ranges' 16 addresses.
    InRangeV4(u8),
    InRangeV6(u8),
    V4(u32),
    V6(u128),
}

impl Addr {
    fn ip(&self) -> IpAddr {
        match self {
            Addr::InRangeV4(n) => IpAddr::V4(Ipv4Addr::new(10, 9, 0, n % 16)),
            Addr::InRangeV6(n) => IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0xdb8,
                0,
                0,
                0,
                0,
                0,
                u16::from(n % 16),
            )),
            Addr::V4(n) => IpAddr::V4(Ipv4Addr::from(*n)),
            Addr::V6(n) => IpAddr::V6(Ipv6Addr::from(*n)),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FileName {
    Reservation(Addr),
    /// An address written the long way (`::ffff:10.9.0.3`, `010.9.0.3`...).
    ReservationText(String),
    LastReserved(u8),
    Lock,
    /// A reservation's temporary file, as a writer killed before its link
    /// leaves it.
    Temp(Addr, u32),
    IndexBucket(u8),
    IndexState,
    Pool(u8),
    Other(String),
}

#[derive(Arbitrary, Debug)]
struct File {
    name: FileName,
    content: Vec<u8>,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Who {
    container: u8,
    ifname: u8,
}

impl Who {
    fn owner(self) -> Owner {
        Owner::new(
            format!("c{}", self.container % 8),
            format!("eth{}", self.ifname % 2),
        )
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Add(Who),
    Del(Who),
    Check(Who),
    Lookup(Who),
    Gc(Vec<Who>),
    Status,
}

#[derive(Arbitrary, Debug)]
struct Input {
    files: Vec<File>,
    ops: Vec<Op>,
}

fn sanitize(name: &str) -> Option<String> {
    (!name.is_empty() && !name.contains('/') && name != "." && name != ".." && !name.contains('\0'))
        .then(|| name.to_string())
}

fn write_file(data_dir: &Path, file: &File) {
    let net = data_dir.join(NETWORK);
    let index = data_dir.join(".cni-ipam-index").join(NETWORK);
    let path = match &file.name {
        FileName::Reservation(a) => net.join(a.ip().to_string()),
        FileName::ReservationText(s) => match sanitize(s) {
            Some(s) => net.join(s),
            None => return,
        },
        FileName::LastReserved(n) => net.join(format!("last_reserved_ip.{}", n % 4)),
        FileName::Lock => net.join("lock"),
        FileName::Temp(a, pid) => net.join(format!(".{}.tmp.{pid}.0", a.ip())),
        FileName::IndexBucket(n) => index.join(format!("{n:02x}")),
        FileName::IndexState => index.join("state"),
        FileName::Pool(n) => index.join("free").join(format!("p{n}")),
        FileName::Other(s) => match sanitize(s) {
            Some(s) => net.join(s),
            None => return,
        },
    };
    let _ = std::fs::write(path, &file.content);
}

fuzz_target!(|input: Input| {
    // tmpfs when there is one: the target is file-system bound.
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let Ok(dir) = tempfile::Builder::new()
        .prefix("cni-fuzz-hl.")
        .tempdir_in(base)
    else {
        return;
    };
    let data_dir = dir.path();
    for d in [
        data_dir.join(NETWORK),
        data_dir.join(".cni-ipam-index").join(NETWORK).join("free"),
    ] {
        std::fs::create_dir_all(d).expect("create the data directory");
    }
    for f in input.files.iter().take(64) {
        write_file(data_dir, f);
    }
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "ipam": {
            "type": "host-local",
            "dataDir": data_dir,
            "ranges": [[{"subnet": "10.9.0.0/28"}], [{"subnet": "2001:db8::/124"}]],
        },
    });
    let config =
        HostLocalConfig::load(conf.to_string().as_bytes(), "").expect("fixed config loads");

    // Who holds what, as far as this run's own ADDs know.
    let mut held: HashMap<Who, Vec<IpAddr>> = HashMap::new();
    let canon = |w: Who| Who {
        container: w.container % 8,
        ifname: w.ifname % 2,
    };
    for op in input.ops.iter().take(32) {
        match op {
            Op::Add(w) => {
                let w = canon(*w);
                let o = w.owner();
                if let Ok(r) = host_local::add(&config, &o.container_id, &o.ifname) {
                    let ips: Vec<IpAddr> = r.ips.iter().map(|i| i.address.ip()).collect();
                    for (other, theirs) in &held {
                        if *other != w {
                            for ip in &ips {
                                assert!(
                                    !theirs.contains(ip),
                                    "{ip} given to {w:?} while {other:?} holds it"
                                );
                            }
                        }
                    }
                    held.entry(w).or_default().extend(ips);
                    host_local::check(&config, &o.container_id, &o.ifname)
                        .expect("CHECK right after ADD");
                }
            }
            Op::Del(w) => {
                let w = canon(*w);
                let o = w.owner();
                if host_local::del(&config, &o.container_id, &o.ifname).is_ok() {
                    held.remove(&w);
                }
            }
            Op::Check(w) => {
                let o = canon(*w).owner();
                let _ = host_local::check(&config, &o.container_id, &o.ifname);
            }
            Op::Lookup(w) => {
                let w = canon(*w);
                let o = w.owner();
                if let Ok(ips) = host_local::lookup(&config, &o.container_id, &o.ifname) {
                    for ip in held.get(&w).into_iter().flatten() {
                        assert!(ips.contains(ip), "lookup of {w:?} misses {ip}");
                    }
                }
            }
            Op::Gc(valid) => {
                let valid: Vec<Who> = valid.iter().map(|w| canon(*w)).collect();
                let owners: Vec<Owner> = valid.iter().map(|w| w.owner()).collect();
                if host_local::gc(&config, &owners).is_ok() {
                    held.retain(|w, _| valid.contains(w));
                }
            }
            Op::Status => {
                let _ = host_local::status(&config);
            }
        }
    }
});
