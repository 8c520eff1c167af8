//! Deleting conntrack entries over `NETLINK_NETFILTER` (ctnetlink), without
//! the `conntrack` binary.
//!
//! After a host port moves to another container, connection tracking still
//! sends a UDP "connection" (which never ends while the client keeps
//! sending) to the old container address: the Go reference's portmap
//! deletes UDP entries for each host port on ADD (`pkg/utils/conntrack.go`);
//! doing it on DEL as well closes the window in between
//! (containernetworking/plugins#123, kubernetes/kubernetes#58336).
//!
//! ```no_run
//! use cni_firewall::conntrack::{Conntrack, ConntrackFamily};
//!
//! let mut ct = Conntrack::open_in("/run/netns/node")?;
//! let deleted = ct.delete_udp_by_dst_port(ConntrackFamily::V4, 5353)?;
//! # let _ = deleted;
//! # Ok::<(), cni_firewall::Error>(())
//! ```

use std::io;
use std::path::Path;

use netlink_sys::protocols::NETLINK_NETFILTER;

use crate::nfnetlink;
use crate::{Error, Result};
use cni_netns::netlink::{
    attr, attrs, attrs_full, Conn, NLA_TYPE_MASK, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};

/// An IP family of conntrack entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConntrackFamily {
    /// IPv4 entries.
    V4,
    /// IPv6 entries.
    V6,
}

impl ConntrackFamily {
    fn af(self) -> u8 {
        match self {
            ConntrackFamily::V4 => libc::AF_INET as u8,
            ConntrackFamily::V6 => libc::AF_INET6 as u8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ConntrackFamily::V4 => "ipv4",
            ConntrackFamily::V6 => "ipv6",
        }
    }
}

// linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h, netlink.h
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_DST_PORT: u16 = 3;
const NFGENMSG_LEN: usize = 4;

/// A ctnetlink socket bound to one network namespace.
#[derive(Debug)]
pub struct Conntrack {
    conn: Conn,
}

impl Conntrack {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> Result<Self> {
        Self::open_at(None)
    }

    /// Opens a socket in the network namespace at `netns`. The socket is
    /// created on a short-lived thread that entered the namespace (a socket
    /// stays in the namespace it was created in), so the caller's thread
    /// never changes namespace.
    pub fn open_in(netns: impl AsRef<Path>) -> Result<Self> {
        Self::open_at(Some(netns.as_ref()))
    }

    fn open_at(netns: Option<&Path>) -> Result<Self> {
        cni_netns::run_at(netns, open_socket)?.map_err(|source| Error::ConntrackOpen {
            netns: cni_netns::netns_label(netns),
            source,
        })
    }

    /// Deletes every UDP entry of `family` whose original destination port
    /// is `port`; returns how many were deleted (entries that expired
    /// meanwhile are not counted and not an error).
    pub fn delete_udp_by_dst_port(&mut self, family: ConntrackFamily, port: u16) -> Result<usize> {
        self.delete_udp_by_dst_ports(family, &[port])
    }

    /// Like [`Conntrack::delete_udp_by_dst_port`] for several ports with a
    /// single dump (portmap's host ports of one attachment).
    ///
    /// An entry the kernel refuses to delete does not stop the others: every
    /// matching entry is tried, and the refusals come back together
    /// ([`Error::ConntrackDelete`]) with the number deleted.
    pub fn delete_udp_by_dst_ports(
        &mut self,
        family: ConntrackFamily,
        ports: &[u16],
    ) -> Result<usize> {
        if ports.is_empty() {
            return Ok(0);
        }
        let entries = self.dump(family).map_err(|source| Error::Conntrack {
            op: "dump entries",
            family: family.name(),
            ports: ports.to_vec(),
            source,
        })?;
        let (deleted, failures) =
            delete_matching(&entries, ports, |entry| self.delete(family, entry));
        if failures.is_empty() {
            return Ok(deleted);
        }
        Err(Error::ConntrackDelete {
            family: family.name(),
            ports: ports.to_vec(),
            deleted,
            failures,
        })
    }

    fn dump(&mut self, family: ConntrackFamily) -> io::Result<Vec<Entry>> {
        let seq = self.conn.next_seq();
        let msg = message(
            IPCTNL_MSG_CT_GET,
            NLM_F_REQUEST | NLM_F_DUMP,
            seq,
            family,
            &[],
        );
        self.conn.send(&msg)?;
        let mut entries = Vec::new();
        // An interrupted dump (an entry came or went meanwhile) still
        // holds every entry that was there throughout: good enough for a
        // flush, as for the `conntrack` tool.
        self.conn.receive(seq, |m| {
            let body = m.body();
            if body.len() >= NFGENMSG_LEN && body[0] == family.af() {
                entries.extend(parse_entry(&body[NFGENMSG_LEN..]));
            }
            Ok(())
        })?;
        Ok(entries)
    }

    fn delete(&mut self, family: ConntrackFamily, entry: &Entry) -> io::Result<()> {
        let seq = self.conn.next_seq();
        let mut attrs = entry.tuple_orig_raw.clone();
        if let Some(zone) = &entry.zone_raw {
            attrs.extend_from_slice(zone);
        }
        let msg = message(
            IPCTNL_MSG_CT_DELETE,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            family,
            &attrs,
        );
        self.conn.send(&msg)?;
        self.conn.receive(seq, |_| Ok(()))?;
        Ok(())
    }
}

/// Deletes (with `delete`) every entry of `entries` that is UDP to one of
/// `ports`, going on past failures; returns how many were deleted and the
/// failures (an entry that expired meanwhile, `ENOENT`, is neither).
fn delete_matching(
    entries: &[Entry],
    ports: &[u16],
    mut delete: impl FnMut(&Entry) -> io::Result<()>,
) -> (usize, Vec<io::Error>) {
    let mut deleted = 0;
    let mut failures = Vec::new();
    for entry in entries {
        if !ports
            .iter()
            .any(|&p| udp_dst_port_matches(&entry.tuple_orig, p))
        {
            continue;
        }
        match delete(entry) {
            Ok(()) => deleted += 1,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => failures.push(e),
        }
    }
    (deleted, failures)
}

fn open_socket() -> io::Result<Conntrack> {
    Ok(Conntrack {
        conn: Conn::open(NETLINK_NETFILTER, 1 << 16)?,
    })
}

/// One entry as needed to delete it: its original tuple (raw attribute, sent
/// back as is) and zone.
#[derive(Debug)]
struct Entry {
    tuple_orig_raw: Vec<u8>,
    tuple_orig: Vec<u8>,
    zone_raw: Option<Vec<u8>>,
}

fn parse_entry(attributes: &[u8]) -> Option<Entry> {
    let mut tuple = None;
    let mut zone = None;
    for (ty, payload, raw) in attrs_full(attributes) {
        match ty & NLA_TYPE_MASK {
            CTA_TUPLE_ORIG => tuple = Some((raw.to_vec(), payload.to_vec())),
            CTA_ZONE => zone = Some(raw.to_vec()),
            _ => {}
        }
    }
    let (tuple_orig_raw, tuple_orig) = tuple?;
    Some(Entry {
        tuple_orig_raw,
        tuple_orig,
        zone_raw: zone,
    })
}

fn udp_dst_port_matches(tuple: &[u8], port: u16) -> bool {
    let Some(proto) = attr(tuple, CTA_TUPLE_PROTO) else {
        return false;
    };
    let mut num = None;
    let mut dport = None;
    for (ty, payload) in attrs(proto) {
        match (ty, payload) {
            (CTA_PROTO_NUM, [n, ..]) => num = Some(*n),
            (CTA_PROTO_DST_PORT, [a, b, ..]) => dport = Some(u16::from_be_bytes([*a, *b])),
            _ => {}
        }
    }
    num == Some(libc::IPPROTO_UDP as u8) && dport == Some(port)
}

fn message(kind: u16, flags: u16, seq: u32, family: ConntrackFamily, attrs: &[u8]) -> Vec<u8> {
    nfnetlink::message(
        (NFNL_SUBSYS_CTNETLINK << 8) | kind,
        flags,
        seq,
        family.af(),
        0,
        attrs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(payload);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    #[test]
    fn matches_udp_destination_port() {
        let proto = [
            attr(CTA_PROTO_NUM, &[17]),
            attr(2, &1234u16.to_be_bytes()),
            attr(CTA_PROTO_DST_PORT, &5353u16.to_be_bytes()),
        ]
        .concat();
        let tuple = [
            attr(1 | 0x8000, &attr(1, &[10, 0, 0, 1])),
            attr(CTA_TUPLE_PROTO | 0x8000, &proto),
        ]
        .concat();
        let entry_attrs = [
            attr(CTA_TUPLE_ORIG | 0x8000, &tuple),
            attr(CTA_ZONE, &[0, 0]),
        ]
        .concat();
        let entry = parse_entry(&entry_attrs).unwrap();
        assert!(udp_dst_port_matches(&entry.tuple_orig, 5353));
        assert!(!udp_dst_port_matches(&entry.tuple_orig, 1234));
        assert!(entry.zone_raw.is_some());
        assert_eq!(entry.tuple_orig_raw.len(), 4 + tuple.len());
    }

    /// A UDP entry to `port` from `src` (the last address byte).
    fn udp_entry(src: u8, port: u16) -> Entry {
        let proto = [
            attr(CTA_PROTO_NUM, &[17]),
            attr(CTA_PROTO_DST_PORT, &port.to_be_bytes()),
        ]
        .concat();
        let tuple = [
            attr(1 | 0x8000, &attr(1, &[10, 0, 0, src])),
            attr(CTA_TUPLE_PROTO | 0x8000, &proto),
        ]
        .concat();
        parse_entry(&attr(CTA_TUPLE_ORIG | 0x8000, &tuple)).unwrap()
    }

    /// One refused delete does not stop the others: every matching entry
    /// is tried, the refusals are collected, expired entries are neither.
    #[test]
    fn deletes_go_on_past_a_refused_entry() {
        let entries = [
            udp_entry(1, 53),
            udp_entry(2, 53), // refused
            udp_entry(3, 80), // another port: untouched
            udp_entry(4, 53), // expired meanwhile
            udp_entry(5, 53),
            udp_entry(6, 53), // refused
        ];
        let mut tried = Vec::new();
        let (deleted, failures) = delete_matching(&entries, &[53], |e| {
            let src = e.tuple_orig[11];
            tried.push(src);
            match src {
                2 => Err(io::Error::from_raw_os_error(libc::EPERM)),
                4 => Err(io::Error::from_raw_os_error(libc::ENOENT)),
                6 => Err(io::Error::from_raw_os_error(libc::EBUSY)),
                _ => Ok(()),
            }
        });
        assert_eq!(tried, [1, 2, 4, 5, 6]);
        assert_eq!(deleted, 2);
        let codes: Vec<_> = failures.iter().map(|e| e.raw_os_error()).collect();
        assert_eq!(codes, [Some(libc::EPERM), Some(libc::EBUSY)]);
        let e = Error::ConntrackDelete {
            family: "ipv4",
            ports: vec![53],
            deleted,
            failures,
        };
        assert_eq!(
            e.to_string(),
            "conntrack delete entries (ipv4 UDP, destination ports [53]): 2 deleted, 2 refused: \
             Operation not permitted (os error 1); Device or resource busy (os error 16)"
        );
    }

    #[test]
    fn message_header() {
        let m = message(
            IPCTNL_MSG_CT_DELETE,
            NLM_F_REQUEST | NLM_F_ACK,
            7,
            ConntrackFamily::V6,
            &[1, 2, 3, 4],
        );
        assert_eq!(m.len(), 24);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x0102);
        assert_eq!(m[16], libc::AF_INET6 as u8);
    }
}
