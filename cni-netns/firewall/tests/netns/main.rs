//! The integration tests of `cni-firewall`, one binary (named `netns` as
//! `cni-netns`'s: `cargo test --workspace --test netns -- firewall::
//! firewall_traffic::` runs the nft backend's, as scripts/test-all.sh
//! does): a module per area, the shared fixtures beside them
//! (`cargo test -p cni-firewall --test netns [FILTER]`).

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod firewall_common;

mod firewall;
mod firewall_conntrack;
mod firewall_native;
mod firewall_traffic;
