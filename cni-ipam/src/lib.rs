//! cni-ipam (in progress).
