//! Kernel network state for CNI plugins.
//!
//! This part of the crate programs the host firewall for CNI attachments
//! (IP masquerade, port mappings, the bridge MAC spoof check) through the
//! [`firewall::Firewall`] trait, and flushes stale UDP conntrack entries
//! ([`conntrack`]).
//!
//! Every rule an attachment owns carries a tag naming its network, container
//! id and interface, so deleting or garbage collecting one attachment never
//! touches another's rules:
//!
//! ```
//! use cni_netns::firewall::{AttachmentId, MasqueradeSpec};
//!
//! let spec = MasqueradeSpec {
//!     attachment: AttachmentId::new("mynet", "0123456789abcdef", "eth0"),
//!     address: "10.88.0.5/16".parse().unwrap(),
//! };
//! let tag = spec.attachment.tag();
//! assert!(tag.contains("net: mynet, if: eth0, id: 0123456789abcdef"));
//! ```

pub mod conntrack;
mod error;
pub mod firewall;

pub use error::{Error, Result};
