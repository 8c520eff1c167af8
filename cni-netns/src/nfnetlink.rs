//! nfnetlink framing, shared by the nf_tables encoder (`firewall::native`)
//! and ctnetlink (`conntrack`): message headers with the `nfgenmsg`, an
//! attribute builder, and one attribute walker (`linux/netlink.h`,
//! `linux/netfilter/nfnetlink.h`).

pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_EXCL: u16 = 0x200;
pub(crate) const NLM_F_CREATE: u16 = 0x400;
pub(crate) const NLM_F_APPEND: u16 = 0x800;
pub(crate) const NLA_F_NESTED: u16 = 0x8000;
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;

/// A netlink attribute stream under construction.
#[derive(Debug, Default, Clone)]
pub(crate) struct Attrs(pub(crate) Vec<u8>);

impl Attrs {
    pub(crate) fn new() -> Self {
        Attrs(Vec::new())
    }

    pub(crate) fn bytes(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        let len = 4 + payload.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.0.resize(align4(self.0.len()), 0);
        self
    }

    pub(crate) fn str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.bytes(ty, &v)
    }

    pub(crate) fn u32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.bytes(ty, &v.to_be_bytes())
    }

    pub(crate) fn nested(&mut self, ty: u16, inner: &Attrs) -> &mut Self {
        self.bytes(ty | NLA_F_NESTED, &inner.0)
    }
}

pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// One complete netlink message: header, nfgenmsg (family, version 0,
/// `res_id` big endian) and attributes.
pub(crate) fn message(
    ty: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) -> Vec<u8> {
    let len = NLMSG_HDRLEN + 4 + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.push(family);
    m.push(0);
    m.extend_from_slice(&res_id.to_be_bytes());
    m.extend_from_slice(attrs);
    m
}

/// The one attribute walker: (type with its flags, payload, the raw
/// attribute with header and padding); stops at a malformed length.
pub(crate) fn attrs_full(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8], &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let ty = u16::from_ne_bytes([buf[2], buf[3]]);
        if len < 4 || len > buf.len() {
            return None;
        }
        let payload = &buf[4..len];
        let raw = &buf[..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some((ty, payload, raw))
    })
}

/// Iterates the attributes of `buf`: (type without flags, payload).
pub(crate) fn attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    attrs_full(buf).map(|(ty, payload, _)| (ty & NLA_TYPE_MASK, payload))
}

/// The first attribute of type `ty` in `buf`.
pub(crate) fn attr(buf: &[u8], ty: u16) -> Option<&[u8]> {
    attrs(buf).find(|(t, _)| *t == ty).map(|(_, p)| p)
}

/// A NUL-terminated string attribute payload.
pub(crate) fn attr_str(payload: &[u8]) -> String {
    let end = payload
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(payload.len());
    String::from_utf8_lossy(&payload[..end]).into_owned()
}

/// The netlink messages in `buf`: (type, flags, seq, body after the header).
pub(crate) fn messages(mut buf: &[u8]) -> impl Iterator<Item = (u16, u16, u32, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            return None;
        }
        let ty = u16::from_ne_bytes([buf[4], buf[5]]);
        let flags = u16::from_ne_bytes([buf[6], buf[7]]);
        let seq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
        let body = &buf[NLMSG_HDRLEN..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some((ty, flags, seq, body))
    })
}
