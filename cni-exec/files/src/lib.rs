//! Crash-safe file mechanics for CNI plugins, runtimes and their node
//! daemons, on Linux.
//!
//! Every piece of state a plugin keeps on a node (an IPAM reservation, a
//! result cache record, a generated config, an installed binary) must
//! survive the writer being killed at any instant, and every file an
//! administrator names must not cost the node its memory when it is the
//! wrong one. This crate is the one place those rules are written:
//!
//! - [`atomic`]: [`AtomicWrite`] writes a temporary file next to the target
//!   and renames it into place (the old file or the new one, never a torn
//!   one), with the mode, owner and fsync policy the caller chooses, and
//!   the clean-up of temporary files left by killed writers.
//! - [`file_lock`]: [`FileLock`], an exclusive `flock(2)` held until
//!   dropped (the IPAM store's writers, sbr's namespace lock).
//! - [`capped`]: reads bounded in size (configuration files, a plugin's
//!   stdin), an error past the bound.
//! - [`daemon`]: the unix socket of a plugin's long-running companion (the
//!   dhcp daemon, multus-daemon): made without destroying what is at the
//!   path, and served with a bounded number of connection threads.
//!
//! It depends on no other crate of the workspace: `cni-exec`, `cni-ipam`
//! and `cni-plugins` all build on it.
//!
//! # Example
//!
//! ```
//! use cni_files::{capped, AtomicWrite, FileLock};
//!
//! let dir = tempfile::tempdir()?;
//! let state = dir.path().join("net/last_reserved_ip.0");
//! // Writers of the directory exclude each other.
//! let _lock = FileLock::create(dir.path().join("net/lock"))?;
//! AtomicWrite::new().create_dir(0o700).fsync(true).write(&state, b"10.1.0.5")?;
//! assert_eq!(capped::read_file(&state, capped::MAX_ADMIN_FILE)?, b"10.1.0.5");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod atomic;
pub mod capped;
pub mod daemon;
mod error;
pub mod file_lock;

pub use atomic::AtomicWrite;
pub use error::Error;
pub use file_lock::FileLock;
