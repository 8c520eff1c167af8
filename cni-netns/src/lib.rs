//! cni-netns (in progress).
