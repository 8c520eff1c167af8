//! cni-types (in progress).
