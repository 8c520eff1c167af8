//! The client's two sockets: a packet socket on the pod interface for the
//! exchanges that happen before the interface has an address (DISCOVER,
//! REQUEST, rebinding), with a classic BPF filter so that the daemon only
//! wakes for its own transaction's replies, and a UDP socket bound to the
//! leased address for the unicast ones (renew, release).
//!
//! Both are opened by the caller on a thread inside the pod's network
//! namespace (a socket stays in the namespace it was created in).

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use super::message::{CLIENT_PORT, SERVER_PORT};

const ETH_P_IP: u16 = 0x0800;
// Classic BPF opcodes (linux/filter.h).
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_LD_H_ABS: u16 = 0x28;
const BPF_LDX_B_MSH: u16 = 0xb1;
const BPF_LD_H_IND: u16 = 0x48;
const BPF_LD_W_IND: u16 = 0x40;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;

/// The classic BPF program for a packet socket of type `SOCK_DGRAM`
/// (packets start at the IPv4 header): accept unfragmented UDP to port 68
/// whose BOOTP `xid` and `chaddr` are ours, drop everything else in the
/// kernel.
pub(crate) fn client_filter(xid: u32, chaddr: [u8; 6]) -> Vec<libc::sock_filter> {
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mac_hi = u32::from_be_bytes([chaddr[0], chaddr[1], chaddr[2], chaddr[3]]);
    let mac_lo = u32::from(u16::from_be_bytes([chaddr[4], chaddr[5]]));
    // (opcode, k, jump-to-drop when the test fails); jf counts to the last
    // instruction ("drop").
    let mut prog = vec![
        ins(BPF_LD_B_ABS, 0, 0, 9),    // IPv4 protocol
        ins(BPF_JEQ_K, 0, 0, 17),      // UDP
        ins(BPF_LD_H_ABS, 0, 0, 6),    // flags + fragment offset
        ins(BPF_JSET_K, 0, 0, 0x1fff), // a fragment: drop
        ins(BPF_LDX_B_MSH, 0, 0, 0),   // x = IPv4 header length
        ins(BPF_LD_H_IND, 0, 0, 2),    // UDP destination port
        ins(BPF_JEQ_K, 0, 0, u32::from(CLIENT_PORT)),
        ins(BPF_LD_W_IND, 0, 0, 8 + 4), // BOOTP xid
        ins(BPF_JEQ_K, 0, 0, xid),
        ins(BPF_LD_W_IND, 0, 0, 8 + 28), // chaddr[0..4]
        ins(BPF_JEQ_K, 0, 0, mac_hi),
        ins(BPF_LD_H_IND, 0, 0, 8 + 32), // chaddr[4..6]
        ins(BPF_JEQ_K, 0, 0, mac_lo),
        ins(BPF_RET_K, 0, 0, 0xffff), // accept
        ins(BPF_RET_K, 0, 0, 0),      // drop
    ];
    let drop = prog.len() - 1;
    for (i, p) in prog.iter_mut().enumerate() {
        let to_drop = drop.saturating_sub(i + 1) as u8;
        match p.code {
            BPF_JEQ_K => p.jf = to_drop,
            BPF_JSET_K => p.jt = to_drop,
            _ => {}
        }
    }
    prog
}

/// A packet socket (`AF_PACKET`, `SOCK_DGRAM`, IPv4) bound to one
/// interface, filtered to one DHCP transaction.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
}

impl PacketSocket {
    /// Opens the socket on `ifindex` for transaction `xid` of `chaddr`. The
    /// filter is attached before the socket is bound, so not one foreign
    /// packet is queued.
    pub fn open(ifindex: u32, xid: u32, chaddr: [u8; 6]) -> io::Result<PacketSocket> {
        // SAFETY: plain socket(2); the fd is owned right away.
        let raw =
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut prog = client_filter(xid, chaddr);
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_mut_ptr(),
        };
        // SAFETY: fprog points into `prog`, alive for the call.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                std::ptr::addr_of!(fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let sll = sockaddr_ll(ifindex, None);
        // SAFETY: sll is a valid sockaddr_ll of the stated size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::addr_of!(sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket { fd, ifindex })
    }

    /// Sends an IPv4 packet to the Ethernet broadcast address.
    pub fn send_broadcast(&self, packet: &[u8]) -> io::Result<()> {
        let sll = sockaddr_ll(self.ifindex, Some([0xff; 6]));
        // SAFETY: buffer and address are valid for the call.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                std::ptr::addr_of!(sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The next packet the filter let through, or `None` at `deadline`.
    pub fn recv_until(&self, deadline: Instant) -> io::Result<Option<Vec<u8>>> {
        if !wait_readable(self.fd.as_raw_fd(), deadline)? {
            return Ok(None);
        }
        let mut buf = vec![0u8; 2048];
        // SAFETY: buf is valid for its length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Some(Vec::new())),
                _ => Err(e),
            };
        }
        buf.truncate(n as usize);
        Ok(Some(buf))
    }
}

fn sockaddr_ll(ifindex: u32, dst: Option<[u8; 6]>) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_IP.to_be();
    sll.sll_ifindex = ifindex as i32;
    if let Some(mac) = dst {
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&mac);
    }
    sll
}

/// Waits until `fd` is readable; false at `deadline`.
fn wait_readable(fd: i32, deadline: Instant) -> io::Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if rc > 0 {
            return Ok(true);
        }
    }
}

/// A UDP socket bound to `addr`:68 (with `SO_REUSEADDR`, so that a DHCP
/// client inside the pod holding `0.0.0.0:68` does not block it) for the
/// unicast exchanges with the server at port 67. Fails when `addr` is not
/// on an interface of the namespace.
pub fn bound_udp(addr: Ipv4Addr) -> io::Result<UdpSocket> {
    use nix::sys::socket::{
        bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(addr, CLIENT_PORT)),
    )?;
    Ok(UdpSocket::from(fd))
}

/// The server's DHCP address for a unicast send.
pub(crate) fn server_addr(server: Ipv4Addr) -> SocketAddrV4 {
    SocketAddrV4::new(server, SERVER_PORT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::message::{Message, MessageType};
    use std::time::Duration;

    // The kernel runs the filter: in a fresh namespace, a packet socket on
    // `lo` for transaction 0x1234 gets the BOOTP reply to port 68 with that
    // xid and chaddr, never one with another xid, another chaddr or
    // another port (recv_until does no filtering of its own).
    #[test]
    fn kernel_filter_passes_only_our_transaction() {
        if !cni_testkit::premise::require_root() {
            return;
        }
        let mac = [2, 0, 0, 0, 0, 7];
        let got = std::thread::spawn(move || {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare");
            let up = std::process::Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
                .expect("ip");
            assert!(up.success());
            let sock = PacketSocket::open(1, 0x1234, mac).expect("packet socket");
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
            let reply = |xid, chaddr| {
                let mut m = Message::request(MessageType::Offer, xid, chaddr);
                m.op = 2;
                m.encode()
            };
            tx.send_to(&reply(0x9999, mac), "127.0.0.1:68")
                .expect("send");
            tx.send_to(&reply(0x1234, [2, 0, 0, 0, 0, 8]), "127.0.0.1:68")
                .expect("send");
            tx.send_to(&reply(0x1234, mac), "127.0.0.1:69")
                .expect("send");
            tx.send_to(&reply(0x1234, mac), "127.0.0.1:68")
                .expect("send");
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_millis(300);
            while let Some(p) = sock.recv_until(deadline).expect("recv") {
                if !p.is_empty() {
                    got.push(p);
                }
            }
            got
        })
        .join()
        .expect("thread");
        assert!(!got.is_empty(), "our reply was filtered out");
        for p in &got {
            let (_, payload) = crate::dhcp::message::udp_payload_to_client(p).expect("to port 68");
            let m = Message::decode(payload).expect("bootp");
            assert_eq!((m.xid, m.chaddr), (0x1234, mac));
        }
    }

    #[test]
    fn filter_jumps_land_on_drop() {
        let prog = client_filter(0x0102_0304, [2, 0, 0, 0, 0, 9]);
        let drop = prog.len() - 1;
        for (i, p) in prog.iter().enumerate() {
            if p.code == BPF_JEQ_K {
                assert_eq!(i + 1 + usize::from(p.jf), drop);
            }
            if p.code == BPF_JSET_K {
                assert_eq!(i + 1 + usize::from(p.jt), drop);
            }
        }
        assert_eq!(prog[8].k, 0x0102_0304);
        assert_eq!((prog[10].k, prog[12].k), (0x0200_0000, 9));
    }
}
