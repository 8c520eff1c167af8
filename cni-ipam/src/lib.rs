//! CNI IP address management, compatible with the Go reference plugins.
//!
//! - [`host_local`]: the `host-local` IPAM plugin's logic: configuration
//!   (`ranges`, legacy `subnet`, `runtimeConfig.ipRanges`, requested IPs),
//!   allocation in Go's exact round-robin order, and ADD/DEL/CHECK/GC/STATUS.
//! - [`store`]: the [`Store`](store::Store) trait and [`DiskStore`](store::DiskStore),
//!   which reads and writes the Go plugin's directory layout
//!   (`<dataDir>/<network>/<ip>`, `last_reserved_ip.<n>`, `lock`) under the
//!   same `flock`, crash-safely (temporary file and `link`, or a pooled
//!   inode and `RENAME_NOREPLACE`; fsync on request), with an owner
//!   index beside it (`<dataDir>/.cni-ipam-index/`) so that ADD, DEL and
//!   CHECK stay around a millisecond with tens of thousands of reservations
//!   (made with a network's first reservation, removed with its last).
//!   The Go plugin and this crate can share a data directory.
//! - [`static_ipam`]: the `static` IPAM plugin's logic.
//! - [`dhcp`]: the DHCP client, lease files and daemon protocol behind the
//!   `dhcp` IPAM plugin.
//!
//! Errors carry the Go reference's messages and map to CNI codes with
//! [`Error::code`] / [`Error::to_cni_error`].
//!
//! ```
//! use cni_ipam::host_local::{self, HostLocalConfig};
//!
//! let data_dir = tempfile::tempdir()?;
//! let stdin = serde_json::json!({
//!     "cniVersion": "1.0.0",
//!     "name": "mynet",
//!     "ipam": {
//!         "type": "host-local",
//!         "dataDir": data_dir.path(),
//!         "ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/64"}]],
//!     },
//! });
//! let config = HostLocalConfig::load(stdin.to_string().as_bytes(), "")?;
//! let result = host_local::add(&config, "dummy", "eth0")?;
//! assert_eq!(result.ips[0].address.to_string(), "10.1.2.2/24");
//! assert_eq!(result.ips[1].address.to_string(), "2001:db8:1::2/64");
//! let file = data_dir.path().join("mynet/10.1.2.2");
//! assert_eq!(std::fs::read_to_string(file)?, "dummy\r\neth0");
//! host_local::del(&config, "dummy", "eth0")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod allocator;
pub mod dhcp;
pub mod dns;
pub mod error;
pub mod host_local;
mod parse;
pub mod range;
pub mod result;
pub mod static_ipam;
pub mod store;

pub use error::{Error, Result};
