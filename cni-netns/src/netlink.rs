//! Netlink, once for the crate: the framing (nlmsghdr and nlattr walks,
//! an attribute builder) and a synchronous socket whose one receive loop
//! serves rtnetlink ([`Socket`], under [`crate::Handle`]), ctnetlink
//! (`conntrack`) and nf_tables (`firewall::native`), all described in
//! `linux/netlink.h`.
//!
//! A netlink socket stays bound to the namespace it was created in (open
//! one elsewhere through `netns::run_at`), so one [`Socket`] serves one
//! namespace from any thread; a mutex keeps request and reply pairs from
//! interleaving.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::Duration;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket as NlSocket, SocketAddr};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

/// How many times a dump is retried when the kernel flags it inconsistent,
/// as Go's `pkg/netlinksafe` does.
pub const DUMP_ATTEMPTS: u32 = 5;

pub const NLMSG_HDRLEN: usize = 16;
// Control message types.
const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
// Request and reply flags.
pub const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_MULTIPART: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;
// Flags of an NLMSG_ERROR reply.
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;
pub const NLA_F_NESTED: u16 = 0x8000;
pub const NLA_TYPE_MASK: u16 = 0x3fff;

const RECV_BUF: usize = 64 * 1024;

/// How long a socket waits for the next datagram of a reply. The kernel
/// answers a request while handling its `send` (a dump's next part while
/// handling the previous `recv`), so the wait is for a reply that was
/// lost, not for work: generous on a loaded node, and still bounded so a
/// lost reply cannot hold a handle's lock (and the plugin) forever.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request failed, before the caller names the operation.
#[derive(Debug)]
pub enum NlError {
    /// The kernel answered with a negative errno: `errno` is the positive
    /// number as sent, kernel-internal codes (`ENOTSUPP`, 524) included.
    Kernel { errno: i32, message: Option<String> },
    /// The socket failed.
    Io(io::Error),
    /// A reply could not be decoded.
    Decode(String),
    /// Every dump attempt came back interrupted.
    Interrupted(u32),
    /// No reply came within the socket's receive timeout.
    Timeout(Duration),
}

impl NlError {
    /// True when the kernel answered with `errno`.
    pub fn is_errno(&self, errno: Errno) -> bool {
        matches!(self, NlError::Kernel { errno: e, .. } if *e == errno as i32)
    }
}

impl From<NlError> for io::Error {
    /// For the sockets whose callers speak `io::Error` (conntrack,
    /// nf_tables): the kernel's errno as the OS error.
    fn from(e: NlError) -> io::Error {
        match e {
            NlError::Kernel { errno, .. } => io::Error::from_raw_os_error(errno),
            NlError::Io(e) => e,
            NlError::Decode(detail) => io::Error::new(io::ErrorKind::InvalidData, detail),
            NlError::Interrupted(_) => io::Error::from_raw_os_error(libc::EINTR),
            NlError::Timeout(after) => io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no netlink reply within {after:?}"),
            ),
        }
    }
}

// ---- framing -----------------------------------------------------------

pub fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// An nlmsghdr for a message of `len` bytes in all.
pub fn header(len: usize, ty: u16, flags: u16, seq: u32) -> [u8; NLMSG_HDRLEN] {
    let mut h = [0u8; NLMSG_HDRLEN];
    h[..4].copy_from_slice(&(len as u32).to_ne_bytes());
    h[4..6].copy_from_slice(&ty.to_ne_bytes());
    h[6..8].copy_from_slice(&flags.to_ne_bytes());
    h[8..12].copy_from_slice(&seq.to_ne_bytes());
    h
}

/// One message of a datagram, as [`messages`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// `nlmsg_type`.
    pub ty: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// The whole message, header included, padding excluded.
    pub raw: &'a [u8],
}

impl<'a> Message<'a> {
    /// What follows the header.
    pub fn body(&self) -> &'a [u8] {
        &self.raw[NLMSG_HDRLEN..]
    }

    /// The (zero or negative) code of an NLMSG_ERROR or NLMSG_DONE.
    fn code(&self) -> Option<i32> {
        self.body()
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_ne_bytes)
    }
}

/// The one message walk: the messages of a datagram in order; a malformed
/// length is an error item, after which the walk ends.
pub fn messages(mut data: &[u8]) -> impl Iterator<Item = Result<Message<'_>, NlError>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let len = data
            .get(..4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let Some(len) = len.filter(|&l| l >= NLMSG_HDRLEN && l <= data.len()) else {
            let e = NlError::Decode(format!(
                "netlink message length out of range in {} bytes",
                data.len()
            ));
            data = &[];
            return Some(Err(e));
        };
        let raw = &data[..len];
        data = &data[align4(len).min(data.len())..];
        Some(Ok(Message {
            ty: u16::from_ne_bytes([raw[4], raw[5]]),
            flags: u16::from_ne_bytes([raw[6], raw[7]]),
            seq: u32::from_ne_bytes([raw[8], raw[9], raw[10], raw[11]]),
            raw,
        }))
    })
}

/// The one attribute walk: (type with its flags, payload, the raw
/// attribute with its header). Ends at the end of `buf` or at the first
/// malformed attribute (a length below 4 or past the end): what the kernel
/// sends is well formed, and a reader that misses an attribute it needs
/// reports that itself.
pub fn attrs_full(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8], &[u8])> {
    std::iter::from_fn(move || {
        let head = buf.get(..4)?;
        let len = u16::from_ne_bytes([head[0], head[1]]) as usize;
        let ty = u16::from_ne_bytes([head[2], head[3]]);
        if len < 4 || len > buf.len() {
            buf = &[];
            return None;
        }
        let raw = &buf[..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some((ty, &raw[4..], raw))
    })
}

/// The attributes of `buf`: (type without flags, payload).
pub fn attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    attrs_full(buf).map(|(ty, payload, _)| (ty & NLA_TYPE_MASK, payload))
}

/// The payload of the first attribute of type `ty` (flags ignored).
pub fn attr(buf: &[u8], ty: u16) -> Option<&[u8]> {
    attrs(buf).find(|(t, _)| *t == ty).map(|(_, p)| p)
}

/// A NUL-terminated string attribute payload.
pub fn attr_str(payload: &[u8]) -> String {
    let end = payload
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(payload.len());
    String::from_utf8_lossy(&payload[..end]).into_owned()
}

/// A netlink attribute stream under construction.
#[derive(Debug, Default, Clone)]
pub struct Attrs(pub Vec<u8>);

impl Attrs {
    pub fn new() -> Self {
        Attrs(Vec::new())
    }

    pub fn bytes(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        let len = 4 + payload.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.0.resize(align4(self.0.len()), 0);
        self
    }

    pub fn str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.bytes(ty, &v)
    }

    pub fn u32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.bytes(ty, &v.to_be_bytes())
    }

    pub fn nested(&mut self, ty: u16, inner: &Attrs) -> &mut Self {
        self.bytes(ty | NLA_F_NESTED, &inner.0)
    }
}

/// Whether the reply to a request is complete.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// More datagrams follow.
    Pending,
    /// The ack, the error or NLMSG_DONE arrived.
    Finished,
}

/// The reply walk of one datagram for request `seq`: framing, sequence
/// numbers (messages for others, late replies to an abandoned request, are
/// skipped), `NLM_F_DUMP_INTR` (noted in `interrupted`), the ack, errors
/// and NLMSG_DONE; every other message goes to `on_message`.
pub fn walk_datagram(
    data: &[u8],
    seq: u32,
    interrupted: &mut bool,
    mut on_message: impl FnMut(Message<'_>) -> Result<(), NlError>,
) -> Result<Progress, NlError> {
    for m in messages(data) {
        let m = m?;
        if m.seq != seq {
            continue;
        }
        if m.flags & NLM_F_DUMP_INTR != 0 {
            *interrupted = true;
        }
        match m.ty {
            NLMSG_ERROR => {
                let code = m.code().ok_or_else(|| {
                    NlError::Decode(format!("error message of {} bytes", m.raw.len()))
                })?;
                if code == 0 {
                    return Ok(Progress::Finished);
                }
                return Err(NlError::Kernel {
                    errno: code.saturating_neg(),
                    message: ext_ack_message(m.raw, m.flags),
                });
            }
            NLMSG_DONE => {
                if let Some(code) = m.code().filter(|c| *c < 0) {
                    return Err(NlError::Kernel {
                        errno: code.saturating_neg(),
                        message: None,
                    });
                }
                return Ok(Progress::Finished);
            }
            NLMSG_NOOP | NLMSG_OVERRUN => {}
            _ => on_message(m)?,
        }
    }
    Ok(Progress::Pending)
}

/// The errno of an NLMSG_ERROR that is not an ack (batch replies, read
/// one by one by `firewall::native`).
pub fn refusal(m: &Message<'_>) -> Result<Option<i32>, NlError> {
    match m.code() {
        Some(0) => Ok(None),
        Some(code) => Ok(Some(code.saturating_neg())),
        None => Err(NlError::Decode(format!(
            "error message of {} bytes",
            m.raw.len()
        ))),
    }
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
    let tlvs = raw.get(20 + align4(echoed_len)..)?;
    attr(tlvs, NLMSGERR_ATTR_MSG).map(attr_str)
}

// ---- the socket --------------------------------------------------------

/// A blocking netlink socket of any protocol, bound to the namespace it
/// was opened in: sequence numbers, sends, and the one receive loop.
#[derive(Debug)]
pub struct Conn {
    sock: NlSocket,
    seq: u32,
    buf: Vec<u8>,
    timeout: Duration,
}

impl Conn {
    /// Opens a `protocol` socket in the calling thread's namespace, reading
    /// datagrams of up to `recv_buf` bytes (a larger one is an error, not
    /// a silent truncation) and waiting at most [`REPLY_TIMEOUT`] for each.
    pub fn open(protocol: isize, recv_buf: usize) -> io::Result<Conn> {
        let mut sock = NlSocket::new(protocol)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Conn::over(sock, recv_buf)
    }

    /// A connection over `sock`, an open and connected socket.
    fn over(sock: NlSocket, recv_buf: usize) -> io::Result<Conn> {
        let mut conn = Conn {
            sock,
            seq: 0,
            buf: vec![0; recv_buf],
            timeout: REPLY_TIMEOUT,
        };
        conn.set_reply_timeout(REPLY_TIMEOUT)?;
        Ok(conn)
    }

    /// Waits at most `timeout` for each datagram of a reply (`SO_RCVTIMEO`).
    pub fn set_reply_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let tv = TimeVal::new(
            libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            libc::suseconds_t::from(timeout.subsec_micros()),
        );
        setsockopt(&self.sock, sockopt::ReceiveTimeout, &tv)?;
        self.timeout = timeout;
        Ok(())
    }

    /// The socket, for options.
    pub fn socket(&self) -> &NlSocket {
        &self.sock
    }

    /// Starts the sequence numbers after `seq`.
    pub fn set_seq(&mut self, seq: u32) {
        self.seq = seq;
    }

    /// The next sequence number.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// The last sequence number handed out.
    pub fn last_seq(&self) -> u32 {
        self.seq
    }

    /// Sends one datagram (one message or a batch).
    pub fn send(&mut self, buf: &[u8]) -> Result<(), NlError> {
        let n = self.sock.send(buf, 0).map_err(NlError::Io)?;
        if n != buf.len() {
            return Err(NlError::Io(io::Error::new(
                io::ErrorKind::WriteZero,
                "short netlink send",
            )));
        }
        Ok(())
    }

    /// Reads replies to request `seq` until its ack, error or NLMSG_DONE
    /// (see [`walk_datagram`]); returns whether a dump was flagged
    /// interrupted.
    pub fn receive(
        &mut self,
        seq: u32,
        mut on_message: impl FnMut(Message<'_>) -> Result<(), NlError>,
    ) -> Result<bool, NlError> {
        let mut interrupted = false;
        loop {
            let data = self.recv()?;
            if walk_datagram(data, seq, &mut interrupted, &mut on_message)? == Progress::Finished {
                return Ok(interrupted);
            }
        }
    }

    /// Reads one datagram.
    pub fn recv(&mut self) -> Result<&[u8], NlError> {
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
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    // What SO_RCVTIMEO ends a wait with.
                    io::ErrorKind::WouldBlock => return Err(NlError::Timeout(self.timeout)),
                    _ => return Err(NlError::Io(e)),
                }
            }
            let r = r as usize;
            if r > self.buf.len() {
                return Err(NlError::Decode(format!(
                    "datagram of {r} bytes truncated to {}",
                    self.buf.len()
                )));
            }
            return Ok(&self.buf[..r]);
        }
    }
}

/// A blocking rtnetlink socket bound to the namespace it was opened in.
pub struct Socket {
    conn: Mutex<Conn>,
}

impl Socket {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Socket> {
        let conn = Conn::open(NETLINK_ROUTE, RECV_BUF)?;
        // Errors carry only the request header back, and the kernel's
        // explanation string when it has one.
        conn.sock.set_cap_ack(true)?;
        conn.sock.set_ext_ack(true)?;
        Ok(Socket {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `msg` with `NLM_F_REQUEST | NLM_F_ACK | flags` and returns the
    /// messages the kernel answered with before its ack.
    pub fn request(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        let mut conn = self.conn();
        let seq = conn.next_seq();
        conn.send(&serialize(msg, NLM_F_REQUEST | NLM_F_ACK | flags, seq))?;
        let mut out = Vec::new();
        conn.receive(seq, |m| decode_into(m, &mut out)).map(|_| out)
    }

    /// Sends a message the route crate has no type for (`msg_type`, its
    /// `payload` after the netlink header) with `NLM_F_REQUEST | NLM_F_ACK
    /// | flags`, and returns the answers before the ack: each one's type
    /// and what follows its header.
    pub fn request_raw(
        &self,
        msg_type: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<Vec<(u16, Vec<u8>)>, NlError> {
        let mut conn = self.conn();
        let seq = conn.next_seq();
        let len = NLMSG_HDRLEN + payload.len();
        if u32::try_from(len).is_err() {
            return Err(NlError::Decode("request too long".into()));
        }
        let mut buf = Vec::with_capacity(len);
        buf.extend_from_slice(&header(
            len,
            msg_type,
            NLM_F_REQUEST | NLM_F_ACK | flags,
            seq,
        ));
        buf.extend_from_slice(payload);
        conn.send(&buf)?;
        let mut out = Vec::new();
        conn.receive(seq, |m| {
            out.push((m.ty, m.body().to_vec()));
            Ok(())
        })
        .map(|_| out)
    }

    /// Dumps with `NLM_F_REQUEST | NLM_F_DUMP`, retrying the whole dump when
    /// the kernel marks it interrupted (`NLM_F_DUMP_INTR`).
    pub fn dump(&self, msg: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        let mut conn = self.conn();
        for _ in 0..DUMP_ATTEMPTS {
            let seq = conn.next_seq();
            conn.send(&serialize(msg.clone(), NLM_F_REQUEST | NLM_F_DUMP, seq))?;
            let mut out = Vec::new();
            if !conn.receive(seq, |m| decode_into(m, &mut out))? {
                return Ok(out);
            }
        }
        Err(NlError::Interrupted(DUMP_ATTEMPTS))
    }
}

/// Serializes a request as it goes on the wire (exposed for unit tests of
/// message building).
pub fn serialize(msg: RouteNetlinkMessage, flags: u16, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    buf
}

/// Decodes one rtnetlink reply into `out`.
fn decode_into(m: Message<'_>, out: &mut Vec<RouteNetlinkMessage>) -> Result<(), NlError> {
    match NetlinkMessage::<RouteNetlinkMessage>::deserialize(m.raw) {
        Ok(NetlinkMessage {
            payload: NetlinkPayload::InnerMessage(msg),
            ..
        }) => out.push(msg),
        Ok(_) => {}
        // One object the parser does not understand (a newer kernel's
        // attribute layout) must not fail a whole dump.
        Err(e) if m.flags & NLM_F_MULTIPART != 0 => {
            tracing::warn!("skipping undecodable netlink message in dump: {e}");
        }
        Err(e) => return Err(NlError::Decode(e.to_string())),
    }
    Ok(())
}

/// One datagram of rtnetlink replies to `seq` decoded into `out` (the
/// receive loop's step, exposed for unit tests).
#[cfg(test)]
fn process_datagram(
    data: &[u8],
    seq: u32,
    out: &mut Vec<RouteNetlinkMessage>,
    interrupted: &mut bool,
) -> Result<Progress, NlError> {
    walk_datagram(data, seq, interrupted, |m| decode_into(m, out))
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
                Err(e @ NlError::Kernel { .. }) => {
                    assert!(e.is_errno(errno), "{e:?}");
                    assert!(matches!(e, NlError::Kernel { message: None, .. }));
                }
                other => panic!("{other:?}"),
            }
        }
        // A dump that fails reports the errno carried by NLMSG_DONE.
        let (mut out, mut intr) = (Vec::new(), false);
        let e = process_datagram(&control(3, 1, -16), 1, &mut out, &mut intr).unwrap_err();
        assert!(e.is_errno(Errno::EBUSY), "{e:?}");
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

    /// A kernel-internal errno (`ENOTSUPP`, 524) reaches the caller as
    /// 524, not as the 0 of an errno nix does not know.
    #[test]
    fn kernel_internal_errnos_are_kept() {
        let (mut out, mut intr) = (Vec::new(), false);
        let e = process_datagram(&control(2, 1, -524), 1, &mut out, &mut intr).unwrap_err();
        assert_eq!(io::Error::from(e).raw_os_error(), Some(524));
    }

    /// A request whose reply never comes fails after the receive timeout
    /// instead of blocking (with the socket's lock held) forever: the
    /// "kernel" is the other end of a socket pair that never answers.
    #[test]
    fn a_request_without_reply_times_out() {
        use std::os::fd::{FromRawFd, IntoRawFd};
        let (ours, peer) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Datagram,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        // SAFETY: `ours` is an open socket whose ownership moves here.
        let sock = unsafe { NlSocket::from_raw_fd(ours.into_raw_fd()) };
        let mut conn = Conn::over(sock, RECV_BUF).unwrap();
        assert_eq!(
            nix::sys::socket::getsockopt(&conn.sock, sockopt::ReceiveTimeout).unwrap(),
            TimeVal::new(10, 0),
            "every socket gets REPLY_TIMEOUT"
        );
        conn.set_reply_timeout(Duration::from_millis(200)).unwrap();
        let socket = Socket {
            conn: Mutex::new(conn),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = socket.request(RouteNetlinkMessage::GetLink(LinkMessage::default()), 0);
            let _ = tx.send(r.map(|_| ()));
        });
        let answer = rx.recv_timeout(Duration::from_secs(10));
        drop(peer);
        match answer {
            Ok(Err(NlError::Timeout(after))) => assert_eq!(after, Duration::from_millis(200)),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[test]
    fn malformed_attributes_end_the_walk() {
        // Length 5 with 4 bytes left, length 2 (below the header), no room
        // for a header: nothing, and no panic.
        assert_eq!(attr(&[5, 0, 1, 0], 1), None);
        assert_eq!(attrs(&[2, 0, 1, 0, 0, 0]).count(), 0);
        assert_eq!(attrs(&[8, 0]).count(), 0);
        // A good attribute before a bad one is still found.
        let mut a = Attrs::new();
        a.bytes(7, &[1, 2, 3]);
        let mut buf = a.0.clone();
        buf.extend_from_slice(&[200, 0, 9, 0]);
        assert_eq!(attrs(&buf).collect::<Vec<_>>(), vec![(7, &[1u8, 2, 3][..])]);
    }

    #[test]
    fn truncated_messages_are_errors() {
        let ack = control(2, 1, 0);
        for cut in 1..ack.len() {
            let mut intr = false;
            assert!(
                walk_datagram(&ack[..cut], 1, &mut intr, |_| Ok(())).is_err(),
                "{cut} bytes"
            );
        }
        let walked: Vec<_> = messages(&ack[..10]).collect();
        assert!(matches!(walked[..], [Err(NlError::Decode(_))]));
    }

    proptest::proptest! {
        /// Any bytes: the walk yields attributes that tile a prefix of the
        /// input, each inside it, and never panics.
        #[test]
        fn attribute_walk_stays_inside_any_input(buf in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let mut at = 0;
            for (ty, payload, raw) in attrs_full(&buf) {
                let here = buf.as_ptr() as usize + at;
                proptest::prop_assert_eq!(raw.as_ptr() as usize, here);
                proptest::prop_assert!(raw.len() >= 4 && at + raw.len() <= buf.len());
                proptest::prop_assert_eq!(&raw[4..], payload);
                proptest::prop_assert_eq!(u16::from_ne_bytes([raw[2], raw[3]]), ty);
                at = (at + align4(raw.len())).min(buf.len());
            }
        }

        /// What the builder writes, the walk reads back (type without the
        /// nested flag, payload), in order.
        #[test]
        fn built_attributes_are_read_back(list in proptest::collection::vec(
            (0u16..0x3fff, proptest::bool::ANY, proptest::collection::vec(proptest::num::u8::ANY, 0..40)),
            0..12,
        )) {
            let mut a = Attrs::new();
            for (ty, nested, payload) in &list {
                a.bytes(if *nested { ty | NLA_F_NESTED } else { *ty }, payload);
            }
            let read: Vec<_> = attrs(&a.0).map(|(t, p)| (t, p.to_vec())).collect();
            let want: Vec<_> = list.iter().map(|(t, _, p)| (*t, p.clone())).collect();
            proptest::prop_assert_eq!(read, want);
        }

        /// Any datagram: the reply walk answers (a message, the end, or an
        /// error) and never panics; messages it hands on are whole.
        #[test]
        fn reply_walk_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..200), seq in 0u32..3) {
            let mut intr = false;
            let _ = walk_datagram(&data, seq, &mut intr, |m| {
                assert!(m.raw.len() >= NLMSG_HDRLEN);
                Ok(())
            });
            for m in messages(&data).flatten() {
                proptest::prop_assert!(m.raw.len() >= NLMSG_HDRLEN && m.raw.len() <= data.len());
            }
        }
    }
}
