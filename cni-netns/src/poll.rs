//! The one poll schedule for waiting on the kernel's asynchronous work (a
//! bridge port's carrier, IPv6 duplicate address detection): a look every
//! 200 µs for the first 10 ms, where the kernel usually answers, then at
//! doubling intervals up to 50 ms (Go's fixed 50 ms would add 25 ms on
//! average to every wait). A look is one netlink request, about 20 µs.

use std::time::{Duration, Instant};

const FIRST_POLL: Duration = Duration::from_micros(200);
const FINE_FOR: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_millis(50);

/// Calls `look` until it answers `(true, _)` or `timeout` has passed;
/// returns the last answer (`(false, value)` at the timeout).
pub fn until<T, E>(
    timeout: Duration,
    mut look: impl FnMut() -> Result<(bool, T), E>,
) -> Result<(bool, T), E> {
    let start = Instant::now();
    let mut pause = FIRST_POLL;
    loop {
        let (done, value) = look()?;
        let elapsed = start.elapsed();
        if done || elapsed >= timeout {
            return Ok((done, value));
        }
        std::thread::sleep(pause.min(timeout - elapsed));
        if start.elapsed() >= FINE_FOR {
            pause = (pause * 2).min(MAX_POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Result<T> = std::result::Result<T, crate::Error>;

    #[test]
    fn ends_at_the_first_yes_or_at_the_timeout() {
        let mut n = 0;
        let (done, v) = until(Duration::from_secs(5), || {
            n += 1;
            Result::Ok((n == 3, n))
        })
        .unwrap();
        assert!(done);
        assert_eq!(v, 3);
        let t = Instant::now();
        let (done, _) = until(Duration::from_millis(30), || Result::Ok((false, ()))).unwrap();
        assert!(!done);
        assert!(t.elapsed() >= Duration::from_millis(30));
    }
}
