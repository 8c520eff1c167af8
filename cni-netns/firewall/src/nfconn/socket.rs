//! A synchronous `NETLINK_NETFILTER` socket for nf_tables batches and dumps.

use std::io;

use netlink_sys::protocols::NETLINK_NETFILTER;
use nix::sys::socket::{setsockopt, sockopt};

use super::encode::Msg;
use super::wire::*;
use cni_netns::netlink::{messages, refusal, Conn, NlError};

/// A batch failed: the index of the first refused message and its errno.
#[derive(Debug)]
pub(crate) enum BatchError {
    /// The kernel refused message `index` of the batch.
    Refused { index: usize, errno: i32 },
    /// The socket failed.
    Io(io::Error),
}

#[derive(Debug)]
pub(crate) struct NfSocket {
    conn: Conn,
}

impl From<NlError> for BatchError {
    fn from(e: NlError) -> BatchError {
        BatchError::Io(e.into())
    }
}

impl NfSocket {
    /// Opens a socket in the calling thread's network namespace (the
    /// firewall opens it through `netns::run_at` for another namespace).
    pub(crate) fn open() -> io::Result<Self> {
        let mut conn = Conn::open(NETLINK_NETFILTER, 1 << 17)?;
        // Large batches (GC of many attachments) and dumps of big tables;
        // without CAP_NET_ADMIN the default sizes stay.
        let sock = conn.socket();
        let _ = setsockopt(sock, sockopt::SndBufForce, &(4 << 20));
        let _ = setsockopt(sock, sockopt::RcvBufForce, &(4 << 20));
        conn.set_seq(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(1),
        );
        Ok(NfSocket { conn })
    }

    /// Sends `msgs` as one atomic batch and waits for the kernel's verdict.
    /// With `generation`, the kernel commits it only if the ruleset is
    /// still at that generation ([`NfSocket::generation`]) and refuses the
    /// whole batch with `ERESTART` otherwise.
    ///
    /// Only the last message asks for an acknowledgement: the kernel reports
    /// every refused message anyway, keeps processing the batch after one,
    /// and delivers all replies in order once the batch is done, so the
    /// reply to the last message closes the answer. That saves one `recv`
    /// per message (a GC of 1000 attachments sends some 4000).
    pub(crate) fn batch(
        &mut self,
        family: u8,
        msgs: &[Msg],
        generation: Option<u32>,
    ) -> Result<(), BatchError> {
        if msgs.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        let begin = self.conn.next_seq();
        let mut begin_attrs = Attrs::new();
        if let Some(g) = generation {
            begin_attrs.u32(NFNL_BATCH_GENID, g);
        }
        buf.extend(message(
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            begin,
            0,
            NFNL_SUBSYS_NFTABLES,
            &begin_attrs.0,
        ));
        let first = begin.wrapping_add(1);
        for (i, m) in msgs.iter().enumerate() {
            let seq = self.conn.next_seq();
            let ack = if i + 1 == msgs.len() { NLM_F_ACK } else { 0 };
            buf.extend(message(
                nft_type(m.kind),
                NLM_F_REQUEST | ack | m.flags,
                seq,
                family,
                0,
                &m.attrs,
            ));
        }
        let last = self.conn.last_seq();
        let end = self.conn.next_seq();
        buf.extend(message(
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            end,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        ));
        self.conn.send(&buf)?;

        let mut first_error: Option<(usize, i32)> = None;
        loop {
            for m in messages(self.conn.recv()?) {
                let m = m?;
                if m.ty != NLMSG_ERROR {
                    continue;
                }
                let refused = refusal(&m)?;
                // An error on the batch itself (no permission, a failed
                // commit) comes on BATCH_BEGIN's sequence number, and then
                // no message of the batch is answered.
                if m.seq == begin || m.seq == end {
                    if let Some(errno) = refused {
                        return Err(BatchError::Refused {
                            index: msgs.len(),
                            errno,
                        });
                    }
                    continue;
                }
                let index = m.seq.wrapping_sub(first) as usize;
                if index >= msgs.len() {
                    // A late reply to an earlier request.
                    continue;
                }
                if let Some(errno) = refused {
                    if first_error.is_none_or(|(i, _)| index < i) {
                        first_error = Some((index, errno));
                    }
                }
                if m.seq == last {
                    return match first_error {
                        Some((index, errno)) => Err(BatchError::Refused { index, errno }),
                        None => Ok(()),
                    };
                }
            }
        }
    }

    /// The ruleset's generation: nf_tables counts its commits (every
    /// table's, every namespace's own count), so a listing read after it
    /// and a batch sent with it ([`NfSocket::batch`]) commit a decision
    /// only if nothing changed in between.
    pub(crate) fn generation(&mut self) -> io::Result<u32> {
        let bodies = self.get(NFT_MSG_GETGEN, 0, &[], false)?.unwrap_or_default();
        bodies
            .iter()
            .find_map(|b| attr(b, NFTA_GEN_ID))
            .and_then(|v| <[u8; 4]>::try_from(v).ok())
            .map(u32::from_be_bytes)
            .ok_or_else(|| io::Error::other("no NFTA_GEN_ID in the NFT_MSG_NEWGEN answer"))
    }

    /// A `GET` request: with `dump` all matching objects (their attributes,
    /// after the nfgenmsg), else the one named. `Ok(None)` when the kernel
    /// says the object does not exist; a dump that raced a commit is
    /// `EINTR` (the caller reads again).
    pub(crate) fn get(
        &mut self,
        kind: u16,
        family: u8,
        attrs: &[u8],
        dump: bool,
    ) -> io::Result<Option<Vec<Vec<u8>>>> {
        let seq = self.conn.next_seq();
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
        self.conn
            .send(&message(nft_type(kind), flags, seq, family, 0, attrs))?;
        let mut out = Vec::new();
        let received = self.conn.receive(seq, |m| {
            if let Some(attrs) = m.body().get(4..) {
                out.push(attrs.to_vec());
            }
            Ok(())
        });
        match received {
            Ok(false) => Ok(Some(out)),
            Ok(true) => Err(io::Error::from_raw_os_error(libc::EINTR)),
            Err(e) if e.is_errno(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::getsockopt;
    use nix::sys::time::TimeVal;

    /// As root the socket gets its 4 MiB buffers (the kernel reports
    /// twice what was set) and the 10 s receive timeout of every netlink
    /// socket.
    #[test]
    fn open_sets_buffers_and_timeout() {
        if !cni_testkit::premise::require_root() {
            return;
        }
        let s = NfSocket::open().unwrap();
        let sock = s.conn.socket();
        assert!(getsockopt(sock, sockopt::SndBuf).unwrap() >= 4 << 20);
        assert!(getsockopt(sock, sockopt::RcvBuf).unwrap() >= 4 << 20);
        assert_eq!(
            getsockopt(sock, sockopt::ReceiveTimeout).unwrap(),
            TimeVal::new(10, 0)
        );
    }
}
