//! The nf_tables constants we use (`linux/netfilter/nf_tables.h`,
//! `linux/netfilter/nfnetlink.h`); the framing is [`crate::nfnetlink`]'s,
//! shared with conntrack.

pub(crate) use crate::nfnetlink::*;

pub(crate) const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub(crate) const NFNL_MSG_BATCH_END: u16 = 0x11;
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NFNL_BATCH_GENID`: a batch begin attribute; the kernel refuses the
/// batch (`ERESTART`) unless the ruleset is still at that generation.
pub(crate) const NFNL_BATCH_GENID: u16 = 1;

pub(crate) const NFT_MSG_NEWTABLE: u16 = 0;
pub(crate) const NFT_MSG_GETTABLE: u16 = 1;
pub(crate) const NFT_MSG_NEWCHAIN: u16 = 3;
pub(crate) const NFT_MSG_NEWRULE: u16 = 6;
pub(crate) const NFT_MSG_GETRULE: u16 = 7;
pub(crate) const NFT_MSG_DELRULE: u16 = 8;
pub(crate) const NFT_MSG_NEWSET: u16 = 9;
pub(crate) const NFT_MSG_NEWSETELEM: u16 = 12;
pub(crate) const NFT_MSG_GETSETELEM: u16 = 13;
pub(crate) const NFT_MSG_DELSETELEM: u16 = 14;
pub(crate) const NFT_MSG_GETGEN: u16 = 16;
/// `NFTA_GEN_ID` in a `NFT_MSG_NEWGEN` answer (big endian u32).
pub(crate) const NFTA_GEN_ID: u16 = 1;

/// The nfnetlink message type of an nf_tables message.
pub(crate) fn nft_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}
