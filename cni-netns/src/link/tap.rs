//! Persistent tap devices for the tap plugin: created through
//! `/dev/net/tun` (`TUNSETIFF`, `TUNSETOWNER`, `TUNSETGROUP`,
//! `TUNSETPERSIST`) from a thread inside the target namespace (a tun
//! device belongs to the namespace that opened the control device), or,
//! when an SELinux context is asked for, by `ip tuntap add` executed under
//! that context, as Go's tap plugin does, so that the device is labelled
//! with it.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::link::{Link, MacAddr};

// linux/if_tun.h: ioctls (_IOW('T', n, int)) and TUNSETIFF flags.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const TUNSETPERSIST: libc::c_ulong = 0x4004_54cb; // _IOW('T', 203, int)
const TUNSETOWNER: libc::c_ulong = 0x4004_54cc; // _IOW('T', 204, int)
const TUNSETGROUP: libc::c_ulong = 0x4004_54ce; // _IOW('T', 206, int)
/// `IFF_TAP` (linux/if_tun.h).
pub const IFF_TAP: u16 = 0x0002;
/// `IFF_NO_PI`: no packet information header (linux/if_tun.h).
pub const IFF_NO_PI: u16 = 0x1000;
/// `IFF_VNET_HDR` (linux/if_tun.h).
pub const IFF_VNET_HDR: u16 = 0x4000;
/// `IFF_MULTI_QUEUE` (linux/if_tun.h).
pub const IFF_MULTI_QUEUE: u16 = 0x0100;

const TUN_DEVICE: &str = "/dev/net/tun";

/// A persistent tap device to create with [`Handle::add_tap`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TapSpec {
    /// Name of the new device (at most 15 bytes).
    pub name: String,
    /// One queue per opener (`IFF_MULTI_QUEUE`).
    pub multi_queue: bool,
    /// Virtio-net header on every frame (`IFF_VNET_HDR`).
    pub vnet_hdr: bool,
    /// Packet information header (no `IFF_NO_PI`).
    pub packet_info: bool,
    /// The user allowed to attach to the device (`TUNSETOWNER`).
    pub owner: Option<u32>,
    /// The group allowed to attach to the device (`TUNSETGROUP`).
    pub group: Option<u32>,
    /// MTU; `None` keeps the kernel's.
    pub mtu: Option<u32>,
    /// MAC; `None` keeps the random one.
    pub mac: Option<MacAddr>,
}

impl TapSpec {
    /// The `TUNSETIFF` flags of this device.
    pub fn flags(&self) -> u16 {
        let mut f = IFF_TAP;
        if !self.packet_info {
            f |= IFF_NO_PI;
        }
        if self.vnet_hdr {
            f |= IFF_VNET_HDR;
        }
        if self.multi_queue {
            f |= IFF_MULTI_QUEUE;
        }
        f
    }

    /// The `ip tuntap add` arguments of this device (without vnet_hdr,
    /// which Go's `ip` path does not ask for either).
    pub fn ip_tuntap_args(&self) -> Vec<String> {
        let mut a: Vec<String> = ["tuntap", "add", "mode", "tap", "name", &self.name]
            .map(String::from)
            .to_vec();
        if self.multi_queue {
            a.push("multi_queue".into());
        }
        if self.packet_info {
            a.push("pi".into());
        }
        if let Some(u) = self.owner {
            a.extend(["user".into(), u.to_string()]);
        }
        if let Some(g) = self.group {
            a.extend(["group".into(), g.to_string()]);
        }
        a
    }
}

/// `struct ifreq` as `TUNSETIFF` reads it: the name, then the flags (a
/// short) at the start of the union; 40 bytes on every Linux ABI with
/// 64-bit pointers, 32 with 32-bit ones: the larger size is harmless.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: u16,
    _pad: [u8; 22],
}

impl IfReq {
    fn new(name: &str, flags: u16) -> Option<IfReq> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return None;
        }
        let mut r = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags,
            _pad: [0; 22],
        };
        r.name[..bytes.len()].copy_from_slice(bytes);
        Some(r)
    }
}

/// Creates the device from the calling thread's namespace.
fn create_persistent_tap(spec: &TapSpec) -> std::io::Result<()> {
    let Some(mut req) = IfReq::new(&spec.name, spec.flags()) else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let tun = OpenOptions::new().read(true).write(true).open(TUN_DEVICE)?;
    let fd = tun.as_raw_fd();
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: `fd` is an open /dev/net/tun descriptor owned by `tun`;
    // TUNSETIFF reads and writes a `struct ifreq`, which `req` is laid
    // out as (and is at least as large as).
    check(unsafe { libc::ioctl(fd, TUNSETIFF as _, &mut req as *mut IfReq) })?;
    if let Some(uid) = spec.owner {
        // SAFETY: TUNSETOWNER takes its argument by value.
        check(unsafe { libc::ioctl(fd, TUNSETOWNER as _, libc::c_ulong::from(uid)) })?;
    }
    if let Some(gid) = spec.group {
        // SAFETY: TUNSETGROUP takes its argument by value.
        check(unsafe { libc::ioctl(fd, TUNSETGROUP as _, libc::c_ulong::from(gid)) })?;
    }
    // SAFETY: TUNSETPERSIST takes its argument by value.
    check(unsafe { libc::ioctl(fd, TUNSETPERSIST as _, 1 as libc::c_ulong) })
    // Closing the descriptor detaches the queue; the device persists.
}

/// Sets this thread's SELinux exec context (applies to its next
/// `execve`) and runs `ip` with `args`.
fn ip_under_selinux_context(context: &str, args: &[String]) -> std::result::Result<(), String> {
    let attr = "/proc/thread-self/attr/exec";
    OpenOptions::new()
        .write(true)
        .open(attr)
        .and_then(|mut f| f.write_all(context.as_bytes()))
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                format!(
                    "set SELinux exec context {context:?} in {attr}: {e} \
                     (is SELinux enabled on this host, and the context valid?)"
                )
            } else {
                format!("set SELinux exec context {context:?} in {attr}: {e}")
            }
        })?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = crate::tool::run(Path::new("ip"), &args, None)
        .map_err(|e| format!("run ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Handle {
    /// Creates the persistent tap device `spec` in this handle's namespace
    /// and applies its MTU and MAC; returns the link.
    ///
    /// With `selinux_context`, the device is created by `ip tuntap add`
    /// executed under that SELinux context (Go's tap plugin), so that it is
    /// labelled with it; on a host without SELinux that fails with an
    /// error saying so.
    pub fn add_tap(&self, spec: &TapSpec, selinux_context: Option<&str>) -> Result<Link> {
        let span = cni_types::step_span!("link.create", link.kind = "tap", link.name = %spec.name);
        cni_types::trace::in_step(span, || {
            let op = || format!("add tap {} (flags {:#06x})", spec.name, spec.flags());
            // Always a fresh thread: the exec context must not outlive this call.
            let created = self.netns().run(|| match selinux_context {
                Some(ctx) => ip_under_selinux_context(ctx, &spec.ip_tuntap_args()),
                None => create_persistent_tap(spec).map_err(|e| format!("{TUN_DEVICE}: {e}")),
            })?;
            created.map_err(|reason| Error::Tun {
                op: op(),
                netns: self.netns_name().to_owned(),
                reason,
            })?;
            let link = self.link_by_name(&spec.name)?;
            let configured = (|| {
                if let Some(mtu) = spec.mtu {
                    self.set_mtu(link.index, mtu)?;
                }
                if let Some(mac) = spec.mac {
                    self.set_mac(link.index, mac)?;
                }
                self.link_by_index(link.index)
            })();
            if configured.is_err() {
                let _ = self.delete_link(link.index);
            }
            configured
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The ioctl numbers, recomputed from linux/if_tun.h's definitions with
    // asm-generic/ioctl.h's _IOW: dir (write = 1) << 30 | size << 16 |
    // type << 8 | nr, with type 'T' and size sizeof(int).
    const fn iow(nr: u32) -> libc::c_ulong {
        ((1u32 << 30) | (4 << 16) | ((b'T' as u32) << 8) | nr) as libc::c_ulong
    }

    #[test]
    fn ioctl_numbers_and_flags_match_if_tun_h() {
        assert_eq!(TUNSETIFF, iow(202));
        assert_eq!(TUNSETPERSIST, iow(203));
        assert_eq!(TUNSETOWNER, iow(204));
        assert_eq!(TUNSETGROUP, iow(206));
        assert_eq!(std::mem::size_of::<IfReq>(), 40); // struct ifreq, LP64
        assert_eq!(std::mem::offset_of!(IfReq, flags), libc::IFNAMSIZ);
    }

    #[test]
    fn flags_of_go_paths() {
        // Go's netlink path: TUNTAP_VNET_HDR | IFF_TAP (pi stays on) ...
        let netlink = TapSpec {
            vnet_hdr: true,
            packet_info: true,
            ..Default::default()
        };
        assert_eq!(netlink.flags(), 0x4002);
        // ... plus TUNTAP_MULTI_QUEUE_DEFAULTS (IFF_MULTI_QUEUE | IFF_NO_PI).
        let mq = TapSpec {
            vnet_hdr: true,
            multi_queue: true,
            ..Default::default()
        };
        assert_eq!(mq.flags(), 0x4002 | 0x0100 | 0x1000);
        // `ip tuntap add mode tap`: IFF_TAP | IFF_NO_PI.
        assert_eq!(TapSpec::default().flags(), 0x1002);
        let ip = TapSpec {
            name: "t0".into(),
            multi_queue: true,
            owner: Some(0),
            group: Some(7),
            ..Default::default()
        };
        assert_eq!(
            ip.ip_tuntap_args().join(" "),
            "tuntap add mode tap name t0 multi_queue user 0 group 7"
        );
    }

    #[test]
    fn ifreq_refuses_bad_names() {
        assert!(IfReq::new("", 0).is_none());
        assert!(IfReq::new("sixteen-chars-xx", 0).is_none());
        assert!(IfReq::new("a\0b", 0).is_none());
        let r = IfReq::new("tap0", IFF_TAP).unwrap();
        assert_eq!(&r.name[..5], b"tap0\0");
    }
}
