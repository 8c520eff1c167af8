//! A small synchronous rtnetlink socket: one request, its replies, its ack.
//!
//! A netlink socket stays bound to the namespace it was created in, so one
//! [`Socket`] serves one namespace from any thread; a mutex keeps request
//! and reply pairs from interleaving.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket as NlSocket, SocketAddr};
use nix::errno::Errno;

/// How many times a dump is retried when the kernel flags it inconsistent,
/// as Go's `pkg/netlinksafe` does.
pub(crate) const DUMP_ATTEMPTS: u32 = 5;

const RECV_BUF: usize = 64 * 1024;
// Flags of an NLMSG_ERROR reply (linux/netlink.h).
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Why a request failed, before the caller names the operation.
#[derive(Debug)]
pub(crate) enum NlError {
    /// The kernel answered with a negative errno.
    Kernel {
        errno: Errno,
        message: Option<String>,
    },
    /// The socket failed.
    Io(io::Error),
    /// A reply could not be decoded.
    Decode(String),
    /// Every dump attempt came back interrupted.
    Interrupted(u32),
}

struct Inner {
    sock: NlSocket,
    seq: u32,
    buf: Vec<u8>,
}

/// A blocking rtnetlink socket bound to the namespace it was opened in.
pub(crate) struct Socket {
    inner: Mutex<Inner>,
}

impl Socket {
    /// Opens a socket in the calling thread's network namespace.
    pub(crate) fn open() -> io::Result<Socket> {
        let mut sock = NlSocket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // Errors carry only the request header back, and the kernel's
        // explanation string when it has one.
        sock.set_cap_ack(true)?;
        sock.set_ext_ack(true)?;
        Ok(Socket {
            inner: Mutex::new(Inner {
                sock,
                seq: 0,
                buf: vec![0; RECV_BUF],
            }),
        })
    }

    /// Sends `msg` with `NLM_F_REQUEST | NLM_F_ACK | flags` and returns the
    /// messages the kernel answered with before its ack.
    pub(crate) fn request(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let seq = inner.send(msg, NLM_F_REQUEST | NLM_F_ACK | flags)?;
        let mut out = Vec::new();
        inner.receive(seq, &mut out).map(|_| out)
    }

    /// Sends a message the route crate has no type for (`msg_type`, its
    /// `payload` after the netlink header) with `NLM_F_REQUEST | NLM_F_ACK
    /// | flags`, and returns the answers (whole messages, header included)
    /// before the ack.
    pub(crate) fn request_raw(
        &self,
        msg_type: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<Vec<Vec<u8>>, NlError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.seq = inner.seq.wrapping_add(1);
        let seq = inner.seq;
        let mut buf = Vec::with_capacity(16 + payload.len());
        let len = u32::try_from(16 + payload.len())
            .map_err(|_| NlError::Decode("request too long".into()))?;
        buf.extend_from_slice(&len.to_ne_bytes());
        buf.extend_from_slice(&msg_type.to_ne_bytes());
        buf.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(payload);
        inner.send_bytes(&buf)?;
        let mut out = Vec::new();
        let mut interrupted = false;
        loop {
            let n = inner.recv()?;
            let progress = walk_datagram(&inner.buf[..n], seq, &mut interrupted, |raw, _| {
                out.push(raw.to_vec());
                Ok(())
            })?;
            if progress == Progress::Finished {
                return Ok(out);
            }
        }
    }

    /// Dumps with `NLM_F_REQUEST | NLM_F_DUMP`, retrying the whole dump when
    /// the kernel marks it interrupted (`NLM_F_DUMP_INTR`).
    pub(crate) fn dump(
        &self,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..DUMP_ATTEMPTS {
            let seq = inner.send(msg.clone(), NLM_F_REQUEST | NLM_F_DUMP)?;
            let mut out = Vec::new();
            if !inner.receive(seq, &mut out)? {
                return Ok(out);
            }
        }
        Err(NlError::Interrupted(DUMP_ATTEMPTS))
    }
}

/// Serializes a request as it goes on the wire (exposed for unit tests of
/// message building).
pub(crate) fn serialize(msg: RouteNetlinkMessage, flags: u16, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    buf
}

impl Inner {
    fn send(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<u32, NlError> {
        self.seq = self.seq.wrapping_add(1);
        let buf = serialize(msg, flags, self.seq);
        self.send_bytes(&buf)?;
        Ok(self.seq)
    }

    fn send_bytes(&mut self, buf: &[u8]) -> Result<(), NlError> {
        let n = self.sock.send(buf, 0).map_err(NlError::Io)?;
        if n != buf.len() {
            return Err(NlError::Io(io::Error::new(
                io::ErrorKind::WriteZero,
                "short netlink send",
            )));
        }
        Ok(())
    }

    /// Reads replies to `seq` until the ack (request) or NLMSG_DONE (dump).
    /// Returns whether a dump was flagged interrupted.
    fn receive(&mut self, seq: u32, out: &mut Vec<RouteNetlinkMessage>) -> Result<bool, NlError> {
        let mut interrupted = false;
        loop {
            let n = self.recv()?;
            if let Progress::Finished =
                process_datagram(&self.buf[..n], seq, out, &mut interrupted)?
            {
                return Ok(interrupted);
            }
        }
    }

    fn recv(&mut self) -> Result<usize, NlError> {
        loop {
            // SAFETY: the pointer and length describe `self.buf`, which
            // outlives the call; the kernel writes at most that many bytes.
            let r = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(NlError::Io(e));
            }
            let r = r as usize;
            if r > self.buf.len() {
                return Err(NlError::Decode(format!(
                    "datagram of {r} bytes truncated to {}",
                    self.buf.len()
                )));
            }
            return Ok(r);
        }
    }
}

/// Whether the reply to a request is complete.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// More datagrams follow.
    Pending,
    /// The ack, the error or NLMSG_DONE arrived.
    Finished,
}

/// Consumes one datagram of replies to request `seq`: collects its
/// messages into `out`, notes `NLM_F_DUMP_INTR`, and ends on the ack, an
/// error or NLMSG_DONE. Messages for other sequence numbers (late replies
/// to an abandoned request) are skipped.
pub(crate) fn process_datagram(
    data: &[u8],
    seq: u32,
    out: &mut Vec<RouteNetlinkMessage>,
    interrupted: &mut bool,
) -> Result<Progress, NlError> {
    walk_datagram(data, seq, interrupted, |raw, flags| {
        match NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw) {
            Ok(NetlinkMessage {
                payload: NetlinkPayload::InnerMessage(m),
                ..
            }) => out.push(m),
            Ok(_) => {}
            // One object the parser does not understand (a newer kernel's
            // attribute layout) must not fail a whole dump.
            Err(e) if flags & NLM_F_MULTIPART != 0 => {
                tracing::warn!("skipping undecodable netlink message in dump: {e}");
            }
            Err(e) => return Err(NlError::Decode(e.to_string())),
        }
        Ok(())
    })
}

// Control message types (linux/netlink.h).
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;

/// The datagram walk under [`process_datagram`]: framing, sequence
/// numbers, `NLM_F_DUMP_INTR`, the ack, errors and NLMSG_DONE; every other
/// message of request `seq` goes to `on_message` with its header's flags.
fn walk_datagram(
    data: &[u8],
    seq: u32,
    interrupted: &mut bool,
    mut on_message: impl FnMut(&[u8], u16) -> Result<(), NlError>,
) -> Result<Progress, NlError> {
    let mut off = 0;
    while off < data.len() {
        let rest = &data[off..];
        let nl = NetlinkBuffer::new_checked(rest).map_err(|e| NlError::Decode(e.to_string()))?;
        let len = nl.length() as usize;
        if len < 16 || len > rest.len() {
            return Err(NlError::Decode(format!(
                "message length {len} out of range"
            )));
        }
        let raw = &rest[..len];
        off += (len + 3) & !3;
        if nl.sequence_number() != seq {
            continue;
        }
        let flags = nl.flags();
        if flags & NLM_F_DUMP_INTR != 0 {
            *interrupted = true;
        }
        let code = || {
            raw.get(16..20)
                .and_then(|b| b.try_into().ok())
                .map(i32::from_ne_bytes)
        };
        match nl.message_type() {
            NLMSG_ERROR => {
                let code = code()
                    .ok_or_else(|| NlError::Decode(format!("error message of {len} bytes")))?;
                if code == 0 {
                    return Ok(Progress::Finished);
                }
                return Err(NlError::Kernel {
                    errno: Errno::from_raw(code.saturating_neg()),
                    message: ext_ack_message(raw, flags),
                });
            }
            NLMSG_DONE => {
                if let Some(code) = code().filter(|c| *c < 0) {
                    return Err(NlError::Kernel {
                        errno: Errno::from_raw(code.saturating_neg()),
                        message: None,
                    });
                }
                return Ok(Progress::Finished);
            }
            NLMSG_NOOP | NLMSG_OVERRUN => {}
            _ => on_message(raw, flags)?,
        }
    }
    Ok(Progress::Pending)
}

/// Extracts `NLMSGERR_ATTR_MSG` from an NLMSG_ERROR reply.
fn ext_ack_message(raw: &[u8], flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // nlmsghdr (16) + error code (4) + the echoed request header.
    let echoed = raw.get(20..36)?;
    let echoed_len = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        u32::from_ne_bytes(echoed[..4].try_into().ok()?) as usize
    };
    let tlvs = raw.get(20 + ((echoed_len + 3) & !3)..)?;
    let value = attribute(tlvs, NLMSGERR_ATTR_MSG)?;
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    Some(String::from_utf8_lossy(&value[..end]).into_owned())
}

/// The value of the first attribute of type `kind` among the netlink
/// attributes `attrs` (the nested flag ignored); `None` when there is none
/// or the attributes are malformed.
pub(crate) fn attribute(mut attrs: &[u8], kind: u16) -> Option<&[u8]> {
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let k = u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3fff;
        if len < 4 || len > attrs.len() {
            return None;
        }
        if k == kind {
            return Some(&attrs[4..len]);
        }
        attrs = attrs.get((len + 3) & !3..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_ack_message_is_extracted() {
        let mut raw = Vec::new();
        let msg = b"Unknown device type\0";
        let tlv_len = 4 + msg.len();
        let total = 16 + 4 + 16 + ((tlv_len + 3) & !3);
        raw.extend_from_slice(&(total as u32).to_ne_bytes());
        raw.extend_from_slice(&2u16.to_ne_bytes());
        raw.extend_from_slice(&(NLM_F_CAPPED | NLM_F_ACK_TLVS).to_ne_bytes());
        raw.extend_from_slice(&[0; 8]);
        raw.extend_from_slice(&(-95i32).to_ne_bytes());
        raw.extend_from_slice(&[0; 16]);
        raw.extend_from_slice(&(tlv_len as u16).to_ne_bytes());
        raw.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        raw.extend_from_slice(msg);
        raw.resize(total, 0);
        assert_eq!(
            ext_ack_message(&raw, NLM_F_CAPPED | NLM_F_ACK_TLVS).as_deref(),
            Some("Unknown device type")
        );
        assert_eq!(ext_ack_message(&raw, NLM_F_CAPPED), None);
    }

    /// An NLMSG_ERROR (code 0 = ack) or NLMSG_DONE message for `seq`.
    fn control(kind: u16, seq: u32, code: i32) -> Vec<u8> {
        let len = if kind == 2 { 16 + 4 + 16 } else { 16 + 4 };
        let mut b = Vec::new();
        b.extend_from_slice(&(len as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(
            &(if kind == 3 {
                NLM_F_MULTIPART
            } else {
                NLM_F_CAPPED
            })
            .to_ne_bytes(),
        );
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&code.to_ne_bytes());
        b.resize(len, 0);
        b
    }

    fn link(seq: u32, flags: u16, name: &str) -> Vec<u8> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.into()));
        serialize(RouteNetlinkMessage::NewLink(m), flags, seq)
    }

    use netlink_packet_route::link::{LinkAttribute, LinkMessage};

    #[test]
    fn dump_collects_messages_and_notices_interruption() {
        let mut dgram = link(9, NLM_F_MULTIPART, "lo");
        dgram.extend(link(9, NLM_F_MULTIPART | NLM_F_DUMP_INTR, "eth0"));
        let (mut out, mut intr) = (Vec::new(), false);
        assert_eq!(
            process_datagram(&dgram, 9, &mut out, &mut intr).unwrap(),
            Progress::Pending
        );
        assert_eq!(out.len(), 2);
        assert!(intr);
        let done = control(3, 9, 0);
        assert_eq!(
            process_datagram(&done, 9, &mut out, &mut intr).unwrap(),
            Progress::Finished
        );
    }

    #[test]
    fn stale_replies_are_skipped_and_the_ack_finishes() {
        let mut dgram = link(3, 0, "old");
        dgram.extend(control(2, 3, -17));
        dgram.extend(control(2, 4, 0));
        let (mut out, mut intr) = (Vec::new(), false);
        assert_eq!(
            process_datagram(&dgram, 4, &mut out, &mut intr).unwrap(),
            Progress::Finished
        );
        assert!(out.is_empty());
        assert!(!intr);
    }

    #[test]
    fn kernel_errors_map_to_errno() {
        for (code, errno) in [
            (-17, Errno::EEXIST),
            (-19, Errno::ENODEV),
            (-95, Errno::EOPNOTSUPP),
        ] {
            let (mut out, mut intr) = (Vec::new(), false);
            match process_datagram(&control(2, 1, code), 1, &mut out, &mut intr) {
                Err(NlError::Kernel { errno: e, message }) => {
                    assert_eq!(e, errno);
                    assert_eq!(message, None);
                }
                other => panic!("{other:?}"),
            }
        }
        // A dump that fails reports the errno carried by NLMSG_DONE.
        let (mut out, mut intr) = (Vec::new(), false);
        assert!(matches!(
            process_datagram(&control(3, 1, -16), 1, &mut out, &mut intr),
            Err(NlError::Kernel {
                errno: Errno::EBUSY,
                ..
            })
        ));
        // Garbage is a decode error, not a panic.
        assert!(matches!(
            process_datagram(&[0xff; 7], 1, &mut out, &mut intr),
            Err(NlError::Decode(_))
        ));
        // An undecodable object inside a dump is skipped, elsewhere it fails.
        let mut odd = link(1, NLM_F_MULTIPART, "x");
        odd[16..32].fill(0xff);
        odd[32..].fill(0xff);
        out.clear();
        assert_eq!(
            process_datagram(&odd, 1, &mut out, &mut intr).unwrap(),
            Progress::Pending
        );
        assert!(out.is_empty());
        odd[6] = 0; // not multipart: a reply to a plain request
        assert!(matches!(
            process_datagram(&odd, 1, &mut out, &mut intr),
            Err(NlError::Decode(_))
        ));
        let mut bad = control(2, 1, 0);
        bad[0] = 200;
        assert!(matches!(
            process_datagram(&bad, 1, &mut out, &mut intr),
            Err(NlError::Decode(_))
        ));
    }
}
