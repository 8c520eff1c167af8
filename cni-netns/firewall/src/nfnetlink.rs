//! nfnetlink messages, shared by the nf_tables encoder (`firewall::native`)
//! and ctnetlink (`conntrack`): the header with the `nfgenmsg`
//! (`linux/netfilter/nfnetlink.h`). The framing underneath (attribute
//! walk and builder, flags) is [`cni_netns::netlink`]'s, re-exported here for
//! the encoder.

pub(crate) use cni_netns::netlink::{
    align4, attr, attr_str, attrs, Attrs, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_ACK, NLM_F_APPEND,
    NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST,
};

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
    m.extend_from_slice(&cni_netns::netlink::header(len, ty, flags, seq));
    m.push(family);
    m.push(0);
    m.extend_from_slice(&res_id.to_be_bytes());
    m.extend_from_slice(attrs);
    m
}
