//! cni-plugins (in progress).
