//! A synchronous `NETLINK_NETFILTER` socket for nf_tables batches and dumps.

use std::io;
use std::os::fd::AsRawFd;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};

use super::encode::Msg;
use super::wire::*;

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
    socket: Socket,
    seq: u32,
}

impl NfSocket {
    /// Opens a socket in the calling thread's network namespace (the
    /// firewall opens it through `netns::run_at` for another namespace).
    pub(crate) fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        // Large batches (GC of many attachments) and dumps of big tables.
        let size: libc::c_int = 4 << 20;
        let fd = socket.as_raw_fd();
        for opt in [libc::SO_SNDBUFFORCE, libc::SO_RCVBUFFORCE] {
            // SAFETY: setsockopt reads `size` for its declared length; a
            // failure (no CAP_NET_ADMIN) keeps the default sizes.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        // A reply that never comes must not hang a CNI call forever.
        let tv = libc::timeval {
            tv_sec: 10,
            tv_usec: 0,
        };
        // SAFETY: as above, for a timeval.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        let seq = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(1);
        Ok(NfSocket { socket, seq })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
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
        let begin = self.next_seq();
        let mut begin_attrs = Vec::new();
        if let Some(g) = generation {
            // struct nlattr: length, type, then the value (4 bytes, no pad).
            begin_attrs.extend(8u16.to_ne_bytes());
            begin_attrs.extend(NFNL_BATCH_GENID.to_ne_bytes());
            begin_attrs.extend(g.to_be_bytes());
        }
        buf.extend(message(
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            begin,
            0,
            NFNL_SUBSYS_NFTABLES,
            &begin_attrs,
        ));
        let first = begin.wrapping_add(1);
        for (i, m) in msgs.iter().enumerate() {
            let seq = self.next_seq();
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
        let last = self.seq;
        let end = self.next_seq();
        buf.extend(message(
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            end,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        ));
        self.socket.send(&buf, 0).map_err(BatchError::Io)?;

        let mut first_error: Option<(usize, i32)> = None;
        let mut rbuf = vec![0u8; 1 << 16];
        loop {
            let n = self
                .socket
                .recv(&mut &mut rbuf[..], 0)
                .map_err(BatchError::Io)?;
            for (ty, _, seq, body) in messages(&rbuf[..n]) {
                if ty != NLMSG_ERROR {
                    continue;
                }
                let code = error_code(body);
                // An error on the batch itself (no permission, a failed
                // commit) comes on BATCH_BEGIN's sequence number, and then
                // no message of the batch is answered.
                if seq == begin || seq == end {
                    if code != 0 {
                        return Err(BatchError::Refused {
                            index: msgs.len(),
                            errno: code,
                        });
                    }
                    continue;
                }
                let index = seq.wrapping_sub(first) as usize;
                if index >= msgs.len() {
                    // A late reply to an earlier request.
                    continue;
                }
                if code != 0 && first_error.is_none_or(|(i, _)| index < i) {
                    first_error = Some((index, code));
                }
                if seq == last {
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

    /// A `GET` request: with `dump` all matching objects, else the one named.
    /// `Ok(None)` when the kernel says the object does not exist.
    pub(crate) fn get(
        &mut self,
        kind: u16,
        family: u8,
        attrs: &[u8],
        dump: bool,
    ) -> io::Result<Option<Vec<Vec<u8>>>> {
        let seq = self.next_seq();
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
        let msg = message(nft_type(kind), flags, seq, family, 0, attrs);
        self.socket.send(&msg, 0)?;
        let mut out = Vec::new();
        let mut rbuf = vec![0u8; 1 << 17];
        loop {
            let n = self.socket.recv(&mut &mut rbuf[..], 0)?;
            for (ty, flags, s, body) in messages(&rbuf[..n]) {
                if s != seq {
                    continue;
                }
                match ty {
                    NLMSG_DONE => return Ok(Some(out)),
                    NLMSG_ERROR => {
                        let code = error_code(body);
                        return match code {
                            0 => Ok(Some(out)),
                            libc::ENOENT => Ok(None),
                            // A dump interrupted by a concurrent change.
                            c => Err(io::Error::from_raw_os_error(c)),
                        };
                    }
                    // The dump raced a commit: the caller reads again.
                    _ if flags & NLM_F_DUMP_INTR != 0 => {
                        return Err(io::Error::from_raw_os_error(libc::EINTR))
                    }
                    _ if body.len() >= 4 => out.push(body[4..].to_vec()),
                    _ => {}
                }
            }
        }
    }
}

fn error_code(body: &[u8]) -> i32 {
    match body.get(..4) {
        Some(b) => -i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        None => libc::EPROTO,
    }
}
