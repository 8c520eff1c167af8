//! cni-plugins (in progress).
pub mod multus;
