//! Steps the interface plugins (bridge, ptp, macvlan, ipvlan, host-device)
//! share: IPAM delegation whose ADD is undone when a later step fails
//! ([`ipam`]), the pod interface ([`iface`]), CHECK's comparisons of a
//! previous result with the kernel ([`check`]), the [`Undo`] list an ADD
//! rolls back with, and running two steps at once ([`concurrently`]).

pub(crate) mod check;
pub(crate) mod iface;
pub(crate) mod ipam;
mod undo;

pub(crate) use undo::Undo;

use crate::{Error, Result};

/// A plain failure (code 999, as the Go plugins' `fmt.Errorf`).
pub(crate) fn fail(msg: String) -> Error {
    Error::Internal(msg)
}

/// Runs `background`, when there is one, on a thread of its own while
/// `foreground` runs on this one; both run to completion. A panic of the
/// background step is an error.
pub(crate) fn concurrently<A: Send, B>(
    background: Option<impl FnOnce() -> A + Send>,
    foreground: impl FnOnce() -> B,
) -> (Option<Result<A>>, B) {
    std::thread::scope(|s| {
        let background = background.map(|step| s.spawn(step));
        let foreground = foreground();
        let background = background.map(|b| {
            b.join()
                .map_err(|_| fail("background step panicked".into()))
        });
        (background, foreground)
    })
}
