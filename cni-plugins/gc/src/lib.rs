//! A collector of the CNI attachments a container runtime leaked on its
//! node: the logic of the `cni-gc` program, for nodes whose runtime never
//! sends CNI GC (containerd through go-cni sends none; CRI-O only at
//! start-up).
//!
//! - [`collector`]: libcni's two GC phases decided from what the runtime
//!   says is alive ([`SandboxLister`]), libcni's result cache and the
//!   network configs: [`collector::plan`] is the decision, pure;
//!   [`Collector`] observes the node and carries a plan out. It never
//!   guesses: what it cannot tell is a refusal
//!   ([`Error::CollectRefused`]), not a DEL.
//! - [`CriSandboxes`]: the [`SandboxLister`] of a CRI runtime (containerd,
//!   CRI-O), through [`cni_cri::RuntimeClient`].
//! - [`cli`]: `cni-gc`'s command line and one pass
//!   ([`cli::run_pass`]); the binary itself is in `cni-plugins`
//!   (feature `gc`).
//!
//! # Example
//!
//! One dry-run pass against containerd, as `cni-gc --dry-run` does:
//!
//! ```no_run
//! use cni_gc::cli::{exit_status, parse_args, run_pass, Command};
//!
//! let Command::Run(opts) = parse_args(["--dry-run".to_string()])? else { unreachable!() };
//! let pass = run_pass(&opts, &mut |line| eprintln!("{line}"));
//! match &pass {
//!     Ok(summary) => eprintln!("{summary}"),
//!     Err(why) => eprintln!("nothing done: {why}"),
//! }
//! std::process::exit(exit_status(&pass).into());
//! # Ok::<(), cni_gc::Error>(())
//! ```

pub mod cli;
pub mod collector;
mod cri;
mod error;

pub use collector::{Collector, SandboxLister};
pub use cri::CriSandboxes;
pub use error::Error;
