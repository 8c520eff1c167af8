//! The DHCP client's transactions: acquire (DISCOVER, OFFER, REQUEST,
//! ACK with retries and back-off), renew (unicast from the leased
//! address), rebind (broadcast), release (unicast from the leased address),
//! and the [`Lease`] they produce, which serializes for the daemon's state
//! directory.
//!
//! The client never enters a namespace: it asks a [`Sockets`] for its
//! sockets, which the caller opens inside the pod's namespace.

use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::message::{
    ipv4_udp_frame, opt, udp_payload_to_client, Message, MessageType, CLIENT_PORT, FLAG_BROADCAST,
};
use super::socket::{server_addr, PacketSocket};
use crate::error::{Error, Result};
use cni_types::random::random_u32;

/// What the client sends and how long it waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientConfig {
    /// Option 61's value (Go: a 0x00 type byte, then `<container>/<network>/<ifname>`).
    pub client_id: Vec<u8>,
    /// Option 55.
    pub request_list: Vec<u8>,
    /// Options sent as is (`provide`, the host name).
    pub provide: Vec<(u8, Vec<u8>)>,
    /// Set the BOOTP broadcast flag in DISCOVER and REQUEST.
    pub broadcast: bool,
    /// How long to wait for each reply.
    #[serde(with = "secs_f64")]
    pub timeout: Duration,
    /// Ceiling of the back-off between retries.
    #[serde(with = "secs_f64")]
    pub resend_max: Duration,
    /// Deadline of a whole acquire.
    #[serde(with = "secs_f64")]
    pub resend_timeout: Duration,
}

/// Go's client identifier for an attachment: type byte 0, then
/// `<containerID>/<network>/<ifname>` cut to 254 bytes.
pub fn client_id(container_id: &str, network: &str, ifname: &str) -> Vec<u8> {
    let mut id = vec![0u8];
    id.extend_from_slice(format!("{container_id}/{network}/{ifname}").as_bytes());
    id.truncate(255);
    id
}

/// The pod interface the client runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLink {
    /// Interface index inside the pod's namespace.
    pub ifindex: u32,
    /// Its hardware address (`chaddr`).
    pub mac: [u8; 6],
}

/// Opens the client's sockets inside the pod's network namespace.
pub trait Sockets {
    /// A packet socket on the pod interface filtered to transaction `xid`.
    fn packet(&self, xid: u32) -> io::Result<PacketSocket>;
    /// A UDP socket bound to `addr`:68 (fails when `addr` is not on an
    /// interface of the pod).
    fn udp(&self, addr: Ipv4Addr) -> io::Result<UdpSocket>;
}

/// A lease: the ACK as received and when it arrived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The leased address.
    pub address: Ipv4Addr,
    /// The server identifier (option 54, or the ACK's source).
    pub server: Ipv4Addr,
    /// Seconds since the epoch when the ACK arrived.
    pub acquired: u64,
    /// Lease time (option 51, 3600 when absent as Go).
    pub lease_secs: u32,
    /// Renewal time T1 (option 58, half the lease by default).
    pub t1_secs: u32,
    /// Rebinding time T2 (option 59, 87.5 % of the lease by default).
    pub t2_secs: u32,
    /// The ACK's BOOTP bytes, hex encoded (the OFFER's for a lease not
    /// yet acknowledged).
    pub ack: String,
}

impl Lease {
    /// The lease an ACK grants (or an OFFER proposes), `src` being the
    /// reply's IPv4 source.
    fn from_reply(ack: &Message, src: Ipv4Addr) -> Lease {
        let lease_secs = ack.option_u32(opt::LEASE_TIME).unwrap_or(3600);
        let mut t1 = ack.option_u32(opt::RENEWAL_TIME).unwrap_or(lease_secs / 2);
        let mut t2 = ack
            .option_u32(opt::REBINDING_TIME)
            .unwrap_or(lease_secs / 8 * 7);
        if t2 > lease_secs || t1 > t2 {
            (t1, t2) = (lease_secs / 2, lease_secs / 8 * 7);
        }
        Lease {
            address: ack.yiaddr,
            server: ack.option_ipv4(opt::SERVER_ID).unwrap_or(src),
            acquired: unix_now(),
            lease_secs,
            t1_secs: t1,
            t2_secs: t2,
            ack: ack.encode().iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The ACK, decoded.
    pub fn ack(&self) -> Result<Message> {
        let bytes = (0..self.ack.len() / 2)
            .map(|i| u8::from_str_radix(self.ack.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
            .collect::<std::result::Result<Vec<u8>, _>>()
            .map_err(|_| Error::DhcpPacket("stored ACK is not hex".into()))?;
        Message::decode(&bytes)
    }

    /// When renewal starts (seconds since the epoch).
    pub fn t1(&self) -> u64 {
        self.acquired + u64::from(self.t1_secs)
    }

    /// When rebinding starts.
    pub fn t2(&self) -> u64 {
        self.acquired + u64::from(self.t2_secs)
    }

    /// When the lease expires.
    pub fn expiry(&self) -> u64 {
        self.acquired + u64::from(self.lease_secs)
    }
}

/// Seconds since the epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The outcome of a renew or rebind.
#[derive(Debug)]
pub enum Renewal {
    /// The server extended the lease.
    Extended(Lease),
    /// The server refused (NAK): the address must not be used any more.
    Refused(String),
}

/// A DHCP client for one attachment.
pub struct Client<'a> {
    /// What to send, how long to wait.
    pub config: &'a ClientConfig,
    /// The pod interface.
    pub link: ClientLink,
    /// The interface name, for messages.
    pub ifname: &'a str,
    /// Opens sockets in the pod's namespace.
    pub sockets: &'a dyn Sockets,
}

impl Client<'_> {
    fn message(&self, kind: MessageType, xid: u32) -> Message {
        let mut m = Message::request(kind, xid, self.link.mac);
        m.set_option(opt::CLIENT_ID, self.config.client_id.clone());
        m.set_option(opt::MAX_MESSAGE_SIZE, 1500u16.to_be_bytes().to_vec());
        if !self.config.request_list.is_empty() {
            m.set_option(
                opt::PARAMETER_REQUEST_LIST,
                self.config.request_list.clone(),
            );
        }
        for (code, value) in &self.config.provide {
            m.set_option(*code, value.clone());
        }
        m
    }

    fn socket_error(&self, op: &'static str) -> impl FnOnce(io::Error) -> Error + '_ {
        move |source| Error::DhcpSocket {
            op,
            ifname: self.ifname.to_owned(),
            source,
        }
    }

    /// DISCOVER, OFFER, REQUEST, ACK, retried until `resend_timeout`.
    /// After each DISCOVER the client listens for `timeout` plus the
    /// back-off pause (2 s doubling up to `resend_max`, ±0.5 s), so a
    /// server that answers late (dnsmasq pings an address before offering
    /// it) is still heard. One transaction id and one filtered socket
    /// serve the whole acquire; a NAK restarts the exchange.
    ///
    /// `pending` tracks the REQUEST the server may have granted without
    /// the client hearing it (so a caller can record it before it is
    /// sent, and give it back when the acquire fails): it gets
    /// `Some(lease)` with the lease each OFFER proposes just before its
    /// DHCPREQUEST is sent, and `None` after a NAK (nothing granted). Its
    /// error ends the acquire without that REQUEST. When a REQUEST got no
    /// answer and the next OFFER is for another address or server, the
    /// first lease is released (best effort) before `pending` hears of the
    /// second: its ACK may have been lost, and nothing else remembers it.
    pub fn acquire(&self, pending: &mut dyn FnMut(Option<&Lease>) -> Result<()>) -> Result<Lease> {
        let start = Instant::now();
        let deadline = start + self.config.resend_timeout;
        let (xid, sock) = self.transaction()?;
        let mut discover = self.message(MessageType::Discover, xid);
        if self.config.broadcast {
            discover.flags = FLAG_BROADCAST;
        }
        let mut last_nak = None;
        let mut unanswered: Option<Lease> = None;
        let mut delay = Duration::from_secs(2);
        while Instant::now() < deadline {
            discover.secs = start.elapsed().as_secs().min(u64::from(u16::MAX)) as u16;
            self.broadcast(&sock, &discover, Ipv4Addr::UNSPECIFIED)?;
            let jitter = Duration::from_millis(u64::from(random_u32() % 1000));
            let pause = (delay + jitter).saturating_sub(Duration::from_millis(500));
            let wait = (Instant::now() + self.config.timeout + pause).min(deadline);
            delay = (delay * 2).min(self.config.resend_max.max(Duration::from_secs(1)));
            let offer = self.receive(&sock, xid, wait, |m| {
                m.message_type() == Some(MessageType::Offer)
            })?;
            let Some((offer, src)) = offer else { continue };
            let offered = Lease::from_reply(&offer, src);
            if let Some(previous) = unanswered.take() {
                if (previous.address, previous.server) != (offered.address, offered.server) {
                    // Best effort: a release that cannot be sent leaves
                    // the lease to expire on the server.
                    let _ = self.release(&previous);
                }
            }
            pending(Some(&offered))?;
            match self.request_offer(&sock, &discover, &offer, src, deadline)? {
                Some(Ok(lease)) => return Ok(lease),
                Some(Err(nak)) => {
                    last_nak = Some(nak);
                    pending(None)?;
                }
                None => unanswered = Some(offered),
            }
        }
        Err(match last_nak {
            Some(reason) => Error::DhcpNak {
                ifname: self.ifname.to_owned(),
                reason,
            },
            None => Error::DhcpTimeout {
                ifname: self.ifname.to_owned(),
                waited: start.elapsed(),
            },
        })
    }

    /// REQUEST for `offer`: `None` when the server did not answer in
    /// `timeout`, the lease, or the NAK's text.
    fn request_offer(
        &self,
        sock: &PacketSocket,
        discover: &Message,
        offer: &Message,
        src: Ipv4Addr,
        deadline: Instant,
    ) -> Result<Option<std::result::Result<Lease, String>>> {
        let server = offer.option_ipv4(opt::SERVER_ID).unwrap_or(src);
        let mut request = self.message(MessageType::Request, discover.xid);
        request.flags = discover.flags;
        request.secs = discover.secs;
        request.set_option(opt::REQUESTED_IP, offer.yiaddr.octets().to_vec());
        request.set_option(opt::SERVER_ID, server.octets().to_vec());
        self.broadcast(sock, &request, Ipv4Addr::UNSPECIFIED)?;
        let wait = (Instant::now() + self.config.timeout).min(deadline);
        let reply = self.receive(sock, discover.xid, wait, |m| {
            matches!(m.message_type(), Some(MessageType::Ack | MessageType::Nak))
                && m.option_ipv4(opt::SERVER_ID).is_none_or(|s| s == server)
        })?;
        Ok(reply.map(|(m, src)| self.ack_or_nak(&m, src)))
    }

    fn ack_or_nak(&self, m: &Message, src: Ipv4Addr) -> std::result::Result<Lease, String> {
        if m.message_type() == Some(MessageType::Ack) {
            Ok(Lease::from_reply(m, src))
        } else {
            Err(m
                .option(opt::MESSAGE)
                .map(|t| String::from_utf8_lossy(t).into_owned())
                .unwrap_or_else(|| "DHCPNAK".to_owned()))
        }
    }

    /// Renewing (RFC 2131 4.3.6): a REQUEST with `ciaddr`, unicast from
    /// the leased address to the server, no options 50 and 54. The reply
    /// is read from a filtered packet socket, which also sees a NAK the
    /// server broadcasts (a socket bound to the leased address would not).
    /// `Ok(None)` when the server did not answer in `timeout`.
    pub fn renew(&self, lease: &Lease) -> Result<Option<Renewal>> {
        let (xid, listen) = self.transaction()?;
        let sock = self
            .sockets
            .udp(lease.address)
            .map_err(self.socket_error("bind leased address on"))?;
        let mut request = self.message(MessageType::Request, xid);
        request.ciaddr = lease.address;
        sock.send_to(&request.encode(), server_addr(lease.server))
            .map_err(self.socket_error("send DHCPREQUEST (renew) on"))?;
        self.await_renewal(&listen, xid)
    }

    /// Rebinding: the same REQUEST broadcast from the leased address to
    /// any server. `Ok(None)` when nobody answered in `timeout`.
    pub fn rebind(&self, lease: &Lease) -> Result<Option<Renewal>> {
        let (xid, sock) = self.transaction()?;
        let mut request = self.message(MessageType::Request, xid);
        request.ciaddr = lease.address;
        self.broadcast(&sock, &request, lease.address)?;
        self.await_renewal(&sock, xid)
    }

    /// INIT-REBOOT (RFC 2131 4.3.2): a REQUEST broadcast from 0.0.0.0
    /// with the remembered address as option 50, no `ciaddr` and no server
    /// identifier; for a lease that expired while the daemon was down.
    /// `Ok(None)` when nobody answered in `timeout`.
    pub fn reboot(&self, lease: &Lease) -> Result<Option<Renewal>> {
        let (xid, sock) = self.transaction()?;
        let mut request = self.message(MessageType::Request, xid);
        request.set_option(opt::REQUESTED_IP, lease.address.octets().to_vec());
        self.broadcast(&sock, &request, Ipv4Addr::UNSPECIFIED)?;
        self.await_renewal(&sock, xid)
    }

    /// A fresh transaction: its id and a packet socket filtered to it.
    fn transaction(&self) -> Result<(u32, PacketSocket)> {
        let xid = random_u32();
        let sock = self
            .sockets
            .packet(xid)
            .map_err(self.socket_error("open packet socket on"))?;
        Ok((xid, sock))
    }

    /// The ACK or NAK of renewal transaction `xid` on `sock`; `None` when
    /// none came in `timeout`.
    fn await_renewal(&self, sock: &PacketSocket, xid: u32) -> Result<Option<Renewal>> {
        let deadline = Instant::now() + self.config.timeout;
        let reply = self.receive(sock, xid, deadline, |m| {
            matches!(m.message_type(), Some(MessageType::Ack | MessageType::Nak))
        })?;
        Ok(reply.and_then(|(m, src)| self.renewal(&m, src)))
    }

    fn renewal(&self, m: &Message, src: Ipv4Addr) -> Option<Renewal> {
        match m.message_type()? {
            MessageType::Ack => Some(Renewal::Extended(Lease::from_reply(m, src))),
            MessageType::Nak => Some(Renewal::Refused(
                self.ack_or_nak(m, src).err().unwrap_or_default(),
            )),
            _ => None,
        }
    }

    /// DHCPRELEASE, unicast from the leased address to the server (RFC
    /// 2131 4.4.6): through a UDP socket bound to the address, or, when
    /// that cannot send (the address no longer on the interface, or no
    /// route to the server), a packet socket with the leased address as
    /// IPv4 source. Servers ignore a release from
    /// 0.0.0.0 (Go's, plugins#1278).
    pub fn release(&self, lease: &Lease) -> Result<()> {
        let release = release_message(self.config, self.link.mac, lease);
        let xid = release.xid;
        // The UDP socket needs the address on an interface *and* a route
        // to the server; without either (a /32, no route: "network
        // unreachable") the packet socket still reaches it.
        let sent = self.sockets.udp(lease.address).and_then(|sock| {
            sock.send_to(&release.encode(), server_addr(lease.server))
                .map(drop)
        });
        if sent.is_ok() {
            return Ok(());
        }
        let sock = self
            .sockets
            .packet(xid)
            .map_err(self.socket_error("open packet socket on"))?;
        let frame = ipv4_udp_frame(lease.address, lease.server, &release.encode());
        sock.send_broadcast(&frame)
            .map_err(self.socket_error("send DHCPRELEASE on"))
    }

    fn broadcast(&self, sock: &PacketSocket, m: &Message, src: Ipv4Addr) -> Result<()> {
        let frame = ipv4_udp_frame(src, Ipv4Addr::BROADCAST, &m.encode());
        let op = match m.message_type() {
            Some(MessageType::Discover) => "send DHCPDISCOVER on",
            _ => "send DHCPREQUEST on",
        };
        sock.send_broadcast(&frame).map_err(self.socket_error(op))
    }

    /// The first reply of transaction `xid` that `accept` takes, with its
    /// IPv4 source, or `None` at `deadline`.
    fn receive(
        &self,
        sock: &PacketSocket,
        xid: u32,
        deadline: Instant,
        accept: impl Fn(&Message) -> bool,
    ) -> Result<Option<(Message, Ipv4Addr)>> {
        while let Some(packet) = sock
            .recv_until(deadline)
            .map_err(self.socket_error("receive on"))?
        {
            let Some((src, payload)) = udp_payload_to_client(&packet) else {
                continue;
            };
            let Ok(m) = Message::decode(payload) else {
                continue;
            };
            if m.op == 2 && m.xid == xid && m.chaddr == self.link.mac && accept(&m) {
                return Ok(Some((m, src)));
            }
        }
        Ok(None)
    }
}

/// DHCPRELEASE of `lease` by the client of `config` whose hardware
/// address is `chaddr` (RFC 2131 4.4.6): `ciaddr` the leased address,
/// the server identifier and the client identifier, no other option.
fn release_message(config: &ClientConfig, chaddr: [u8; 6], lease: &Lease) -> Message {
    let mut m = Message::request(MessageType::Release, random_u32(), chaddr);
    m.set_option(opt::CLIENT_ID, config.client_id.clone());
    m.ciaddr = lease.address;
    m.set_option(opt::SERVER_ID, lease.server.octets().to_vec());
    m
}

/// DHCPRELEASE of `lease` sent from the calling thread's own network
/// namespace rather than the pod's, for a lease whose pod interface is
/// gone (a main plugin removed it when it rolled back a failed ADD): a
/// UDP datagram to the server's port 67 (from port 68 when no other
/// socket holds it, else from any port), through whatever route this namespace has
/// to the server, with the same `chaddr` (the one the lease's ACK, or
/// OFFER, echoes), client identifier and `ciaddr` as the pod's release
/// would have. The server matches a release by those, not by its IPv4
/// source. Fails when this namespace has no route to the server, and for
/// a server identifier that names no single remote host (unspecified,
/// broadcast, multicast or loopback).
pub fn release_unicast(config: &ClientConfig, lease: &Lease) -> Result<()> {
    let server = lease.server;
    let failed = |source| Error::DhcpRelease {
        address: lease.address,
        server,
        source,
    };
    if server.is_unspecified()
        || server.is_broadcast()
        || server.is_multicast()
        || server.is_loopback()
    {
        return Err(failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a server's unicast address",
        )));
    }
    let chaddr = lease.ack()?.chaddr;
    let release = release_message(config, chaddr, lease);
    // Port 68 only when nobody holds it (no SO_REUSEADDR: a DHCP client
    // of the node's own must not share its port, even for an instant).
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, CLIENT_PORT))
        .or_else(|_| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)))
        .map_err(failed)?;
    sock.send_to(&release.encode(), server_addr(server))
        .map(drop)
        .map_err(failed)
}

mod secs_f64 {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_id_is_go_shape() {
        let id = client_id("c1", "net", "eth0");
        assert_eq!(id, b"\0c1/net/eth0");
        assert_eq!(client_id(&"x".repeat(300), "n", "e").len(), 255);
    }

    #[test]
    fn lease_times_default_and_sanitize() {
        let mut ack = Message::request(MessageType::Ack, 1, [0; 6]);
        ack.yiaddr = Ipv4Addr::new(10, 0, 0, 9);
        ack.set_option(opt::LEASE_TIME, 1000u32.to_be_bytes().to_vec());
        let l = Lease::from_reply(&ack, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(
            (l.t1_secs, l.t2_secs, l.server),
            (500, 875, Ipv4Addr::new(10, 0, 0, 1))
        );
        ack.set_option(opt::RENEWAL_TIME, 900u32.to_be_bytes().to_vec());
        ack.set_option(opt::REBINDING_TIME, 800u32.to_be_bytes().to_vec());
        let l = Lease::from_reply(&ack, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!((l.t1_secs, l.t2_secs), (500, 875));
        assert_eq!(l.ack().unwrap().yiaddr, ack.yiaddr);
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(serde_json::from_str::<Lease>(&json).unwrap(), l);
    }

    // The node-side release carries the pod's identity (client id,
    // chaddr from the stored ACK, ciaddr) and is never sent to an address
    // that is not one server's.
    #[test]
    fn release_message_and_unicast_refusals() {
        let config = ClientConfig {
            client_id: client_id("c1", "net", "eth0"),
            request_list: vec![1, 3],
            provide: vec![(12, b"pod".to_vec())],
            broadcast: false,
            timeout: Duration::from_secs(1),
            resend_max: Duration::from_secs(1),
            resend_timeout: Duration::from_secs(1),
        };
        let mac = [2, 0, 0, 0, 0, 5];
        let mut ack = Message::request(MessageType::Ack, 1, mac);
        ack.yiaddr = Ipv4Addr::new(10, 0, 0, 9);
        let mut lease = Lease::from_reply(&ack, Ipv4Addr::new(10, 0, 0, 1));
        let m = release_message(&config, lease.ack().unwrap().chaddr, &lease);
        assert_eq!((m.chaddr, m.ciaddr), (mac, lease.address));
        assert_eq!(m.message_type(), Some(MessageType::Release));
        assert_eq!(m.option(opt::CLIENT_ID), Some(&config.client_id[..]));
        assert_eq!(m.option_ipv4(opt::SERVER_ID), Some(lease.server));
        assert_eq!(m.option(opt::PARAMETER_REQUEST_LIST), None);
        assert_eq!(m.option(12), None);
        for server in [
            [0, 0, 0, 0],
            [255, 255, 255, 255],
            [224, 0, 0, 1],
            [127, 0, 0, 1],
        ] {
            lease.server = Ipv4Addr::from(server);
            let e = release_unicast(&config, &lease).unwrap_err();
            assert!(matches!(e, Error::DhcpRelease { .. }), "{e}");
        }
    }
}
