//! The cap on CNI requests the daemon serves at once (`connectionLimit`,
//! multus-cni `ControllerNetConf.ConnectionLimit`, PR #1510): a burst of
//! pods (a node reboot) otherwise runs every delegate at the same time and
//! the daemon's pod is OOM-killed.
//!
//! Go wraps the listener in `netutil.LimitListener`: connections over the
//! limit wait in the socket backlog until the shim gives up. Here a request
//! over the limit waits for a free slot up to `connectionLimitWaitSeconds`
//! (ours) and then gets a clear CNI error (code 11, "try again later"), so
//! the runtime retries instead of timing out in silence. Health and
//! readiness probes are never queued behind CNI requests.

use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cni_types::{CniError, ErrorCode};
use serde_json::{Map, Value};

use crate::Error;

/// `connectionLimit` (Go's key).
pub const CONNECTION_LIMIT_KEY: &str = "connectionLimit";
/// `connectionLimitWaitSeconds` (ours): how long a request over the limit
/// waits for a slot.
pub const CONNECTION_WAIT_KEY: &str = "connectionLimitWaitSeconds";
/// Default `connectionLimitWaitSeconds`: well inside the shim's reply
/// timeout (300 s) and kubelet's default runtime request timeout (2 min).
pub const DEFAULT_CONNECTION_WAIT: Duration = Duration::from_secs(60);

/// The limit as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitConfig {
    /// `connectionLimit`: requests served at once; `None` is unlimited (the
    /// Go default).
    pub max: Option<usize>,
    /// `connectionLimitWaitSeconds`.
    pub wait: Duration,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            max: None,
            wait: DEFAULT_CONNECTION_WAIT,
        }
    }
}

impl LimitConfig {
    /// Reads both keys of a daemon configuration (`path` names it in
    /// errors). Like Go, a limit of 0 or less is refused.
    pub fn from_raw(raw: &Map<String, Value>, path: &Path) -> Result<LimitConfig, Error> {
        let bad = |reason: String| Error::DaemonConfig {
            path: path.to_path_buf(),
            reason,
        };
        let max = match raw.get(CONNECTION_LIMIT_KEY) {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n > 0 => Some(n),
                _ => {
                    return Err(bad(format!(
                    "\"{CONNECTION_LIMIT_KEY}\": connection limit must be greater than 0, got {v}"
                )))
                }
            },
        };
        let wait = match raw.get(CONNECTION_WAIT_KEY) {
            None | Some(Value::Null) => DEFAULT_CONNECTION_WAIT,
            Some(v) => match v.as_f64() {
                Some(s) if (0.0..=3600.0).contains(&s) => Duration::from_secs_f64(s),
                _ => {
                    return Err(bad(format!(
                    "\"{CONNECTION_WAIT_KEY}\" must be a number of seconds in [0, 3600], got {v}"
                )))
                }
            },
        };
        Ok(LimitConfig { max, wait })
    }
}

/// The daemon's request slots.
#[derive(Debug, Default)]
pub struct RequestLimit {
    config: LimitConfig,
    in_flight: Mutex<usize>,
    freed: Condvar,
}

/// A slot, given back on drop.
#[derive(Debug)]
pub struct Permit<'a>(Option<&'a RequestLimit>);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(l) = self.0 {
            let mut n = l.lock();
            *n = n.saturating_sub(1);
            drop(n);
            l.freed.notify_one();
        }
    }
}

impl RequestLimit {
    /// Slots as configured.
    pub fn new(config: LimitConfig) -> RequestLimit {
        RequestLimit {
            config,
            in_flight: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, usize> {
        // The counter stays consistent even if a holder panicked.
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Requests holding a slot now (0 when unlimited).
    pub fn in_flight(&self) -> usize {
        *self.lock()
    }

    /// A slot: at once when one is free, else after waiting up to the
    /// configured time; then the error the client gets.
    pub fn acquire(&self) -> Result<Permit<'_>, CniError> {
        let Some(max) = self.config.max else {
            return Ok(Permit(None));
        };
        let deadline = Instant::now() + self.config.wait;
        let mut n = self.lock();
        while *n >= max {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CniError::new(
                    ErrorCode::TryAgainLater,
                    format!(
                        "multus daemon busy: {max} requests in flight (connectionLimit {max}); no slot freed within {:.1}s",
                        self.config.wait.as_secs_f64()
                    ),
                    "raise connectionLimit or connectionLimitWaitSeconds in the daemon configuration, or retry",
                ));
            }
            n = self
                .freed
                .wait_timeout(n, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        *n += 1;
        Ok(Permit(Some(self)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: Value) -> Result<LimitConfig, Error> {
        LimitConfig::from_raw(v.as_object().unwrap(), Path::new("x"))
    }

    #[test]
    fn keys() {
        assert_eq!(conf(json!({})).unwrap(), LimitConfig::default());
        let c = conf(json!({"connectionLimit": 5, "connectionLimitWaitSeconds": 1.5})).unwrap();
        assert_eq!(c.max, Some(5));
        assert_eq!(c.wait, Duration::from_millis(1500));
        for bad in [
            json!({"connectionLimit": 0}),
            json!({"connectionLimit": -1}),
            json!({"connectionLimit": "5"}),
            json!({"connectionLimitWaitSeconds": -1}),
            json!({"connectionLimitWaitSeconds": "1"}),
        ] {
            assert!(conf(bad.clone()).is_err(), "{bad}");
        }
        assert!(conf(json!({"connectionLimit": 0}))
            .unwrap_err()
            .to_string()
            .contains("connection limit must be greater than 0"));
    }

    #[test]
    fn waits_then_fails_clearly() {
        let l = RequestLimit::new(LimitConfig {
            max: Some(1),
            wait: Duration::from_millis(100),
        });
        let p = l.acquire().unwrap();
        assert_eq!(l.in_flight(), 1);
        let start = Instant::now();
        let e = l.acquire().unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(e.code, ErrorCode::TryAgainLater);
        assert!(e.msg.contains("connectionLimit 1"), "{}", e.msg);
        drop(p);
        assert_eq!(l.in_flight(), 0);
        let _p = l.acquire().unwrap();
    }

    #[test]
    fn a_waiter_gets_the_freed_slot() {
        let l = std::sync::Arc::new(RequestLimit::new(LimitConfig {
            max: Some(1),
            wait: Duration::from_secs(5),
        }));
        let p = l.acquire().unwrap();
        let l2 = l.clone();
        let t = std::thread::spawn(move || l2.acquire().map(|_| ()).is_ok());
        std::thread::sleep(Duration::from_millis(50));
        drop(p);
        assert!(t.join().unwrap());
        let unlimited = RequestLimit::new(LimitConfig::default());
        let _a = unlimited.acquire().unwrap();
        let _b = unlimited.acquire().unwrap();
        assert_eq!(unlimited.in_flight(), 0);
    }
}
