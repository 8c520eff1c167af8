//! The DHCP client behind the `dhcp` IPAM plugin's daemon.
//!
//! - [`message`]: the DHCPv4 message codec and the IPv4/UDP framing of a
//!   packet socket.
//! - [`socket`]: the packet socket bound to the pod interface, with a
//!   classic BPF filter (`SO_ATTACH_FILTER`: unfragmented UDP to port 68,
//!   our transaction id and hardware address), and the UDP socket bound to
//!   the leased address for unicast renew and release.
//! - [`client`]: the transactions (acquire with retries and back-off,
//!   renew, rebind, release) and the [`Lease`](client::Lease).
//! - [`options`]: Go's `request`/`provide` option lists and the result
//!   (address, gateway, routes from 121/33/3, DNS from 6/15/119).
//! - [`store`]: one lease file per attachment, written durably.
//! - [`rpc`]: the plugin ↔ daemon protocol (newline-delimited JSON over a
//!   unix socket).
//!
//! ```
//! use cni_ipam::dhcp::message::{opt, Message, MessageType};
//! use cni_ipam::dhcp::options;
//!
//! let mut ack = Message::request(MessageType::Ack, 7, [2, 0, 0, 0, 0, 1]);
//! ack.op = 2;
//! ack.yiaddr = "192.168.1.5".parse()?;
//! ack.set_option(opt::SUBNET_MASK, vec![255, 255, 255, 0]);
//! ack.set_option(opt::ROUTERS, vec![192, 168, 1, 1]);
//! let ack = Message::decode(&ack.encode())?;
//! let ip = options::ip_config(&ack)?;
//! assert_eq!(ip.address.to_string(), "192.168.1.5/24");
//! assert_eq!(options::routes(&ack, 0)[0].dst.to_string(), "0.0.0.0/0");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod client;
pub mod message;
pub mod options;
pub mod rpc;
pub mod socket;
pub mod store;
