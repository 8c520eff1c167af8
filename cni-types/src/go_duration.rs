//! Go's `time.ParseDuration`, for the config keys and flags the Go
//! plugins read as durations (multus's `certDuration`, dhcp's `timeout`,
//! `resendMax`, `resendTimeout` and the daemon's flags, cni-gc's flags).
//!
//! ```
//! use std::time::Duration;
//! use cni_types::go_duration::parse;
//!
//! assert_eq!(parse("1h30m"), Some(Duration::from_secs(5400)));
//! assert_eq!(parse("1.5s"), Some(Duration::from_millis(1500)));
//! assert_eq!(parse("90"), None);
//! ```

use std::time::Duration;

/// Parses a Go duration: a sequence of decimal numbers with units `ns`,
/// `us` (or `µs`), `ms`, `s`, `m`, `h` ("1h30m", "1.5s", "90s"); a bare
/// "0" is zero. `None` for anything else.
pub fn parse(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += n * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
        for bad in ["3x", "", "s", "10"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
