//! The DHCPv4 message (RFC 2131 BOOTP layout with RFC 2132 options) and the
//! IPv4 + UDP framing a packet socket sends and receives, built and parsed
//! by hand: the format is small and fixed, and no crate on offer is both
//! maintained and free of an async or `pnet` dependency tree.

use std::net::Ipv4Addr;

use crate::error::{Error, Result};

/// The DHCP server port.
pub(crate) const SERVER_PORT: u16 = 67;
/// The DHCP client port.
pub(crate) const CLIENT_PORT: u16 = 68;
/// BOOTP `flags` bit asking the server to broadcast its reply.
pub const FLAG_BROADCAST: u16 = 0x8000;

const MAGIC: [u8; 4] = [99, 130, 83, 99];
/// The fixed BOOTP header: op .. file, then the magic cookie.
const FIXED_LEN: usize = 236;

/// Option codes this crate reads or writes.
pub mod opt {
    /// Pad.
    pub const PAD: u8 = 0;
    /// Subnet mask.
    pub const SUBNET_MASK: u8 = 1;
    /// Routers.
    pub const ROUTERS: u8 = 3;
    /// Domain name servers.
    pub const DNS_SERVERS: u8 = 6;
    /// Host name.
    pub const HOST_NAME: u8 = 12;
    /// Domain name.
    pub const DOMAIN_NAME: u8 = 15;
    /// Classful static routes.
    pub const STATIC_ROUTES: u8 = 33;
    /// Requested IP address.
    pub const REQUESTED_IP: u8 = 50;
    /// Lease time.
    pub const LEASE_TIME: u8 = 51;
    /// DHCP message type.
    pub const MESSAGE_TYPE: u8 = 53;
    /// Server identifier.
    pub const SERVER_ID: u8 = 54;
    /// Parameter request list.
    pub const PARAMETER_REQUEST_LIST: u8 = 55;
    /// Message (text).
    pub const MESSAGE: u8 = 56;
    /// Maximum DHCP message size.
    pub const MAX_MESSAGE_SIZE: u8 = 57;
    /// Renewal (T1) time.
    pub const RENEWAL_TIME: u8 = 58;
    /// Rebinding (T2) time.
    pub const REBINDING_TIME: u8 = 59;
    /// Vendor class identifier.
    pub const VENDOR_CLASS: u8 = 60;
    /// Client identifier.
    pub const CLIENT_ID: u8 = 61;
    /// User class.
    pub const USER_CLASS: u8 = 77;
    /// Domain search list (RFC 3397).
    pub const DOMAIN_SEARCH: u8 = 119;
    /// Classless static routes (RFC 3442).
    pub const CLASSLESS_ROUTES: u8 = 121;
    /// End.
    pub const END: u8 = 255;
}

/// The DHCP message type (option 53).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageType {
    /// 1
    Discover,
    /// 2
    Offer,
    /// 3
    Request,
    /// 4
    Decline,
    /// 5
    Ack,
    /// 6
    Nak,
    /// 7
    Release,
    /// 8
    Inform,
}

impl MessageType {
    /// The option 53 value.
    pub fn code(self) -> u8 {
        match self {
            MessageType::Discover => 1,
            MessageType::Offer => 2,
            MessageType::Request => 3,
            MessageType::Decline => 4,
            MessageType::Ack => 5,
            MessageType::Nak => 6,
            MessageType::Release => 7,
            MessageType::Inform => 8,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => MessageType::Discover,
            2 => MessageType::Offer,
            3 => MessageType::Request,
            4 => MessageType::Decline,
            5 => MessageType::Ack,
            6 => MessageType::Nak,
            7 => MessageType::Release,
            8 => MessageType::Inform,
            _ => return None,
        })
    }
}

/// One DHCP message: the BOOTP header fields a client uses and the options
/// in wire order (long options split over several instances are joined on
/// decode, as RFC 3396 asks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// 1 request, 2 reply.
    pub op: u8,
    /// Transaction id.
    pub xid: u32,
    /// Seconds since the client began.
    pub secs: u16,
    /// Flags ([`FLAG_BROADCAST`]).
    pub flags: u16,
    /// Client address (renew, rebind, release).
    pub ciaddr: Ipv4Addr,
    /// "Your" address: what the server offers.
    pub yiaddr: Ipv4Addr,
    /// Next server.
    pub siaddr: Ipv4Addr,
    /// Relay agent.
    pub giaddr: Ipv4Addr,
    /// Client hardware address (Ethernet: 6 bytes used).
    pub chaddr: [u8; 6],
    /// Options (code, value), pad and end excluded.
    pub options: Vec<(u8, Vec<u8>)>,
}

impl Message {
    /// A client request (op 1, Ethernet) of `kind` with transaction `xid`.
    pub fn request(kind: MessageType, xid: u32, chaddr: [u8; 6]) -> Self {
        Message {
            op: 1,
            xid,
            secs: 0,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            chaddr,
            options: vec![(opt::MESSAGE_TYPE, vec![kind.code()])],
        }
    }

    /// The message type, when option 53 is present and known.
    pub fn message_type(&self) -> Option<MessageType> {
        self.option(opt::MESSAGE_TYPE)
            .and_then(|v| v.first().copied())
            .and_then(MessageType::from_code)
    }

    /// The first value of option `code`.
    pub fn option(&self, code: u8) -> Option<&[u8]> {
        self.options
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v.as_slice())
    }

    /// Sets option `code`, replacing an earlier value.
    pub fn set_option(&mut self, code: u8, value: Vec<u8>) {
        match self.options.iter_mut().find(|(c, _)| *c == code) {
            Some(slot) => slot.1 = value,
            None => self.options.push((code, value)),
        }
    }

    /// An option holding one IPv4 address (50, 54, the first of 1 or 3).
    pub fn option_ipv4(&self, code: u8) -> Option<Ipv4Addr> {
        let v = self.option(code)?;
        let b: [u8; 4] = v.get(..4)?.try_into().ok()?;
        Some(Ipv4Addr::from(b))
    }

    /// An option holding a 32-bit number of seconds (51, 58, 59).
    pub fn option_u32(&self, code: u8) -> Option<u32> {
        let v = self.option(code)?;
        let b: [u8; 4] = v.get(..4)?.try_into().ok()?;
        Some(u32::from_be_bytes(b))
    }

    /// The BOOTP payload (header, magic cookie, options, end), padded to
    /// the 300 bytes older servers expect. Values longer than 255 bytes are
    /// split over several instances of the option.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(320);
        b.extend_from_slice(&[self.op, 1, 6, 0]);
        b.extend_from_slice(&self.xid.to_be_bytes());
        b.extend_from_slice(&self.secs.to_be_bytes());
        b.extend_from_slice(&self.flags.to_be_bytes());
        for a in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            b.extend_from_slice(&a.octets());
        }
        b.extend_from_slice(&self.chaddr);
        b.resize(FIXED_LEN, 0); // chaddr padding, sname, file
        b.extend_from_slice(&MAGIC);
        for (code, value) in &self.options {
            let mut chunks = value.chunks(255).peekable();
            if chunks.peek().is_none() {
                b.extend_from_slice(&[*code, 0]);
            }
            for chunk in chunks {
                b.push(*code);
                b.push(chunk.len() as u8);
                b.extend_from_slice(chunk);
            }
        }
        b.push(opt::END);
        if b.len() < 300 {
            b.resize(300, 0);
        }
        b
    }

    /// Parses a BOOTP payload. Option overload (52) is not followed: no
    /// server a pod meets puts lease parameters in `sname`/`file`.
    pub fn decode(b: &[u8]) -> Result<Message> {
        let bad = |why: &str| Error::DhcpPacket(why.to_owned());
        if b.len() < FIXED_LEN + MAGIC.len() {
            return Err(bad("shorter than a BOOTP header"));
        }
        if b[1] != 1 || b[2] != 6 {
            return Err(bad("not an Ethernet BOOTP message"));
        }
        if b[FIXED_LEN..FIXED_LEN + 4] != MAGIC {
            return Err(bad("no DHCP magic cookie"));
        }
        let ip = |o: usize| Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3]);
        let mut chaddr = [0u8; 6];
        chaddr.copy_from_slice(&b[28..34]);
        let mut options: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut i = FIXED_LEN + 4;
        while i < b.len() {
            let code = b[i];
            match code {
                opt::PAD => i += 1,
                opt::END => break,
                _ => {
                    let len = *b.get(i + 1).ok_or_else(|| bad("truncated option"))? as usize;
                    let value = b
                        .get(i + 2..i + 2 + len)
                        .ok_or_else(|| bad("truncated option"))?;
                    match options.iter_mut().find(|(c, _)| *c == code) {
                        Some(slot) => slot.1.extend_from_slice(value),
                        None => options.push((code, value.to_vec())),
                    }
                    i += 2 + len;
                }
            }
        }
        Ok(Message {
            op: b[0],
            xid: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            secs: u16::from_be_bytes([b[8], b[9]]),
            flags: u16::from_be_bytes([b[10], b[11]]),
            ciaddr: ip(12),
            yiaddr: ip(16),
            siaddr: ip(20),
            giaddr: ip(24),
            chaddr,
            options,
        })
    }
}

/// Wraps a BOOTP payload in UDP and IPv4 headers (checksums filled), as a
/// packet socket of type `SOCK_DGRAM` sends it: the kernel adds Ethernet.
pub(crate) fn ipv4_udp_frame(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = 20 + udp_len;
    let mut f = Vec::with_capacity(total);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(total as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0]); // id 0, don't fragment
    f.extend_from_slice(&[64, 17, 0, 0]); // ttl, UDP, checksum below
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    let ip_sum = checksum(&[&f[..20]]);
    f[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    f.extend_from_slice(&CLIENT_PORT.to_be_bytes());
    f.extend_from_slice(&SERVER_PORT.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    let mut udp_sum = checksum(&[&pseudo, &f[20..]]);
    if udp_sum == 0 {
        udp_sum = 0xffff;
    }
    f[26..28].copy_from_slice(&udp_sum.to_be_bytes());
    f
}

/// The UDP payload of an IPv4 packet addressed to the DHCP client port,
/// with the sender's address; `None` for anything else (fragments, other
/// ports, truncated packets).
pub(crate) fn udp_payload_to_client(packet: &[u8]) -> Option<(Ipv4Addr, &[u8])> {
    if packet.len() < 20 || packet[0] >> 4 != 4 || packet[9] != 17 {
        return None;
    }
    if u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff != 0 {
        return None;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]])).min(packet.len());
    let udp = packet.get(ihl..total)?;
    if udp.len() < 8 || u16::from_be_bytes([udp[2], udp[3]]) != CLIENT_PORT {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    Some((src, udp.get(8..len.max(8).min(udp.len()))?))
}

fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        let mut it = part.chunks(2);
        for c in &mut it {
            let word = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            sum += u32::from(word);
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Whatever arrives on the wire: no panic, and the option readers
        // built on the decoder do not panic either.
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(m) = Message::decode(&bytes) {
                let _ = crate::dhcp::options::ip_config(&m);
                let _ = crate::dhcp::options::routes(&m, 1);
                let _ = crate::dhcp::options::dns(&m, &[6, 15, 119]);
            }
            let _ = udp_payload_to_client(&bytes);
            let _ = crate::dhcp::options::domain_search(&bytes);
            let _ = crate::dhcp::options::classless_routes(&bytes);
        }

        #[test]
        fn encode_decode_round_trip(
            xid in any::<u32>(),
            chaddr in any::<[u8; 6]>(),
            opts in proptest::collection::vec((1u8..=254, proptest::collection::vec(any::<u8>(), 0..400)), 0..6),
        ) {
            let mut m = Message::request(MessageType::Request, xid, chaddr);
            for (code, value) in opts {
                m.set_option(code, value);
            }
            prop_assert_eq!(Message::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn round_trip_with_long_option() {
        let mut m = Message::request(MessageType::Discover, 0xdead_beef, [2, 0, 0, 0, 0, 1]);
        m.flags = FLAG_BROADCAST;
        m.set_option(opt::CLIENT_ID, vec![7; 300]);
        m.set_option(opt::PARAMETER_REQUEST_LIST, vec![1, 3]);
        let bytes = m.encode();
        assert_eq!(bytes[236..240], MAGIC);
        let back = Message::decode(&bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.message_type(), Some(MessageType::Discover));
    }

    #[test]
    fn truncated_and_garbage_are_errors() {
        assert!(Message::decode(&[0u8; 10]).is_err());
        let mut b = Message::request(MessageType::Ack, 1, [0; 6]).encode();
        b.truncate(243);
        b[240] = 51;
        b[241] = 4;
        assert!(Message::decode(&b).is_err());
    }

    #[test]
    fn frame_round_trip_and_checksum() {
        let payload = Message::request(MessageType::Request, 9, [1; 6]).encode();
        let mut f = ipv4_udp_frame(
            Ipv4Addr::new(10, 0, 0, 5),
            Ipv4Addr::new(10, 0, 0, 1),
            &payload,
        );
        assert_eq!(checksum(&[&f[..20]]), 0);
        // A reply to the client port: swap the ports.
        f[20..24].copy_from_slice(&[0, 67, 0, 68]);
        let (src, p) = udp_payload_to_client(&f).unwrap();
        assert_eq!((src, p), (Ipv4Addr::new(10, 0, 0, 5), payload.as_slice()));
        f[22..24].copy_from_slice(&[0, 69]);
        assert!(udp_payload_to_client(&f).is_none());
    }
}
