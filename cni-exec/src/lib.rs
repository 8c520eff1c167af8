//! cni-exec (in progress).
